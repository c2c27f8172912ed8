"""Replay: recorded turns re-run against today's code, and the first divergence named.

1. Every scenario of tests/kits/trace_scenarios.py (paths, faults, LLM retries and
   exhaustion, the round limit, a commit conflict, failing store and catalog, R10
   refusals, mode changes, containers), recorded, replays with no divergence —
   as recorded, after a JSON round trip and after a round trip through a file —
   and the replayed state trace and result are the recorded ones.
2. Each kind of ``Divergence``, from code that behaves differently (a changed
   step passed to ``replay``) or a recording edited by hand: the step, the call
   number, the port call, the JSON path, expected and actual; the replay stops at
   the divergence.
3. Replays emit no spans unless asked.
4. The pytest API: ``assert_replays`` and ``recordings_in``.
5. The command line: ``aptix run --record`` and ``aptix replay``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, text
from opentelemetry import trace
from replay_kit import DEMO_SCRIPT, demo_session, recording_pipeline, run_recorded
from span_kit import Recorded
from trace_scenarios import SCENARIOS, Store
from typer.testing import CliRunner

from aptix_pipeline import (
    Divergence,
    PipelineOptions,
    PortCall,
    RecordingOptions,
    ReplayDivergenceError,
    ReplayOutcome,
    TurnRecording,
    assert_replays,
    recordings_in,
    replay,
    replay_sync,
    write_recording,
)
from aptix_pipeline.adapters.cli import app
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import ErrorCode, PipelineStep
from aptix_pipeline.engine import StateTrace, Telemetry
from aptix_pipeline.steps import STEP_FUNCTIONS, StepFunction, TurnScope
from aptix_pipeline.steps.prompt_content_provider_initializer import (
    prompt_content_provider_initializer,
)

APTIX = Path(sys.executable).parent / "aptix"
S = PipelineStep

TOOLS_SCRIPT: list[dict[str, Any]] = [
    calls(call("x1", "Math")),
    calls(call("a1", "Add", {"a": 1, "b": 2})),
    calls(call("r1", "read_file", {"path": "a.py"})),
    text("never"),
]
"""An Initial turn that expands Math, runs Add on the server, then asks the client for
read_file: 22 port calls, the first ``LLM.complete`` is call #13."""


def assert_replays_exactly(recording: TurnRecording, outcome: ReplayOutcome) -> None:
    """No divergence, and what the code did now is what the recording says."""
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    assert outcome.report.trace is not None
    # The JSON forms: a trace read back has no warning messages (they are in the result).
    assert outcome.report.trace.to_dict() == recording.trace.to_dict()
    assert outcome.report.result.to_wire() == recording.result


# === 1. every scenario replays ==================================================================


@pytest.mark.decision("D111")
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_recorded_replays_with_no_divergence(
    name: str, store: Store, tmp_path: Path
) -> None:
    kit = await run_recorded(name, store)

    assert kit.turns, name
    for number, turn in enumerate(kit.turns):
        recording = turn.recording
        assert recording.trace == turn.report.trace
        assert recording.result == turn.report.result.to_wire()
        assert_replays_exactly(recording, await replay(recording, steps=turn.steps))

        as_json = TurnRecording.from_dict(json.loads(recording.to_json()))
        assert as_json.to_json() == recording.to_json()
        assert_replays_exactly(as_json, await replay(as_json, steps=turn.steps))

        path = write_recording(recording, tmp_path / f"turn-{number}")
        from_file = await replay(path, steps=turn.steps)
        assert from_file.source == path
        assert from_file.recording.to_json() == recording.to_json()
        assert_replays_exactly(recording, from_file)


@pytest.mark.decision("D112")
async def test_a_scenario_that_broke_a_step_diverges_when_replayed_on_todays_steps() -> None:
    """The recorded turn ran a reasoner that raises; today's reasoner does not."""
    kit = await run_recorded("step_raises", MemoryStore())
    [turn] = kit.turns
    assert turn.steps is not None

    outcome = await replay(turn.recording)

    assert outcome.divergence is not None
    assert outcome.divergence.kind == "call"
    assert outcome.divergence.step == "llm_client"
    assert outcome.divergence.expected["call"] == "SessionTransaction.rollback"
    # today's reasoner goes on: the model call's guard reads the clock to reserve it (D594)
    assert outcome.divergence.actual["call"] == "Clock.now"


