"""AGN-036 §4.9 LLMClient: one call to the model, and what to do with its reply.

The reply is one of three outcomes (DESIGN.md R5):

- **Final** — text and no tool calls: ``ResponsePayload``.
- **ToolContinuation** — at least one valid call of a client tool: the client
  calls, sent to the client; any server-side calls in the same reply run first.
- **another round** — only calls the engine answers itself: server tools,
  ``agent_change_mode``, container expansions and calls the container design's
  checks refuse (their errors go back to the model as tool results). The engine
  then calls the model again, at most ``max_server_tool_rounds`` times.

§4.9's POST ("exactly one outcome") is checked when the loop exits.

A streamed turn (AGN-034 §4.7) asks a model that can stream for its reply chunk
by chunk and passes each piece of text on as it comes; the chunks are put
together into the same ``LLMReply`` (``contracts/llm_stream.py``), so what
follows the call does not depend on how the reply came. A failure before any
text has gone out is retried as usual; after, it faults the turn
(``DESIGN/streaming/interrupted``): text the client has seen cannot be taken back
by a second, different reply.

The host's hooks (``steps/hooks.py``) run inside the model and tool ports; one that
fails faults the turn with ``internal`` here (``hook_fault``), never retried nor
reported to the model as a tool failure. A server tool that raises is reported
to the model and in ``ToolResults`` with the text ``error_detail`` allows
(``steps/exception_text.py``); its traceback is logged once and goes to its span.
A server tool that returns files (``ToolOutput``) has them kept while the call runs
(``steps/tool_files.py``): they join the turn's files, which the final response
lists as ``Files`` (AGN-033 §6).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, cast

from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ContainerInvocationErrorResponse,
    ErrorCode,
    FileRef,
    InvokeError,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    ReplyAssembler,
    ReplyTextDelta,
    ResponsePayload,
    ResponseType,
    StreamingLLM,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolPause,
    ToolResult,
    Usage,
    close_stream,
    scrubbed_logger,
)
from aptix_pipeline.validators import (
    MODEL_REPLY_SIZE,
    ROUND_LIMIT,
    SERVER_TOOL_TIMEOUT,
    STREAM_INTERRUPTED,
    TOOL_CALL_IDS,
    TOOL_POSSIBLY_EXECUTED,
    ToolCallOutcome,
    ToolCallVerdict,
    check_tool_call,
    guard_machine_payloads,
    strict_json_loads,
    utf8_text,
)

from .budget import call_settled
from .exception_text import PROPAGATED, ErrorDetail, error_text, exception_type, traceback_text
from .faults import StepFaultError
from .hooks import HookFailedError, hook_fault
from .mode_change import AGENT_CHANGE_MODE, change_mode
from .observer import LLMCallObservation
from .scope import TurnScope
from .tool_files import keep_files, told_to_model
from .tool_ledger import ToolPossiblyExecutedError
from .tool_records import RejectionKind, ToolCallFate, ToolCallRecord, ToolCallSide

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = [
    "check_round_limit",
    "llm_client",
    "model_request",
    "reply_size",
    "system_message",
]

logger = scrubbed_logger(__name__)


def reply_size(reply: LLMReply) -> int:
    """The characters of a reply that count against ``max_model_reply_chars``."""
    size = len(reply.text) if reply.text is not None else 0
    for call in reply.tool_calls:
        size += len(call.tool_call_id) + len(call.name) + len(call.arguments_json)
    return size


def _check_tool_call_ids(scope: TurnScope, calls: list[ToolCall]) -> None:
    seen = {record.tool_call_id for record in scope.tool_calls}
    manifest = scope.ctx.tool_call_manifest
    if manifest is not None:  # the calls this continuation just answered
        seen.update(call.tool_call_id for call in manifest.tool_calls)
    for index, call in enumerate(calls):
        problem = None
        if not call.tool_call_id.strip():
            problem = "is empty"
        elif call.tool_call_id in seen:
            problem = "repeats an earlier call's id"
        if problem:
            raise StepFaultError(
                [
                    TOOL_CALL_IDS.error(
                        f"the call to {call.name!r} (#{index + 1} of the reply) {problem}",
                        field=f"ToolCalls[{index}].ToolCallId",
                        tool_call_id=call.tool_call_id,
                        tool_name=call.name,
                    )
                ]
            )
        seen.add(call.tool_call_id)


def check_round_limit(scope: TurnScope) -> None:
    """Fault past ``max_server_tool_rounds``: the guard of ``server_tool_round``, and the
    LLMClient's check before it runs the calls of a reply that would need one more."""
    limit = scope.options.max_server_tool_rounds
    if scope.llm_calls > limit:
        raise StepFaultError(
            [
                ROUND_LIMIT.error(
                    f"{scope.llm_calls - 1} rounds taken, limit {limit}",
                    field="max_server_tool_rounds",
                )
            ]
        )


