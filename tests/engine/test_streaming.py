"""``Pipeline.stream``: the same turn delivered as it happens (AGN-034 §4.7, DESIGN.md R11).

Streaming changes delivery only: every trace scenario ends with the same result
and the same state trace streamed and not. The stream is progress, text deltas,
then exactly one result; the POST rules still judge the assembled response; a
model failure is retried only until text has gone out; a consumer that leaves
cancels the turn and nothing is stored.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from engine_kit import (
    CALLER,
    NOTHING_STORED,
    READ_A,
    calls,
    content_request,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    stored,
    text,
)
from trace_scenarios import SCENARIOS, run_scenario

from aptix_pipeline import (
    PROGRESS_EVENTS,
    ErrorCode,
    LLMReply,
    LLMRequest,
    MemoryStore,
    ModelCallStarted,
    ModelFirstChunk,
    ModelTextDelta,
    Pipeline,
    PipelineOptions,
    ReplyChunk,
    ReplyFinished,
    ReplyTextDelta,
    ReplyToolCallDelta,
    ScriptedLLM,
    StepEnded,
    StepStarted,
    StreamDelta,
    StreamItem,
    StreamProgress,
    StreamResult,
    Telemetry,
    TurnEvent,
    TurnFaulted,
    TurnFinished,
    TurnStream,
    Usage,
    WarningRaised,
    split_reply,
)
from aptix_pipeline.engine import (
    CheckRan,
    ModelCallRetried,
    RetrievalFinished,
    RetrievalStarted,
    TransitionTaken,
)

CONSUMER_GONE = "DESIGN/streaming/consumer-gone"
INTERRUPTED = "DESIGN/streaming/interrupted"
ANSWER = "The answer is forty-two, as the tests have always said."
EXPAND_MATH = calls({"id": "s1", "name": "Math"}, text="Let me add.")
ADD = calls({"id": "s2", "name": "Add", "arguments": {"a": 40, "b": 2}})


async def drain(stream: TurnStream) -> list[StreamItem]:
    """Every item of ``stream``, in order."""
    async with stream:
        return [item async for item in stream]


def deltas(items: Sequence[StreamItem]) -> list[StreamDelta]:
    return [item for item in items if isinstance(item, StreamDelta)]


def streamed_text(items: Sequence[StreamItem]) -> str:
    return "".join(item.text for item in deltas(items))


def last_result(items: Sequence[StreamItem]) -> StreamResult:
    results = [item for item in items if isinstance(item, StreamResult)]
    assert len(results) == 1, items
    assert items[-1] is results[0], "the result comes last"
    return results[0]


def progress_kinds(items: Sequence[StreamItem]) -> list[str]:
    return [item.to_json()["kind"] for item in items if isinstance(item, StreamProgress)]


# --- delivery only: the same turn streamed and not ------------------------------------------


@pytest.mark.decision("R11")
@pytest.mark.decision("D273")
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_ends_the_same_streamed_and_not(name: str) -> None:
    plain = await run_scenario(name, MemoryStore())
    streamed = await run_scenario(name, MemoryStore(), streamed=True)

    assert [r.result.to_wire() for r in streamed.reports] == [
        r.result.to_wire() for r in plain.reports
    ]
    assert [r.trace.to_dict() if r.trace else None for r in streamed.reports] == [
        r.trace.to_dict() if r.trace else None for r in plain.reports
    ]
    for items, report in zip(streamed.items, streamed.reports, strict=True):
        assert last_result(items).result == report.result
        response = report.result.result
        if response is not None and response.primary_output_text is not None:
            # the final reply's text reached the consumer as deltas, whatever came before
            assert streamed_text(items).endswith(response.primary_output_text)


@pytest.mark.rule(CONSUMER_GONE, "holds")
async def test_the_text_comes_in_pieces_that_make_the_answer() -> None:
    llm = ScriptedLLM([text(ANSWER)], chunk_size=5, chunk_delay_seconds=0.001)
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, llm)

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    assert (await stored(store))[0] is not None  # read to the end: the turn is stored
    assert len(deltas(items)) > 1
    assert streamed_text(items) == ANSWER
    assert ok(last_result(items).result).primary_output_text == ANSWER
    assert {d.round for d in deltas(items)} == {1}


async def test_progress_comes_before_the_text_and_the_result_last() -> None:
    llm = ScriptedLLM([text(ANSWER)], chunk_size=8, chunk_delay_seconds=0.001)
    pipeline, _ = make_pipeline(MemoryStore(), llm)

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    kinds = [type(item).__name__ for item in items]
    first_delta = kinds.index("StreamDelta")
    assert "model_call_started" in progress_kinds(items[:first_delta])
    assert "model_first_chunk" in progress_kinds(items[:first_delta])
    assert progress_kinds(items)[0] == "turn_started"
    assert kinds[-1] == "StreamResult"


async def test_a_round_of_server_tools_streams_each_rounds_text() -> None:
    replies = [EXPAND_MATH, ADD, text("It is 42.")]
    llm = ScriptedLLM(replies, chunk_size=4, chunk_delay_seconds=0.001)
    pipeline, _ = make_pipeline(MemoryStore(), llm)

    items = await drain(pipeline.stream({"Instruction": "40+2?"}, CALLER))

    by_round: dict[int, str] = {}
    for delta in deltas(items):
        by_round[delta.round] = by_round.get(delta.round, "") + delta.text
    assert by_round == {1: "Let me add.", 3: "It is 42."}
    assert ok(last_result(items).result).primary_output_text == "It is 42."
    kinds = progress_kinds(items)
    assert kinds.index("tool_started") < kinds.index("tool_finished")


@pytest.mark.decision("D276")
async def test_a_model_that_cannot_stream_gives_its_text_in_one_piece() -> None:
    class Whole:
        async def complete(self, request: LLMRequest) -> LLMReply:
            return LLMReply(text=ANSWER)

    pipeline, _ = make_pipeline(MemoryStore(), Whole())

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    assert [d.text for d in deltas(items)] == [ANSWER]
    assert "model_first_chunk" not in progress_kinds(items)
    assert ok(last_result(items).result).primary_output_text == ANSWER


async def test_a_continuation_streams_too() -> None:
    llm = ScriptedLLM([calls(READ_A), text("Read it.")], chunk_size=3)
    pipeline, _ = make_pipeline(MemoryStore(), llm)
    pending = ok(await pipeline.execute({"Instruction": "Read a.py"}, CALLER))

    items = await drain(pipeline.stream(continuation(pending), CALLER))

    assert streamed_text(items) == "Read it."
    assert ok(last_result(items).result).turn_id == pending.turn_id


@pytest.mark.decision("D273")
async def test_the_stream_flag_changes_nothing_but_delivery() -> None:
    plain_pipeline, _ = make_pipeline(MemoryStore(), [text(ANSWER)])
    flagged_pipeline, _ = make_pipeline(MemoryStore(), [text(ANSWER)])

    plain = await plain_pipeline.execute({"Instruction": "Tell me."}, CALLER)
    flagged = await flagged_pipeline.execute({"Instruction": "Tell me.", "Stream": True}, CALLER)

    assert flagged.to_wire() == plain.to_wire()


# --- the POST rules judge the assembled response --------------------------------------------


@pytest.mark.decision("R11")
@pytest.mark.decision("D274")
async def test_a_post_refusal_after_streamed_text_ends_with_the_unsuccessful_result() -> None:
    image = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVQ="
    answer = f"The chart: ![chart]({image})"  # an embedded file: AGN-033 §6.1 refuses it
    llm = ScriptedLLM([text(answer)], chunk_size=50, chunk_delay_seconds=0.001)
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, llm)

    items = await drain(pipeline.stream({"Instruction": "Send me the file."}, CALLER))

    assert streamed_text(items) == answer  # the text went out, provisionally
    result = last_result(items).result
    assert not result.successful
    assert "AGN-033/6.1/no-embedded-file-contents" in result.rule_ids
    assert await stored(store) == NOTHING_STORED


# --- the consumer leaves: the turn is cancelled ---------------------------------------------


@pytest.mark.decision("D275")
@pytest.mark.rule(CONSUMER_GONE, "broken")
async def test_a_consumer_that_leaves_cancels_the_turn_and_nothing_is_stored() -> None:
    llm = ScriptedLLM([text(ANSWER)], chunk_size=2, chunk_delay_seconds=0.01)
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, llm)

    async with pipeline.stream({"Instruction": "Tell me."}, CALLER) as stream:
        async for item in stream:
            if isinstance(item, StreamDelta):
                break

    report = stream.report
    assert report is not None
    assert report.result.rule_ids == (CONSUMER_GONE,)
    assert report.result.errors[0].code is ErrorCode.CANCELLED
    assert report.faulted_step == "llm_client"
    assert report.trace is not None
    assert report.trace.outcome == "faulted"
    assert report.trace.states[-1] == "faulted"
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D275")
async def test_a_consumer_that_stops_before_the_commit_leaves_nothing_stored() -> None:
    # The model is fast: the turn is done before the consumer reads. It still waits for
    # the consumer before its commit, so a consumer that leaves undoes it.
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, [text("First."), text(ANSWER)])
    first = ok(await pipeline.execute({"Instruction": "First."}, CALLER))
    before = await stored(store)

    async with pipeline.stream(follow_on(first), CALLER) as stream:
        async for item in stream:
            if isinstance(item, StreamDelta):
                break

    assert stream.report is not None
    assert stream.report.result.rule_ids == (CONSUMER_GONE,)
    assert stream.report.faulted_step == "complete"
    assert await stored(store) == before


async def test_a_dropped_stream_cancels_its_turn() -> None:
    finished: asyncio.Future[TurnFinished] = asyncio.get_running_loop().create_future()

    def listen(event: TurnEvent) -> None:
        if isinstance(event, TurnFinished) and not finished.done():
            finished.set_result(event)

    store = MemoryStore()
    llm = ScriptedLLM([text(ANSWER)], chunk_size=2, chunk_delay_seconds=0.01)
    pipeline, _ = make_pipeline(store, llm, listeners=[listen])

    stream = pipeline.stream({"Instruction": "Tell me."}, CALLER)
    async for item in stream:
        if isinstance(item, StreamDelta):
            break
    del stream, item
    gc.collect()

    event = await asyncio.wait_for(finished, 5)
    assert event.result.rule_ids == (CONSUMER_GONE,)
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D279")
async def test_text_piled_up_behind_a_slow_consumer_comes_joined() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), ScriptedLLM([text(ANSWER)], chunk_size=2))

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    assert [d.text for d in deltas(items)] == [ANSWER]  # 28 chunks, one wake-up


async def test_a_stream_closed_before_it_starts_runs_nothing() -> None:
    llm = ScriptedLLM([text(ANSWER)])
    pipeline, _ = make_pipeline(MemoryStore(), llm)

    stream = pipeline.stream({"Instruction": "Tell me."}, CALLER)
    await stream.aclose()

    assert [item async for item in stream] == []
    assert llm.requests == []
    assert stream.report is None


async def test_a_finished_stream_gives_nothing_more() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), [text(ANSWER)])
    stream = pipeline.stream({"Instruction": "Tell me."}, CALLER)

    items = await drain(stream)

    assert isinstance(items[-1], StreamResult)
    assert [item async for item in stream] == []
    assert stream.report is not None
    assert stream.report.result == items[-1].result


# --- retries: only before text has gone out -------------------------------------------------


class StreamingDouble:
    """A streaming model that plays one list of chunks per call, raising where told."""

    def __init__(self, *attempts: Sequence[ReplyChunk | Exception]) -> None:
        self.attempts = list(attempts)
        self.calls = 0
        self.closed = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        raise AssertionError("a streamed turn calls stream()")

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        chunks = self.attempts[self.calls]
        self.calls += 1
        try:
            for chunk in chunks:
                await asyncio.sleep(0)
                if isinstance(chunk, Exception):
                    raise chunk
                yield chunk
        finally:
            self.closed += 1


@pytest.mark.decision("D276")
@pytest.mark.rule(INTERRUPTED, "holds")
async def test_a_failure_before_any_text_is_retried() -> None:
    llm = StreamingDouble(
        [ConnectionError("reset")],
        split_reply(LLMReply(text=ANSWER), 7),
    )
    pipeline, _ = make_pipeline(MemoryStore(), llm)

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    assert llm.calls == 2
    assert ok(last_result(items).result).primary_output_text == ANSWER
    assert "model_call_retried" in progress_kinds(items)
    assert streamed_text(items) == ANSWER


async def test_a_failure_after_tool_call_pieces_but_no_text_is_retried() -> None:
    llm = StreamingDouble(
        [ReplyToolCallDelta(0, "c1", "read_file", '{"pa'), ConnectionError("reset")],
        split_reply(LLMReply(text=ANSWER), 7),
    )
    pipeline, _ = make_pipeline(MemoryStore(), llm)

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    assert llm.calls == 2
    assert last_result(items).result.successful


@pytest.mark.decision("D276")
@pytest.mark.rule(INTERRUPTED, "broken")
async def test_a_failure_after_text_went_out_faults_without_a_retry() -> None:
    llm = StreamingDouble(
        [ReplyTextDelta("The answer"), ConnectionError("reset")],
        split_reply(LLMReply(text=ANSWER), 7),
    )
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, llm)

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    assert llm.calls == 1
    result = last_result(items).result
    assert result.rule_ids == (INTERRUPTED,)
    assert result.errors[0].code is ErrorCode.PORT_FAILED
    assert result.errors[0].field == "LLM"
    assert "ConnectionError: reset" in result.errors[0].message
    assert streamed_text(items) == "The answer"
    assert await stored(store) == NOTHING_STORED


async def test_a_malformed_stream_is_a_failed_attempt() -> None:
    bad = [ReplyToolCallDelta(0, "c1", "read_file"), ReplyToolCallDelta(0, "c2", "read_file")]
    llm = StreamingDouble(bad, bad)
    pipeline, _ = make_pipeline(
        MemoryStore(),
        llm,
        options=PipelineOptions(llm_attempts=2, retry_wait_seconds=0, retry_max_wait_seconds=0),
    )

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    result = last_result(items).result
    assert llm.calls == 2
    assert result.errors[0].code is ErrorCode.PORT_FAILED
    assert "MalformedStreamError" in result.errors[0].message
    assert "second id" in result.errors[0].message


@pytest.mark.decision("D276")
async def test_a_reply_over_the_size_limit_is_cut_off_while_it_streams() -> None:
    chunks: list[ReplyChunk | Exception] = [ReplyTextDelta("x" * 10) for _ in range(100)]
    llm = StreamingDouble(chunks)
    pipeline, _ = make_pipeline(
        MemoryStore(), llm, options=PipelineOptions(max_model_reply_chars=55, retry_wait_seconds=0)
    )
    stream = pipeline.stream({"Instruction": "Tell me."}, CALLER)

    items = await drain(stream)

    result = last_result(items).result
    assert result.rule_ids == ("DESIGN/limits/model-reply-size",)
    assert llm.calls == 1
    assert llm.closed == 1
    assert len(streamed_text(items)) <= 60


# --- who hears the text: the content rule of text deltas ------------------------------------


@pytest.mark.decision("D277")
@pytest.mark.parametrize("capture", [False, True], ids=["plain", "content"])
async def test_a_catch_all_listener_hears_text_deltas_only_with_content_capture(
    capture: bool,
) -> None:
    heard: list[TurnEvent] = []
    llm = ScriptedLLM([text(ANSWER)], chunk_size=10)
    pipeline, _ = make_pipeline(
        MemoryStore(),
        llm,
        listeners=[heard.append],
        telemetry=Telemetry(spans=False, capture_content=capture),
    )

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    texts = [e.text for e in heard if isinstance(e, ModelTextDelta)]
    assert ("".join(texts) == ANSWER) is capture
    assert bool(texts) is capture
    assert streamed_text(items) == ANSWER  # the stream itself always has the text
    assert any(isinstance(e, ModelFirstChunk) for e in heard)


@pytest.mark.decision("D277")
async def test_a_listener_alone_does_not_make_a_turn_streamed() -> None:
    class Counting(ScriptedLLM):
        streamed = 0

        async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
            Counting.streamed += 1
            async for chunk in super().stream(request):
                yield chunk

    heard: list[TurnEvent] = []
    llm = Counting([text(ANSWER)])
    pipeline, _ = make_pipeline(
        MemoryStore(),
        llm,
        listeners=[heard.append],
        telemetry=Telemetry(spans=False, capture_content=True),
    )

    await pipeline.execute({"Instruction": "Tell me."}, CALLER)

    assert Counting.streamed == 0
    assert not any(isinstance(e, ModelTextDelta | ModelFirstChunk) for e in heard)


async def test_a_listener_that_names_text_deltas_hears_them_and_streams_the_turn() -> None:
    class TextListener:
        event_types = frozenset({ModelTextDelta})

        def __init__(self) -> None:
            self.text = ""

        def __call__(self, event: TurnEvent) -> None:
            if isinstance(event, ModelTextDelta):
                self.text += event.text

    listener = TextListener()
    llm = ScriptedLLM([text(ANSWER)], chunk_size=4)
    pipeline, _ = make_pipeline(MemoryStore(), llm, listeners=[listener])

    await pipeline.execute({"Instruction": "Tell me."}, CALLER)

    assert listener.text == ANSWER


SECRETS = {
    "instruction": "instruction-secret-5521",
    "artifact": "artifact-secret-7741",
    "image": "aW1hZ2Utc2VjcmV0LTk5MTI=",
    "solution context": "solution-secret-3318",
}


@pytest.mark.decision("D278")
async def test_progress_carries_no_user_content_without_capture() -> None:
    replies = [EXPAND_MATH, ADD, text("answer-secret-6604")]
    pipeline, _ = make_pipeline(MemoryStore(), ScriptedLLM(replies, chunk_size=4))

    items = await drain(pipeline.stream(content_request(SECRETS), CALLER))

    shown = json.dumps([item.to_json() for item in items if isinstance(item, StreamProgress)])
    for secret in [*SECRETS.values(), "answer-secret-6604", "Let me add", '"a": 40', "42"]:
        assert secret not in shown
    assert "Add" in shown  # tool names are not content


async def test_progress_carries_tool_arguments_and_results_with_capture() -> None:
    replies = [EXPAND_MATH, ADD, text("42")]
    pipeline, _ = make_pipeline(
        MemoryStore(),
        ScriptedLLM(replies),
        telemetry=Telemetry(spans=False, capture_content=True),
    )

    items = await drain(pipeline.stream({"Instruction": "40+2?"}, CALLER))

    shown = [item.to_json() for item in items if isinstance(item, StreamProgress)]
    started = [data for data in shown if data["kind"] == "tool_started"]
    finished = [data for data in shown if data["kind"] == "tool_finished"]
    assert started[0]["arguments"] == {"a": 40, "b": 2}
    assert json.loads(finished[0]["result_json"]) == {"result": 42}


async def test_progress_can_be_chosen_or_left_out() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), ScriptedLLM([text(ANSWER)] * 2, chunk_size=9))

    quiet = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER, progress=()))
    steps = await drain(
        pipeline.stream({"Instruction": "Tell me."}, CALLER, progress={StepStarted})
    )

    assert not any(isinstance(item, StreamProgress) for item in quiet)
    assert streamed_text(quiet) == ANSWER
    assert set(progress_kinds(steps)) == {"step_started"}


def test_progress_must_name_event_types() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), [text(ANSWER)])

    with pytest.raises(TypeError, match="not turn event types"):
        pipeline.stream({"Instruction": "x"}, CALLER, progress=[int])  # type: ignore[list-item]


@pytest.mark.decision("D278")
async def test_every_event_of_a_busy_turn_has_its_own_progress_kind() -> None:
    replies = [
        EXPAND_MATH,
        ADD,
        calls({"id": "m1", "name": "agent_change_mode", "arguments": {"mode": "review"}}),
        text("done"),
    ]
    pipeline, _ = make_pipeline(MemoryStore(), ScriptedLLM(replies))
    every = {*PROGRESS_EVENTS, CheckRan, TransitionTaken, StepEnded, TurnFinished}

    items = await drain(pipeline.stream({"Instruction": "go"}, CALLER, progress=every))

    seen = {
        type(item.event): item.to_json()["kind"]
        for item in items
        if isinstance(item, StreamProgress)
    }
    assert ModelCallStarted in PROGRESS_EVENTS
    assert CheckRan not in PROGRESS_EVENTS
    # This turn retries nothing, warns of nothing, does not fault and has no retriever
    # (tests/adapters/retrieval/test_retrieval_turns.py streams a retrieval's progress).
    unseen = {ModelCallRetried, WarningRaised, TurnFaulted, RetrievalStarted, RetrievalFinished}
    assert set(seen) == every - unseen
    assert all(kind.islower() for kind in seen.values()), seen  # no class-name fallback


# --- answered without a turn ----------------------------------------------------------------


async def test_a_stored_answer_is_streamed_as_its_result_alone() -> None:
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, ScriptedLLM([text(ANSWER)], chunk_size=5))
    first = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER, idempotency_key="k1"))

    again = pipeline.stream({"Instruction": "Tell me."}, CALLER, idempotency_key="k1")
    items = await drain(again)

    assert items == [StreamResult(last_result(first).result)]
    assert again.report is not None
    assert again.report.replayed


async def test_a_refused_request_streams_its_refusal() -> None:
    pipeline, llm = make_pipeline(MemoryStore(), [text(ANSWER)])

    items = await drain(pipeline.stream({"Instruction": "x", "Mode": "review"}, CALLER))

    result = last_result(items).result
    assert not result.successful
    assert result.errors[0].code is ErrorCode.INVALID_REQUEST
    assert deltas(items) == []
    assert llm is not None
    assert llm.requests == []


# --- the pipeline's own stream items --------------------------------------------------------


def test_stream_items_have_their_sse_names_and_json() -> None:
    delta = StreamDelta("hi", 2)

    assert (StreamProgress.name, StreamDelta.name, StreamResult.name) == (
        "progress",
        "delta",
        "result",
    )
    assert delta.to_json() == {"text": "hi", "round": 2}


async def test_the_result_item_is_the_wire_invoke_result() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), [text(ANSWER)])

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    wire: dict[str, Any] = last_result(items).to_json()
    assert wire["Successful"] is True
    assert wire["Result"]["PrimaryOutputText"] == ANSWER


async def test_two_streams_of_one_pipeline_run_concurrently() -> None:
    llm = ScriptedLLM([text("one two three"), text("four five six")], chunk_size=3)
    pipeline, _ = make_pipeline(MemoryStore(), llm)

    first, second = await asyncio.gather(
        drain(pipeline.stream({"Instruction": "a"}, CALLER)),
        drain(pipeline.stream({"Instruction": "b"}, CALLER)),
    )

    assert {streamed_text(first), streamed_text(second)} == {"one two three", "four five six"}


async def test_the_reply_finished_chunk_carries_usage_into_the_response() -> None:
    usage = Usage(input_tokens=3, output_tokens=4, total_tokens=7)
    llm = StreamingDouble([ReplyTextDelta(ANSWER), ReplyFinished(usage=usage, model="m")])
    pipeline, _ = make_pipeline(MemoryStore(), llm)

    items = await drain(pipeline.stream({"Instruction": "Tell me."}, CALLER))

    assert ok(last_result(items).result).usage == usage


def test_a_pipeline_made_without_a_loop_can_stream_later() -> None:
    pipeline = Pipeline(make_pipeline(MemoryStore(), [text(ANSWER)])[0].ports)

    items = asyncio.run(drain(pipeline.stream({"Instruction": "Tell me."}, CALLER)))

    assert ok(last_result(items).result).primary_output_text == ANSWER


async def test_a_stream_closed_after_its_turn_ended_keeps_the_turns_report() -> None:
    finished = asyncio.Event()

    def listen(event: TurnEvent) -> None:
        if isinstance(event, TurnFinished):
            finished.set()

    store = MemoryStore()
    pipeline, _ = make_pipeline(store, [text(ANSWER)], listeners=[listen])
    stream = pipeline.stream({"Instruction": "Tell me."}, CALLER, progress=())
    async for item in stream:
        if isinstance(item, StreamDelta):
            break  # every item taken: the turn goes on to its commit
    await finished.wait()
    await asyncio.sleep(0)  # the turn's task ends

    await stream.aclose()  # before its result was read

    assert stream.report is not None
    assert stream.report.result.successful
    assert (await stored(store))[0] is not None


@pytest.mark.decision("D275")
async def test_a_copy_waiting_on_a_stream_whose_consumer_left_runs_the_turn_itself() -> None:
    store = MemoryStore()
    llm = ScriptedLLM([text(ANSWER), text(ANSWER)], chunk_size=4, chunk_delay_seconds=0.01)
    pipeline, _ = make_pipeline(store, llm)
    request = {"Instruction": "Tell me."}
    leaving = pipeline.stream(request, CALLER, idempotency_key="k1")
    async for item in leaving:
        if isinstance(item, StreamDelta):
            break  # the first copy is running its model call
    copy = asyncio.ensure_future(pipeline.execute(request, CALLER, idempotency_key="k1"))
    await asyncio.sleep(0)  # the copy joins the first one's flight

    await leaving.aclose()
    result = await copy

    assert leaving.report is not None
    assert leaving.report.result.rule_ids == (CONSUMER_GONE,)
    assert ok(result).primary_output_text == ANSWER
    assert len(llm.requests) == 2