# === 2. divergences =============================================================================


@pytest.fixture
async def tools_recording() -> TurnRecording:
    """The recorded Initial turn of ``TOOLS_SCRIPT``, without a usage ledger (the calls
    these tests number are the turn's own; a ledger's are replayed in test_usage_replay)."""
    options = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0, usage_ledger=False)
    report = await recording_pipeline(MemoryStore(), TOOLS_SCRIPT, options=options).run(
        {"Instruction": "Add and read"}, CALLER
    )
    assert report.successful
    assert report.recording is not None
    return report.recording


def index_of(recording: TurnRecording, name: str, occurrence: int = 0) -> int:
    """Where the ``occurrence``-th call named ``name`` is in ``recording.calls``."""
    return [i for i, c in enumerate(recording.calls) if c.name == name][occurrence]


async def with_extra_message(scope: TurnScope) -> None:
    """Today's prompt initializer gives the model one more message."""
    await prompt_content_provider_initializer(scope)
    scope.messages.append(scope.messages[-1].model_copy(update={"content": "P.S. be nice"}))


def making_an_extra_call(step: PipelineStep) -> StepFunction:
    """``step`` that first lists the modes (a call the recording does not have)."""

    async def changed(scope: TurnScope) -> None:
        await scope.ports.modes.list_modes()
        await STEP_FUNCTIONS[step](scope)

    return changed


def diverged(outcome: ReplayOutcome) -> Divergence:
    """The outcome's divergence (the test fails when there is none)."""
    assert outcome.divergence is not None, "replayed without divergence"
    assert not outcome.ok
    return outcome.divergence


@pytest.mark.decision("D108")
async def test_a_changed_prompt_is_an_arguments_divergence_at_the_first_model_call(
    tools_recording: TurnRecording,
) -> None:
    first_llm = tools_recording.calls[index_of(tools_recording, "LLM.complete")]
    recorded_messages = first_llm.args["request"]["Messages"]

    outcome = await replay(
        tools_recording, steps={S.PROMPT_CONTENT_PROVIDER_INITIALIZER: with_extra_message}
    )

    divergence = diverged(outcome)
    assert divergence.kind == "arguments"
    assert (divergence.step, divergence.port_call) == ("llm_client", "LLM.complete")
    assert divergence.call_number == first_llm.n == 13
    assert divergence.where == f"request.Messages[{len(recorded_messages)}]"
    assert repr(divergence.expected) == "<absent>"
    assert divergence.actual["Content"] == "P.S. be nice"
    described = divergence.describe()
    assert "port call #13 LLM.complete during step llm_client: other arguments" in described
    assert f"at:       request.Messages[{len(recorded_messages)}]" in described
    assert "expected: <absent>" in described
    assert "P.S. be nice" in described
    # The replay stopped there: one attempt, no retry, and nothing after it.
    assert outcome.report.faulted_step == "llm_client"
    assert outcome.report.trace is not None
    assert [c.attempts for c in outcome.report.trace.llm_calls] == [1]
    assert outcome.report.result.errors[0].code is ErrorCode.PORT_FAILED


@pytest.mark.decision("D108")
async def test_a_step_making_an_extra_call_is_a_call_divergence_naming_both_calls(
    tools_recording: TurnRecording,
) -> None:
    outcome = await replay(tools_recording, steps={S.REASONER: making_an_extra_call(S.REASONER)})

    divergence = diverged(outcome)
    expected = tools_recording.calls[index_of(tools_recording, "ModeCatalog.get_mode", 1)]
    assert expected.step == "reasoner"
    assert (divergence.kind, divergence.step) == ("call", "reasoner")
    assert (divergence.call_number, divergence.port_call) == (expected.n, "ModeCatalog.get_mode")
    assert divergence.expected == {
        "call": "ModeCatalog.get_mode",
        "step": "reasoner",
        "args": {"mode": "general"},
    }
    assert divergence.actual == {"call": "ModeCatalog.list_modes", "step": "reasoner", "args": {}}
    described = divergence.describe()
    assert f"port call #{expected.n} during step reasoner: the code made another call" in described
    assert '"call": "ModeCatalog.list_modes"' in described
    assert outcome.report.llm_calls == 0  # stopped before the model was asked


