"""The engine's limits: the turn deadline, the server tool timeout, the model reply size
and the transcript size (``PipelineOptions``, docs/CONFIGURATION.md "Limits").

Deadlines run on real time (asyncio), so the tests set tiny ones and make the slow
part wait on an event that never comes: they assert what happened (the error code,
nothing stored, the model call cancelled), never how long it took.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from engine_kit import (
    CALLER,
    NOTHING_STORED,
    call,
    calls,
    follow_on,
    make_pipeline,
    ok,
    scripted,
    stored,
    text,
)
from span_kit import Recorded, attributes_of, events_named
from syrupy.assertion import SnapshotAssertion
from trace_scenarios import TraceJSON

from aptix_pipeline import Pipeline, PipelineOptions, Recorder, replay
from aptix_pipeline.adapters.config.service import (
    ConfigError,
    OpenAIModelConfig,
    load_service_config,
)
from aptix_pipeline.adapters.models.openai_compatible import OpenAICompatibleLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.postgres import PostgresStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.stores.unit_of_work import TurnWrites
from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ErrorCode,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    ToolCall,
    ToolInvocation,
)
from aptix_pipeline.engine import Runtime
from aptix_pipeline.engine.telemetry import CAPTURE_CONTENT_ENV
from aptix_pipeline.engine.trace import FaultRecord, LLMCallRecord
from aptix_pipeline.testing import fake_openai_server

TOOLS_TOML = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["slow_lookup"]

[[server_tools]]
name = "slow_lookup"
description = "Looks something up, slowly."

[[agents]]
id = "assistant"
name = "Assistant"
default = true
system_prompt = "You help."

[[conversations]]
id = "workspace"
default = true
instructions = "Be brief."
"""


class HangingLLM:
    """An LLM port that answers its first ``answer_first`` calls, then never answers;
    it counts the calls that were cancelled."""

    def __init__(self, *, answer_first: int = 0, reply: LLMReply | None = None) -> None:
        self.answer_first = answer_first
        self.reply = reply or LLMReply(text="done")
        self.started = asyncio.Event()
        self.cancelled = 0
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        if self.calls <= self.answer_first:
            return self.reply
        self.started.set()
        try:
            await asyncio.Event().wait()  # never set
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


WAIT = 20.0
"""How long a test waits for a thread it holds: generous, never asserted."""


def _options(**limits: Any) -> PipelineOptions:
    return PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0, **limits)


# --- the turn deadline -------------------------------------------------------------------


@pytest.mark.decision("D200")
@pytest.mark.rule("DESIGN/limits/turn-deadline", "broken")
@pytest.mark.parametrize("runtime", ["compiled", "statechart"])
async def test_a_turn_past_its_deadline_faults_with_its_own_code_and_stores_nothing(
    runtime: Runtime, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "aptix.db")
    try:
        llm = HangingLLM()
        pipeline, _ = make_pipeline(
            store, llm, options=_options(turn_deadline_seconds=0.05), runtime=runtime
        )
        report = await pipeline.run({"Instruction": "hi"}, CALLER)

        assert not report.successful
        (error,) = report.result.errors
        assert error.code is ErrorCode.DEADLINE_EXCEEDED
        assert error.rule_id == "DESIGN/limits/turn-deadline"
        assert report.faulted_step == "llm_client"
        assert report.states[-1] == "faulted"
        assert llm.cancelled == 1  # the model call itself was cancelled
        assert await stored(store) == NOTHING_STORED
        # The trace says where: the model call failed, then the deadline fault.
        assert report.trace is not None
        entries = report.trace.entries
        faults = [e for e in entries if isinstance(e, FaultRecord)]
        assert faults == [
            FaultRecord("llm_client", ("deadline_exceeded",), ("DESIGN/limits/turn-deadline",))
        ]
        (model_call,) = [e for e in entries if isinstance(e, LLMCallRecord)]
        assert model_call.error == "CancelledError"
        assert report.trace.error_codes == ("deadline_exceeded",)
        # The store is not left stuck: the next turn runs and commits.
        again, _ = make_pipeline(store, [text("hello")], options=_options())
        ok(await again.execute({"Instruction": "hi"}, CALLER))
    finally:
        await store.aclose()


