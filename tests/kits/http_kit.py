"""The HTTP service under test: API keys, service configs, and the app in process or
``aptix serve`` as a real process.

Ana's key comes from the environment (``ENV``), bob's by its hash (``KEYS``); ``ANA``
and ``BOB`` are headers that authenticate them. ``write_config`` writes an
``aptix.toml`` with the scripted model; ``app_client`` talks to an app in process (its
lifespan around the client) and ``host_app`` is the app on a pipeline a host built;
``aptix_serve`` runs ``aptix serve`` on a free loopback port. ``continuation_body``
and ``follow_on_body`` are the wire requests after an answer, ``session_count`` what a
SQLite file holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
from cli_kit import APTIX
from fastapi import FastAPI
from serve_process import free_port, serving

from aptix_pipeline.adapters.config.service import ApiKey
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.http.app import ApiKeyAuthenticator, create_app
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import SessionStore, SessionTransaction

__all__ = [
    "ANA",
    "ANA_KEY",
    "BOB",
    "BOB_KEY",
    "ENV",
    "KEYS",
    "READ_THEN_ANSWER",
    "CountingStore",
    "app_client",
    "aptix_serve",
    "continuation_body",
    "follow_on_body",
    "host_app",
    "session_count",
    "write_config",
]

ANA_KEY, BOB_KEY = "ana-test-key", "bob-test-key"
ENV = {"APTIX_TEST_KEY_ANA": ANA_KEY}
"""The environment that gives ana's key to the service (``key_env`` of ``KEYS``)."""
ANA = {"Authorization": f"Bearer {ANA_KEY}"}
BOB = {"X-API-Key": BOB_KEY}
"""Request headers that authenticate ana (bearer token) and bob (``X-API-Key``)."""
KEYS = f"""
[[auth.keys]]
org = "acme"
user = "ana"
key_env = "APTIX_TEST_KEY_ANA"

[[auth.keys]]
org = "acme"
user = "bob"
key_sha256 = "{hashlib.sha256(BOB_KEY.encode()).hexdigest()}"
"""
"""The ``[[auth.keys]]`` of a service config: ana's key from ``ENV``, bob's by its hash."""
READ_THEN_ANSWER: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "app.py"}}]},
    {"text": "app.py is fine."},
    {"text": "Follow-on answer."},
]
"""A script: ``read_file`` of ``app.py`` (call ``c1``), an answer, a follow-on answer."""


def write_config(
    folder: Path,
    replies: list[dict[str, Any]],
    *,
    store: str = 'url = "sqlite:aptix.db"',
    more: str = "",
) -> Path:
    """An ``aptix.toml`` in ``folder`` for the service: ``store`` (SQLite ``aptix.db`` by
    default), the scripted model playing ``replies`` (written to ``replies.json``), the
    ``more`` tables, and the API keys ``KEYS``; its path."""
    (folder / "replies.json").write_text(json.dumps(replies), encoding="utf-8")
    path = folder / "aptix.toml"
    path.write_text(
        f'[store]\n{store}\n[model]\nkind = "scripted"\nscript = "replies.json"\n{more}\n{KEYS}',
        encoding="utf-8",
    )
    return path


@asynccontextmanager
async def app_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app in process, its lifespan (store open/close) around it."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client,
    ):
        yield client


def session_count(db: Path) -> int:
    """How many sessions the SQLite file ``db`` holds."""
    with sqlite3.connect(db) as connection:
        count: int = connection.execute("SELECT count(*) FROM sessions").fetchone()[0]
    return count


def continuation_body(response: Mapping[str, Any]) -> dict[str, Any]:
    """The wire continuation after ``response``: one result, for tool call ``c1``."""
    return {
        "SessionId": response["SessionId"],
        "TurnId": response["TurnId"],
        "ToolResults": [{"ToolCallId": "c1", "ExecutionMs": 3, "ResultJson": '{"text": "x=1"}'}],
    }


def follow_on_body(response: Mapping[str, Any]) -> dict[str, Any]:
    """The wire FollowOn request after ``response``: the instruction ``more``."""
    return {"SessionId": response["SessionId"], "TurnId": response["TurnId"], "Instruction": "more"}


class CountingStore:
    """A real SQLite store that counts the transactions opened on it."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.begun = 0

    def begin(self, org: str, user: str) -> SessionTransaction:
        self.begun += 1
        return self.inner.begin(org, user)


def host_app(tmp_path: Path) -> tuple[FastAPI, ScriptedLLM, CountingStore]:
    """The app on a pipeline the host built (scripted model, counted SQLite store)."""
    llm = ScriptedLLM(READ_THEN_ANSWER)
    store = CountingStore(SQLiteStore(tmp_path / "host.db"))
    counted: SessionStore = store
    pipeline = embedded_pipeline(llm=llm, store=counted)
    keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(ANA_KEY.encode()).digest())]
    app = create_app(pipeline, authenticator=ApiKeyAuthenticator(keys), max_body_bytes=4096)
    return app, llm, store


@contextmanager
def aptix_serve(config: Path, env: Mapping[str, str], *args: str) -> Iterator[tuple[str, Path]]:
    """``aptix serve`` on 127.0.0.1 at a free port (``serve_process.serving``); its base URL
    and log, beside the configuration. Stopped afterwards."""
    port = free_port()
    loopback = ["--host", "127.0.0.1", "--port", str(port)]
    argv = [APTIX, "serve", "--config", config, *loopback, *args]
    log = config.parent / f"serve-{port}.log"
    with serving(argv, {**os.environ, **env}, port=port, cwd=config.parent, log=log) as served:
        yield served.base, served.log
