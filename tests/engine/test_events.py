"""The turn's event stream and the hosts that listen to it (``Pipeline(listeners=[...])``).

The state trace and the spans are subscribers of the same stream, so what a host
hears is what the trace says, in the same order. Listeners may be plain or
coroutine functions; one that raises is logged with its traceback and changes
nothing; events hold no user content unless content capture is on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import pytest
from engine_kit import CALLER, make_pipeline
from trace_scenarios import CONTENT, SCENARIOS, run_scenario

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.engine import (
    CheckRan,
    ModeChanged,
    ModelCallFinished,
    ModelCallStarted,
    Pipeline,
    StepEnded,
    StepStarted,
    Telemetry,
    ToolCallHandled,
    ToolExecuted,
    ToolExecutionStarted,
    TransitionTaken,
    TurnEvent,
    TurnFaulted,
    TurnFinished,
    TurnStarted,
    WarningRaised,
)
from aptix_pipeline.engine.trace import TraceEntry

NAMES = list(SCENARIOS)
OFF = Telemetry(spans=False, capture_content=False)


def _entries(events: list[TurnEvent]) -> list[TraceEntry]:
    """The trace entries a host can read off the events, in order."""
    found: list[TraceEntry] = []
    for event in events:
        if isinstance(event, TransitionTaken):
            found.append(event.transition)
        elif isinstance(event, CheckRan):
            found.append(event.check)
        elif isinstance(event, ModelCallFinished):
            found.append(event.call)
        elif isinstance(event, ToolCallHandled):
            found.append(event.record)
        elif isinstance(event, ModeChanged):
            found.append(event.change)
        elif isinstance(event, WarningRaised):
            found.append(event.warning)
        elif isinstance(event, TurnFaulted):
            found.append(event.fault)
    return found


def _by_turn(events: list[TurnEvent]) -> list[list[TurnEvent]]:
    turns: dict[int, list[TurnEvent]] = {}
    for event in events:
        turns.setdefault(event.run_id, []).append(event)
    return list(turns.values())


@pytest.mark.decision("D49", "D130")
@pytest.mark.parametrize("name", NAMES)
async def test_a_listener_hears_what_the_trace_records_in_the_same_order(name: str) -> None:
    heard: list[TurnEvent] = []
    kit = await run_scenario(name, MemoryStore(), OFF, listeners=[heard.append])
    turns = _by_turn(heard)
    assert len(turns) == len(kit.reports)
    for events, report in zip(turns, kit.reports, strict=True):
        assert isinstance(events[0], TurnStarted)
        assert isinstance(events[-1], TurnFinished)
        assert events[-1].result == report.result
        assert events[-1].session_id == report.session_id
        assert events[-1].turn_id == report.turn_id
        assert report.trace is not None
        assert _entries(events) == list(report.trace.entries)
        started = [e.step for e in events if isinstance(e, StepStarted)]
        ended = [e.step for e in events if isinstance(e, StepEnded)]
        assert started == ended
        taken = [e.step for e in events if isinstance(e, StepEnded) and e.taken]
        assert taken == [t.event for t in report.transitions if t.event != "fault"]


@pytest.mark.decision("D130")
async def test_step_events_frame_each_transition() -> None:
    heard: list[TurnEvent] = []
    pipeline, _ = make_pipeline(MemoryStore(), [{"text": "hi"}], listeners=[heard.append])
    await pipeline.run({"Instruction": "hi"}, CALLER)
    kinds = [type(e).__name__ for e in heard[:6]]
    assert kinds == [
        "TurnStarted",
        "StepStarted",
        "TransitionTaken",
        "CheckRan",
        "StepEnded",
        "StepStarted",
    ]
    first = heard[1]
    assert isinstance(first, StepStarted)
    assert (first.step, first.source, first.context_type) == ("request_handler", "received", None)
    ended = heard[4]
    assert isinstance(ended, StepEnded)
    assert (ended.state, ended.taken, ended.context_type) == ("validated", True, "Initial")


@pytest.mark.decision("D131")
async def test_an_async_listener_hears_every_event_in_order_before_the_turn_returns() -> None:
    plain: list[TurnEvent] = []
    awaited: list[TurnEvent] = []

    async def slow(event: TurnEvent) -> None:
        await asyncio.sleep(0)
        awaited.append(event)

    pipeline, _ = make_pipeline(MemoryStore(), [{"text": "hi"}], listeners=[plain.append, slow])
    report = await pipeline.run({"Instruction": "hi"}, CALLER)
    assert report.successful
    assert awaited == plain
    assert isinstance(awaited[-1], TurnFinished)


class Callable:
    """A listener object whose ``__call__`` is a coroutine function."""

    def __init__(self) -> None:
        self.heard: list[TurnEvent] = []

    async def __call__(self, event: TurnEvent) -> None:
        self.heard.append(event)


@pytest.mark.decision("D131")
async def test_a_listener_object_with_an_async_call_is_awaited() -> None:
    listener = Callable()
    pipeline, _ = make_pipeline(MemoryStore(), [{"text": "hi"}], listeners=[listener])
    await pipeline.run({"Instruction": "hi"}, CALLER)
    assert isinstance(listener.heard[-1], TurnFinished)


@pytest.mark.decision("D131")
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_raising_listener_is_logged_and_changes_nothing(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: TurnEvent) -> None:
        if isinstance(event, (CheckRan, TurnFinished)):
            raise RuntimeError("listener bug")

    async def broken_async(event: TurnEvent) -> None:
        broken(event)

    heard: list[TurnEvent] = []
    listener: Any = broken if kind == "sync" else broken_async
    script = [{"text": "hi"}]
    quiet, _ = make_pipeline(MemoryStore(), script, telemetry=OFF)
    loud, _ = make_pipeline(
        MemoryStore(), script, telemetry=OFF, listeners=[listener, heard.append]
    )
    expected = await quiet.run({"Instruction": "hi"}, CALLER)
    with caplog.at_level(logging.ERROR, logger="aptix_pipeline"):
        report = await loud.run({"Instruction": "hi"}, CALLER)
    assert report.result == expected.result
    assert report.trace == expected.trace
    assert isinstance(heard[-1], TurnFinished)  # the others heard everything
    failures = [r for r in caplog.records if "event listener" in r.getMessage()]
    assert failures, caplog.text
    assert all(r.exc_info is not None and "listener bug" in str(r.exc_info[1]) for r in failures)
    assert any("TurnFinished" in r.getMessage() for r in failures)


@pytest.mark.decision("D131")
def test_a_listener_that_is_not_callable_is_refused() -> None:
    pipeline, _ = make_pipeline(MemoryStore())
    with pytest.raises(TypeError, match="a listener is a callable"):
        Pipeline(pipeline.ports, listeners=["print"])  # type: ignore[list-item]


@pytest.mark.decision("D130")
async def test_events_are_frozen() -> None:
    heard: list[TurnEvent] = []
    pipeline, _ = make_pipeline(MemoryStore(), [{"text": "hi"}], listeners=[heard.append])
    await pipeline.run({"Instruction": "hi"}, CALLER)
    for event in heard:
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.run_id = 0  # type: ignore[misc]


@pytest.mark.decision("D130")
async def test_concurrent_turns_have_their_own_run_ids() -> None:
    heard: list[TurnEvent] = []
    pipeline, _ = make_pipeline(
        MemoryStore(), [{"text": "a"}, {"text": "b"}, {"text": "c"}], listeners=[heard.append]
    )
    reports = await asyncio.gather(
        *(pipeline.run({"Instruction": f"hi {n}"}, CALLER) for n in range(3))
    )
    turns = _by_turn(heard)
    assert len(turns) == 3
    for events in turns:
        assert isinstance(events[0], TurnStarted)
        assert isinstance(events[-1], TurnFinished)
    finished = {
        e.result.result.turn_id
        for e in heard
        if isinstance(e, TurnFinished)
        if e.result.result is not None
    }
    assert finished == {r.turn_id for r in reports}


def _planted(events: list[TurnEvent]) -> set[str]:
    """Which planted strings appear in the events (the result, the host's own answer, aside)."""
    texts = " ".join(
        repr(dataclasses.replace(e, result=None) if isinstance(e, TurnFinished) else e)  # type: ignore[arg-type]
        for e in events
    )
    return {name for name, value in CONTENT.items() if value in texts}


@pytest.mark.decision("D132")
async def test_events_hold_no_user_content_without_capture() -> None:
    heard: list[TurnEvent] = []
    await run_scenario("content_everywhere", MemoryStore(), OFF, listeners=[heard.append])
    assert _planted(heard) == set()
    started = [e for e in heard if isinstance(e, ModelCallStarted)]
    assert started
    assert all(e.request is None for e in started)
    assert all(e.reply is None for e in heard if isinstance(e, ModelCallFinished))
    assert all(e.arguments is None for e in heard if isinstance(e, ToolExecutionStarted))
    assert all(e.result_json is None for e in heard if isinstance(e, ToolExecuted))
    assert all(e.context is None for e in heard if isinstance(e, TurnFinished))


@pytest.mark.decision("D132")
async def test_events_carry_user_content_with_capture() -> None:
    heard: list[TurnEvent] = []
    telemetry = Telemetry(spans=False, capture_content=True)
    await run_scenario("content_everywhere", MemoryStore(), telemetry, listeners=[heard.append])
    assert _planted(heard) >= {
        "instruction",
        "model_text",
        "reason",
        "argument",
        "server_result",
        "answer",
    }
    [change] = [e.change for e in heard if isinstance(e, ModeChanged)]
    assert change.reason == CONTENT["reason"]
    executed = [(e.name, e.outcome, e.failed) for e in heard if isinstance(e, ToolExecuted)]
    assert executed == [
        ("agent_change_mode", "mode_changed", False),
        ("review_checklist", "executed", False),
    ]


def test_spans_are_recorded_only_where_an_sdk_would_keep_them() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    assert not Telemetry().recording_spans()  # the API's global proxy: no SDK set up
    assert not Telemetry(tracer_provider=NoOpTracerProvider()).recording_spans()
    assert not Telemetry(spans=False, tracer_provider=TracerProvider()).recording_spans()
    assert Telemetry(tracer_provider=TracerProvider()).recording_spans()


async def test_no_span_builder_runs_without_an_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    import aptix_pipeline.engine.pipeline as pipeline_module

    def refuse(*args: object) -> None:
        raise AssertionError("a span builder was made for a no-op provider")

    monkeypatch.setattr(pipeline_module, "SpanBuilder", refuse)
    pipeline, _ = make_pipeline(MemoryStore(), [{"text": "hi"}], telemetry=Telemetry())
    report = await pipeline.run({"Instruction": "hi"}, CALLER)
    assert report.successful


@pytest.mark.decision("D133")
async def test_with_content_capture_each_message_is_serialized_once_per_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three model calls (two server rounds): every round's input messages attribute is
    whole, yet each message became JSON once — a round does not redo the ones before."""
    import json as json_module

    from span_kit import Recorded

    import aptix_pipeline.engine.telemetry as telemetry_module

    made: list[str] = []
    original = telemetry_module._message_json

    def counting(message: Any) -> dict[str, Any]:
        made.append(str(message.role))
        return original(message)

    monkeypatch.setattr(telemetry_module, "_message_json", counting)
    recorded = Recorded()
    await run_scenario(
        "server_tool_rounds_with_container_expansion",
        MemoryStore(),
        recorded.telemetry(capture_content=True),
    )
    chats = [s for s in recorded.spans if s.name.startswith("chat")]
    inputs = [json_module.loads(str((s.attributes or {})["gen_ai.input.messages"])) for s in chats]
    assert [len(messages) for messages in inputs] == [1, 3, 5]  # user; + call, result; ...
    assert inputs[2][:3] == inputs[1]  # each round repeats the conversation so far, whole
    assert len(made) == 5  # but each message was serialized once
    recorded.shutdown()


def test_events_nobody_reads_are_not_wanted() -> None:
    from aptix_pipeline.engine.events import TraceBuilder, TurnEvents

    async def listener(event: TurnEvent) -> None:
        return None

    alone = TurnEvents([TraceBuilder()])
    assert alone.wants(CheckRan)
    assert alone.wants(TransitionTaken)
    assert not alone.wants(StepStarted)
    assert not alone.wants(ModelCallStarted)
    assert not alone.wants(TurnFinished)
    heard: list[TurnEvent] = []
    assert TurnEvents([TraceBuilder(), heard.append]).wants(StepStarted)
    assert TurnEvents([TraceBuilder()], [listener]).wants(TurnFinished)


async def test_a_cancelled_turn_still_ends_its_spans_and_tells_async_listeners() -> None:
    """The task running a turn is cancelled while the model is thinking: no TurnFinished,
    yet its invoke_agent, step and chat spans end (and are exported), and the async
    listeners have heard what happened before."""
    from span_kit import Recorded

    from aptix_pipeline.contracts import LLMReply, LLMRequest

    started = asyncio.Event()

    class Thinking:
        async def complete(self, request: LLMRequest) -> LLMReply:
            started.set()
            await asyncio.Event().wait()  # never answers
            raise AssertionError("unreachable")

    heard: list[TurnEvent] = []

    async def listener(event: TurnEvent) -> None:
        heard.append(event)

    recorded = Recorded()
    pipeline, _ = make_pipeline(
        MemoryStore(), Thinking(), telemetry=recorded.telemetry(), listeners=[listener]
    )
    task = asyncio.create_task(pipeline.run({"Instruction": "hi"}, CALLER))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    names = [span.name.split(" ")[0] for span in recorded.spans]
    assert names[-3:] == ["chat", "step", "invoke_agent"]
    assert recorded.spans[-2].name == "step llm_client"
    assert any(isinstance(e, ModelCallStarted) for e in heard)
    assert not any(isinstance(e, TurnFinished) for e in heard)
    recorded.shutdown()


@pytest.mark.parametrize("tracing", ["off", "sdk"])
async def test_a_turn_leaves_no_reference_cycles_behind(tracing: str) -> None:
    """A finished turn is freed by reference counting alone: with a thousand turns in
    flight, objects kept for the collector are what made its passes expensive."""
    import gc

    from span_kit import Recorded

    recorded = Recorded()
    telemetry = OFF if tracing == "off" else recorded.telemetry(capture_content=True)
    pipeline, _ = make_pipeline(MemoryStore(), [{"text": "hi"}] * 8, telemetry=telemetry)
    await pipeline.run({"Instruction": "warm up"}, CALLER)
    gc.collect()
    gc.disable()
    try:
        for n in range(5):
            report = await pipeline.run({"Instruction": f"turn {n}"}, CALLER)
            assert report.successful
        del report
        unreachable = gc.collect()
    finally:
        gc.enable()
        recorded.shutdown()
    assert unreachable == 0
