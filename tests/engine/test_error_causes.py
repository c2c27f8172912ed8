"""Errors keep their cause: a host's model, store, catalog or tool that raises.

The result names the failure as it always did (``port_failed`` naming the port, or
the tool's failure told to the model); the exception's traceback is logged once
and is the conventions' ``exception`` event on the innermost span it happened in;
the recording keeps its type and message. What of a failing tool's exception
reaches the client is ``PipelineOptions.tool_error_detail``'s to say: by default
its class and a short message, never a traceback.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, follow_on, make_pipeline, ok, text
from span_kit import Recorded, TurnSpans, events_named

from aptix_pipeline import (
    ErrorCode,
    LLMReply,
    LLMRequest,
    MemoryStore,
    ModeSpec,
    Pipeline,
    PipelineOptions,
    Recorder,
    RecordingOptions,
    ScriptedLLM,
    Session,
    SessionStore,
    SessionTransaction,
    Telemetry,
    ToolErrorDetail,
    ToolInvocation,
    TurnEvent,
    TurnFaulted,
    TurnReport,
    replay,
)

NO_WAIT = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)
EXPAND = calls(call("m1", "Math"))  # Add is a member of the Math container
ADD = calls(call("s1", "Add", {"a": 40, "b": 2}))
LONG = "x" * 500
MESSAGE = (
    "ticket T-7 is locked\n"
    "Traceback (most recent call last):\n"
    '  File "tickets.py", line 7, in lookup\n'
    "KeyError: 'T-7'"
)


async def broken_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    raise ValueError(MESSAGE)


async def long_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    raise ValueError(LONG)


def tool_pipeline(
    executor: Any,
    *,
    options: PipelineOptions | None = None,
    telemetry: Telemetry | None = None,
    recording: bool = False,
) -> tuple[Pipeline, ScriptedLLM]:
    """A pipeline whose model expands Math, calls Add (``executor``) and answers."""
    base, llm = make_pipeline(MemoryStore(), [EXPAND, ADD, text("Done.")], tools={"Add": executor})
    assert llm is not None
    pipeline = Pipeline(
        base.ports,
        options or base.options,
        telemetry=telemetry or Telemetry.off(),
        interceptors=[Recorder(RecordingOptions())] if recording else [],
    )
    return pipeline, llm


def told_to_the_model(llm: ScriptedLLM) -> str:
    """The error text the model's tool message held for the call ``s1``."""
    [message] = [m for m in llm.requests[2].messages if m.tool_call_id == "s1"]
    found: str = json.loads(message.content)["error"]
    return found


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every traceback logged: a record's exception (content capture), or one in its text."""
    found = []
    for record in caplog.records:
        if record.exc_info is not None:
            found.append(logging.Formatter().format(record))
        elif "Traceback (most recent call last)" in record.getMessage():
            found.append(record.getMessage())
    return found


def exception_events(turn: TurnSpans, prefix: str) -> list[dict[str, Any]]:
    return [event for span in turn.named(prefix) for event in events_named(span, "exception")]


# --- what a failing tool tells the client --------------------------------------------------------


@pytest.mark.decision("D289")
async def test_a_failing_tool_tells_its_class_and_first_line_never_a_traceback() -> None:
    pipeline, llm = tool_pipeline(broken_add)

    response = ok(await pipeline.execute({"Instruction": "Add"}, CALLER))

    assert response.tool_results is not None
    [result] = response.tool_results
    assert result.error_message == "ValueError: ticket T-7 is locked"
    assert told_to_the_model(llm) == result.error_message
    assert "Traceback" not in result.error_message


@pytest.mark.decision("D289")
async def test_a_long_message_is_cut_to_two_hundred_characters() -> None:
    pipeline, llm = tool_pipeline(long_add)

    response = ok(await pipeline.execute({"Instruction": "Add"}, CALLER))

    assert response.tool_results is not None
    shown = response.tool_results[0].error_message
    assert shown is not None
    assert len(shown) == 200
    assert shown == f"ValueError: {LONG[: 200 - len('ValueError: ') - 1]}…"
    assert told_to_the_model(llm) == shown


@pytest.mark.decision("D289")
@pytest.mark.parametrize(
    ("detail", "shown"),
    [("class", "ValueError"), ("full", f"ValueError: {MESSAGE}")],
)
async def test_tool_error_detail_says_how_much_the_client_is_told(
    detail: ToolErrorDetail, shown: str
) -> None:
    options = PipelineOptions(retry_wait_seconds=0, tool_error_detail=detail)
    pipeline, llm = tool_pipeline(broken_add, options=options)

    response = ok(await pipeline.execute({"Instruction": "Add"}, CALLER))

    assert response.tool_results is not None
    assert response.tool_results[0].error_message == shown
    assert told_to_the_model(llm) == shown


def test_an_unknown_tool_error_detail_is_refused() -> None:
    with pytest.raises(ValueError, match="tool_error_detail must be one of short, class, full"):
        PipelineOptions(tool_error_detail="traceback")  # type: ignore[arg-type]


@pytest.mark.decision("D289")
async def test_the_recording_keeps_the_tools_exception_and_the_replay_tells_the_same() -> None:
    pipeline, _ = tool_pipeline(broken_add, recording=True)
    report = await pipeline.run({"Instruction": "Add"}, CALLER)
    assert report.recording is not None

    outcome = await replay(report.recording)

    [tool_call] = [c for c in report.recording.calls if c.port == "ToolExecutor"]
    assert tool_call.error is not None
    assert (tool_call.error.type, tool_call.error.message) == ("ValueError", MESSAGE)
    assert outcome.ok, outcome.divergence and outcome.divergence.describe()


