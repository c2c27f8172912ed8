"""Replaying with the calls' usage in the trace (issue 31, D587).

A recording made before ``llm_client`` transitions carried their call's usage still
replays: the live trace's usage is not a divergence there. A recording that has the
usage is held to it like to the rest of the trace.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from repo import ROOT

from aptix_pipeline import replay

EXAMPLE = ROOT / "examples" / "recordings" / "01-initial.json"


def llm_client_transitions(data: dict[str, Any]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = data["trace"]["entries"]
    found = [e for e in entries if e["kind"] == "transition" and e["step"] == "llm_client"]
    assert found
    return found


@pytest.mark.decision("D587")
def test_a_recording_made_before_the_trace_kept_usage_still_replays(tmp_path: Path) -> None:
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    for transition in llm_client_transitions(data):
        del transition["usage"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data), encoding="utf-8")

    outcome = asyncio.run(replay(older))

    assert outcome.divergence is None
    assert outcome.report.trace is not None
    live = [t for t in outcome.report.trace.transitions if t.event == "llm_client"]
    assert live
    assert all(t.usage is not None for t in live)


@pytest.mark.decision("D587")
def test_a_recorded_usage_that_differs_is_a_divergence_of_the_trace(tmp_path: Path) -> None:
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    llm_client_transitions(data)[0]["usage"] = {"input_tokens": 1, "output_tokens": 1}
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data), encoding="utf-8")

    outcome = asyncio.run(replay(edited))

    assert outcome.divergence is not None
    assert (outcome.divergence.kind, outcome.divergence.step) == ("trace", "llm_client")
    assert "usage" in outcome.divergence.where