def system_message(scope: TurnScope) -> ChatMessage:
    """The agent's instructions, the conversation's, and the in-flight mode (AGN-011 §5.3)."""
    ctx = scope.ctx
    parts = [ctx.agent_context.system_prompt if ctx.agent_context else ""]
    if ctx.conversation_context is not None:
        parts.append(ctx.conversation_context.instructions)
    if ctx.session is not None and ctx.session.solution_context_text:
        parts.append(f"[solution context]\n{ctx.session.solution_context_text}")
    parts.append(f"[mode] {ctx.mode}")
    return ChatMessage(role=ChatRole.SYSTEM, content="\n\n".join(p for p in parts if p))


def _too_large(size: int, limit: int) -> StepFaultError:
    return StepFaultError(
        [
            MODEL_REPLY_SIZE.error(
                f"the reply holds {size} characters, limit {limit}",
                field="max_model_reply_chars",
            )
        ]
    )


async def _streamed(
    llm: StreamingLLM,
    request: LLMRequest,
    observation: LLMCallObservation,
    limit: int,
    detail: ErrorDetail,
) -> LLMReply:
    """One streamed attempt: its text passed on as it comes, its chunks put together.

    Past ``limit`` characters the stream is closed at once. A failure once text has
    gone out is the turn's fault, never retried (see the module docstring).
    """
    assembler = ReplyAssembler()
    add_text, text_delta = assembler.add_text, observation.text_delta
    chunks = llm.stream(request)
    first = True
    try:
        async for chunk in chunks:
            if first:
                observation.first_chunk()
                first = False
            if type(chunk) is ReplyTextDelta:  # most chunks: the lean path
                text = chunk.text
                if add_text(text) > limit:
                    raise _too_large(assembler.size, limit)
                if text:
                    text_delta(text)
            elif assembler.add(chunk) and assembler.size > limit:
                raise _too_large(assembler.size, limit)  # not retried, as a whole reply
        return assembler.reply()
    except (StepFaultError, HookFailedError):
        raise
    except Exception as error:
        if assembler.has_text:
            raise _interrupted(error, detail) from error
        raise
    finally:
        await close_stream(chunks)


def _interrupted(error: BaseException, detail: ErrorDetail) -> StepFaultError:
    return StepFaultError(
        [
            STREAM_INTERRUPTED.error(
                f"the LLM's stream failed after its text began: {error_text(error, detail)}",
                field="LLM",
            )
        ]
    )


def model_request(scope: TurnScope) -> LLMRequest:
    """The request of the turn's next model call: its messages so far, its tools."""
    ctx = scope.ctx
    return LLMRequest(
        model=ctx.agent_context.model if ctx.agent_context else None,
        mode=ctx.mode or "",
        messages=[system_message(scope), *scope.messages],
        tools=scope.advertised_tools,
        max_output_tokens=scope.options.max_output_tokens,
    )