# --- tracebacks: logged once, on the span -------------------------------------------------------


@pytest.mark.decision("D292")
async def test_a_failing_tool_logs_its_traceback_once_and_marks_its_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorded = Recorded()
    pipeline, _ = tool_pipeline(broken_add, telemetry=recorded.telemetry())

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        ok(await pipeline.execute({"Instruction": "Add"}, CALLER))

    [logged] = tracebacks(caplog)
    assert "in broken_add" in logged
    assert "ValueError" in logged
    assert "locked" not in caplog.text  # no content capture: no message
    [event] = exception_events(recorded.turn(), "execute_tool Add")
    assert event["exception.type"] == "ValueError"
    assert "in broken_add" in event["exception.stacktrace"]
    assert "exception.message" not in event  # no content capture: no message
    assert "locked" not in event["exception.stacktrace"]
    assert exception_events(recorded.turn(), "step") == []


@pytest.mark.decision("D292")
async def test_with_content_capture_the_exception_event_holds_the_message() -> None:
    recorded = Recorded()
    pipeline, _ = tool_pipeline(broken_add, telemetry=recorded.telemetry(capture_content=True))

    ok(await pipeline.execute({"Instruction": "Add"}, CALLER))

    [event] = exception_events(recorded.turn(), "execute_tool Add")
    assert event["exception.message"] == MESSAGE
    assert "ticket T-7 is locked" in event["exception.stacktrace"]


@pytest.mark.decision("D292")
async def test_with_content_capture_the_log_holds_the_exception_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorded = Recorded()
    pipeline, _ = tool_pipeline(broken_add, telemetry=recorded.telemetry(capture_content=True))

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        ok(await pipeline.execute({"Instruction": "Add"}, CALLER))

    [logged] = [r for r in caplog.records if r.exc_info is not None]
    assert logged.exc_info is not None
    assert logged.exc_info[1] is not None
    assert str(logged.exc_info[1]) == MESSAGE


class Down:
    """A model that cannot be reached."""

    provider_name = "down"

    async def complete(self, request: LLMRequest) -> LLMReply:
        raise ConnectionError("connection refused")


@pytest.mark.decision("D292")
async def test_a_failing_model_names_the_port_logs_once_and_marks_its_chat_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorded = Recorded()
    base, _ = make_pipeline(MemoryStore(), Down())
    pipeline = Pipeline(base.ports, NO_WAIT, telemetry=recorded.telemetry())

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        report = await pipeline.run({"Instruction": "Hi"}, CALLER)

    [error] = report.result.errors
    assert (error.code, error.field) == (ErrorCode.PORT_FAILED, "LLM")
    assert "ConnectionError: connection refused" in error.message
    [logged] = tracebacks(caplog)
    assert "ConnectionError" in logged
    assert "in complete" in logged  # the model's own frame
    turn = recorded.turn()
    [event] = exception_events(turn, "chat")
    assert event["exception.type"] == "ConnectionError"
    assert exception_events(turn, "step") == []  # once, on the innermost span


class ReadFailingStore:
    """A store whose ``load_session`` raises."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner

    def begin(self, org: str, user: str) -> SessionTransaction:
        tx = self.inner.begin(org, user)

        async def load_session(session_id: str) -> Session | None:
            raise OSError("database is unavailable")

        tx.load_session = load_session  # type: ignore[method-assign]
        return tx


class FailingModes:
    """A Mode Catalog that is down."""

    async def get_mode(self, mode: str) -> ModeSpec | None:
        raise TimeoutError("catalog service timed out")

    async def list_modes(self) -> list[ModeSpec]:
        raise TimeoutError("catalog service timed out")


@pytest.mark.decision("D292")
@pytest.mark.parametrize(
    ("port", "step", "kind"),
    [
        ("SessionStore", "session_restorer", "OSError"),
        ("ModeCatalog", "reasoner", "TimeoutError"),
    ],
)
async def test_a_failing_store_or_catalog_logs_once_and_marks_its_step_span(
    port: str, step: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    first, _ = make_pipeline(store, [text("Hello."), text("Again.")])
    done = ok(await first.execute({"Instruction": "Hi"}, CALLER))
    ports = (  # the same ids and model, one port failing
        replace(first.ports, store=ReadFailingStore(store))
        if port == "SessionStore"
        else replace(first.ports, modes=FailingModes())
    )
    recorded = Recorded()
    faults: list[TurnFaulted] = []

    def listen(event: TurnEvent) -> None:
        if isinstance(event, TurnFaulted):
            faults.append(event)

    pipeline = Pipeline(ports, NO_WAIT, telemetry=recorded.telemetry(), listeners=[listen])

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        report = await pipeline.run(follow_on(done), CALLER)

    [error] = report.result.errors
    assert (error.code, error.field) == (ErrorCode.PORT_FAILED, port)
    assert report.faulted_step == step
    [logged] = tracebacks(caplog)
    assert f"{kind}\n" in logged
    assert f"faulted ({ErrorCode.PORT_FAILED})" in logged
    [event] = exception_events(recorded.turn(), f"step {step}")
    assert event["exception.type"] == kind
    [fault] = faults
    assert type(fault.cause).__name__ == kind


@pytest.mark.decision("D292")
async def test_an_engine_refusal_is_reported_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline, _ = make_pipeline(MemoryStore(), [])  # a script that has run out

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        report: TurnReport = await pipeline.run({"Instruction": "Hi"}, CALLER)

    [error] = report.result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert "ScriptExhaustedError" in error.message
    assert tracebacks(caplog) == []
