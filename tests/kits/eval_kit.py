"""Eval cases and candidates for the tests of ``aptix eval`` (docs/EVALS.md).

The cases are the example recordings (``examples/recordings/``), copied; a candidate is
``examples/evals/candidate.toml`` (the demo session's script keyed by turn, with the
built-in catalog and a price), with another script, or with a model of the test's own.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repo import ROOT

from aptix_pipeline.adapters.config import SecretTable, load_service_config
from aptix_pipeline.adapters.evals import Candidate
from aptix_pipeline.contracts import LLM

MODEL_ONLY: tuple[SecretTable, ...] = ("model",)

RECORDINGS = ROOT / "examples" / "recordings"
CANDIDATE = ROOT / "examples" / "evals" / "candidate.toml"
TURNS = json.loads((ROOT / "examples" / "session" / "turns.json").read_text(encoding="utf-8"))
"""The demo session's script keyed by turn: it answers cases 01, 03 and 04 as recorded."""

__all__ = [
    "CANDIDATE",
    "RECORDINGS",
    "TURNS",
    "candidate_config",
    "candidate_with",
    "case_folder",
]


def case_folder(tmp_path: Path, *names: str) -> Path:
    """A case folder holding copies of the example recordings (those named, else all)."""
    folder = tmp_path / "cases"
    folder.mkdir(parents=True)
    for path in sorted(RECORDINGS.glob("*.json")):
        if not names or path.stem in names:
            shutil.copyfile(path, folder / path.name)
    return folder


def candidate_config(
    tmp_path: Path, script: Any, *, name: str = "candidate.toml", prices: str | None = None
) -> Path:
    """A candidate configuration: the example candidate's catalog with ``script`` as its
    scripted model (and ``prices`` as its ``[prices]`` tables instead of the example's)."""
    script_path = tmp_path / f"{Path(name).stem}-script.json"
    script_path.write_text(json.dumps(script), encoding="utf-8")
    text = CANDIDATE.read_text(encoding="utf-8").replace(
        'script = "../session/turns.json"', f"script = {json.dumps(str(script_path))}"
    )
    if prices is not None:
        head, _, rest = text.partition("[prices]")
        text = head + prices + "\n" + rest[rest.index("# --- the catalog") :]
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    return config


def candidate_with(model: Callable[[], LLM], *, name: str = "own model") -> Candidate:
    """The example candidate's catalog and prices with a model of the test's own."""
    config = load_service_config(CANDIDATE, secrets_for=MODEL_ONLY)
    return Candidate(name=name, model=model, config=config, prices=config.options.prices)