async def _ask_model(scope: TurnScope) -> LLMReply:
    options = scope.options
    request, scope.next_request = scope.next_request or model_request(scope), None
    attempts = 1
    llm = scope.ports.llm
    limit = options.max_model_reply_chars
    # A StreamingLLM is one with a stream method: looked up, not isinstance-checked
    # (a runtime Protocol check costs more than the rest of the call's set-up).
    stream = getattr(llm, "stream", None) if scope.observer.streaming else None
    with scope.observer.llm_call(request, streamed=stream is not None) as observation:
        if stream is not None:
            streaming = cast(StreamingLLM, llm)

            def ask() -> Awaitable[LLMReply]:
                return _streamed(streaming, request, observation, limit, options.error_detail)

        else:

            def ask() -> Awaitable[LLMReply]:
                return llm.complete(request)

        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            if error is not None:
                observation.retry(state.attempt_number, error, wait)

        async def retried(first: Exception) -> LLMReply:
            """The tries after a failed first one; tenacity's attempt 1 is that failure."""
            # Imported on the first failure: most turns never retry (start-up, D474).
            from tenacity import (
                AsyncRetrying,
                retry_if_exception_type,
                retry_if_not_exception_type,
                stop_after_attempt,
                wait_exponential,
            )

            nonlocal attempts
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(options.llm_attempts),
                wait=wait_exponential(
                    multiplier=options.retry_wait_seconds, max=options.retry_max_wait_seconds
                ),
                # Exceptions only: cancellation, KeyboardInterrupt and SystemExit end the turn;
                # the engine's own faults (a streamed reply cut short, too large) are final.
                retry=retry_if_exception_type(Exception)
                & retry_if_not_exception_type(
                    (PermanentPortError, StepFaultError, HookFailedError)
                ),
                before_sleep=before_sleep,
                reraise=True,
            ):
                with attempt:
                    if attempt.retry_state.attempt_number == 1:
                        raise first
                    attempts += 1
                    reply = await ask()
            return reply

        try:
            try:  # most calls succeed at once: the retry machinery starts only on a failure
                reply = await ask()
            except (StepFaultError, HookFailedError):
                raise
            except Exception as first:
                reply = await retried(first)
            if not isinstance(reply, LLMReply):
                raise TypeError(f"the LLM port returned {type(reply).__name__}, not an LLMReply")
        except StepFaultError:
            raise
        except HookFailedError as error:  # the host's hook, not the model: never retried
            raise hook_fault(error, options.error_detail) from error
        except PROPAGATED:
            raise
        except BaseException as error:  # SystemExit too: the host's adapter failed
            told = error_text(error, options.error_detail)
            raise StepFaultError(
                [
                    InvokeError(
                        code=ErrorCode.PORT_FAILED,
                        field="LLM",
                        message=f"the LLM failed after {attempts} attempt(s): {told}",
                    )
                ]
            ) from error
        size = reply_size(reply)
        if size > limit:  # not retried: another try costs as much and may well do the same
            raise _too_large(size, limit)
        reply = _utf8_reply(reply)
        if observation.streaming and stream is None and reply.text:
            observation.text_delta(reply.text)  # a model that cannot stream: its text in one piece
        observation.replied(reply, attempts)
    return reply


_CALL_TEXT = ("tool_call_id", "name", "arguments_json")


def _utf8_call(call: ToolCall) -> ToolCall:
    fixed = {field: utf8_text(getattr(call, field)) for field in _CALL_TEXT}
    changed = {field: text for field, text in fixed.items() if text is not getattr(call, field)}
    return call.model_copy(update=changed) if changed else call


def _utf8_reply(reply: LLMReply) -> LLMReply:
    """The reply with lone surrogates escaped, so it can be answered, stored and returned.

    A reply is a frozen value: when nothing needs escaping (almost always) it is kept.
    """
    calls = [_utf8_call(call) for call in reply.tool_calls]
    text = utf8_text(reply.text) if reply.text is not None else None
    if text is reply.text and all(
        new is old for new, old in zip(calls, reply.tool_calls, strict=True)
    ):
        return reply
    return reply.model_copy(update={"text": text, "tool_calls": calls})


def _add_usage(scope: TurnScope, usage: Usage | None) -> None:
    if usage is None:
        return
    total = scope.usage or Usage()
    # Cached and reasoning tokens sum the calls that reported them; ``None`` while none
    # has: unknown, never 0 (issue 31).
    cached, reasoning = total.cached_input_tokens, total.reasoning_tokens
    if usage.cached_input_tokens is not None:
        cached = (cached or 0) + usage.cached_input_tokens
    if usage.reasoning_tokens is not None:
        reasoning = (reasoning or 0) + usage.reasoning_tokens
    scope.usage = Usage(
        input_tokens=total.input_tokens + usage.input_tokens,
        output_tokens=total.output_tokens + usage.output_tokens,
        total_tokens=total.total_tokens
        + (usage.total_tokens or usage.input_tokens + usage.output_tokens),
        cached_input_tokens=cached,
        reasoning_tokens=reasoning,
    )


