"""Hooks: a host's own code around each model request and each server tool run.

``Pipeline(ports, hooks=Hooks(...))`` (or ``embedded_pipeline(..., hooks=...)``)
takes three, each optional, each a plain or a coroutine function:

- ``before_model_request(request)``, before each request to the model (each
  attempt; AGN-036 §4.9): returns ``None`` to send the request as it is, another
  ``LLMRequest`` to send that one instead, or an ``LLMReply`` to answer in the
  model's place — the model is then not called, and on a streamed turn
  (AGN-034 §4.7) the answer's text goes out as one delta;
- ``after_model_reply(request, reply)``, after each reply of the model: the
  request as the model got it and its reply. It observes and returns ``None``; a
  host that wants another answer gives it from ``before_model_request``;
- ``after_tool(execution)``, after each run of a server tool's executor
  (AGN-011 §5.2): a ``ToolExecution`` with the invocation, the arguments, and the
  executor's result or the exception it raised. It observes and returns ``None``.

The hooks wrap the ports (``hooked_ports``): the model and each executor are
called through them, and whatever records or replays the ports sees the hooked
ones. A recording therefore holds the request as the engine made it and the reply
the hooks let through — a hook's own answer as the model call's answer — and a
replay, which answers every port call from the recording, runs no hook and still
repeats the turn (docs/CONFORMANCE.md D287).

A hook that raises (any exception but ``PROPAGATED``'s: ``SystemExit`` too), or
returns what it may not, raises ``HookFailedError``; the turn faults with
``internal`` (``hook_fault``), its traceback is logged once and nothing is stored
(D288). The message names the hook and the exception's class alone — its text
only with ``PipelineOptions.error_detail = "full"`` (``steps/exception_text.py``).
A pipeline without hooks calls its ports directly: hooks cost nothing until given.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from aptix_pipeline.contracts import (
    LLM,
    AptixPipelineError,
    ErrorCode,
    InvokeError,
    LLMReply,
    LLMRequest,
    ReplyAssembler,
    ReplyChunk,
    ToolExecutor,
    ToolInvocation,
    ToolOutput,
    ToolPause,
    split_reply,
)

from .exception_text import (
    PROPAGATED,
    SHORT_ERROR_CHARS,
    ErrorDetail,
    bounded,
    internal_text,
)
from .faults import StepFaultError
from .scope import Ports

__all__ = [
    "AfterModelReply",
    "AfterTool",
    "BeforeModelRequest",
    "HookFailedError",
    "HookedLLM",
    "HookedStreamingLLM",
    "HookedTool",
    "Hooks",
    "ToolExecution",
    "hook_fault",
    "hooked_llm",
    "hooked_ports",
    "hooked_tools",
]


@dataclass(frozen=True, slots=True)
class ToolExecution:
    """One run of a server tool's executor, as ``after_tool`` sees it.

    ``invocation`` names the call (its id, the tool, the session, turn, mode and
    caller); ``arguments`` are the validated arguments the executor got; ``result``
    is what it returned (JSON text, a ``ToolOutput`` with the files it made, or a
    ``ToolPause``), or ``error`` the exception it raised.
    """

    invocation: ToolInvocation
    arguments: dict[str, Any]
    result: str | ToolOutput | ToolPause | None = None
    error: Exception | None = None

    @property
    def failed(self) -> bool:
        """Whether the executor raised."""
        return self.error is not None


BeforeModelRequest = Callable[
    [LLMRequest],
    LLMRequest | LLMReply | Awaitable[LLMRequest | LLMReply | None] | None,
]
"""``before_model_request``: ``None`` (send as it is), another request, or the answer."""
AfterModelReply = Callable[[LLMRequest, LLMReply], Awaitable[None] | None]
"""``after_model_reply``: the request as the model got it, and its reply."""
AfterTool = Callable[[ToolExecution], Awaitable[None] | None]
"""``after_tool``: one run of a server tool's executor."""


