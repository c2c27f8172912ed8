"""OpenAICompatibleLLM streams (AGN-034 §4.7) from a real loopback server speaking SSE.

The official ``openai`` SDK reads ``data:`` events over a socket from
``fake_openai_server``; the tests check what the adapter yields, that the engine
assembles it into the reply ``complete`` gives, how faults before and after the
first chunk are handled (D257-D259), and what a whole ``Pipeline.stream`` turn
does with them. Waits between retries are recorded rather than slept.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from engine_kit import CALLER, NOTHING_STORED, make_pipeline, stored
from openai_kit import KEY, READ_FILE, adapter, ask, waits_of

from aptix_pipeline import (
    InvokeResult,
    LLMReply,
    MemoryStore,
    OpenAICompatibleLLM,
    PermanentPortError,
    ReplyAssembler,
    ReplyChunk,
    ReplyFinished,
    ReplyTextDelta,
    ReplyToolCallDelta,
    ResponseKind,
    StreamDelta,
    StreamItem,
    StreamProgress,
    StreamResult,
    ToolCall,
    Usage,
)
from aptix_pipeline.adapters.models.openai_compatible import StreamBrokenError
from aptix_pipeline.contracts import AgentExecuteResponse, ErrorCode, LLMRequest
from aptix_pipeline.testing import fake_openai_server

LONG_TEXT = "The file reads a config, parses it and prints the result."


async def chunks_of(
    llm: OpenAICompatibleLLM, request: LLMRequest | None = None
) -> list[ReplyChunk]:
    """Every item the adapter yields for one request."""
    return [chunk async for chunk in llm.stream(request or ask())]


async def until_it_fails(llm: OpenAICompatibleLLM) -> tuple[list[ReplyChunk], Exception]:
    """The items the adapter yields for one request before it raises, and what it raises."""
    received: list[ReplyChunk] = []
    try:
        async for chunk in llm.stream(ask()):
            received.append(chunk)
    except Exception as error:
        return received, error
    raise AssertionError(f"the stream ended without failing after {len(received)} item(s)")


def assembled(chunks: list[ReplyChunk]) -> LLMReply:
    """The reply the engine puts together from ``chunks``."""
    assembler = ReplyAssembler()
    for chunk in chunks:
        assembler.add(chunk)
    return assembler.reply()


async def streamed_turn(
    llm: OpenAICompatibleLLM, store: MemoryStore, **tools: Any
) -> tuple[list[StreamItem], InvokeResult[AgentExecuteResponse]]:
    """One Initial turn of ``CALLER`` through ``Pipeline.stream``: every item, and the result."""
    pipeline, _ = make_pipeline(store, llm, tools=tools)
    async with pipeline.stream({"Instruction": "Explain a.py."}, CALLER) as stream:
        items = [item async for item in stream]
    last = items[-1]
    assert isinstance(last, StreamResult)
    return items, last.result


def deltas(items: list[StreamItem]) -> str:
    return "".join(item.text for item in items if isinstance(item, StreamDelta))


def progress_kinds(items: list[StreamItem]) -> list[str]:
    return [item.to_json()["kind"] for item in items if isinstance(item, StreamProgress)]


# --- the reply, streamed --------------------------------------------------------------


async def test_a_text_reply_streams_in_pieces() -> None:
    entry = {
        "text": LONG_TEXT,
        "chunk_size": 5,
        "usage": {"prompt_tokens": 9, "completion_tokens": 12},
    }
    with fake_openai_server([entry]) as server:
        async with adapter(server) as llm:
            chunks = await chunks_of(llm)

    texts = [chunk.text for chunk in chunks if isinstance(chunk, ReplyTextDelta)]
    assert len(texts) == len(LONG_TEXT) // 5 + 1
    assert all(0 < len(text) <= 5 for text in texts)
    assert "".join(texts) == LONG_TEXT
    assert chunks[-1] == ReplyFinished(
        usage=Usage(input_tokens=9, output_tokens=12, total_tokens=21),
        model="fake-model",
        response_id="chatcmpl-1",
        finish_reason="stop",
    )
    assert sum(isinstance(chunk, ReplyFinished) for chunk in chunks) == 1


@pytest.mark.decision("D259")
@pytest.mark.parametrize(
    "entry",
    [
        {"text": LONG_TEXT, "usage": {"prompt_tokens": 12, "completion_tokens": 3}},
        {
            "tool_calls": [
                {"id": "call_1", "name": "read_file", "arguments": {"path": "src/a.py"}},
                {"id": "call_2", "name": "run_tests", "arguments": "{not json"},
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 30},
        },
        {
            "text": "Let me look.",
            "tool_calls": [{"id": "call_1", "name": "read_file", "arguments": {"path": "a.py"}}],
        },
        {"text": "", "finish_reason": "length", "model": "served-model-2"},
    ],
    ids=["text and usage", "tool calls", "text and a tool call", "empty text"],
)
async def test_streamed_and_completed_replies_are_the_same(entry: dict[str, Any]) -> None:
    same = {**entry, "id": "chatcmpl-same", "chunk_size": 3}
    with fake_openai_server([same, same]) as server:
        async with adapter(server) as llm:
            completed = await llm.complete(ask(tools=[READ_FILE]))
            chunks = await chunks_of(llm, ask(tools=[READ_FILE]))

    assert assembled(chunks) == completed
    assert isinstance(chunks[-1], ReplyFinished)


async def test_parallel_tool_calls_split_and_interleaved_assemble_by_index() -> None:
    entry = {
        "tool_calls": [
            {"id": "call_a", "name": "read_file", "arguments": {"path": "src/app/main.py"}},
            {"id": "call_b", "name": "grep", "arguments": {"pattern": "TODO", "path": "src"}},
        ],
        "chunk_size": 6,
        "interleave": True,
    }
    with fake_openai_server([entry]) as server:
        async with adapter(server) as llm:
            chunks = await chunks_of(llm)

    calls = [chunk for chunk in chunks if isinstance(chunk, ReplyToolCallDelta)]
    assert [call.index for call in calls[:4]] == [0, 1, 0, 1]  # interleaved on the wire
    assert (calls[0].tool_call_id, calls[0].name, calls[0].arguments) == ("call_a", "read_file", "")
    assert all(call.tool_call_id is None and call.name is None for call in calls[2:])
    assert assembled(chunks).tool_calls == [
        ToolCall(
            tool_call_id="call_a", name="read_file", arguments_json='{"path": "src/app/main.py"}'
        ),
        ToolCall(
            tool_call_id="call_b",
            name="grep",
            arguments_json='{"pattern": "TODO", "path": "src"}',
        ),
    ]


@pytest.mark.decision("D257")
async def test_the_request_asks_for_a_stream_with_its_usage() -> None:
    with fake_openai_server([{"text": "a"}, {"text": "b"}]) as server:
        async with adapter(server, temperature=0.2, extra_body={"max_tokens": 64}) as llm:
            await llm.complete(ask(tools=[READ_FILE]))
            await chunks_of(llm, ask(tools=[READ_FILE]))

    completed, streamed = (request.body for request in server.completions())
    assert streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True}
    rest = {k: v for k, v in streamed.items() if k not in ("stream", "stream_options")}
    assert rest == completed  # the same messages, tools and options as complete sends


@pytest.mark.decision("D259")
async def test_a_stream_without_a_usage_chunk_has_no_usage() -> None:
    with fake_openai_server([{"text": "No usage reported."}]) as server:
        async with adapter(server) as llm:
            chunks = await chunks_of(llm)

    assert server.completions()[0].body["stream_options"] == {"include_usage": True}
    assert assembled(chunks).usage is None
    assert assembled(chunks).text == "No usage reported."


@pytest.mark.decision("D258")
async def test_only_choice_0_is_read_and_chunks_without_choices_are_skipped() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [choice],
        }

    filter_results = {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [],
        "prompt_filter_results": [{"prompt_index": 0}],
    }
    second_choice = {
        **chunk({"content": "other"}),
        "choices": [{"index": 1, "delta": {"content": "other"}, "finish_reason": None}],
    }
    refusal = chunk({"refusal": "I can't help"})
    script = [
        {
            "chunks": [
                filter_results,
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Hi"}),
                second_choice,
                refusal,
                {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"},
                chunk({}, "stop"),
            ]
        }
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            chunks = await chunks_of(llm)

    assert chunks == [
        ReplyTextDelta("Hi"),
        ReplyTextDelta("I can't help"),
        ReplyFinished(usage=None, model="m", response_id="c1", finish_reason="stop"),
    ]


# --- faults before the first chunk: retried -----------------------------------------------


@pytest.mark.decision("D257")
@pytest.mark.parametrize(
    "fault",
    [
        {"status": 500, "error": "upstream failed"},
        {"status": 429, "error": "slow down", "headers": {"Retry-After": "2"}},
        {"disconnect": True},
        {"text": "lost", "stream_fault": {"after": 0, "kind": "disconnect"}},
        {"text": "lost", "stream_fault": {"after": 1, "kind": "error", "message": "overloaded"}},
        {"text": "lost", "stream_fault": {"after": 1, "kind": "end"}},
    ],
    ids=[
        "500",
        "429",
        "dropped before answering",
        "dropped after the headers",
        "error event first",
        "ended with nothing",
    ],
)
async def test_failures_before_the_first_chunk_are_retried(fault: dict[str, Any]) -> None:
    with fake_openai_server([fault, {"text": "Recovered."}]) as server:
        async with adapter(server) as llm:
            chunks = await chunks_of(llm)

    assert assembled(chunks).text == "Recovered."
    assert len(server.completions()) == 2
    assert len(waits_of(llm)) == 1


@pytest.mark.decision("D257")
@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (
            {"status": 400, "error": "model 'x' does not exist"},
            "400 Bad Request: model 'x' does not exist",
        ),
        (
            {
                "text": "no",
                "stream_fault": {
                    "after": 1,
                    "kind": "error",
                    "message": "prompt too long",
                    "type": "invalid_request_error",
                },
            },
            "sent an error in its stream: prompt too long",
        ),
    ],
    ids=["400", "error event naming a bad request"],
)
async def test_a_refused_stream_is_not_retried_and_names_the_servers_message(
    fault: dict[str, Any], message: str
) -> None:
    with fake_openai_server([fault, {"text": "never"}]) as server:
        async with adapter(server) as llm:
            with pytest.raises(PermanentPortError) as raised:
                await chunks_of(llm)

    assert message in str(raised.value)
    assert "not retryable" in str(raised.value)
    assert len(server.completions()) == 1
    assert waits_of(llm) == []


@pytest.mark.decision("D257")
async def test_a_stream_that_keeps_failing_before_its_first_chunk_gives_up() -> None:
    fault = {"text": "x", "stream_fault": {"after": 0, "kind": "disconnect"}}
    with fake_openai_server([fault] * 3) as server:
        async with adapter(server, max_attempts=3) as llm:
            with pytest.raises(PermanentPortError) as raised:
                await chunks_of(llm)

    assert len(server.completions()) == 3
    assert f"could not reach the model server at {server.base_url}" in str(raised.value)
    assert "gave up after 3 attempt(s)" in str(raised.value)


# --- faults after the first chunk: raised at once ------------------------------------------


@pytest.mark.decision("D257")
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("disconnect", "the connection to the model server at http://127.0.0.1:"),
        ("error", "the model server sent an error in its stream: Internal server error"),
        ("end", "the model server's stream is incomplete"),
    ],
)
async def test_a_failure_after_the_first_chunk_is_raised_at_once(kind: str, message: str) -> None:
    entry = {"text": LONG_TEXT, "stream_fault": {"after": 4, "kind": kind}}
    with fake_openai_server([entry, {"text": "never"}]) as server:
        async with adapter(server) as llm:
            received, error = await until_it_fails(llm)

    assert "".join(c.text for c in received if isinstance(c, ReplyTextDelta)) == LONG_TEXT[:12]
    assert isinstance(error, StreamBrokenError)
    assert not isinstance(error, PermanentPortError)  # the engine may retry it
    assert message in str(error)
    assert "chunk(s) of the stream; not retried" in str(error)
    assert len(server.completions()) == 1
    assert waits_of(llm) == []


@pytest.mark.decision("D259")
async def test_a_stream_that_ends_without_a_finish_reason_is_incomplete() -> None:
    entry = {
        "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}],
        "stream_fault": {"after": 3, "kind": "end"},
    }
    with fake_openai_server([entry]) as server:
        async with adapter(server) as llm:
            with pytest.raises(
                StreamBrokenError, match=r"ended after 3 chunk\(s\) without a finish_reason"
            ):
                await chunks_of(llm)


@pytest.mark.decision("D258")
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"choices": "none"}, "chunk 2: choices is str"),
        (
            {"choices": [{"index": 0, "delta": {"content": 7}}]},
            r"chunk 2: choices\[0\].delta.content is int",
        ),
        (
            {
                "choices": [
                    {"index": 0, "delta": {"tool_calls": [{"id": "c1", "function": {"name": "f"}}]}}
                ]
            },
            r"chunk 2: choices\[0\].delta.tool_calls\[0\].index is None",
        ),
        ({"choices": [], "usage": {"prompt_tokens": -3}}, "usage.prompt_tokens"),
        ("{not json", "JSONDecodeError"),
    ],
    ids=[
        "choices not a list",
        "content not text",
        "tool call without index",
        "negative usage",
        "not json",
    ],
)
async def test_a_malformed_chunk_is_a_permanent_error_naming_the_chunk(
    bad: Any, field: str
) -> None:
    good = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
    }
    malformed = bad if isinstance(bad, str) else {**good, **bad}
    with fake_openai_server([{"chunks": [good, malformed]}, {"text": "never"}]) as server:
        async with adapter(server) as llm:
            with pytest.raises(PermanentPortError, match="malformed") as raised:
                await chunks_of(llm)

    assert raised.match(field)
    assert len(server.completions()) == 1


@pytest.mark.decision("D258")
async def test_a_server_that_ignores_stream_is_refused_clearly() -> None:
    completion = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "whole"},
            }
        ],
    }
    with fake_openai_server([{"json": completion}, {"text": "never"}]) as server:
        async with adapter(server) as llm:
            with pytest.raises(PermanentPortError, match="application/json, not text/event-stream"):
                await chunks_of(llm)
    assert len(server.completions()) == 1


async def test_the_api_key_never_appears_in_a_stream_error() -> None:
    echoed = f"Incorrect API key provided: {KEY}"
    entry = {"text": LONG_TEXT, "stream_fault": {"after": 3, "kind": "error", "message": echoed}}
    with fake_openai_server([entry]) as server:
        async with adapter(server) as llm:
            with pytest.raises(StreamBrokenError) as raised:
                await chunks_of(llm)
    assert KEY not in str(raised.value)
    assert "Incorrect API key provided: ***" in str(raised.value)


@pytest.mark.decision("D204")
async def test_a_stream_is_read_up_to_max_reply_bytes_and_not_retried() -> None:
    entry = {"text": "x" * 6000, "chunk_size": 200}
    with fake_openai_server([entry, entry]) as server:
        async with adapter(server, max_reply_bytes=4096) as llm:
            received, error = await until_it_fails(llm)

    assert received  # the stream flowed until the bound
    assert isinstance(error, PermanentPortError)
    assert "larger than 4096 bytes" in str(error)
    assert len(server.completions()) == 1


async def test_closing_the_stream_early_closes_the_connection() -> None:
    entry = {"text": LONG_TEXT * 4, "chunk_size": 4, "chunk_delay": 0.02}
    with fake_openai_server([entry]) as server:
        async with adapter(server) as llm:
            stream = llm.stream(ask())
            assert isinstance(stream, AsyncGenerator)
            first = await anext(stream)
            await stream.aclose()

            assert server.wait_abandoned()
    assert first == ReplyTextDelta(LONG_TEXT[:4])
    assert server.abandoned == [1]


# --- whole turns through Pipeline.stream ---------------------------------------------------


@pytest.mark.rule("DESIGN/streaming/consumer-gone", "holds")
async def test_a_streamed_turn_with_a_tool_round_has_the_same_result_as_execute() -> None:
    checklist = {"checklist": ["tests?", "names?"]}
    script: list[dict[str, Any]] = [
        {
            "text": "Checking the list first.",
            "tool_calls": [{"id": "k1", "name": "review_checklist", "arguments": {}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        },
        {"text": LONG_TEXT, "usage": {"prompt_tokens": 30, "completion_tokens": 14}},
    ]

    async def review_checklist(arguments: dict[str, Any], invocation: Any) -> str:
        return json.dumps(checklist)

    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            pipeline, _ = make_pipeline(
                MemoryStore(), llm, tools={"review_checklist": review_checklist}
            )
            executed = await pipeline.execute({"Instruction": "Explain a.py."}, CALLER)
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            items, streamed = await streamed_turn(
                llm, MemoryStore(), review_checklist=review_checklist
            )

    assert streamed == executed
    assert streamed.successful
    assert streamed.result is not None
    assert streamed.result.kind is ResponseKind.FINAL
    round_texts: dict[int, str] = {}
    for item in items:
        if isinstance(item, StreamDelta):
            round_texts[item.round] = round_texts.get(item.round, "") + item.text
    assert round_texts == {1: "Checking the list first.", 2: LONG_TEXT}
    assert all(request.body["stream"] is True for request in server.completions())


@pytest.mark.rule("DESIGN/streaming/interrupted", "broken")
@pytest.mark.parametrize("kind", ["disconnect", "error", "end"])
async def test_a_fault_mid_stream_ends_the_turn_unsuccessfully_and_stores_nothing(
    kind: str,
) -> None:
    entry = {"text": LONG_TEXT, "stream_fault": {"after": 4, "kind": kind}}
    store = MemoryStore()
    with fake_openai_server([entry, {"text": "never"}]) as server:
        async with adapter(server) as llm:
            items, result = await streamed_turn(llm, store)
            pipeline, _ = make_pipeline(store, llm)
            follow_on = await pipeline.execute(
                {"SessionId": "session-1", "TurnId": "turn-1", "Instruction": "next"}, CALLER
            )

    assert deltas(items) == LONG_TEXT[:12]  # the client saw text before the fault
    assert not result.successful
    assert result.rule_ids == ("DESIGN/streaming/interrupted",)
    [error] = result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert "StreamBrokenError" in error.message
    assert len(server.completions()) == 1  # neither the adapter nor the engine retried
    assert await stored(store) == NOTHING_STORED
    assert [e.code for e in follow_on.errors] == [ErrorCode.NOT_FOUND]


async def test_a_fault_before_the_first_chunk_is_retried_and_the_turn_succeeds() -> None:
    script: list[dict[str, Any]] = [
        {"status": 503, "error": "overloaded"},
        {"status": 429, "error": "slow down", "headers": {"Retry-After": "1"}},
        {"text": "lost", "stream_fault": {"after": 0, "kind": "disconnect"}},
        {"text": LONG_TEXT},
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            items, result = await streamed_turn(llm, MemoryStore())

    assert result.successful
    assert result.result is not None
    assert result.result.primary_output_text == LONG_TEXT
    assert deltas(items) == LONG_TEXT
    assert len(server.completions()) == 4
    assert len(waits_of(llm)) == 3
    assert waits_of(llm)[1] == 1.0  # the 429's Retry-After
    assert "model_call_retried" not in progress_kinds(items)  # the adapter's retries alone


@pytest.mark.decision("D257")
@pytest.mark.rule("DESIGN/streaming/interrupted", "holds")
async def test_a_stream_broken_before_any_text_is_retried_by_the_engine() -> None:
    read = {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}]}
    script: list[dict[str, Any]] = [
        {**read, "stream_fault": {"after": 3, "kind": "disconnect"}},
        read,
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            items, result = await streamed_turn(llm, MemoryStore())

    assert result.successful
    assert result.result is not None
    assert result.result.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert len(server.completions()) == 2
    assert progress_kinds(items).count("model_call_retried") == 1


@pytest.mark.rule("DESIGN/streaming/consumer-gone", "broken")
async def test_a_consumer_that_leaves_closes_the_model_connection() -> None:
    entry = {"text": LONG_TEXT * 4, "chunk_size": 4, "chunk_delay": 0.02}
    store = MemoryStore()
    with fake_openai_server([entry]) as server:
        async with adapter(server) as llm:
            pipeline, _ = make_pipeline(store, llm)
            stream = pipeline.stream({"Instruction": "Explain a.py."}, CALLER)
            async for item in stream:
                if isinstance(item, StreamDelta):
                    break
            await stream.aclose()

            assert server.wait_abandoned()
    assert stream.report is not None
    assert stream.report.result.rule_ids == ("DESIGN/streaming/consumer-gone",)
    assert await stored(store) == NOTHING_STORED