def _remember(scope: TurnScope, message: ChatMessage) -> None:
    scope.messages.append(message)
    scope.new_messages.append(message)


def _record(
    scope: TurnScope, record: ToolCallRecord, rejection_kind: RejectionKind | None = None
) -> None:
    scope.tool_calls.append(record)
    scope.observer.tool_call(record, rejection_kind)


def _answer(
    scope: TurnScope,
    call: ToolCall,
    content: str,
    record: ToolCallRecord,
    rejection_kind: RejectionKind | None = None,
) -> None:
    _remember(
        scope,
        ChatMessage(
            role=ChatRole.TOOL, tool_call_id=call.tool_call_id, name=call.name, content=content
        ),
    )
    _record(scope, record, rejection_kind)


def _rejection_kind(tool: ToolDefinition | None, verdict: ToolCallVerdict) -> RejectionKind:
    """Why a call was refused, for traces and span events (the container design's errors)."""
    if tool is None:
        return RejectionKind.UNKNOWN_TOOL
    if isinstance(verdict.rejection, ContainerInvocationErrorResponse):
        return RejectionKind.CONTAINER_INVOCATION
    return RejectionKind.ARGUMENT_VALIDATION


def _result_json(text: object) -> str:
    """An executor's answer as RFC 8259 JSON text: kept when it is JSON, else quoted.

    ``NaN``/``Infinity`` are not JSON (AGN-033 §5.2 needs valid ResultJson): text
    holding them is quoted, and a Python value holding them raises ``ValueError``,
    which the caller reports as the tool's failure.
    """
    if isinstance(text, str):
        try:
            strict_json_loads(text)
        except (ValueError, RecursionError):
            return json.dumps(text)
        return utf8_text(text)
    return json.dumps(text, default=str, allow_nan=False, ensure_ascii=True)


def _log_tool_failure(scope: TurnScope, name: str, failure: Exception) -> None:
    """A failing tool's traceback, once; its message only with content capture (D292)."""
    if scope.capture_content:
        logger.warning("server tool %r raised", name, exc_info=failure)
    else:
        logger.warning(
            "server tool %r raised %s\n%s",
            name,
            exception_type(failure),
            traceback_text(failure, messages=False),
        )