@pytest.mark.decision("D108")
async def test_a_step_that_skips_a_call_is_a_call_divergence() -> None:
    """Recorded with a response builder that listed the modes; today's does not."""
    recorded = await recording_pipeline(
        MemoryStore(),
        [text("hi")],
        steps={S.RESPONSE_BUILDER: making_an_extra_call(S.RESPONSE_BUILDER)},
    ).run({"Instruction": "hello"}, CALLER)
    assert recorded.recording is not None

    divergence = diverged(await replay(recorded.recording))

    assert (divergence.kind, divergence.step) == ("call", "response_builder")
    assert divergence.expected["call"] == "ModeCatalog.list_modes"
    assert divergence.actual["call"] == "ModeCatalog.get_mode"


@pytest.mark.decision("D108")
async def test_recorded_calls_the_code_no_longer_makes_are_missing_calls(
    tools_recording: TurnRecording,
) -> None:
    last = tools_recording.calls[-1]
    extra = PortCall(last.n + 1, None, "Clock", "now", {}, "2026-01-01T00:00:01Z")
    edited = replace(tools_recording, calls=(*tools_recording.calls, extra))

    divergence = diverged(await replay(edited))

    assert divergence.kind == "missing_calls"
    assert (divergence.call_number, divergence.port_call, divergence.step) == (
        last.n + 1,
        "Clock.now",
        None,
    )
    assert divergence.expected == {"calls": ["Clock.now"]}
    assert f"the turn ended before port call #{last.n + 1} Clock.now" in divergence.describe()


@pytest.mark.decision("D108")
async def test_a_call_past_the_recordings_end_is_an_extra_call(
    tools_recording: TurnRecording,
) -> None:
    edited = replace(tools_recording, calls=tools_recording.calls[:-1])  # no commit

    outcome = await replay(edited)

    divergence = diverged(outcome)
    assert (divergence.kind, divergence.step, divergence.call_number) == (
        "extra_call",
        "complete",
        None,
    )
    assert divergence.actual == {"call": "SessionTransaction.commit", "args": {}}
    assert "during step complete: the code made a port call the recording does not have" in (
        divergence.describe()
    )
    assert not outcome.report.successful  # the commit failed: the turn faulted


@pytest.mark.parametrize(
    ("call_name", "key", "recorded", "where", "actual"),
    [
        ("IdSource.new_id", "kind", "session-id", "kind", "session"),
        ("SessionStore.begin", "user", "bob", "user", "ana"),
    ],
)
async def test_a_recording_edited_to_expect_other_arguments_names_the_argument(
    tools_recording: TurnRecording,
    call_name: str,
    key: str,
    recorded: str,
    where: str,
    actual: str,
) -> None:
    at = index_of(tools_recording, call_name, 1 if call_name == "IdSource.new_id" else 0)
    original = tools_recording.calls[at]
    edited_call = replace(original, args={**original.args, key: recorded})
    calls_ = list(tools_recording.calls)
    calls_[at] = edited_call
    edited = replace(tools_recording, calls=tuple(calls_))

    divergence = diverged(await replay(edited))

    assert divergence.kind == "arguments"
    assert (divergence.call_number, divergence.port_call, divergence.step) == (
        original.n,
        call_name,
        original.step,
    )
    assert (divergence.where, divergence.expected, divergence.actual) == (where, recorded, actual)


async def test_a_model_request_edited_deep_inside_names_its_json_path(
    tools_recording: TurnRecording,
) -> None:
    at = index_of(tools_recording, "LLM.complete", 2)
    original = tools_recording.calls[at]
    args = json.loads(json.dumps(original.args))
    args["request"]["Model"] = "gpt-other"
    calls_ = list(tools_recording.calls)
    calls_[at] = replace(original, args=args)

    divergence = diverged(await replay(replace(tools_recording, calls=tuple(calls_))))

    assert (divergence.kind, divergence.where) == ("arguments", "request.Model")
    assert (divergence.expected, divergence.actual) == ("gpt-other", "scripted")
    assert divergence.call_number == original.n


