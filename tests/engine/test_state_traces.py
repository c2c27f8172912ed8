"""Snapshot tests of the ``StateTrace`` of every scenario of the engine's scenario suite.

Each scenario of tests/kits/trace_scenarios.py (each path, each fault, mode changes,
containers, manifests, continuations, bad requests) runs on the memory store; the
list of ``report.trace.to_dict()`` of its requests is compared with a syrupy
snapshot, one readable JSON file per scenario under
``tests/engine/__snapshots__/test_state_traces/``. The same scenario on a SQLite file must
give exactly the same traces: the trace is deterministic across stores.

Snapshots are committed, so a clean run needs no flag. When a change to the engine
changes a trace on purpose, regenerate them with::

    .venv/bin/pytest tests/engine/test_state_traces.py --snapshot-update

and review the diff of the .json files like code: it is the record of what a turn
does. A snapshot that no test uses any more only warns (``--snapshot-warn-unused``
in pyproject.toml's pytest options); delete it with ``--snapshot-update``.

The other tests: the JSON form round-trips and refuses what is not a trace; a
scenario run twice gives byte-identical JSON; the trace agrees with the rest of
the ``TurnReport``; a faulted turn ends with its fault; no user content without
content capture, and the model's text and a mode change's reason with it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from syrupy.assertion import SnapshotAssertion
from trace_scenarios import CONTENT, SCENARIOS, Kit, TraceJSON, run_scenario

from aptix_pipeline import RejectionKind, ToolCallFate, ToolCallRecord, ToolCallSide
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import InvokeWarning
from aptix_pipeline.engine import StateTrace, Telemetry, TurnReport
from aptix_pipeline.engine.telemetry import CAPTURE_CONTENT_ENV
from aptix_pipeline.engine.trace import (
    TRACE_FORMAT,
    CallUsage,
    FaultRecord,
    LLMCallRecord,
    TraceEntry,
    TransitionRecord,
)

NAMES = list(SCENARIOS)
FAILED_TURNS_WITH_MODE_CHANGES = (
    "several_mode_changes_of_a_failed_turn",
    "mode_change_of_a_failed_turn",
)
SNAPSHOTTED = [
    pytest.param(name, id=name, marks=pytest.mark.decision("D93"))
    if name in FAILED_TURNS_WITH_MODE_CHANGES
    else name
    for name in NAMES
]
"""Every scenario; the traces of failed turns that changed the mode show what D93 keeps."""


@pytest.fixture(autouse=True)
def no_content_capture_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default is decided by the conventions' switch; these tests decide it themselves."""
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A fresh SQLite file for one scenario."""
    return tmp_path / "aptix.db"


def traces_of(kit: Kit) -> list[StateTrace]:
    """The trace of every request of a scenario, in order."""
    traces = [report.trace for report in kit.reports]
    assert all(trace is not None for trace in traces)
    return [trace for trace in traces if trace is not None]


def dicts_of(kit: Kit) -> list[dict[str, Any]]:
    """The JSON form of every trace of a scenario."""
    return [trace.to_dict() for trace in traces_of(kit)]


async def run_on_sqlite(name: str, path: Path, telemetry: Telemetry | None = None) -> Kit:
    """Scenario ``name`` on a SQLite file, closed afterwards."""
    store = SQLiteStore(path)
    try:
        return await run_scenario(name, store, telemetry)
    finally:
        await store.aclose()


# --- the snapshots ------------------------------------------------------------------------


@pytest.mark.decision("D91")
@pytest.mark.parametrize("name", SNAPSHOTTED)
async def test_scenario_trace(name: str, snapshot: SnapshotAssertion, sqlite_path: Path) -> None:
    on_memory = await run_scenario(name, MemoryStore())

    traces = dicts_of(on_memory)

    assert traces == snapshot(extension_class=TraceJSON)
    on_sqlite = await run_on_sqlite(name, sqlite_path)
    assert dicts_of(on_sqlite) == traces


# --- the JSON form ------------------------------------------------------------------------


@pytest.mark.decision("D58")
@pytest.mark.parametrize("name", NAMES)
async def test_a_trace_round_trips_through_its_dict_and_json_text(name: str) -> None:
    kit = await run_scenario(name, MemoryStore())

    for trace in traces_of(kit):
        again = StateTrace.from_dict(trace.to_dict())
        from_text = StateTrace.from_dict(json.loads(trace.to_json()))

        assert again.to_dict() == trace.to_dict()
        assert from_text.to_json() == trace.to_json()
        # The compact form a kept trace stores is json.dumps of the dict, to the byte (D647).
        compact = json.dumps(trace.to_dict(), ensure_ascii=False)
        assert trace.to_json(indent=None) == compact
        assert from_text.to_json(indent=None) == compact
        # A warning's message is not part of the trace (it is in the result's warnings).
        assert _but_warnings(again.entries) == _but_warnings(trace.entries)
        assert [(w.code, w.rule_id) for w in again.entries if isinstance(w, InvokeWarning)] == [
            (w.code, w.rule_id) for w in trace.entries if isinstance(w, InvokeWarning)
        ]


_AWKWARD = 'quote " backslash \\ newline \n tab \t nul \x00 é 漢 \U0001f600 \ud800'


@pytest.mark.decision("D647")
@pytest.mark.parametrize("captured", [False, True])
def test_the_compact_json_of_model_calls_and_usage_is_json_dumps_of_their_dict(
    captured: bool,
) -> None:
    """Model calls and transitions with usage are written straight to text (not through
    the encoder): every field, with strings JSON must escape, still reads alike."""
    usage = CallUsage(True, 12, 30, 4, None, True, Decimal("0.00120"), "EUR")
    entries: tuple[TraceEntry, ...] = (
        TransitionRecord("llm_client", "prompt_ready", "llm_answered", usage),
        TransitionRecord(_AWKWARD, _AWKWARD, _AWKWARD, CallUsage(False)),
        LLMCallRecord(
            round=2,
            mode=_AWKWARD,
            request_model=None,
            tools=(_AWKWARD, "send"),
            messages=7,
            attempts=3,
            retries=("TimeoutError", _AWKWARD),
            response_model=_AWKWARD,
            response_id=None,
            finish_reason="tool_calls",
            tool_calls=((_AWKWARD, "send"), ("x2", _AWKWARD)),
            has_text=captured,
            input_tokens=None,
            output_tokens=0,
            error=_AWKWARD,
            text=_AWKWARD if captured else None,
        ),
        LLMCallRecord(1, "general", "m", (), 1),
    )
    trace = StateTrace("Initial", "done", ("received",), entries)

    assert trace.to_json(indent=None) == json.dumps(trace.to_dict(), ensure_ascii=False)
    assert StateTrace.from_dict(json.loads(trace.to_json(indent=None))) == trace


def _but_warnings(entries: tuple[TraceEntry, ...]) -> list[TraceEntry]:
    return [entry for entry in entries if not isinstance(entry, InvokeWarning)]


@pytest.mark.decision("D48", "D91")
@pytest.mark.parametrize("name", NAMES)
async def test_a_scenario_run_twice_gives_byte_identical_json(name: str) -> None:
    first = await run_scenario(name, MemoryStore())
    second = await run_scenario(name, MemoryStore())

    assert [t.to_json() for t in traces_of(first)] == [t.to_json() for t in traces_of(second)]


@pytest.mark.decision("D49", "D91")
async def test_the_trace_does_not_depend_on_whether_spans_are_recorded() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for name in ("several_mode_changes_warn", "round_limit", "llm_fails_after_retries"):
        traced = await run_scenario(name, MemoryStore(), Telemetry(tracer_provider=provider))
        untraced = await run_scenario(name, MemoryStore(), Telemetry.off())

        assert dicts_of(traced) == dicts_of(untraced), name
    assert exporter.get_finished_spans()  # the spans were really recorded
    provider.shutdown()


def _valid() -> dict[str, Any]:
    return StateTrace(
        context_type="Initial",
        outcome="done",
        states=("received",),
        entries=(
            TransitionRecord("request_handler", "received", "validated"),
            FaultRecord("x", ("internal",), ()),
        ),
    ).to_dict()


def _with(**changes: Any) -> dict[str, Any]:
    return {**_valid(), **changes}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in _valid().items() if k != key}


MALFORMED: dict[str, Any] = {
    "another format": _with(format="aptix.state-trace/2"),
    "no format": _without("format"),
    "not a mapping": [_valid()],
    "no entries": _without("entries"),
    "no outcome": _without("outcome"),
    "entries not a list": _with(entries=None),
    "entry of unknown kind": _with(entries=[{"kind": "telepathy"}]),
    "entry without its fields": _with(entries=[{"kind": "transition", "step": "x"}]),
    "entry not a mapping": _with(entries=["transition"]),
    "tool call not a mapping": _with(
        entries=[{**_valid()["entries"][0], "kind": "llm_call", "tool_calls": [3]}]
    ),
}


def test_the_valid_base_of_the_malformed_cases_reads_back() -> None:
    assert StateTrace.from_dict(_valid()).to_dict() == _valid()


@pytest.mark.decision("D58", "D90")
@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_from_dict_refuses_another_format_or_malformed_data(data: Any) -> None:
    with pytest.raises(ValueError, match="trace"):
        StateTrace.from_dict(data)


# --- the trace and the rest of the report ---------------------------------------------------


def _reports(kit: Kit) -> list[tuple[TurnReport, StateTrace]]:
    return [(report, trace) for report, trace in zip(kit.reports, traces_of(kit), strict=True)]


@pytest.mark.parametrize("name", NAMES)
async def test_the_trace_agrees_with_the_turn_report(name: str) -> None:
    kit = await run_scenario(name, MemoryStore())

    for report, trace in _reports(kit):
        assert report.to_dict()["trace"] == trace.to_dict()
        assert json.loads(json.dumps(report.to_dict()))["trace"] == trace.to_dict()
        assert trace.to_dict()["format"] == TRACE_FORMAT
        assert trace.transitions == report.transitions
        assert trace.checks == report.checks
        assert trace.states == report.states
        assert trace.tool_calls == report.tool_calls
        assert len(trace.llm_calls) == report.llm_calls
        assert trace.outcome == ("done" if report.successful else "faulted")
        assert trace.error_codes == tuple(str(e.code) for e in report.result.errors)
        assert trace.faulted_step == report.faulted_step
        assert (trace.session_id, trace.turn_id) == (report.session_id, report.turn_id)
        assert trace.mode == report.mode
        assert trace.warnings == tuple(w.code for w in report.warnings)
        if report.successful:
            assert [
                (m.tool_call_id, m.previous_mode, m.new_mode, m.branch) for m in trace.mode_changes
            ] == [
                (m.tool_call_id, m.previous_mode, m.new_mode, m.branch) for m in report.mode_changes
            ]


@pytest.mark.decision("D94")
@pytest.mark.parametrize("name", NAMES)
async def test_a_faulted_turn_ends_with_its_fault_then_the_fault_transition(name: str) -> None:
    kit = await run_scenario(name, MemoryStore())

    for report, trace in _reports(kit):
        faults = [entry for entry in trace.entries if isinstance(entry, FaultRecord)]
        if report.successful:
            assert (trace.outcome, faults, trace.states[-1]) == ("done", [], "done")
            continue
        assert trace.outcome == "faulted"
        *_, fault, last = trace.entries
        assert fault == FaultRecord(
            str(report.faulted_step),
            tuple(str(error.code) for error in report.result.errors),
            report.result.rule_ids,
        )
        assert faults == [fault]
        assert isinstance(last, TransitionRecord)
        assert (last.event, last.target) == ("fault", "faulted")
        assert trace.states[-1] == "faulted"


# --- user content ---------------------------------------------------------------------------


@pytest.mark.decision("D50")
async def test_a_trace_holds_no_user_content_by_default() -> None:
    kit = await run_scenario("content_everywhere", MemoryStore())
    texts = [trace.to_json() for trace in traces_of(kit)]

    assert [t.outcome for t in traces_of(kit)] == ["done", "done"]
    for value in CONTENT.values():
        assert not any(value in text for text in texts), value
    assert all("text" not in call_ for t in traces_of(kit) for call_ in _llm_dicts(t))
    assert all(m.reason is None for t in traces_of(kit) for m in t.mode_changes)
    assert traces_of(kit)[0].llm_calls[0].has_text  # that there was text is kept


@pytest.mark.decision("D50")
async def test_content_capture_keeps_the_model_text_and_the_mode_change_reason() -> None:
    kit = await run_scenario("content_everywhere", MemoryStore(), Telemetry(capture_content=True))
    first, second = traces_of(kit)

    assert [c.text for c in first.llm_calls] == [CONTENT["model_text"], None]
    assert [c.text for c in second.llm_calls] == [CONTENT["answer"]]
    assert [m.reason for m in first.mode_changes] == [CONTENT["reason"]]
    assert [d.get("text") for d in _llm_dicts(first)] == [CONTENT["model_text"], None]
    assert StateTrace.from_dict(first.to_dict()).to_dict() == first.to_dict()


@pytest.mark.decision("D56")
async def test_the_content_switch_of_the_conventions_turns_capture_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")

    kit = await run_scenario("content_everywhere", MemoryStore())

    assert [m.reason for m in traces_of(kit)[0].mode_changes] == [CONTENT["reason"]]


def _llm_dicts(trace: StateTrace) -> list[dict[str, Any]]:
    return [e for e in trace.to_dict()["entries"] if e["kind"] == "llm_call"]


# --- tool-call words are enums whose values are the trace's words ----------------------------


def _tool_call_entry(**changes: str) -> dict[str, Any]:
    entry = {
        "kind": "tool_call",
        "id": "c1",
        "name": "read_file",
        "side": "client",
        "outcome": "client",
        "rule_id": None,
        **changes,
    }
    return _with(entries=[entry])


@pytest.mark.decision("D256")
def test_a_traced_tool_call_reads_back_as_enum_members_with_the_same_words() -> None:
    trace = StateTrace.from_dict(_tool_call_entry(side="server", outcome="mode_refused"))

    [entry] = trace.entries
    assert isinstance(entry, ToolCallRecord)
    assert entry.side is ToolCallSide.SERVER
    assert entry.outcome is ToolCallFate.MODE_REFUSED
    assert json.loads(trace.to_json())["entries"][0]["outcome"] == "mode_refused"


@pytest.mark.decision("D256")
@pytest.mark.parametrize(("field", "word"), [("side", "sideways"), ("outcome", "vanished")])
def test_a_traced_tool_call_with_an_unknown_word_is_refused(field: str, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        StateTrace.from_dict(_tool_call_entry(**{field: word}))


@pytest.mark.decision("D256")
def test_the_enums_hold_exactly_the_words_traces_used() -> None:
    assert {fate.value for fate in ToolCallFate} == {
        "client",
        "executed",
        "failed",
        "paused",
        "expanded",
        "rejected",
        "mode_changed",
        "mode_unchanged",
        "mode_refused",
    }
    assert {side.value for side in ToolCallSide} == {"client", "server", "unknown"}
    assert {kind.value for kind in RejectionKind} == {
        "unknown_tool",
        "container_invocation",
        "argument_validation",
    }