async def _run_server_tool(
    scope: TurnScope,
    call: ToolCall,
    tool: ToolDefinition,
    arguments: dict[str, Any],
    client_answer: str | None = None,
    pause_id: str | None = None,
) -> None:
    clock = scope.ports.clock
    started = clock.now()
    outcome: ToolCallFate = ToolCallFate.EXECUTED
    content, error, rule_id = "", None, None
    told = None  # the model's message, when it differs from the result (files named)
    files: list[FileRef] = []
    raised: Exception | None = None
    limit: asyncio.Timeout | None = None
    paused: ToolPause | None = None
    with scope.observer.tool_execution(call, tool, arguments) as observation:
        try:
            if tool.name == AGENT_CHANGE_MODE:
                content, outcome, rule_id = await change_mode(scope, call, arguments)
                if outcome is ToolCallFate.MODE_REFUSED:  # a refusal is a failed tool call (D30)
                    error = content
            else:
                executor = scope.ports.tools.get(tool.name)
                if executor is None:
                    raise LookupError(f"no executor is registered for server tool {tool.name!r}")
                limit = asyncio.timeout(scope.options.server_tool_timeout_seconds)
                async with limit:  # keeping its files is part of the call (AGN-033 §6)
                    answer = await executor(
                        arguments, scope.invocation(call, client_answer, arguments)
                    )
                    if isinstance(answer, ToolPause):
                        paused = answer
                    elif isinstance(answer, ToolOutput):
                        content = _result_json(answer.result_json)
                        files = await keep_files(scope.ports.files, tool.name, answer.files)
                        told = told_to_model(content, files)
                    else:
                        content = _result_json(answer)
        except StepFaultError:
            raise
        except HookFailedError as failure:  # the host's after_tool hook: the turn faults
            raise hook_fault(failure, scope.options.error_detail) from failure
        except Exception as failure:
            outcome, raised = ToolCallFate.FAILED, failure
            error = error_text(failure, scope.options.error_detail)
            if isinstance(failure, TimeoutError) and limit is not None and limit.expired():
                rule_id = SERVER_TOOL_TIMEOUT.id  # our timeout, not one the tool raised
                error = (
                    f"TimeoutError: server tool {tool.name!r} did not answer within "
                    f"{scope.options.server_tool_timeout_seconds:g} s"
                )
                logger.warning("%s", error)
            elif isinstance(failure, ToolPossiblyExecutedError):  # the ledger's policy
                rule_id = TOOL_POSSIBLY_EXECUTED.id
                logger.warning("%s", failure)
            else:
                _log_tool_failure(scope, tool.name, failure)
            content, told, files = json.dumps({"error": error}), None, []
        if paused is not None:  # the client answers first; the call is run again then
            observation.finished(ToolCallFate.PAUSED, paused.arguments_json, None)
        else:
            observation.finished(outcome, told or content, error, raised)
    if paused is not None:
        scope.paused.append(
            ToolCall(
                tool_call_id=pause_id or call.tool_call_id,
                name=paused.name,
                arguments_json=paused.arguments_json,
            )
        )
        record = ToolCallRecord(
            call.tool_call_id, call.name, ToolCallSide.SERVER, ToolCallFate.PAUSED
        )
        _record(scope, record)
        return
    scope.files.extend(files)
    elapsed = max(0, int((clock.now() - started).total_seconds() * 1000))
    scope.server_results.append(
        ToolResult(
            tool_call_id=call.tool_call_id,
            execution_ms=elapsed,
            result_json=None if error else content,
            error_message=error,
        )
    )
    record = ToolCallRecord(call.tool_call_id, call.name, ToolCallSide.SERVER, outcome, rule_id)
    _answer(scope, call, told or content, record)


def _json_or_none(text: str) -> object:
    """The JSON value of ``text``, or ``None`` when it is blank or not JSON."""
    try:
        return strict_json_loads(text) if text.strip() else None
    except (ValueError, RecursionError):
        return None


def _decide(scope: TurnScope, call: ToolCall) -> tuple[ToolDefinition | None, ToolCallVerdict]:
    """The advertised tool the call names (if any) and the container design's verdict."""
    tool = next((t for t in scope.advertised_tools if t.name == call.name), None)
    return tool, check_tool_call(tool, call.name, call.arguments_json)


def _goes_to_client(scope: TurnScope, call: ToolCall) -> bool:
    """Whether the call is a valid call of an advertised client tool."""
    tool, verdict = _decide(scope, call)
    return (
        tool is not None
        and tool.executes_on == "client"
        and verdict.outcome is ToolCallOutcome.INVOKE
    )


async def _handle_call(scope: TurnScope, call: ToolCall) -> ToolCall | None:
    """Answer one call here, or return it when it is for the client."""
    tool, verdict = _decide(scope, call)
    side = ToolCallSide(tool.executes_on) if tool is not None else ToolCallSide.UNKNOWN
    if tool is None or not verdict.allowed:
        _answer(
            scope,
            call,
            verdict.rejection_json(),
            ToolCallRecord(
                call.tool_call_id, call.name, side, ToolCallFate.REJECTED, verdict.rule_id
            ),
            _rejection_kind(tool, verdict),
        )
        return None
    if verdict.outcome is ToolCallOutcome.EXPAND_CONTAINER:
        if tool.name not in scope.expanded:
            scope.expanded.append(tool.name)
        members = [t.name for t in scope.tool_index.values() if t.member_of == tool.name]
        content = json.dumps(
            {
                "container": tool.name,
                "expanded": True,
                "functions": members,
                "message": f"{tool.name} expanded. Functions: {', '.join(members)}",
            }
        )
        record = ToolCallRecord(call.tool_call_id, call.name, side, ToolCallFate.EXPANDED)
        _answer(scope, call, content, record)
        return None
    if tool.executes_on == "client":
        _record(
            scope,
            ToolCallRecord(call.tool_call_id, call.name, ToolCallSide.CLIENT, ToolCallFate.CLIENT),
        )
        if not isinstance(_json_or_none(call.arguments_json), dict):
            # Blank or null arguments mean none: sent as the JSON object AGN-033 §5.1 needs.
            return call.model_copy(update={"arguments_json": json.dumps(verdict.arguments)})
        return call
    await _run_server_tool(scope, call, tool, verdict.arguments)
    return None