@pytest.mark.decision("D108")
async def test_a_call_recorded_in_another_step_is_a_step_divergence(
    tools_recording: TurnRecording,
) -> None:
    at = index_of(tools_recording, "ModeCatalog.list_modes")
    calls_ = list(tools_recording.calls)
    calls_[at] = replace(calls_[at], step="llm_client")

    divergence = diverged(await replay(replace(tools_recording, calls=tuple(calls_))))

    assert (divergence.kind, divergence.where) == ("step", "step")
    assert (divergence.expected, divergence.actual) == ("llm_client", "reasoner")
    assert divergence.port_call == "ModeCatalog.list_modes"
    assert "made in another step" in divergence.describe()


@pytest.mark.decision("D108")
async def test_a_changed_trace_with_the_same_calls_is_a_trace_divergence(
    tools_recording: TurnRecording,
) -> None:
    data = tools_recording.trace.to_dict()
    data["states"] = [*data["states"][:-1], "faulted"]
    edited = replace(tools_recording, trace=StateTrace.from_dict(data))

    divergence = diverged(await replay(edited))

    assert divergence.kind == "trace"
    assert divergence.where == f"states[{len(data['states']) - 1}]"
    assert (divergence.expected, divergence.actual) == ("faulted", "done")
    assert (divergence.call_number, divergence.port_call) == (None, None)
    assert "the state trace differs" in divergence.describe()


async def test_a_changed_trace_entry_names_the_step_it_belongs_to(
    tools_recording: TurnRecording,
) -> None:
    data = tools_recording.trace.to_dict()
    index = next(
        i
        for i, entry in enumerate(data["entries"])
        if entry.get("kind") == "llm_call" and entry.get("round") == 2
    )
    data["entries"][index] = {**data["entries"][index], "messages": 99}
    edited = replace(tools_recording, trace=StateTrace.from_dict(data))

    divergence = diverged(await replay(edited))

    assert divergence.kind == "trace"
    assert divergence.step == "llm_client"
    assert divergence.where == f"entries[{index}].messages"
    assert divergence.expected == 99
    assert "the state trace differs during step llm_client" in divergence.describe()


@pytest.mark.decision("D108")
async def test_a_changed_result_with_the_same_calls_and_trace_is_a_result_divergence(
    tools_recording: TurnRecording,
) -> None:
    result = json.loads(json.dumps(tools_recording.result))
    result["Result"]["ModeDisplayName"] = "Something else"

    divergence = diverged(await replay(replace(tools_recording, result=result)))

    assert (divergence.kind, divergence.where) == ("result", "Result.ModeDisplayName")
    assert (divergence.expected, divergence.actual) == ("Something else", "General")
    assert divergence.describe().startswith("divergence: the result differs")


# === 3. spans ===================================================================================


@pytest.fixture
def recorded_spans() -> Iterator[Recorded]:
    """An SDK tracer provider of this test only, into memory."""
    found = Recorded()
    yield found
    found.provider.shutdown()


@pytest.mark.decision("D121")
async def test_a_replay_emits_no_spans_unless_asked(
    recorded_spans: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a default Telemetry() would use, for this test only (the global one is not set).
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: recorded_spans.provider)
    pipeline = recording_pipeline(MemoryStore(), TOOLS_SCRIPT, telemetry=Telemetry())
    report = await pipeline.run({"Instruction": "Add and read"}, CALLER)
    assert report.recording is not None
    recorded_tree = recorded_spans.turn()
    recorded_spans.exporter.clear()

    quiet = await replay(report.recording)
    assert quiet.ok
    assert recorded_spans.spans == ()

    loud = await replay(
        report.recording, telemetry=Telemetry(tracer_provider=recorded_spans.provider)
    )
    assert loud.ok
    replayed_tree = recorded_spans.turn()
    assert [s.name for s in replayed_tree.steps] == [s.name for s in recorded_tree.steps]
    assert loud.report.trace == quiet.report.trace == report.recording.trace


# === 4. the pytest API ==========================================================================


def test_assert_replays_passes_a_good_recording_and_raises_an_assertion_naming_a_divergence(
    tmp_path: Path, tools_recording: TurnRecording
) -> None:
    path = write_recording(tools_recording, tmp_path)
    assert assert_replays(path).ok

    broken = replace(tools_recording, calls=tools_recording.calls[:-1])
    with pytest.raises(ReplayDivergenceError) as raised:
        assert_replays(broken)

    assert isinstance(raised.value, AssertionError)
    message = str(raised.value)
    assert "divergence: during step complete: the code made a port call" in message
    assert "SessionTransaction.commit" in message
    assert raised.value.outcome.divergence is not None


