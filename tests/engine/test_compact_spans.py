"""``SpanMode.COMPACT``: each step an ``aptix.step`` event on ``invoke_agent``.

``Telemetry(span_mode="compact")`` keeps the ``invoke_agent``, ``chat``,
``retrieval`` and ``execute_tool`` spans exactly as the default mode makes them (the
GenAI attributes where the conventions put them), children of ``invoke_agent``, and
folds each ``step`` span into one event on ``invoke_agent``: its name, where it
went, a check that did not pass, the error of the step the turn faulted in. What a
step span held of a failure goes on ``invoke_agent``. The default mode is unchanged
(tests/engine/test_spans.py).

Every scenario of tests/kits/trace_scenarios.py is run in both modes and the compact
tree checked against the full one folded by hand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, change_mode, make_pipeline, text
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from span_kit import Recorded, TurnSpans, attributes_of, events_named, span_id
from syrupy.assertion import SnapshotAssertion
from trace_scenarios import SCENARIOS, TraceJSON, run_scenario

from aptix_pipeline import SpanMode, Telemetry
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import LLMReply, LLMRequest, PipelineStep, ResponsePayload
from aptix_pipeline.engine.events import StepEnded, StepStarted
from aptix_pipeline.engine.telemetry import CAPTURE_CONTENT_ENV, CompactSpanBuilder
from aptix_pipeline.steps import STEP_FUNCTIONS, TurnScope

COMPACT = SpanMode.COMPACT
AGENT = "Aptix assistant"
STEP_KEYS = (
    "aptix.step.name",
    "aptix.step.to",
    "aptix.guard.outcome",
    "aptix.guard.failed_rule_ids",
    "aptix.exit_hook.outcome",
    "aptix.exit_hook.failed_rule_ids",
    "error.type",
)
"""What a compact step event keeps of its step span's attributes (when they are there)."""


@pytest.fixture(autouse=True)
def no_content_capture_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests decide content capture themselves."""
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)


def event_list(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    """The span's events: (name, attributes), in order."""
    return [(event.name, attributes_of(event)) for event in span.events]


def parent_name(turn: TurnSpans, span: ReadableSpan) -> str | None:
    """The name of the span's parent within the turn."""
    if span.parent is None:
        return None
    by_id = {span_id(s): s for s in (turn.root, *turn.spans)}
    return by_id[span.parent.span_id].name


def step_event(step: ReadableSpan) -> tuple[str, dict[str, Any]]:
    """The ``aptix.step`` event a full-mode step span folds into."""
    found = attributes_of(step)
    kept = {key: found[key] for key in STEP_KEYS if key in found}
    for prefix in ("aptix.guard", "aptix.exit_hook"):
        if kept.get(f"{prefix}.outcome") == "passed":  # a passed check is left out
            del kept[f"{prefix}.outcome"]
        if not kept.get(f"{prefix}.failed_rule_ids"):
            kept.pop(f"{prefix}.failed_rule_ids", None)
    return "aptix.step", kept


def shape(span: ReadableSpan) -> tuple[Any, ...]:
    """Everything of a span but its ids, times and parent."""
    return (
        span.name,
        span.kind,
        attributes_of(span),
        event_list(span),
        span.status.status_code,
        span.status.description,
    )


def assert_folded(full: TurnSpans, compact: TurnSpans) -> None:
    """``compact`` is ``full`` with each step span folded into an event of the root."""
    steps = full.steps
    assert all(step.name.startswith("step ") for step in steps)
    # The same root: name, kind, attributes, status.
    assert shape(compact.root)[:3] == shape(full.root)[:3]
    assert shape(compact.root)[4:] == shape(full.root)[4:]
    # Each step's events, then its own event, in the steps' order.
    expected: list[tuple[str, dict[str, Any]]] = []
    for step in steps:
        expected += event_list(step)
        expected.append(step_event(step))
    assert event_list(compact.root) == [*event_list(full.root), *expected]
    # Every other span as it was, a child of invoke_agent where it was a step's.
    others = [span for span in full.spans if span not in steps]
    assert [shape(span) for span in compact.spans] == [shape(span) for span in others]
    for before, after in zip(others, compact.spans, strict=True):
        parent = parent_name(full, before)
        assert parent_name(compact, after) == (
            compact.root.name if parent is not None and parent.startswith("step ") else parent
        )


