"""OpenAICompatibleLLM against a real loopback HTTP server speaking chat completions.

The official ``openai`` SDK sends every request over a socket to
``fake_openai_server``; the tests check what arrived on the wire, how the reply
maps to an ``LLMReply``, and how each fault is retried or not (D70-D77). Waits are
recorded rather than slept, except where a test measures real time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import openai
import pytest
from engine_kit import CALLER, continuation, make_pipeline, ok
from openai_kit import KEY, READ_FILE, adapter, ask, waits_of
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aptix_pipeline.adapters.models.openai_compatible import RETRY_EVENT, OpenAICompatibleLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ErrorCode,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    ResponseKind,
    ToolCall,
    ToolDefinition,
    Usage,
)
from aptix_pipeline.testing import fake_openai_server

NO_ARGS = ToolDefinition(name="review_checklist", executes_on="client")


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A private tracer provider whose finished spans are kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


# --- the request on the wire ------------------------------------------------------------


@pytest.mark.decision("D76")
async def test_messages_and_tools_are_sent_as_chat_completions() -> None:
    request = LLMRequest(
        model="agent-model",
        mode="general",
        messages=[
            ChatMessage(role=ChatRole.SYSTEM, content="Be brief."),
            ChatMessage(role=ChatRole.USER, content="Explain a.py."),
            ChatMessage(
                role=ChatRole.ASSISTANT,
                tool_calls=[
                    ToolCall(tool_call_id="c1", name="read_file", arguments_json='{"path":"a.py"}')
                ],
            ),
            ChatMessage(
                role=ChatRole.TOOL, content='"print(1)"', tool_call_id="c1", name="read_file"
            ),
            ChatMessage(
                role=ChatRole.ASSISTANT,
                content="Checking the list.",
                tool_calls=[
                    ToolCall(tool_call_id="s1", name="review_checklist", arguments_json="{}")
                ],
            ),
            ChatMessage(role=ChatRole.TOOL, content='{"checklist": []}', tool_call_id="s1"),
            ChatMessage(role=ChatRole.ASSISTANT, content="It prints 1."),
            ChatMessage(role=ChatRole.USER, content="Thanks."),
        ],
        tools=[READ_FILE, NO_ARGS],
    )
    with fake_openai_server([{"text": "ok"}]) as server:
        async with adapter(server) as llm:
            await llm.complete(request)

    [received] = server.completions()
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["x-stainless-retry-count"] == "0"
    assert received.body == {
        "model": "agent-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Explain a.py."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '"print(1)"'},
            {
                "role": "assistant",
                "content": "Checking the list.",
                "tool_calls": [
                    {
                        "id": "s1",
                        "type": "function",
                        "function": {"name": "review_checklist", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "s1", "content": '{"checklist": []}'},
            {"role": "assistant", "content": "It prints 1."},
            {"role": "user", "content": "Thanks."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": READ_FILE.parameters,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "review_checklist",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
    }


@pytest.mark.decision("D76")
async def test_default_model_no_tools_field_and_extra_body() -> None:
    with fake_openai_server([{"text": "ok"}]) as server:
        async with adapter(server, temperature=0.2, extra_body={"max_tokens": 64}) as llm:
            await llm.complete(ask())

    [received] = server.completions()
    assert received.body["model"] == "fake-model"  # the request named none
    assert "tools" not in received.body  # OpenAI refuses an empty list
    assert received.body["temperature"] == 0.2
    assert received.body["max_tokens"] == 64


@pytest.mark.decision("D76")
async def test_a_tool_message_without_its_call_id_is_refused_before_sending() -> None:
    request = LLMRequest(mode="general", messages=[ChatMessage(role=ChatRole.TOOL, content="{}")])
    with fake_openai_server([{"text": "ok"}]) as server:
        async with adapter(server) as llm:
            with pytest.raises(PermanentPortError, match=r"messages\[0\].*tool_call_id"):
                await llm.complete(request)
    assert server.completions() == []


# --- the reply ------------------------------------------------------------------------


@pytest.mark.decision("D75")
async def test_text_reply_maps_text_usage_model_id_and_finish_reason() -> None:
    script: list[dict[str, Any]] = [
        {
            "text": "Hello.",
            "usage": {"prompt_tokens": 12, "completion_tokens": 3},
            "model": "served-model-2",
            "id": "chatcmpl-abc",
            "finish_reason": "length",
        }
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            reply = await llm.complete(ask())

    assert reply == LLMReply(
        text="Hello.",
        tool_calls=[],
        usage=Usage(input_tokens=12, output_tokens=3, total_tokens=15),
        model="served-model-2",
        response_id="chatcmpl-abc",
        finish_reason="length",
    )


@pytest.mark.decision("D75")
async def test_tool_call_reply_maps_every_call_and_keeps_arguments_as_sent() -> None:
    script: list[dict[str, Any]] = [
        {
            "text": "Let me look.",
            "tool_calls": [
                {"id": "call_1", "name": "read_file", "arguments": {"path": "a.py"}},
                {"id": "call_2", "name": "run_tests", "arguments": "{not json"},
            ],
        }
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            reply = await llm.complete(ask(tools=[READ_FILE]))

    assert reply.text == "Let me look."
    assert reply.tool_calls == [
        ToolCall(tool_call_id="call_1", name="read_file", arguments_json='{"path": "a.py"}'),
        # malformed arguments are the engine's to answer (container design checks)
        ToolCall(tool_call_id="call_2", name="run_tests", arguments_json="{not json"),
    ]
    assert reply.finish_reason == "tool_calls"
    assert reply.usage is None  # the server reported none


@pytest.mark.decision("D75")
async def test_a_refusal_is_the_reply_text() -> None:
    completion = {
        "id": "r1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": None, "refusal": "I can't help."},
            }
        ],
    }
    with fake_openai_server([{"json": completion}]) as server:
        async with adapter(server) as llm:
            reply = await llm.complete(ask())
    assert reply.text == "I can't help."


@pytest.mark.decision("D75")
@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"raw": "this is not json"}, "malformed"),
        (
            {"json": {"id": "x", "object": "chat.completion", "created": 1, "model": "m"}},
            "no choices",
        ),
        (
            {
                "json": {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "m",
                    "choices": [],
                }
            },
            "no choices",
        ),
        ({"text": "hi", "usage": {"prompt_tokens": -1, "completion_tokens": 1}}, "prompt_tokens"),
    ],
    ids=["not json", "choices missing", "choices empty", "negative usage"],
)
async def test_a_malformed_reply_is_a_permanent_error_and_not_retried(
    entry: dict[str, Any], problem: str
) -> None:
    with fake_openai_server([entry, {"text": "never asked"}]) as server:
        async with adapter(server) as llm:
            with pytest.raises(PermanentPortError, match=problem):
                await llm.complete(ask())
    assert len(server.completions()) == 1


# --- faults that are retried -----------------------------------------------------------


@pytest.mark.decision("D71")
async def test_429_waits_the_retry_after_seconds_then_succeeds(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    script: list[dict[str, Any]] = [
        {"status": 429, "error": "Rate limit reached", "headers": {"Retry-After": "7"}},
        {"text": "done"},
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            with provider.get_tracer("test").start_as_current_span("chat fake-model"):
                reply = await llm.complete(ask())

    assert reply.text == "done"
    assert len(server.completions()) == 2
    assert waits_of(llm) == [7.0]
    [span] = exporter.get_finished_spans()
    [event] = span.events
    assert event.name == RETRY_EVENT
    assert dict(event.attributes or {}) == {
        "aptix.llm.attempt": 1,
        "error.type": "429",
        "aptix.llm.retry_wait_seconds": 7.0,
    }


@pytest.mark.decision("D71")
@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),  # the finer one wins
        ({"Retry-After": "0"}, 0.0),
        ({"Retry-After": "1.5"}, 1.5),
    ],
)
async def test_retry_after_forms_are_honoured(headers: dict[str, str], wait: float) -> None:
    script: list[dict[str, Any]] = [{"status": 503, "headers": headers}, {"text": "done"}]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            await llm.complete(ask())
    assert waits_of(llm) == [wait]


@pytest.mark.decision("D71")
async def test_retry_after_as_an_http_date_is_honoured() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    script: list[dict[str, Any]] = [
        {"status": 429, "headers": {"Retry-After": when}},
        {"text": "done"},
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            await llm.complete(ask())
    [wait] = waits_of(llm)
    assert 27 <= wait <= 30


@pytest.mark.decision("D71")
async def test_retry_after_is_really_waited_on_the_wire() -> None:
    script: list[dict[str, Any]] = [
        {"status": 429, "headers": {"Retry-After": "1"}},
        {"text": "done"},
    ]
    with fake_openai_server(script) as server:
        async with OpenAICompatibleLLM(
            model="fake-model", base_url=server.base_url, api_key=KEY
        ) as llm:
            reply = await llm.complete(ask())

    first, second = server.completions()
    assert reply.text == "done"
    assert second.received_at - first.received_at >= 1.0


@pytest.mark.decision("D70", "D72")
@pytest.mark.parametrize("status", [500, 502, 503, 504, 529, 408])
async def test_server_errors_are_retried_with_growing_jittered_waits(status: int) -> None:
    script: list[dict[str, Any]] = [
        {"status": status},
        {"status": status},
        {"status": status},
        {"text": "done"},
    ]
    with fake_openai_server(script) as server:
        async with adapter(server, backoff_initial_seconds=0.5, backoff_max_seconds=1.8) as llm:
            reply = await llm.complete(ask())

    assert reply.text == "done"
    assert len(server.completions()) == 4
    first, second, third = waits_of(llm)
    assert 0.5 <= first <= 1.0  # initial, plus up to initial of jitter
    assert 1.0 <= second <= 1.5  # doubled
    assert third == 1.8  # capped


@pytest.mark.decision("D70")
async def test_a_timeout_is_retried() -> None:
    script: list[dict[str, Any]] = [{"delay": 2, "text": "too late"}, {"text": "in time"}]
    with fake_openai_server(script) as server:
        async with adapter(server, timeout_seconds=0.2) as llm:
            reply = await llm.complete(ask())
    assert reply.text == "in time"
    assert len(server.completions()) == 2


@pytest.mark.decision("D70")
async def test_a_dropped_connection_is_retried(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    with fake_openai_server([{"disconnect": True}, {"text": "back"}]) as server:
        async with adapter(server) as llm:
            with provider.get_tracer("test").start_as_current_span("chat"):
                reply = await llm.complete(ask())
    assert reply.text == "back"
    [event] = exporter.get_finished_spans()[0].events
    assert event.attributes is not None
    assert event.attributes["error.type"] == "APIConnectionError"


# --- faults that are not retried, and giving up ----------------------------------------


@pytest.mark.decision("D70")
@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
async def test_other_4xx_are_not_retried_and_name_status_and_message(status: int) -> None:
    script: list[dict[str, Any]] = [
        {"status": status, "error": "model 'x' does not exist"},
        {"text": "never"},
    ]
    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            with pytest.raises(PermanentPortError) as raised:
                await llm.complete(ask())

    assert len(server.completions()) == 1
    assert waits_of(llm) == []
    assert str(status) in str(raised.value)
    assert "model 'x' does not exist" in str(raised.value)
    assert "not retryable" in str(raised.value)


@pytest.mark.decision("D74")
async def test_giving_up_after_max_attempts_is_a_permanent_error() -> None:
    script: list[dict[str, Any]] = [{"status": 503, "error": "overloaded"}] * 5
    with fake_openai_server(script) as server:
        async with adapter(server, max_attempts=3) as llm:
            with pytest.raises(PermanentPortError) as raised:
                await llm.complete(ask())

    assert len(server.completions()) == 3
    assert len(waits_of(llm)) == 2
    assert "503 Service Unavailable: overloaded" in str(raised.value)
    assert "gave up after 3 attempt(s)" in str(raised.value)


@pytest.mark.decision("D73")
async def test_total_time_is_bounded_across_retries() -> None:
    script: list[dict[str, Any]] = [{"status": 500}] * 100
    with fake_openai_server(script) as server:
        llm = OpenAICompatibleLLM(
            model="m",
            base_url=server.base_url,
            api_key=KEY,
            max_attempts=100,
            max_total_seconds=0.8,
            backoff_initial_seconds=0.05,
            backoff_max_seconds=0.2,
        )
        started = time.monotonic()
        with pytest.raises(PermanentPortError, match=r"would pass the 0.8 s budget"):
            await llm.complete(ask())
        elapsed = time.monotonic() - started
        await llm.aclose()

    assert elapsed <= 0.8 + 0.3  # the last answer's round trip
    assert 3 <= len(server.completions()) < 100


@pytest.mark.decision("D73")
async def test_a_slow_request_is_cut_to_the_budget_left() -> None:
    with fake_openai_server([{"delay": 10, "text": "late"}] * 3) as server:
        llm = OpenAICompatibleLLM(
            model="m",
            base_url=server.base_url,
            api_key=KEY,
            timeout_seconds=30,
            max_total_seconds=0.5,
        )
        started = time.monotonic()
        with pytest.raises(PermanentPortError, match="did not answer in time"):
            await llm.complete(ask())
        elapsed = time.monotonic() - started
        await llm.aclose()
    assert elapsed < 1.5


@pytest.mark.decision("D71")
async def test_a_retry_after_past_the_budget_gives_up_at_once() -> None:
    script: list[dict[str, Any]] = [
        {"status": 429, "error": "quota", "headers": {"Retry-After": "60"}},
        {"text": "no"},
    ]
    with fake_openai_server(script) as server:
        async with adapter(server, max_total_seconds=10) as llm:
            with pytest.raises(PermanentPortError, match=r"429 Too Many Requests: quota.*60 s"):
                await llm.complete(ask())
    assert len(server.completions()) == 1
    assert waits_of(llm) == []


@pytest.mark.decision("D74")
@pytest.mark.parametrize("status", [401, 503])
async def test_the_api_key_never_appears_in_an_error(status: int) -> None:
    echoed = f"Incorrect API key provided: {KEY}"
    with fake_openai_server([{"status": status, "error": echoed}] * 2) as server:
        async with adapter(server, max_attempts=2) as llm:
            with pytest.raises(PermanentPortError) as raised:
                await llm.complete(ask())
    assert KEY not in str(raised.value)
    assert "Incorrect API key provided: ***" in str(raised.value)


@pytest.mark.decision("D70")
async def test_cancellation_is_not_retried() -> None:
    with fake_openai_server([{"delay": 5, "text": "late"}, {"text": "never"}]) as server:
        async with adapter(server) as llm:
            task = asyncio.create_task(llm.complete(ask()))
            for _ in range(200):  # until the request is on the server
                if server.completions():
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.1)
    assert len(server.completions()) == 1
    assert waits_of(llm) == []


@pytest.mark.decision("D70")
async def test_an_injected_client_has_its_own_retries_turned_off() -> None:
    with fake_openai_server([{"status": 503}] * 3) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY, max_retries=5)
        llm = OpenAICompatibleLLM(model="m", client=client, max_attempts=1)
        with pytest.raises(PermanentPortError, match="503"):
            await llm.complete(ask())
        await client.close()
    assert len(server.completions()) == 1


# --- construction ---------------------------------------------------------------------


def test_it_is_built_without_a_running_event_loop() -> None:
    llm = OpenAICompatibleLLM(model="m", base_url="http://127.0.0.1:9/v1")
    assert llm.model == "m"
    assert llm.base_url == "http://127.0.0.1:9/v1/"


@pytest.mark.decision("D77")
@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"model": ""}, "model"),
        ({"base_url": "127.0.0.1:8000"}, "base_url"),
        ({"api_key": ""}, "api_key"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": float("inf")}, "timeout_seconds"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_total_seconds": -1}, "max_total_seconds"),
        ({"backoff_initial_seconds": 0}, "backoff_initial_seconds"),
        ({"backoff_initial_seconds": 5, "backoff_max_seconds": 1}, "backoff_max_seconds"),
        ({"temperature": 3}, "temperature"),
        ({"extra_body": {"messages": []}}, "extra_body"),
        ({"client": openai.AsyncOpenAI(api_key="k")}, "client"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(options: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"model": "m", "base_url": "http://127.0.0.1:9/v1", **options}
    with pytest.raises(ValueError, match=field):
        OpenAICompatibleLLM(**arguments)


@pytest.mark.decision("D77")
def test_openai_itself_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match=r"api_key is missing.*OPENAI_API_KEY"):
        OpenAICompatibleLLM(model="gpt-4o-mini")


@pytest.mark.decision("D77")
async def test_the_key_comes_from_the_environment_or_a_placeholder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with fake_openai_server([{"text": "a"}, {"text": "b"}]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        async with OpenAICompatibleLLM(model="m", base_url=server.base_url) as llm:
            await llm.complete(ask())
        monkeypatch.delenv("OPENAI_API_KEY")
        async with OpenAICompatibleLLM(model="m", base_url=server.base_url) as llm:
            await llm.complete(ask())
    env, local = server.completions()
    assert env.headers["authorization"] == "Bearer sk-from-env"
    assert local.headers["authorization"] == "Bearer not-needed"


# --- end to end: the engine on the adapter on the wire -----------------------------------


async def test_a_pipeline_runs_a_server_round_a_client_call_and_its_continuation() -> None:
    checklist = {"checklist": ["tests?", "names?"]}
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [{"id": "k1", "name": "review_checklist", "arguments": {}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        },
        {
            "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 3},
        },
        {"text": "Looks fine.", "usage": {"prompt_tokens": 30, "completion_tokens": 4}},
    ]

    async def review_checklist(arguments: dict[str, Any], invocation: Any) -> str:
        return json.dumps(checklist)

    with fake_openai_server(script) as server:
        async with adapter(server) as llm:
            pipeline, _ = make_pipeline(
                MemoryStore(), llm, tools={"review_checklist": review_checklist}
            )
            pending = ok(
                await pipeline.execute(
                    {"Instruction": "Review a.py."}, CALLER, initial_mode="review"
                )
            )
            final = ok(
                await pipeline.execute(
                    continuation(
                        pending, {"ToolCallId": "c1", "ExecutionMs": 2, "ResultJson": '"print(1)"'}
                    ),
                    CALLER,
                )
            )

    assert pending.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert [(c.tool_call_id, c.name) for c in pending.tool_calls or []] == [("c1", "read_file")]
    assert final.kind is ResponseKind.FINAL
    assert final.primary_output_text == "Looks fine."

    first, second, third = (r.body for r in server.completions())
    assert first["model"] == "scripted"  # the agent context's model wins over the default
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][-1] == {"role": "user", "content": "Review a.py."}
    advertised = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert advertised["read_file"]["parameters"]["required"] == ["path"]
    assert "review_checklist" in advertised
    # the server round: the model's call, then the engine's answer to it
    assert second["messages"][-2]["tool_calls"][0]["id"] == "k1"
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["tool_call_id"] == "k1"
    assert json.loads(second["messages"][-1]["content"]) == checklist
    # the continuation: the client's result answers c1
    answer = third["messages"][-1]
    assert (answer["role"], answer["tool_call_id"]) == ("tool", "c1")
    assert json.loads(answer["content"]) == "print(1)"


@pytest.mark.decision("D74")
@pytest.mark.parametrize(
    ("script", "requests"),
    [([{"status": 401, "error": "bad key"}], 1), ([{"status": 503}] * 2, 2)],
    ids=["refused", "retries exhausted"],
)
async def test_the_engine_does_not_multiply_the_adapters_attempts(
    script: list[dict[str, Any]], requests: int, tmp_path: Path
) -> None:
    with fake_openai_server(script) as server:
        async with adapter(server, max_attempts=2) as llm:
            pipeline, _ = make_pipeline(MemoryStore(), llm)
            result = await pipeline.execute({"Instruction": "hi"}, CALLER)

    assert not result.successful
    [error] = result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert str(script[0]["status"]) in error.message
    assert len(server.completions()) == requests