@dataclass(frozen=True, slots=True)
class Hooks:
    """A host's hooks around the model and its server tools; see the module docstring."""

    before_model_request: BeforeModelRequest | None = None
    after_model_reply: AfterModelReply | None = None
    after_tool: AfterTool | None = None

    def __post_init__(self) -> None:
        for name in ("before_model_request", "after_model_reply", "after_tool"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise TypeError(f"Hooks.{name} must be a function or None, not {hook!r}")

    @property
    def wraps_model(self) -> bool:
        """Whether a hook runs around model requests."""
        return self.before_model_request is not None or self.after_model_reply is not None


class HookFailedError(AptixPipelineError):
    """A hook raised, or returned what it may not; the message names the hook.

    The engine faults the turn with ``internal`` (``hook_fault``). A recording keeps
    it as the failure of the port call the hook ran in, and a replay raises it there
    again, so the replayed turn faults the same way.
    """


def hook_fault(error: HookFailedError, detail: ErrorDetail = "short") -> StepFaultError:
    """The fault of a turn whose hook failed: ``internal``, with the hook's message (made
    per the pipeline's ``error_detail`` when it was raised, so a replay tells it alike).

    ``detail`` bounds a message that did not come from ``_run`` (a host's own
    ``HookFailedError``): its first line, at most ``SHORT_ERROR_CHARS`` characters.
    """
    message = str(error)
    if detail != "full":
        message = bounded(message.split("\n", 1)[0], SHORT_ERROR_CHARS)
    return StepFaultError([InvokeError(code=ErrorCode.INTERNAL, message=message)])


async def _run(name: str, hook: Callable[..., Any], detail: ErrorDetail, *args: object) -> Any:
    """Call ``hook`` (awaiting what it returns, when awaitable); its failure, named."""
    try:
        outcome = hook(*args)
        if inspect.isawaitable(outcome):
            outcome = await outcome
    except PROPAGATED:
        raise
    except BaseException as error:
        told = internal_text(error, detail)
        raise HookFailedError(f"the {name} hook raised {told}") from error
    return outcome


async def _observed(
    name: str, hook: Callable[..., Any], detail: ErrorDetail, *args: object
) -> None:
    """Run an observing hook, which must return ``None``."""
    outcome = await _run(name, hook, detail, *args)
    if outcome is not None:
        raise HookFailedError(
            f"the {name} hook returned {type(outcome).__name__}; it observes and returns None"
        )


class HookedLLM:
    """The host's model with its hooks around each request (``hooked_ports``).

    ``provider_name`` is the model's own, so spans and recordings name the host's model.
    """

    def __init__(self, inner: LLM, hooks: Hooks, detail: ErrorDetail = "short") -> None:
        self.inner, self.hooks, self.detail = inner, hooks, detail
        self.provider_name: str | None = getattr(inner, "provider_name", None)

    async def _before(self, request: LLMRequest) -> LLMRequest | LLMReply:
        hook = self.hooks.before_model_request
        if hook is None:
            return request
        answer = await _run("before_model_request", hook, self.detail, request)
        if answer is None:
            return request
        if not isinstance(answer, LLMRequest | LLMReply):
            raise HookFailedError(
                f"the before_model_request hook returned {type(answer).__name__}, "
                "not an LLMRequest, an LLMReply or None"
            )
        return answer

    async def _after(self, request: LLMRequest, reply: object) -> None:
        hook = self.hooks.after_model_reply
        if hook is not None and isinstance(reply, LLMReply):
            await _observed("after_model_reply", hook, self.detail, request, reply)

    async def complete(self, request: LLMRequest) -> LLMReply:
        """See ``LLM``: the hook's answer, or the model's reply to the (changed) request."""
        asked = await self._before(request)
        if isinstance(asked, LLMReply):
            return asked
        reply = await self.inner.complete(asked)
        await self._after(asked, reply)
        return reply


def _whole(reply: LLMReply) -> list[ReplyChunk]:
    """A hook's answer as a stream: its text in one delta, each call's arguments in one."""
    longest = max([1, len(reply.text or ""), *(len(c.arguments_json) for c in reply.tool_calls)])
    return split_reply(reply, longest)


class HookedStreamingLLM(HookedLLM):
    """A ``StreamingLLM`` with its hooks: ``stream`` is hooked as ``complete`` is."""

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """See ``StreamingLLM``: the hook's answer in one piece, or the model's chunks.

        ``after_model_reply`` sees the reply the chunks made once the stream has ended;
        a stream the engine closes early (its reply too large) ends before it.
        """
        asked = await self._before(request)
        if isinstance(asked, LLMReply):
            for chunk in _whole(asked):
                yield chunk
            return
        chunks = self.inner.stream(asked)  # type: ignore[attr-defined]
        assembler = ReplyAssembler() if self.hooks.after_model_reply is not None else None
        try:
            async for chunk in chunks:
                yield chunk
                if assembler is not None:  # once the engine took it, as the engine does
                    assembler.add(chunk)
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()
        if assembler is not None:
            await self._after(asked, assembler.reply())


class HookedTool:
    """A server tool's executor with ``after_tool`` after each run (``hooked_ports``)."""

    def __init__(self, inner: ToolExecutor, hook: AfterTool, detail: ErrorDetail = "short") -> None:
        self.inner, self.hook, self.detail = inner, hook, detail

    async def __call__(
        self, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> str | ToolOutput | ToolPause:
        """See ``ToolExecutor``: the executor's answer or exception, after the hook saw it."""
        try:
            result = await self.inner(arguments, invocation)
        except Exception as error:
            await _observed(
                "after_tool",
                self.hook,
                self.detail,
                ToolExecution(invocation, arguments, None, error),
            )
            raise
        await _observed(
            "after_tool", self.hook, self.detail, ToolExecution(invocation, arguments, result)
        )
        return result


def hooked_llm(llm: LLM, hooks: Hooks, detail: ErrorDetail = "short") -> LLM:
    """``llm`` with the model hooks of ``hooks`` around it (itself when there are none).

    The model is hooked as a ``HookedStreamingLLM`` when it can stream (it has a
    ``stream`` method), else as a ``HookedLLM``, so the engine streams it exactly
    when it would stream the model itself.
    """
    if not hooks.wraps_model:
        return llm
    streams = callable(getattr(llm, "stream", None))
    return (HookedStreamingLLM if streams else HookedLLM)(llm, hooks, detail)


def hooked_tools(
    tools: Mapping[str, ToolExecutor], hooks: Hooks, detail: ErrorDetail = "short"
) -> Mapping[str, ToolExecutor]:
    """``tools`` with ``after_tool`` after each run (themselves when there is none)."""
    after = hooks.after_tool
    if after is None:
        return tools
    return {name: HookedTool(executor, after, detail) for name, executor in tools.items()}


def hooked_ports(ports: Ports, hooks: Hooks, detail: ErrorDetail = "short") -> Ports:
    """``ports`` whose model and server tools run through ``hooks`` (those it has);
    a hook's failure is told per ``detail`` (``PipelineOptions.error_detail``)."""
    return replace(
        ports,
        llm=hooked_llm(ports.llm, hooks, detail),
        tools=hooked_tools(ports.tools, hooks, detail),
    )
