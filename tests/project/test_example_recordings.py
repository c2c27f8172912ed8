"""The example recordings (``examples/recordings/``) replay, and are what the code records now.

They are also the pattern a host follows to run its own folder of production
recordings as a regression suite (docs/RECORDING.md "A folder of recordings as a
regression suite").
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from repo import ROOT

from aptix_pipeline import TurnRecording, assert_replays, recordings_in, replay
from aptix_pipeline.engine import DiagramFormat, pipeline_diagram

RECORDINGS = ROOT / "examples" / "recordings"
sys.path.insert(0, str(ROOT / "examples"))

from make_recordings import record_session  # noqa: E402

EXAMPLES = recordings_in(RECORDINGS)


def test_the_examples_hold_the_demo_session_a_faulted_turn_and_a_streamed_turn() -> None:
    recordings = [TurnRecording.load(path) for path in EXAMPLES]
    assert [r.trace.context_type for r in recordings] == [
        "Initial",
        "ClientToolCallContinuation",
        "ClientToolCallContinuation",
        "FollowOn",
        "Initial",
    ]
    assert [r.trace.outcome for r in recordings] == ["done", "faulted", "done", "done", "done"]
    assert recordings[1].trace.faulted_step == "client_tool_continuation_resolver"
    model_calls = [[c.call for c in r.calls if c.port == "LLM"] for r in recordings]
    assert model_calls[-1] == ["stream", "stream", "stream"]
    assert {call for calls in model_calls[:-1] for call in calls} == {"complete"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_each_example_recording_replays(path: Path) -> None:
    outcome = assert_replays(path)
    assert outcome.report.trace is not None
    assert outcome.report.trace.to_dict() == outcome.recording.trace.to_dict()


def test_the_examples_are_what_the_code_records_now() -> None:
    recorded = asyncio.run(record_session())
    assert sorted(recorded) == [path.name for path in EXAMPLES]
    stale = [
        name
        for name, recording in recorded.items()
        if (RECORDINGS / name).read_text(encoding="utf-8") != recording.to_json()
    ]
    assert not stale, f"examples/recordings is stale ({stale}): run make recordings"


def test_aptix_replay_of_every_example_succeeds() -> None:
    run = subprocess.run(
        [str(Path(sys.executable).parent / "aptix"), "replay", *map(str, EXAMPLES)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "5 of 5 recordings replay; 0 diverge" in run.stdout
    assert "transition  step=client_tool_continuation_resolver" in run.stdout  # the trace


def test_a_changed_example_names_its_divergence(tmp_path: Path) -> None:
    data = json.loads((RECORDINGS / "04-follow-on.json").read_text(encoding="utf-8"))
    llm = next(call for call in data["calls"] if call["port"] == "LLM")
    llm["args"]["request"]["Messages"][0]["Content"] += " (edited)"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    outcome = asyncio.run(replay(edited))
    assert outcome.divergence is not None
    assert (outcome.divergence.kind, outcome.divergence.step) == ("arguments", "llm_client")
    assert outcome.divergence.call_number == llm["n"]
    assert outcome.divergence.where == "request.Messages[0].Content"
    assert str(outcome.divergence.expected).endswith(" (edited)")


def _svg_texts(svg: bytes) -> list[str]:
    """The words a picture shows (its layout depends on the Graphviz version; they do not)."""
    root = ElementTree.fromstring(svg)
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_the_recording_page_path_picture_shows_the_faulted_example_turn() -> None:
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("Graphviz's dot is missing under CI (make graphviz installs it)")
        pytest.skip("Graphviz's dot is not installed")
    trace = TurnRecording.load(RECORDINGS / "02-faulted-unknown-tool-call-id.json").trace
    committed = (ROOT / "diagrams" / "example-faulted-turn.svg").read_bytes()
    assert _svg_texts(committed) == _svg_texts(pipeline_diagram(DiagramFormat.SVG, path=trace)), (
        "diagrams/example-faulted-turn.svg is stale: run make diagrams"
    )
    page = (ROOT / "docs" / "RECORDING.md").read_text(encoding="utf-8")
    assert "](../diagrams/example-faulted-turn.svg)" in page


def _aptix_replay(*args: str) -> subprocess.CompletedProcess[str]:
    aptix = str(Path(sys.executable).parent / "aptix")
    return subprocess.run(
        [aptix, "replay", *args], capture_output=True, text=True, check=False, cwd=ROOT
    )


BUILTIN_CATALOG = ROOT / "adapters" / "config" / "default_config.toml"


@pytest.mark.decision("D293")
def test_aptix_replay_live_runs_a_configs_catalog_and_tools(tmp_path: Path) -> None:
    same = tmp_path / "same.toml"
    same.write_text(BUILTIN_CATALOG.read_text(encoding="utf-8"), encoding="utf-8")
    changed = tmp_path / "changed.toml"
    changed.write_text(
        same.read_text(encoding="utf-8").replace("Be brief and precise.", "Be brief."),
        encoding="utf-8",
    )

    kept = _aptix_replay(str(RECORDINGS), "--live", str(same), "--quiet")
    edited = _aptix_replay(str(RECORDINGS / "01-initial.json"), "--live", str(changed))

    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "5 of 5 recordings replay; 0 diverge" in kept.stdout
    assert edited.returncode == 1, edited.stdout + edited.stderr
    assert "AgentCatalog.get_agent_context" in edited.stdout
    assert "at:       answer.SystemPrompt" in edited.stdout


def test_aptix_replay_live_model_runs_the_configs_model(tmp_path: Path) -> None:
    (tmp_path / "replies.json").write_text('[{"text": "Another answer."}]', encoding="utf-8")
    config = tmp_path / "model.toml"
    config.write_text(
        BUILTIN_CATALOG.read_text(encoding="utf-8")
        + '\n[model]\nkind = "scripted"\nscript = "replies.json"\n',
        encoding="utf-8",
    )

    run = _aptix_replay(
        str(RECORDINGS / "04-follow-on.json"), "--live", str(config), "--live-model"
    )

    assert run.returncode == 1, run.stdout + run.stderr
    assert "LLM.complete during step llm_client: the live port answered otherwise" in run.stdout
    assert "at:       answer." in run.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--live-model"], "--live-model needs --live CONFIG"),
        (["--live", "{catalog}", "--live-model"], "--live-model needs a [model] table"),
    ],
    ids=["model-without-config", "config-without-model"],
)
def test_aptix_replay_live_refuses_what_it_cannot_run(args: list[str], message: str) -> None:
    shown = [arg.format(catalog=BUILTIN_CATALOG) for arg in args]

    run = _aptix_replay(str(RECORDINGS / "01-initial.json"), *shown)

    assert run.returncode == 2
    assert message in run.stderr