@pytest.mark.decision("D450")
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_compact_spans_are_the_full_ones_with_each_step_folded_into_an_event(
    name: str,
) -> None:
    full, compact = Recorded(), Recorded()

    await run_scenario(name, MemoryStore(), full.telemetry())
    await run_scenario(name, MemoryStore(), compact.telemetry(span_mode=COMPACT))

    full_turns, compact_turns = full.turns(), compact.turns()
    assert len(compact_turns) == len(full_turns)
    for before, after in zip(full_turns, compact_turns, strict=True):
        assert_folded(before, after)
    assert not [s for s in compact.spans if s.name.startswith("step ")]


@pytest.mark.decision("D450")
async def test_a_compact_initial_turn_is_two_spans_and_a_step_event_per_transition() -> None:
    recorded = Recorded()
    pipeline, _ = make_pipeline(
        MemoryStore(), [text("Hello.")], telemetry=recorded.telemetry(span_mode=COMPACT)
    )

    await pipeline.run({"Instruction": "hi"}, CALLER)

    turn = recorded.turn()
    assert [(s.name, s.kind, parent_name(turn, s)) for s in (*turn.spans, turn.root)] == [
        ("chat scripted", SpanKind.CLIENT, f"invoke_agent {AGENT}"),
        (f"invoke_agent {AGENT}", SpanKind.INTERNAL, None),
    ]
    assert event_list(turn.root) == [
        ("aptix.step", {"aptix.step.name": name, "aptix.step.to": to})
        for name, to in [
            ("request_handler", "validated"),
            ("agent_context_resolver", "agent_context_resolved"),
            ("agent_session_creator", "session_created"),
            ("prompt_content_provider_initializer", "prompt_ready"),
            ("reasoner", "reasoning"),
            ("llm_client", "llm_answered"),
            ("response_builder", "response_built"),
            ("complete", "done"),
        ]
    ]
    stamps = [event.timestamp for event in turn.root.events]
    assert stamps == sorted(stamps)
    root = attributes_of(turn.root)  # the GenAI attributes stay on invoke_agent
    assert root["gen_ai.operation.name"] == "invoke_agent"
    assert root["gen_ai.agent.name"] == AGENT
    assert root["gen_ai.conversation.id"].startswith("session")
    [chat] = turn.spans
    assert attributes_of(chat)["gen_ai.operation.name"] == "chat"


@pytest.mark.decision("D450")
async def test_a_compact_server_tool_round_keeps_its_execute_tool_span_and_mode_change() -> None:
    recorded = Recorded()
    script = [calls(change_mode("m1", "review")), text("Reviewed.")]
    pipeline, _ = make_pipeline(
        MemoryStore(), script, telemetry=recorded.telemetry(span_mode=COMPACT)
    )

    await pipeline.run({"Instruction": "review this"}, CALLER)

    turn = recorded.turn()
    assert [(s.name, parent_name(turn, s)) for s in turn.spans] == [
        ("chat scripted", f"invoke_agent {AGENT}"),
        ("execute_tool agent_change_mode", f"invoke_agent {AGENT}"),
        ("chat scripted", f"invoke_agent {AGENT}"),
    ]
    [tool] = turn.named("execute_tool")
    assert events_named(tool, "aptix.mode.changed")[0]["aptix.mode.new"] == "review"
    assert attributes_of(tool)["gen_ai.tool.name"] == "agent_change_mode"
    steps = events_named(turn.root, "aptix.step")
    assert [e["aptix.step.name"] for e in steps][5:8] == [
        "llm_client",
        "server_tool_round",
        "llm_client",
    ]
    assert steps[5] == {  # §4.9's POST waits for the round that answers (DESIGN.md R5)
        "aptix.step.name": "llm_client",
        "aptix.step.to": "llm_answered",
        "aptix.exit_hook.outcome": "deferred",
    }


async def reasoner_then_answer_early(scope: TurnScope) -> None:
    """The reasoner, then a response payload set too early: §4.9's guard must fail."""
    await STEP_FUNCTIONS[PipelineStep.REASONER](scope)
    scope.ctx.response_payload = ResponsePayload(primary_output_text="too early")


