"""A ``CheckRan`` or ``TransitionTaken`` is made only when someone but the state trace reads
it (D443, ``TurnEvents.entry_sink``): the trace alone gets the record itself."""

from __future__ import annotations

from typing import ClassVar

import pytest
from engine_kit import CALLER, make_pipeline

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.engine import (
    CheckRan,
    ModelCallFinished,
    StepStarted,
    Telemetry,
    TransitionTaken,
    TurnEvent,
    TurnStarted,
)
from aptix_pipeline.engine.events import TraceBuilder, TurnEvents
from aptix_pipeline.engine.trace import CheckRecord, TransitionRecord

CHECK = CheckRecord("reasoner", "PRE", ("AGN-036/4.8/PRE/x",))
MOVE = TransitionRecord("reasoner", "prompt_ready", "reasoning")
OFF = Telemetry(spans=False, capture_content=False)


class StartsOnly:
    """A listener that declares it reads ``TurnStarted`` alone."""

    event_types: ClassVar[frozenset[type[TurnEvent]]] = frozenset({TurnStarted})

    def __init__(self) -> None:
        self.heard: list[TurnEvent] = []

    def __call__(self, event: TurnEvent) -> None:
        self.heard.append(event)


class TraceBuilderKind(TraceBuilder):
    """A subscriber that is a kind of ``TraceBuilder`` but hears events its own way."""

    __slots__ = ("heard",)

    def __init__(self) -> None:
        super().__init__()
        self.heard: list[TurnEvent] = []

    def __call__(self, event: TurnEvent) -> None:
        self.heard.append(event)
        super().__call__(event)


@pytest.mark.decision("D443")
def test_with_the_trace_alone_the_record_goes_to_it_and_no_listener_hears_an_event() -> None:
    trace, starts = TraceBuilder(), StartsOnly()
    events = TurnEvents([trace, starts])

    events.entry_sink(CheckRan)(CHECK)
    events.entry_sink(TransitionTaken)(MOVE)

    assert trace.entries == [CHECK, MOVE]
    assert starts.heard == []


@pytest.mark.decision("D443")
def test_a_listener_of_every_event_hears_it_and_the_trace_keeps_the_record() -> None:
    trace = TraceBuilder()
    heard: list[TurnEvent] = []
    events = TurnEvents([trace, heard.append])

    events.entry_sink(CheckRan)(CHECK)
    events.entry_sink(TransitionTaken)(MOVE)

    assert trace.entries == [CHECK, MOVE]
    assert heard == [CheckRan(events.run_id, CHECK), TransitionTaken(events.run_id, MOVE)]


@pytest.mark.decision("D443")
def test_every_trace_builder_keeps_the_record_and_a_subclass_hears_the_event() -> None:
    first, second = TraceBuilder(), TraceBuilder()
    TurnEvents([first, second]).entry_sink(CheckRan)(CHECK)
    assert first.entries == second.entries == [CHECK]

    kind = TraceBuilderKind()
    events = TurnEvents([kind])
    events.entry_sink(TransitionTaken)(MOVE)
    assert kind.entries == [MOVE]
    assert kind.heard == [TransitionTaken(events.run_id, MOVE)]


@pytest.mark.decision("D443")
async def test_an_async_listener_hears_the_events_the_trace_keeps() -> None:
    trace = TraceBuilder()
    heard: list[TurnEvent] = []

    async def listener(event: TurnEvent) -> None:
        heard.append(event)

    events = TurnEvents([trace], [listener])
    events.entry_sink(CheckRan)(CHECK)
    await events.close()

    assert trace.entries == [CHECK]
    assert heard == [CheckRan(events.run_id, CHECK)]


@pytest.mark.decision("D443")
async def test_a_turn_heard_by_a_listener_of_checks_has_the_trace_of_one_heard_by_none() -> None:
    heard: list[TurnEvent] = []
    quiet, _ = make_pipeline(MemoryStore(), [{"text": "hi"}], telemetry=OFF)
    loud, _ = make_pipeline(
        MemoryStore(), [{"text": "hi"}], telemetry=OFF, listeners=[heard.append]
    )

    one = await quiet.run({"Instruction": "hi"}, CALLER)
    other = await loud.run({"Instruction": "hi"}, CALLER)

    assert one.trace == other.trace
    assert one.checks == other.checks
    assert one.transitions == other.transitions
    assert any(isinstance(e, StepStarted) for e in heard)
    assert [e.check for e in heard if isinstance(e, CheckRan)] == list(other.checks)
    assert [e.transition for e in heard if isinstance(e, TransitionTaken)] == list(
        other.transitions
    )
    assert other.trace is not None
    assert [e.call for e in heard if isinstance(e, ModelCallFinished)] == list(
        other.trace.llm_calls
    )


@pytest.mark.decision("D443")
def test_a_model_calls_record_goes_straight_to_the_trace_only_when_nobody_else_reads_it() -> None:
    trace = TraceBuilder()
    keep = TurnEvents([trace, StartsOnly()]).entry_keeper(ModelCallFinished)
    assert keep is not None
    keep(CHECK)
    assert trace.entries == [CHECK]
    heard: list[TurnEvent] = []
    assert TurnEvents([TraceBuilder(), heard.append]).entry_keeper(ModelCallFinished) is None
    assert TurnEvents([TraceBuilderKind()]).entry_keeper(ModelCallFinished) is None


class TextReader:
    """A subscriber that declares its types in a mutable set (unhashable)."""

    def __init__(self, kinds: set[type[TurnEvent]]) -> None:
        self.event_types = kinds
        self.heard: list[TurnEvent] = []

    def __call__(self, event: TurnEvent) -> None:
        self.heard.append(event)


@pytest.mark.decision("D443")
def test_what_the_dispatcher_works_out_follows_each_turns_own_subscribers() -> None:
    from aptix_pipeline.engine import ModelTextDelta

    for _ in range(2):  # the second time from what was kept
        alone = TurnEvents([TraceBuilder()])
        assert not alone.streamed
        assert not alone.wants(StepStarted)
        reader = TextReader({ModelTextDelta})
        streamed = TurnEvents([TraceBuilder(), reader])
        assert streamed.streamed
        assert streamed.wants(ModelTextDelta)
        assert not streamed.wants(StepStarted)
        delta = ModelTextDelta(streamed.run_id, 1, "hi")
        streamed.emit_text(delta)
        assert reader.heard == [delta]
        heard: list[TurnEvent] = []
        captured = TurnEvents([heard.append], capture_content=True)
        captured.emit_text(ModelTextDelta(captured.run_id, 1, "yo"))
        assert len(heard) == 1
        blind = TurnEvents([heard.append], capture_content=False)
        blind.emit_text(ModelTextDelta(blind.run_id, 1, "no"))
        assert len(heard) == 1
