"""The ``chat`` span of a streamed model call (AGN-034 §4.7), read back from the SDK.

A call answered as a stream carries ``gen_ai.request.stream`` (true) and
``gen_ai.response.time_to_first_chunk`` (seconds from the call's start to its first
chunk); a call answered whole carries neither. Text deltas never reach the span
builder: no span holds a piece of the model's text, with content capture or
without (with capture the whole reply is on the span, as for any call).

Every test gives its pipeline its own SDK ``TracerProvider`` (tests/kits/span_kit.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, make_pipeline, text
from opentelemetry.sdk.trace import ReadableSpan
from replay_kit import CutStreamLLM, streamed_report
from span_kit import Recorded, attributes_of, events_named, values_of

from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import LLM, LLMReply, LLMRequest
from aptix_pipeline.engine import ModelFirstChunk, ModelTextDelta, TurnEvent
from aptix_pipeline.engine.events import TraceBuilder, TurnEvents
from aptix_pipeline.engine.telemetry import SpanBuilder

STREAM = "gen_ai.request.stream"
TTFC = "gen_ai.response.time_to_first_chunk"
REPLY = "SECRET-REPLY-7f3a, written piece by piece by the model."
PIECE = 4
"""The chunk size the scripted model streams in."""
SCRIPT: list[dict[str, Any]] = [
    calls(call("x1", "Math")),
    calls(call("a1", "Add", {"a": 1, "b": 2})),
    text(REPLY),
]


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    """An SDK tracer provider of this test only, into memory."""
    found = Recorded()
    yield found
    found.shutdown()


def chats(recorded: Recorded) -> list[ReadableSpan]:
    """The turn's ``chat`` spans, in the order the calls ran."""
    return sorted(recorded.turn().named("chat"), key=lambda span: span.start_time or 0)


def seconds(span: ReadableSpan) -> float:
    """How long the span lasted."""
    assert span.start_time is not None
    assert span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


async def stream_turn(
    recorded: Recorded,
    llm: LLM | list[dict[str, Any]],
    *,
    capture: bool = False,
    leave_after: int | None = None,
) -> None:
    """One Initial turn through ``Pipeline.stream``, its spans into ``recorded``."""
    model = ScriptedLLM(llm, chunk_size=PIECE) if isinstance(llm, list) else llm
    pipeline, _ = make_pipeline(
        MemoryStore(), model, telemetry=recorded.telemetry(capture_content=capture)
    )
    await streamed_report(pipeline, {"Instruction": "Add"}, leave_after=leave_after)


@pytest.mark.decision("D269")
async def test_each_streamed_model_call_marks_its_chat_span_with_its_time_to_first_chunk(
    recorded: Recorded,
) -> None:
    await stream_turn(recorded, SCRIPT)

    spans = chats(recorded)
    assert len(spans) == 3
    for span in spans:
        attributes = attributes_of(span)
        assert attributes[STREAM] is True
        elapsed = attributes[TTFC]
        assert isinstance(elapsed, float)
        assert 0 <= elapsed <= seconds(span)


@pytest.mark.decision("D269")
async def test_a_model_call_answered_whole_has_neither_stream_attribute(
    recorded: Recorded,
) -> None:
    pipeline, _ = make_pipeline(MemoryStore(), SCRIPT, telemetry=recorded.telemetry())

    await pipeline.run({"Instruction": "Add"}, CALLER)

    for span in chats(recorded):
        assert STREAM not in attributes_of(span)
        assert TTFC not in attributes_of(span)


@pytest.mark.decision("D269")
async def test_a_streamed_turn_on_a_model_that_cannot_stream_marks_no_chat_span(
    recorded: Recorded,
) -> None:
    class Whole:
        """A model with ``complete`` only."""

        def __init__(self) -> None:
            self._scripted = ScriptedLLM(SCRIPT)

        async def complete(self, request: LLMRequest) -> LLMReply:
            return await self._scripted.complete(request)

    await stream_turn(recorded, Whole())

    spans = chats(recorded)
    assert len(spans) == 3
    assert all(STREAM not in attributes_of(span) for span in spans)
    assert all(TTFC not in attributes_of(span) for span in spans)