@pytest.mark.decision("D451")
async def test_a_failed_guard_in_compact_mode_is_a_rule_event_then_its_step_event() -> None:
    recorded = Recorded()
    steps = {PipelineStep.REASONER: reasoner_then_answer_early}
    pipeline, _ = make_pipeline(
        MemoryStore(), [text("hi")], steps=steps, telemetry=recorded.telemetry(span_mode=COMPACT)
    )

    await pipeline.run({"Instruction": "hello"}, CALLER)

    turn = recorded.turn()
    rule = "AGN-036/4.9/PRE/response-payload-null"
    assert event_list(turn.root)[-3:] == [
        ("aptix.step", {"aptix.step.name": "reasoner", "aptix.step.to": "reasoning"}),
        (
            "aptix.rule.failed",
            {"aptix.rule.id": rule, "aptix.step.name": "llm_client", "aptix.check.phase": "PRE"},
        ),
        (
            "aptix.step",
            {
                "aptix.step.name": "llm_client",
                "aptix.guard.outcome": "failed",
                "aptix.guard.failed_rule_ids": [rule],
                "error.type": "pipeline_rule_failed",
            },
        ),
    ]
    assert turn.spans == ()  # the model was not called
    assert turn.root.status.status_code is StatusCode.ERROR
    assert attributes_of(turn.root)["error.type"] == "pipeline_rule_failed"


class HangingLLM:
    """A model that never answers: its turn is cancelled inside ``llm_client``."""

    def __init__(self) -> None:
        self.called = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMReply:
        """Wait for ever."""
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.mark.decision("D451")
async def test_a_cancelled_compact_turn_adds_the_step_it_stopped_in_and_ends_its_spans() -> None:
    recorded = Recorded()
    llm = HangingLLM()
    pipeline, _ = make_pipeline(MemoryStore(), llm, telemetry=recorded.telemetry(span_mode=COMPACT))

    task = asyncio.create_task(pipeline.run({"Instruction": "hello"}, CALLER))
    await asyncio.wait_for(llm.called.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    turn = recorded.turn()
    assert [s.name for s in turn.spans] == ["chat scripted"]
    assert events_named(turn.root, "aptix.step")[-1] == {"aptix.step.name": "llm_client"}


@pytest.mark.decision("D451")
async def test_compact_mode_takes_a_step_event_per_llm_round_of_a_multi_round_turn() -> None:
    recorded = Recorded()
    script = [calls(call("m1", "Math")), calls(call("a1", "Add", {"a": 2, "b": 3})), text("5")]
    pipeline, _ = make_pipeline(
        MemoryStore(), script, telemetry=recorded.telemetry(span_mode=COMPACT)
    )

    report = await pipeline.run({"Instruction": "2 + 3?"}, CALLER)

    turn = recorded.turn()
    steps = events_named(turn.root, "aptix.step")
    assert report.trace is not None
    assert [(e["aptix.step.name"], e["aptix.step.to"]) for e in steps] == [
        (t.event, t.target) for t in report.trace.transitions
    ]
    assert [s.name for s in turn.spans].count("chat scripted") == 3


@pytest.mark.decision("D450")
async def test_the_compact_span_tree_of_a_tool_scenario(snapshot: SnapshotAssertion) -> None:
    recorded = Recorded()

    await run_scenario(
        "server_tool_rounds_with_container_expansion",
        MemoryStore(),
        recorded.telemetry(span_mode=COMPACT),
    )

    tree = [
        {
            "name": span.name,
            "kind": span.kind.name,
            "parent": parent_name(turn, span),
            "attributes": attributes_of(span),
            "events": [{"name": n, "attributes": a} for n, a in event_list(span)],
            "status": span.status.status_code.name,
        }
        for turn in recorded.turns()
        for span in (*turn.spans, turn.root)
    ]
    assert tree == snapshot(extension_class=TraceJSON)


@pytest.mark.decision("D450")
def test_the_compact_builder_reads_transitions_so_the_runner_makes_no_step_events() -> None:
    assert StepStarted not in CompactSpanBuilder.event_types
    assert StepEnded not in CompactSpanBuilder.event_types


@pytest.mark.decision("D452")
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (SpanMode.FULL, SpanMode.FULL),
        (SpanMode.COMPACT, SpanMode.COMPACT),
        ("full", SpanMode.FULL),
        ("compact", SpanMode.COMPACT),
    ],
)
def test_span_mode_takes_the_enum_or_its_value(given: Any, expected: SpanMode) -> None:
    assert Telemetry(span_mode=given).span_mode is expected


@pytest.mark.decision("D452")
def test_full_spans_are_the_default() -> None:
    assert Telemetry().span_mode is SpanMode.FULL
    assert Telemetry.off().span_mode is SpanMode.FULL


@pytest.mark.decision("D452")
@pytest.mark.parametrize("given", ["tiny", "COMPACT", "", True, None, 1])
def test_a_span_mode_that_is_not_one_is_refused_naming_the_field(given: Any) -> None:
    with pytest.raises(ValueError, match=r"span_mode must be one of 'full', 'compact', not "):
        Telemetry(span_mode=given)