@pytest.mark.decision("D200")
async def test_a_deadline_fault_of_a_follow_on_leaves_the_session_as_it_was() -> None:
    store = MemoryStore()
    pipeline, _ = make_pipeline(
        store, HangingLLM(answer_first=1), options=_options(turn_deadline_seconds=0.05)
    )
    response = ok(await pipeline.execute({"Instruction": "hi"}, CALLER))
    before = await stored(store)

    result = await pipeline.execute(follow_on(response), CALLER)

    assert [e.code for e in result.errors] == [ErrorCode.DEADLINE_EXCEEDED]
    assert await stored(store) == before


@pytest.mark.decision("D200")
@pytest.mark.rule("DESIGN/limits/turn-deadline", "holds")
async def test_a_turn_within_its_deadline_succeeds() -> None:
    pipeline, _ = make_pipeline(
        MemoryStore(), [text("quick")], options=_options(turn_deadline_seconds=60)
    )
    assert ok(await pipeline.execute({"Instruction": "hi"}, CALLER)).primary_output_text == "quick"


class SlowCommitStore(MemoryStore):
    """A memory store whose commit waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.committing = asyncio.Event()
        self.release = asyncio.Event()

    async def apply(self, writes: TurnWrites) -> None:
        self.committing.set()
        await self.release.wait()
        await super().apply(writes)


@pytest.mark.decision("D201")
async def test_the_deadline_never_interrupts_a_commit_and_the_committed_answer_stands() -> None:
    store = SlowCommitStore()
    pipeline, _ = make_pipeline(store, [text("kept")], options=_options(turn_deadline_seconds=0.05))
    turn = asyncio.ensure_future(pipeline.execute({"Instruction": "hi"}, CALLER))
    await store.committing.wait()
    await asyncio.sleep(0.2)  # well past the deadline, while the commit waits
    store.release.set()
    result = await turn

    assert ok(result).primary_output_text == "kept"
    session, turns, transcript = await stored(store)
    assert session is not None
    assert turns[0] is not None
    assert len(transcript) == 2


@pytest.mark.decision("D201")
async def test_a_cancelled_turn_still_finishes_the_commit_it_began() -> None:
    store = SlowCommitStore()
    pipeline, _ = make_pipeline(store, [text("kept")])
    turn = asyncio.ensure_future(pipeline.execute({"Instruction": "hi"}, CALLER))
    await store.committing.wait()
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    store.release.set()
    for _ in range(10):  # the shielded commit finishes on its own
        await asyncio.sleep(0)
    session, turns, _ = await stored(store)
    assert session is not None
    assert turns[0] is not None


@pytest.mark.decision("D201")
async def test_no_commit_starts_once_the_deadline_has_passed() -> None:
    store = SlowCommitStore()
    store.release.set()

    class BlockingReplyLLM:
        async def complete(self, request: LLMRequest) -> LLMReply:
            # Block the loop itself past the deadline: no await can notice it.
            import time

            time.sleep(0.1)
            return LLMReply(text="late")

    pipeline, _ = make_pipeline(
        store, BlockingReplyLLM(), options=_options(turn_deadline_seconds=0.05)
    )
    report = await pipeline.run({"Instruction": "hi"}, CALLER)

    assert [e.code for e in report.result.errors] == [ErrorCode.DEADLINE_EXCEEDED]
    assert report.faulted_step == "complete"
    assert not store.committing.is_set()
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D202")
async def test_the_deadline_fault_is_on_the_turn_and_step_spans() -> None:
    recorded = Recorded()
    try:
        pipeline, _ = make_pipeline(
            MemoryStore(),
            HangingLLM(),
            options=_options(turn_deadline_seconds=0.05),
            telemetry=recorded.telemetry(),
        )
        await pipeline.execute({"Instruction": "hi"}, CALLER)
        turn = recorded.turn()
        assert attributes_of(turn.root)["error.type"] == "deadline_exceeded"
        (step,) = [s for s in turn.steps if s.name == "step llm_client"]
        assert attributes_of(step)["error.type"] == "deadline_exceeded"
        assert [e["aptix.rule.id"] for e in events_named(step, "aptix.rule.failed")] == [
            "DESIGN/limits/turn-deadline"
        ]
        (chat,) = turn.named("chat")
        assert chat.end_time is not None
    finally:
        recorded.shutdown()


@pytest.mark.decision("D200")
async def test_no_deadline_when_it_is_switched_off() -> None:
    llm = HangingLLM()
    pipeline, _ = make_pipeline(MemoryStore(), llm, options=_options(turn_deadline_seconds=None))
    turn = asyncio.ensure_future(pipeline.execute({"Instruction": "hi"}, CALLER))
    await llm.started.wait()
    await asyncio.sleep(0.1)
    assert not turn.done()
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn


# --- the server tool timeout ---------------------------------------------------------------


class HangingTool:
    """A server tool that never answers; it counts its cancellations."""

    def __init__(self) -> None:
        self.cancelled = 0

    async def __call__(self, arguments: Any, invocation: ToolInvocation) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


@pytest.mark.decision("D203")
@pytest.mark.rule("DESIGN/limits/server-tool-timeout", "broken")
async def test_a_hanging_server_tool_times_out_and_the_model_is_told() -> None:
    tool = HangingTool()
    recorded = Recorded()
    try:
        pipeline, llm = make_pipeline(
            MemoryStore(),
            [calls(call("c1", "slow_lookup")), text("the lookup timed out, sorry")],
            config=TOOLS_TOML,
            tools={"slow_lookup": tool},
            options=_options(server_tool_timeout_seconds=0.05),
            telemetry=recorded.telemetry(),
        )
        report = await pipeline.run({"Instruction": "look it up"}, CALLER)

        response = ok(report.result)
        assert response.primary_output_text == "the lookup timed out, sorry"
        assert tool.cancelled == 1
        # The model's second request carries the tool's failure.
        tool_message = scripted(llm).requests[1].messages[-1]
        assert tool_message.tool_call_id == "c1"
        assert "did not answer within 0.05 s" in json.loads(tool_message.content)["error"]
        (result,) = response.tool_results or []
        assert result.result_json is None
        assert "TimeoutError" in (result.error_message or "")
        # Trace and span name the limit.
        (record,) = report.tool_calls
        assert (record.outcome, record.rule_id) == ("failed", "DESIGN/limits/server-tool-timeout")
        (span,) = recorded.turn().named("execute_tool")
        assert attributes_of(span)["aptix.tool.outcome"] == "failed"
        step = recorded.turn().step_of(span)
        assert "DESIGN/limits/server-tool-timeout" in [
            e["aptix.rule.id"] for e in events_named(step, "aptix.rule.failed")
        ]
    finally:
        recorded.shutdown()


@pytest.mark.decision("D203")
@pytest.mark.rule("DESIGN/limits/server-tool-timeout", "holds")
async def test_a_server_tool_within_its_timeout_answers_and_its_own_timeout_is_its_failure() -> (
    None
):
    async def quick(arguments: Any, invocation: ToolInvocation) -> Any:
        return {"found": 42}

    async def gives_up(arguments: Any, invocation: ToolInvocation) -> Any:
        raise TimeoutError("upstream took too long")

    for executor, outcome, error in (
        (quick, "executed", None),
        (gives_up, "failed", "TimeoutError: upstream took too long"),
    ):
        pipeline, _ = make_pipeline(
            MemoryStore(),
            [calls(call("c1", "slow_lookup")), text("ok")],
            config=TOOLS_TOML,
            tools={"slow_lookup": executor},
            options=_options(server_tool_timeout_seconds=30),
        )
        report = await pipeline.run({"Instruction": "look it up"}, CALLER)
        (result,) = ok(report.result).tool_results or []
        assert result.error_message == error
        assert [(r.outcome, r.rule_id) for r in report.tool_calls] == [(outcome, None)]


# --- the model reply size --------------------------------------------------------------------


@pytest.mark.decision("D204")
@pytest.mark.rule("DESIGN/limits/model-reply-size", "broken")
@pytest.mark.parametrize(
    "reply",
    [
        LLMReply(text="x" * 101),
        LLMReply(
            tool_calls=[
                ToolCall(
                    tool_call_id="c1",
                    name="slow_lookup",
                    arguments_json=json.dumps({"q": "y" * 90}),
                )
            ]
        ),
    ],
    ids=["text", "tool-arguments"],
)
async def test_a_model_reply_over_the_size_limit_faults_the_turn_without_another_try(
    reply: LLMReply,
) -> None:
    llm = HangingLLM(answer_first=5, reply=reply)
    pipeline, _ = make_pipeline(
        MemoryStore(),
        llm,
        config=TOOLS_TOML,
        tools={"slow_lookup": _found},
        options=_options(max_model_reply_chars=100),
    )
    report = await pipeline.run({"Instruction": "hi"}, CALLER)

    (error,) = report.result.errors
    assert (error.code, error.rule_id) == (ErrorCode.PORT_FAILED, "DESIGN/limits/model-reply-size")
    assert "limit 100" in error.message
    assert llm.calls == 1
    assert report.faulted_step == "llm_client"
    assert report.session_id is None


@pytest.mark.decision("D204")
@pytest.mark.rule("DESIGN/limits/model-reply-size", "holds")
async def test_a_model_reply_at_the_size_limit_is_taken() -> None:
    pipeline, _ = make_pipeline(
        MemoryStore(), [text("x" * 100)], options=_options(max_model_reply_chars=100)
    )
    assert (
        ok(await pipeline.execute({"Instruction": "hi"}, CALLER)).primary_output_text == "x" * 100
    )


# --- the transcript size -------------------------------------------------------------------


async def _session_of_three_turns(
    options: PipelineOptions, last: dict[str, Any] | None = None
) -> tuple[Any, Any, MemoryStore]:
    """Two turns that store 2 + 4 messages (one with a server tool round), then a third."""
    store = MemoryStore()
    pipeline, llm = make_pipeline(
        store,
        [
            text("one"),
            calls(call("c1", "slow_lookup")),
            text("two"),
            last or text("three"),
        ],
        config=TOOLS_TOML,
        tools={"slow_lookup": _found},
        options=options,
    )
    first = ok(await pipeline.execute({"Instruction": "first"}, CALLER))
    second = ok(await pipeline.execute(follow_on(first, "second"), CALLER))
    return await pipeline.run(follow_on(second, "third"), CALLER), scripted(llm), store


async def _found(arguments: Any, invocation: ToolInvocation) -> Any:
    return {"found": True}


@pytest.mark.decision("D205")
@pytest.mark.rule("DESIGN/limits/transcript-size", "broken")
async def test_truncate_sends_the_newest_messages_whole_and_warns() -> None:
    # The stored transcript: user, assistant | user, assistant(c1), tool(c1), assistant.
    report, llm, store = await _session_of_three_turns(
        _options(max_transcript_messages=2, transcript_policy="truncate")
    )

    response = ok(report.result)
    assert response.primary_output_text == "three"
    sent = llm.requests[-1].messages[1:]  # after the system message
    # The newest 2 would start at the tool result, whose call was cut: it goes too.
    assert [(m.role.value, m.content) for m in sent] == [
        ("assistant", "two"),
        ("user", "third"),
    ]
    (warning,) = report.result.warnings
    assert warning.code == "transcript_truncated"
    assert warning.rule_id == "DESIGN/limits/transcript-size"
    assert "session-1" in warning.message
    _, _, transcript = await stored(store)
    assert len(transcript) == 8  # the store keeps every message


@pytest.mark.decision("D205")
@pytest.mark.rule("DESIGN/limits/transcript-size", "broken")
async def test_refuse_faults_the_turn_naming_the_session_and_stores_nothing() -> None:
    report, llm, store = await _session_of_three_turns(
        _options(max_transcript_messages=5, transcript_policy="refuse")
    )

    (error,) = report.result.errors
    assert (error.code, error.rule_id, error.field) == (
        ErrorCode.INVALID_REQUEST,
        "DESIGN/limits/transcript-size",
        "SessionId",
    )
    assert "'session-1' holds 6 messages, limit 5" in error.message
    assert len(llm.requests) == 3  # the third turn never reached the model
    _, turns, transcript = await stored(store)
    assert turns[2] is None
    assert len(transcript) == 6


@pytest.mark.decision("D205")
@pytest.mark.rule("DESIGN/limits/transcript-size", "holds")
@pytest.mark.parametrize("policy", ["truncate", "refuse"])
async def test_a_transcript_within_the_limit_is_sent_whole(policy: str) -> None:
    report, llm, _ = await _session_of_three_turns(
        PipelineOptions(
            retry_wait_seconds=0,
            retry_max_wait_seconds=0,
            max_transcript_messages=6,
            transcript_policy="refuse" if policy == "refuse" else "truncate",
        )
    )
    ok(report.result)
    assert report.result.warnings == ()
    assert len(llm.requests[-1].messages) == 1 + 6 + 1


@pytest.mark.decision("D207")
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("turn_deadline_seconds", 0),
        ("turn_deadline_seconds", float("nan")),
        ("server_tool_timeout_seconds", -1),
        ("max_model_reply_chars", 0),
        ("max_transcript_messages", 0),
        ("transcript_policy", "drop"),
    ],
)
def test_limits_out_of_range_are_refused_naming_the_option(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        PipelineOptions(**{field: value})


# --- the OpenAI-compatible adapter reads a bounded body ---------------------------------------


@pytest.mark.decision("D204")
async def test_the_openai_adapter_stops_reading_a_reply_body_over_its_bound() -> None:
    with fake_openai_server([{"text": "x" * 5000}, {"text": "never asked"}]) as server:
        llm = OpenAICompatibleLLM(
            model="fake-model", base_url=server.base_url, api_key="k", max_reply_bytes=4096
        )
        try:
            with pytest.raises(PermanentPortError, match="more than 4096"):
                await llm.complete(_one_message())
        finally:
            await llm.aclose()
        assert len(server.completions()) == 1  # not retried


@pytest.mark.decision("D204")
async def test_the_openai_adapter_stops_reading_an_endless_chunked_reply() -> None:
    sent = 0

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        while (await reader.readline()).strip():
            pass  # the request's headers; its body is never needed
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        chunk = b'{"padding": "' + b"x" * 8192
        try:
            while sent < 50_000_000:  # a backstop: the client must stop long before
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        writer.close()

    server = await asyncio.start_server(endless, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    llm = OpenAICompatibleLLM(
        model="m", base_url=f"http://127.0.0.1:{port}/v1", max_reply_bytes=65536
    )
    try:
        with pytest.raises(PermanentPortError, match="larger than 65536 bytes"):
            await llm.complete(_one_message())
    finally:
        await llm.aclose()
        server.close()
    assert sent < 50_000_000


@pytest.mark.decision("D204")
async def test_the_openai_adapter_reads_a_reply_within_its_bound() -> None:
    with fake_openai_server([{"text": "fits"}]) as server:
        async with OpenAICompatibleLLM(
            model="fake-model", base_url=server.base_url, api_key="k", max_reply_bytes=4096
        ) as llm:
            assert (await llm.complete(_one_message())).text == "fits"


def _one_message() -> LLMRequest:
    return LLMRequest(mode="general", messages=[ChatMessage(role=ChatRole.USER, content="hi")])


# --- the configuration file ------------------------------------------------------------------


@pytest.mark.decision("D207")
def test_the_limits_are_read_from_the_engine_and_server_tables(tmp_path: Path) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text(
        "[engine]\nturn_deadline_seconds = 0\nserver_tool_timeout_seconds = 2.5\n"
        'max_model_reply_chars = 5000\nmax_transcript_messages = 40\ntranscript_policy = "refuse"\n'
        "[server]\nread_timeout_seconds = 3\n",
        encoding="utf-8",
    )
    config = load_service_config(path)
    options = config.options

    assert options.turn_deadline_seconds is None  # 0 turns it off
    assert options.server_tool_timeout_seconds == 2.5
    assert (options.max_model_reply_chars, options.max_transcript_messages) == (5000, 40)
    assert options.transcript_policy == "refuse"
    assert config.server.read_timeout_seconds == 3


def test_the_limits_default_as_documented(tmp_path: Path) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text("", encoding="utf-8")
    config = load_service_config(path)
    assert config.options == PipelineOptions()
    options = config.options
    assert (options.turn_deadline_seconds, options.server_tool_timeout_seconds) == (300, 30)
    assert (options.max_model_reply_chars, options.max_transcript_messages) == (1_000_000, 1000)
    assert options.transcript_policy == "truncate"
    assert config.server.read_timeout_seconds == 15


@pytest.mark.decision("D207")
@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("[engine]\nturn_deadline_seconds = -1\n", "turn_deadline_seconds"),
        ('[engine]\ntranscript_policy = "forget"\n', "transcript_policy"),
        ("[engine]\nmax_model_reply_chars = 0\n", "max_model_reply_chars"),
        ("[server]\nread_timeout_seconds = -0.5\n", "read_timeout_seconds"),
    ],
)
def test_a_bad_limit_in_the_file_is_refused_naming_it(tmp_path: Path, table: str, key: str) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text(table, encoding="utf-8")
    with pytest.raises(ConfigError, match=key):
        load_service_config(path)


# --- the traces, as snapshots ----------------------------------------------------------------


@pytest.mark.decision("D202", "D203")
async def test_the_traces_of_a_deadline_fault_and_a_tool_timeout(
    snapshot: SnapshotAssertion, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    deadline, _ = make_pipeline(
        MemoryStore(), HangingLLM(), options=_options(turn_deadline_seconds=0.05)
    )
    timeout, _ = make_pipeline(
        MemoryStore(),
        [calls(call("c1", "slow_lookup")), text("it timed out")],
        config=TOOLS_TOML,
        tools={"slow_lookup": HangingTool()},
        options=_options(server_tool_timeout_seconds=0.05),
    )
    reports = [
        await deadline.run({"Instruction": "hi"}, CALLER),
        await timeout.run({"Instruction": "look it up"}, CALLER),
    ]

    traces = [report.trace.to_dict() for report in reports if report.trace is not None]
    assert traces == snapshot(extension_class=TraceJSON)


# --- a deadline on real stores: nothing stuck, nothing half done ---------------------------------


async def test_a_deadline_while_a_sqlite_read_waits_leaves_the_store_working(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "aptix.db")
    try:
        pipeline, _ = make_pipeline(
            store, HangingLLM(answer_first=2), options=_options(turn_deadline_seconds=0.2)
        )
        first = ok(await pipeline.execute({"Instruction": "hi"}, CALLER))
        before = await stored(store)
        # Hold the store's one worker thread, so the follow-on's first read waits in its queue.
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(WAIT)

        store._worker.submit(hold)
        assert held.wait(WAIT)
        try:
            report = await pipeline.run(follow_on(first), CALLER)
        finally:
            release.set()

        assert [e.code for e in report.result.errors] == [ErrorCode.DEADLINE_EXCEEDED]
        assert report.faulted_step == "session_restorer"
        assert await stored(store) == before
        ok(await pipeline.execute(follow_on(first, "again"), CALLER))  # the worker goes on
    finally:
        await store.aclose()


@pytest.mark.decision("D201")
async def test_a_sqlite_commit_waiting_for_the_write_lock_outlives_the_deadline(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "aptix.db")
    blocker = sqlite3.connect(tmp_path / "aptix.db", isolation_level=None)
    try:
        committing = asyncio.Event()

        class Watched(HangingLLM):
            async def complete(self, request: LLMRequest) -> LLMReply:
                blocker.execute("BEGIN IMMEDIATE")  # another writer holds the file
                committing.set()
                return LLMReply(text="kept")

        pipeline, _ = make_pipeline(store, Watched(), options=_options(turn_deadline_seconds=0.2))
        turn = asyncio.ensure_future(pipeline.execute({"Instruction": "hi"}, CALLER))
        await committing.wait()
        await asyncio.sleep(0.5)  # the turn's commit waits on the lock past the deadline
        blocker.execute("ROLLBACK")
        result = await turn

        assert ok(result).primary_output_text == "kept"
        session, turns, _ = await stored(store)
        assert session is not None
        assert turns[0] is not None
    finally:
        blocker.close()
        await store.aclose()


async def test_a_deadline_while_a_postgres_read_waits_leaves_the_pool_working(
    postgres_db_url: str,
) -> None:
    store = PostgresStore(postgres_db_url, max_size=2)
    try:
        pipeline, _ = make_pipeline(
            store, HangingLLM(answer_first=100), options=_options(turn_deadline_seconds=0.3)
        )
        first = ok(await pipeline.execute({"Instruction": "hi"}, CALLER))
        async with await psycopg.AsyncConnection.connect(postgres_db_url) as locker:
            await locker.execute("LOCK TABLE aptix_sessions IN ACCESS EXCLUSIVE MODE")
            report = await pipeline.run(follow_on(first), CALLER)
            await locker.rollback()

        assert [e.code for e in report.result.errors] == [ErrorCode.DEADLINE_EXCEEDED]
        for n in range(3):  # more turns than the pool has connections: none was left stuck
            ok(await pipeline.execute(follow_on(first, f"again {n}"), CALLER))
        _, turns, _ = await stored(store)
        assert [turn is not None for turn in turns] == [True, True, True, True, False]
    finally:
        await store.aclose()


@pytest.mark.decision("D208")
async def test_a_replay_runs_off_the_clock_whatever_deadline_was_recorded() -> None:
    class SlowOnce:
        async def complete(self, request: LLMRequest) -> LLMReply:
            await asyncio.sleep(0.05)
            return LLMReply(text="slow but on time")

    base, _ = make_pipeline(MemoryStore(), SlowOnce(), options=_options())
    pipeline = Pipeline(base.ports, base.options, interceptors=[Recorder()])
    recording = (await pipeline.run({"Instruction": "hi"}, CALLER)).recording
    assert recording is not None
    # The same turn as if it had been recorded with a deadline far shorter than any run.
    tight = replace(recording, options={**recording.options, "turn_deadline_seconds": 1e-9})

    assert (await replay(tight)).ok


@pytest.mark.decision("D204")
def test_the_openai_reply_bound_is_read_from_the_model_table(tmp_path: Path) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text(
        '[model]\nkind = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
        "max_reply_bytes = 4096\n",
        encoding="utf-8",
    )
    model = load_service_config(path).model
    assert isinstance(model, OpenAIModelConfig)
    assert model.max_reply_bytes == 4096
