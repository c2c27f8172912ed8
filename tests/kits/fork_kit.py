"""A service that forks, for the end-to-end fork tests (docs/FORKS.md, D610, D611).

``write_fork_config`` writes an ``aptix.toml`` whose model is a loopback fake OpenAI
server (``aptix_pipeline.testing.fake_openai_server``), so a test sees every message
the model was sent whichever front door ran the turn; ``ANSWERS`` is its script for
four turns, then one on the fork. ``store_url`` is the test's store of a kind:
``memory``, a SQLite file or a PostgreSQL database. ``said`` is what one request
sent the model, as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from http_kit import KEYS

from aptix_pipeline.testing import RecordedRequest

__all__ = ["ANSWERS", "KEY_ENV", "MODEL_ENV", "said", "store_url", "write_fork_config"]

KEY_ENV = "APTIX_FORK_OPENAI_KEY"
MODEL_ENV = {KEY_ENV: "sk-fork-0123456789"}
"""The environment that gives the fake model's key to the command or service."""
ANSWERS: list[dict[str, Any]] = [{"text": f"answer {n}"} for n in ("1", "2", "3", "4", "2b")]
"""Four turns of the source, then the fork's first."""


def store_url(kind: str, request: pytest.FixtureRequest, folder: Path) -> str:
    """The store of ``kind`` a test's command or service uses."""
    if kind == "memory":
        return "memory"
    if kind == "sqlite":
        return f"sqlite:{folder / 'aptix.db'}"
    url: str = request.getfixturevalue("postgres_db_url")
    return url


def write_fork_config(folder: Path, base_url: str, store: str) -> Path:
    """An ``aptix.toml`` in ``folder``: the fake model at ``base_url``, the store, ``KEYS``."""
    path = folder / "aptix.toml"
    path.write_text(
        f"""
[model]
kind = "openai"
base_url = "{base_url}"
model = "fake-model"
api_key_env = "{KEY_ENV}"
max_attempts = 1

[store]
url = "{store}"

[engine]
llm_attempts = 1
{KEYS}""",
        encoding="utf-8",
    )
    return path


def said(request: RecordedRequest) -> list[str]:
    """The contents of the messages one model request sent, system prompt left out."""
    return [
        str(message.get("content"))
        for message in request.body["messages"]
        if message.get("role") != "system"
    ]