def test_assert_replays_takes_the_changed_steps(tools_recording: TurnRecording) -> None:
    with pytest.raises(ReplayDivergenceError, match="other arguments"):
        assert_replays(
            tools_recording, steps={S.PROMPT_CONTENT_PROVIDER_INITIALIZER: with_extra_message}
        )


def test_replay_sync_runs_without_an_event_loop(tools_recording: TurnRecording) -> None:
    assert_replays_exactly(tools_recording, replay_sync(tools_recording))


def test_recordings_in_finds_json_files_in_folders_recursively_sorted(tmp_path: Path) -> None:
    for name in ("b/2.json", "a/deep/1.json", "a/0.json", "c.json", "a/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")

    found = recordings_in(tmp_path / "a", tmp_path / "b", tmp_path / "c.json")

    assert found == [
        tmp_path / "a/0.json",
        tmp_path / "a/deep/1.json",
        tmp_path / "b/2.json",
        tmp_path / "c.json",
    ]
    (tmp_path / "empty").mkdir()
    assert recordings_in(tmp_path / "empty") == []


@pytest.fixture
def recordings_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the demo-like session's three recorded turns."""
    folder = tmp_path_factory.mktemp("recordings")
    pipeline = recording_pipeline(
        MemoryStore(), DEMO_SCRIPT, recording=RecordingOptions(directory=folder / "demo")
    )
    asyncio.run(demo_session(pipeline))
    return folder


def test_a_folder_of_recordings_runs_as_a_regression_suite(recordings_folder: Path) -> None:
    paths = recordings_in(recordings_folder)

    assert len(paths) == 3
    outcomes = [assert_replays(path) for path in paths]
    assert [o.recording.trace.context_type for o in outcomes] == [
        "Initial",
        "ClientToolCallContinuation",
        "FollowOn",
    ]


# === 5. the command line ========================================================================


def aptix(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``aptix`` console script."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [str(APTIX), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**environment, **(env or {})},
    )