async def _resume_paused(scope: TurnScope) -> None:
    """Run again each server call that paused for the client, with the client's answer
    (``ToolPause``); its answer now is the call's result, or another pause."""
    resumed, scope.resumed = scope.resumed, []
    for call, answered, answer in resumed:
        tool, verdict = scope.tool_index.get(call.name), None
        if tool is not None:
            verdict = check_tool_call(tool, call.name, call.arguments_json)
        if tool is None or verdict is None or verdict.outcome is not ToolCallOutcome.INVOKE:
            record = ToolCallRecord(
                call.tool_call_id, call.name, ToolCallSide.SERVER, ToolCallFate.FAILED
            )
            message = f"server tool {call.name!r} is not among this turn's tools; not resumed"
            _answer(scope, call, json.dumps({"error": message}), record)
            continue
        await _run_server_tool(
            scope, call, tool, verdict.arguments, client_answer=answer, pause_id=_next(answered)
        )


def _next(answered: str) -> str:
    """The id of a call's next pause: the model's id, then ``#2``, ``#3``… (each pause is a
    new client call: a continuation's ids are its answer key, docs/CONFORMANCE.md D181)."""
    base, mark, count = answered.rpartition("#")
    if mark and count.isdigit():
        return f"{base}#{int(count) + 1}"
    return f"{answered}#2"


def _await_client(scope: TurnScope, calls: list[ToolCall], text: str | None) -> None:
    """End the turn awaiting ``calls`` from the client (AGN-033 §3.3)."""
    ctx = scope.ctx
    ctx.client_tool_calls = calls
    has_text = bool(text and text.strip())
    ctx.tool_continuation_message = guard_machine_payloads(text or "") if has_text else None
    ctx.response_type = ResponseType.TOOL_CONTINUATION


async def llm_client(scope: TurnScope) -> None:
    """Call the model once and settle its reply into an outcome or another round."""
    if scope.resumed:  # a continuation answering paused server calls: they finish first
        await _resume_paused(scope)
        if scope.paused:  # paused again: the client answers before the model is asked
            _await_client(scope, scope.paused, None)
            return
    scope.llm_calls += 1
    try:
        reply = await _ask_model(scope)
    except BaseException:
        call_settled(scope, None)
        raise
    try:
        await _settle_reply(scope, reply)
    finally:
        if scope.reserved is not None:
            call_settled(scope, reply)  # what the call took, its round known (D603)


async def _settle_reply(scope: TurnScope, reply: LLMReply) -> None:
    """Settle the model's ``reply`` into an outcome or another round."""
    ctx = scope.ctx
    _add_usage(scope, reply.usage)
    _remember(
        scope,
        ChatMessage(
            role=ChatRole.ASSISTANT,
            content=reply.text or "",
            tool_calls=list(reply.tool_calls) or None,
        ),
    )
    scope.another_round = False
    if not reply.tool_calls:
        if reply.text is not None and reply.text.strip():
            ctx.response_payload = ResponsePayload(
                primary_output_text=guard_machine_payloads(reply.text),
                files=list(scope.files) or None,
                tool_results=list(scope.server_results) or None,
                user_warnings=list(scope.user_warnings) or None,
                usage=scope.usage,
            )
            ctx.response_type = ResponseType.FINAL
        return  # an empty reply has no outcome: §4.9's POST says so
    _check_tool_call_ids(scope, reply.tool_calls)
    if scope.llm_calls > scope.options.max_server_tool_rounds and not any(
        _goes_to_client(scope, call) for call in reply.tool_calls
    ):
        # No further model call is allowed, so the engine's own calls would be answered
        # to no one: fault before running any of them (DESIGN.md R5).
        check_round_limit(scope)
    client_calls = [
        handled for call in reply.tool_calls if (handled := await _handle_call(scope, call))
    ]
    if client_calls or scope.paused:
        _await_client(scope, [*scope.paused, *client_calls], reply.text)
    else:
        scope.another_round = True