@pytest.mark.decision("D269")
async def test_a_streamed_call_that_fails_before_its_first_chunk_is_marked_streamed(
    recorded: Recorded,
) -> None:
    """Every attempt's stream fails before any chunk: the call failed, streamed."""
    failing = CutStreamLLM([text(REPLY)] * 3, after=0, times=3, chunk_size=PIECE)

    await stream_turn(recorded, failing)

    [span] = chats(recorded)
    attributes = attributes_of(span)
    assert attributes[STREAM] is True
    assert TTFC not in attributes  # no chunk ever came


@pytest.mark.decision("D269")
async def test_the_time_to_first_chunk_runs_from_the_calls_start_over_its_retries(
    recorded: Recorded,
) -> None:
    """The first attempt's stream fails before any chunk; the second streams."""
    await stream_turn(recorded, CutStreamLLM([text(REPLY)] * 2, after=0, chunk_size=PIECE))

    [span] = chats(recorded)
    assert [e["error.type"] for e in events_named(span, "aptix.llm.retry")] == ["ConnectionError"]
    attributes = attributes_of(span)
    assert attributes[STREAM] is True
    assert 0 <= attributes[TTFC] <= seconds(span)


@pytest.mark.decision("D269")
async def test_a_call_whose_consumer_left_mid_stream_keeps_its_time_to_first_chunk(
    recorded: Recorded,
) -> None:
    await stream_turn(
        recorded, CutStreamLLM([text(REPLY)], after=3, hang=True, chunk_size=PIECE), leave_after=4
    )

    [span] = chats(recorded)
    attributes = attributes_of(span)
    assert attributes[STREAM] is True
    assert 0 <= attributes[TTFC] <= seconds(span)
    assert attributes_of(recorded.turn().root)["error.type"] == "cancelled"


def pieces(reply: str) -> set[str]:
    """The pieces the scripted model streams ``reply`` in."""
    return {reply[at : at + PIECE] for at in range(0, len(reply), PIECE)}


@pytest.mark.decision("D269")
async def test_by_default_no_span_of_a_streamed_turn_holds_any_of_the_models_text(
    recorded: Recorded,
) -> None:
    await stream_turn(recorded, SCRIPT)

    turn = recorded.turn()
    shown = [value for span in (turn.root, *turn.spans) for _, value in values_of(span)]
    assert not [value for value in shown if "SECRET" in value or "piece by" in value]


@pytest.mark.decision("D269")
async def test_with_content_capture_spans_hold_the_whole_reply_and_never_a_text_delta(
    recorded: Recorded,
) -> None:
    await stream_turn(recorded, SCRIPT, capture=True)

    turn = recorded.turn()
    shown = [value for span in (turn.root, *turn.spans) for _, value in values_of(span)]
    assert not pieces(REPLY) & set(shown)
    holding = [value for value in shown if "SECRET" in value]
    assert holding, "content capture shows the reply"
    assert all(REPLY in value for value in holding)


@pytest.mark.decision("D269")
def test_the_span_builder_reads_the_first_chunk_and_never_a_text_delta() -> None:
    builder = SpanBuilder(Recorded().provider.get_tracer("test"), True, "aptix")

    events = TurnEvents([TraceBuilder(), builder], capture_content=True)

    assert ModelFirstChunk in SpanBuilder.event_types
    assert ModelTextDelta not in SpanBuilder.event_types
    assert events.wants(ModelFirstChunk)
    assert not events.wants(ModelTextDelta)
    assert not events.streamed


@pytest.mark.decision("D269")
def test_with_content_capture_a_text_delta_still_never_reaches_the_span_builder() -> None:
    spans = Recorded()
    read: list[type[TurnEvent]] = []

    class Noting(SpanBuilder):
        """The builder, noting the events it is handed."""

        __slots__ = ()

        def __call__(self, event: TurnEvent) -> None:
            read.append(type(event))
            super().__call__(event)

    events = TurnEvents(
        [Noting(spans.provider.get_tracer("test"), True, "aptix")], capture_content=True
    )

    events.emit_text(ModelTextDelta(events.run_id, 1, "piece"))
    events.emit(ModelFirstChunk(events.run_id, 1))

    assert read == [ModelFirstChunk]