def record_with_the_cli(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``aptix run --record rec`` of one Initial turn."""
    (tmp_path / "request.json").write_text(json.dumps({"Instruction": "SECRET-CLI-1"}))
    (tmp_path / "script.json").write_text(json.dumps([{"text": "SECRET-CLI-2"}]))
    scripted = ("--llm-script", "script.json", "--store", "memory")
    return aptix("run", "request.json", *scripted, "--record", "rec", *extra, cwd=tmp_path)


def test_aptix_run_records_a_turn_that_aptix_replay_replays(tmp_path: Path) -> None:
    run = record_with_the_cli(tmp_path)
    assert run.returncode == 0, run.stderr
    [path] = (tmp_path / "rec").iterdir()
    assert "SECRET-CLI-1" in path.read_text()

    replayed = aptix("replay", "rec", cwd=tmp_path)

    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    lines = replayed.stdout.splitlines()
    assert lines[0].startswith(f"replay {Path('rec') / path.name}: Initial turn")
    assert any("request_handler" in line for line in lines[1:-1])  # the trace, a line a step
    assert lines[-1].startswith("ok: the same ")
    assert replayed.stderr == ""  # no spans by default


def test_aptix_run_redact_records_without_user_content(tmp_path: Path) -> None:
    run = record_with_the_cli(tmp_path, "--redact")
    assert run.returncode == 0, run.stderr
    [path] = (tmp_path / "rec").iterdir()
    content = path.read_text()
    assert "SECRET-CLI" not in content
    assert json.loads(content)["redacted"] is True
    assert aptix("replay", str(path), cwd=tmp_path).returncode == 0


@pytest.mark.decision("D123")
def test_redact_without_record_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "request.json").write_text(json.dumps({"Instruction": "hi"}))
    (tmp_path / "script.json").write_text(json.dumps([{"text": "x"}]))

    result = CliRunner().invoke(
        app,
        [
            "run",
            str(tmp_path / "request.json"),
            "--llm-script",
            str(tmp_path / "script.json"),
            "--redact",
        ],
    )

    assert result.exit_code == 2
    assert "--redact applies to --record DIR" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["request.json", "script.json"]


@pytest.mark.decision("D125")
def test_aptix_replay_of_a_tampered_recording_exits_one_naming_the_divergence(
    tmp_path: Path, tools_recording: TurnRecording
) -> None:
    data = tools_recording.to_dict()
    data["calls"][0]["answer"] = "2030-05-05T00:00:00Z"  # the clock now says another time
    data["calls"][1]["args"]["kind"] = "tampered"
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(data))

    result = CliRunner().invoke(app, ["replay", str(path)])

    assert result.exit_code == 1
    assert "divergence: port call #2 IdSource.new_id during step request_handler" in result.stdout
    assert 'expected: "tampered"' in result.stdout
    assert 'actual:   "correlation"' in result.stdout


@pytest.mark.decision("D125")
def test_aptix_replay_of_several_recordings_counts_those_that_diverge(
    tmp_path: Path, tools_recording: TurnRecording
) -> None:
    write_recording(tools_recording, tmp_path / "good")
    write_recording(replace(tools_recording, calls=tools_recording.calls[:-1]), tmp_path / "bad")

    result = CliRunner().invoke(app, ["replay", str(tmp_path), "--quiet"])

    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == "1 of 2 recordings replay; 1 diverge"


@pytest.mark.decision("D125")
def test_aptix_replay_of_a_file_that_is_not_a_recording_exits_two_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"Instruction": "hi"}))

    result = CliRunner().invoke(app, ["replay", str(path)])

    assert result.exit_code == 2
    assert str(path) in result.stderr
    assert "not a turn recording this engine reads" in result.stderr


@pytest.mark.decision("D125")
def test_aptix_replay_diagram_draws_the_recorded_path_and_refuses_several_recordings(
    tmp_path: Path, tools_recording: TurnRecording
) -> None:
    path = write_recording(tools_recording, tmp_path / "one")
    out = tmp_path / "path.dot"

    drawn = CliRunner().invoke(app, ["replay", str(path), "--diagram", str(out)])

    assert drawn.exit_code == 0, drawn.output
    dot = out.read_text()
    assert dot.startswith("digraph")
    assert "llm_client" in dot
    assert "response_builder" in dot
    assert f"path diagram: {out}" in drawn.stdout

    other = replace(tools_recording, config_digest="sha256:other")
    write_recording(other, tmp_path / "one")
    refused = CliRunner().invoke(
        app, ["replay", str(tmp_path / "one"), "--diagram", str(tmp_path / "two.dot")]
    )
    assert refused.exit_code == 2
    assert "--diagram draws one turn; 2 recordings given" in refused.stderr
    assert not (tmp_path / "two.dot").exists()


def test_aptix_replay_spans_go_to_the_console_exporter_only_when_asked(
    tmp_path: Path, tools_recording: TurnRecording
) -> None:
    path = write_recording(tools_recording, tmp_path)
    console = {"OTEL_TRACES_EXPORTER": "console"}

    quiet = aptix("replay", str(path), cwd=tmp_path, env=console)
    loud = aptix("replay", str(path), "--spans", cwd=tmp_path, env=console)

    assert (quiet.returncode, loud.returncode) == (0, 0), loud.stderr
    assert quiet.stderr == ""
    assert '"name": "invoke_agent' in loud.stderr
    assert '"name": "step llm_client"' in loud.stderr
    assert quiet.stdout == loud.stdout


@pytest.mark.parametrize(
    ("expected", "actual", "difference"),
    [
        ({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, None),  # key order does not matter
        ({"a": True}, {"a": 1}, ("a", True, 1)),  # JSON tells true from 1
        ({"a": 1}, {"a": 1.0}, ("a", 1, 1.0)),
        ({"a": {"b": [1, {"c": "x"}]}}, {"a": {"b": [1, {"c": "y"}]}}, ("a.b[1].c", "x", "y")),
        ([1, 2], [1], ("[1]", 2, "<absent>")),
        ({1: "a", "b": 2}, {1: "a", "b": 2}, None),  # keys of mixed types: walked
    ],
)
def test_first_difference_names_the_first_json_path_that_differs(
    expected: Any, actual: Any, difference: tuple[str, Any, Any] | None
) -> None:
    from aptix_pipeline.engine.replay.replayer import first_difference

    found = first_difference(expected, actual)
    if difference is None:
        assert found is None
    else:
        assert found is not None
        assert (
            found[0],
            found[1],
            repr(found[2]) if difference[2] == "<absent>" else found[2],
        ) == (difference)
