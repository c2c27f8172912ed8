"""OpenTelemetry spans and the state trace of a turn, from one stream of facts.

``TurnRecorder`` is the ``TurnObserver`` the engine gives each turn. Everything
the machine and the steps report goes into the turn's ``StateTrace`` and, when
tracing is on, into spans that follow the OpenTelemetry GenAI semantic
conventions (Development status; ``GENAI_SEMCONV`` says which version):

- ``invoke_agent {agent name}`` (INTERNAL): the turn — ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.agent.name``/``id``, ``gen_ai.conversation.id``
  (the SessionId), ``gen_ai.request.model``, the usage totals; status ERROR and
  ``error.type`` (the first error code) when the turn fails.
- ``step {step}`` (INTERNAL), a child per transition: the step, from/to state,
  context type, mode, the rule ids its guard and exit hook checked and their
  outcome; an ``aptix.rule.failed`` event per failed rule.
- ``chat {model}`` (CLIENT), per model call: request/response model, response id,
  finish reasons, ``gen_ai.usage.input_tokens``/``output_tokens``; an
  ``aptix.llm.retry`` event per retry.
- ``execute_tool {tool}`` (INTERNAL), per server-side tool execution:
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``.

Events: ``aptix.mode.changed``, ``aptix.warning`` (e.g. several mode changes),
``aptix.tool.container_invocation_error``, ``aptix.tool.argument_validation_error``,
``aptix.tool.unknown``, ``aptix.llm.retry``, ``aptix.rule.failed``.

User content — instructions, the model's text and messages, tool arguments and
results, a mode change's reason — is recorded only when content capture is on
(``Telemetry(capture_content=True)`` or the conventions' switch
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``); ids, names, counts and
timings always (DESIGN.md "Observability without leaks").

With ``Telemetry(spans=False)`` no span is started at all (what a replay uses, so
a replayed turn never sends or duplicates spans); the trace is kept either way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from aptix_pipeline import __version__
from aptix_pipeline.contracts import (
    InvokeError,
    InvokeWarning,
    LLMReply,
    LLMRequest,
    PipelineContext,
    ToolCall,
    ToolDefinition,
)
from aptix_pipeline.steps import ModeChange, ToolCallRecord

from .trace import CheckRecord, FaultRecord, LLMCallRecord, TraceEntry, TransitionRecord

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "GENAI_SEMCONV",
    "SCHEMA_URL",
    "Telemetry",
    "TurnRecorder",
]

GENAI_SEMCONV = "OpenTelemetry GenAI semantic conventions v0.1.0 (semantic-conventions-genai)"
"""The conventions the spans follow: the first standalone GenAI release, the successor
of the GenAI part of semantic-conventions 1.41."""
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_VALUES = {"true", "1", "yes", "on", "span_only", "span_and_event"}


def _capture_from_env() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CAPTURE_VALUES


@dataclass(frozen=True, slots=True)
class Telemetry:
    """How a ``Pipeline`` reports its turns.

    - ``spans``: emit OpenTelemetry spans (default). ``False`` starts none — a
      replay's setting, so a replayed turn sends nothing.
    - ``tracer_provider``: where spans go; ``None`` takes the global provider, which
      is the API's no-op until the host configures the SDK.
    - ``capture_content``: record user content on spans and in the state trace;
      ``None`` reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
      (``true``/``SPAN_ONLY``/``SPAN_AND_EVENT`` capture) when the pipeline is made.
    """

    spans: bool = True
    tracer_provider: TracerProvider | None = None
    capture_content: bool | None = None

    @classmethod
    def off(cls) -> Telemetry:
        """No spans (a replay); the state trace is still kept."""
        return cls(spans=False)

    def resolved(self) -> Telemetry:
        """This setting with ``capture_content`` read from the environment when unset."""
        if self.capture_content is not None:
            return self
        return replace(self, capture_content=_capture_from_env())

    def tracer(self) -> Tracer | None:
        """The tracer spans come from, or ``None`` when spans are off."""
        if not self.spans:
            return None
        return trace.get_tracer(
            "aptix_pipeline", __version__, tracer_provider=self.tracer_provider,
            schema_url=SCHEMA_URL,
        )  # fmt: skip


# --- attribute names (GenAI conventions, and ours under aptix.*) ----------------------

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
ERROR_TYPE = "error.type"


def _messages_json(request: LLMRequest) -> tuple[str, str]:
    """(system instructions, input messages) in the conventions' JSON shapes."""
    system = [
        {"type": "text", "content": m.content} for m in request.messages if m.role == "system"
    ]
    messages = []
    for message in request.messages:
        if message.role == "system":
            continue
        parts: list[dict[str, Any]] = []
        if message.content:
            if message.role == "tool":
                parts.append({"type": "tool_call_response", "id": message.tool_call_id,
                              "response": message.content})  # fmt: skip
            else:
                parts.append({"type": "text", "content": message.content})
        for call in message.tool_calls or ():
            parts.append({"type": "tool_call", "id": call.tool_call_id, "name": call.name,
                          "arguments": call.arguments_json})  # fmt: skip
        messages.append({"role": str(message.role), "parts": parts})
    return json.dumps(system), json.dumps(messages)


def _output_json(reply: LLMReply) -> str:
    parts: list[dict[str, Any]] = []
    if reply.text:
        parts.append({"type": "text", "content": reply.text})
    for call in reply.tool_calls:
        parts.append({"type": "tool_call", "id": call.tool_call_id, "name": call.name,
                      "arguments": call.arguments_json})  # fmt: skip
    message = {"role": "assistant", "parts": parts, "finish_reason": reply.finish_reason or ""}
    return json.dumps([message])


class _LLMCall:
    """One model call: builds its trace entry and, when tracing, its ``chat`` span."""

    def __init__(self, recorder: TurnRecorder, request: LLMRequest, round_: int) -> None:
        self.recorder, self.round = recorder, round_
        self.retries: list[str] = []
        self.record = LLMCallRecord(
            round=round_,
            mode=request.mode,
            request_model=request.model,
            tools=tuple(tool.name for tool in request.tools),
            messages=len(request.messages),
        )
        self.span: Span | None = None

    def retry(self, attempt: int, error: BaseException, wait_seconds: float) -> None:
        self.retries.append(type(error).__name__)
        if self.span is not None:
            self.span.add_event(
                "aptix.llm.retry",
                {"aptix.llm.attempt": attempt, ERROR_TYPE: type(error).__name__,
                 "aptix.llm.retry_wait_seconds": float(wait_seconds)},
            )  # fmt: skip

    def replied(self, reply: LLMReply, attempts: int) -> None:
        usage = reply.usage
        self.record = replace(
            self.record,
            attempts=attempts,
            retries=tuple(self.retries),
            response_model=reply.model,
            response_id=reply.response_id,
            finish_reason=reply.finish_reason,
            tool_calls=tuple((c.tool_call_id, c.name) for c in reply.tool_calls),
            has_text=bool(reply.text and reply.text.strip()),
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            text=reply.text if self.recorder.capture_content else None,
        )
        span = self.span
        if span is None:
            return
        attributes: dict[str, Any] = {"aptix.llm.attempts": attempts}
        if reply.model:
            attributes["gen_ai.response.model"] = reply.model
        if reply.response_id:
            attributes["gen_ai.response.id"] = reply.response_id
        if reply.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [reply.finish_reason]
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if self.recorder.capture_content:
            attributes["gen_ai.output.messages"] = _output_json(reply)
        span.set_attributes(attributes)

    def failed(self, error: BaseException) -> None:
        cause = error.__cause__ or error
        self.record = replace(
            self.record, retries=tuple(self.retries), attempts=len(self.retries) + 1,
            error=type(cause).__name__,
        )  # fmt: skip
        if self.span is not None:
            self.span.set_attribute(ERROR_TYPE, type(cause).__name__)
            self.span.set_status(Status(StatusCode.ERROR, type(cause).__name__))


class _ToolExecution:
    def __init__(self, span: Span | None, capture: bool) -> None:
        self.span, self.capture = span, capture

    def finished(self, outcome: str, result_json: str, error: str | None) -> None:
        span = self.span
        if span is None:
            return
        span.set_attribute("aptix.tool.outcome", outcome)
        if self.capture:
            span.set_attribute("gen_ai.tool.call.result", result_json)
        if error is not None:
            span.set_attribute(ERROR_TYPE, outcome)
            span.set_status(Status(StatusCode.ERROR, outcome))


@dataclass(slots=True)
class TurnRecorder:
    """The state trace and spans of one turn; the ``TurnObserver`` its steps report to."""

    tracer: Tracer | None = None
    capture_content: bool = False
    provider_name: str = "aptix"
    entries: list[TraceEntry] = field(default_factory=list)
    _rounds: int = 0
    _turn_span: Span | None = None
    _step_span: Span | None = None
    _step_taken: bool = False

    # --- the turn and its steps (engine side) ---------------------------------------

    def _span(
        self, name: str, kind: SpanKind, attributes: Callable[[], dict[str, Any]]
    ) -> AbstractContextManager[Span | None]:
        """A current span, or nothing when tracing is off (attributes built only when on)."""
        if self.tracer is None:
            return nullcontext(None)
        return self.tracer.start_as_current_span(
            name, kind=kind, attributes=attributes(), record_exception=False,
            set_status_on_exception=False,
        )  # fmt: skip

    @contextmanager
    def turn(self) -> Iterator[None]:
        """The ``invoke_agent`` span around the whole turn (when tracing)."""
        attributes = {OPERATION: "invoke_agent", PROVIDER: self.provider_name}
        with self._span("invoke_agent", SpanKind.INTERNAL, lambda: attributes) as span:
            self._turn_span = span
            yield

    def turn_ended(
        self,
        ctx: PipelineContext | None,
        errors: Sequence[InvokeError],
        usage: Any,
        stored: tuple[str | None, str | None] = (None, None),
    ) -> None:
        """Name the turn's span after its agent and set what is known only at the end.

        ``stored`` is the (session, turn) ids the store holds afterwards: a failed
        Initial turn's ids name nothing, so they are not put on the span (D59).

        ``gen_ai.usage.*`` sum this request's own model calls (its ``chat`` spans), so
        adding up ``invoke_agent`` spans counts each call once; ``usage`` — the
        turn's total over its continuations too, the response's ``Usage`` (D31) —
        goes to ``aptix.turn.usage.*``.
        """
        span = self._turn_span
        if span is None:
            return
        attributes: dict[str, Any] = {"aptix.llm.calls": self._rounds}
        if ctx is not None:
            attributes["aptix.context.type"] = str(ctx.type)
            session_id, turn_id = stored
            if session_id is not None:
                attributes["gen_ai.conversation.id"] = session_id
            if turn_id is not None:
                attributes["aptix.turn.id"] = turn_id
            if ctx.mode:
                attributes["aptix.mode"] = ctx.mode
            agent = ctx.agent_context
            if agent is not None:
                attributes["gen_ai.agent.name"] = agent.name
                attributes["gen_ai.agent.id"] = agent.id
                if agent.model:
                    attributes["gen_ai.request.model"] = agent.model
                span.update_name(f"invoke_agent {agent.name}")
            if ctx.response_type is not None:
                attributes["aptix.response.type"] = str(ctx.response_type)
            if self.capture_content:
                self._turn_content(ctx, attributes)
        reported = [c for c in self.entries if isinstance(c, LLMCallRecord)
                    and (c.input_tokens is not None or c.output_tokens is not None)]  # fmt: skip
        if reported:
            attributes["gen_ai.usage.input_tokens"] = sum(c.input_tokens or 0 for c in reported)
            attributes["gen_ai.usage.output_tokens"] = sum(c.output_tokens or 0 for c in reported)
        if usage is not None:
            attributes["aptix.turn.usage.input_tokens"] = usage.input_tokens
            attributes["aptix.turn.usage.output_tokens"] = usage.output_tokens
        if errors:
            codes = [str(error.code) for error in errors]
            attributes[ERROR_TYPE] = codes[0]
            attributes["aptix.error.codes"] = codes
            rules = [error.rule_id for error in errors if error.rule_id]
            if rules:
                attributes["aptix.rule.failed_ids"] = rules
            span.set_status(Status(StatusCode.ERROR, codes[0]))
        span.set_attributes(attributes)

    @staticmethod
    def _turn_content(ctx: PipelineContext, attributes: dict[str, Any]) -> None:
        """The request's user content and the response text (content capture only)."""
        envelope = ctx.envelope
        parts: list[dict[str, Any]] = []
        if envelope.instructions:
            parts.append({"type": "text", "content": envelope.instructions})
        for artifact in envelope.input_artifacts or ():
            parts.append({"type": "file", "name": artifact.relative_path,
                          "mime_type": artifact.mime_type,
                          "content": artifact.contents})  # fmt: skip
        for image in envelope.clip_board_images or ():
            parts.append({"type": "blob", "modality": "image", "mime_type": image.mime_type,
                          "content": image.data_base64})  # fmt: skip
        if parts:
            attributes["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": parts}])
        response = ctx.response
        text = response.primary_output_text if response is not None else None
        if text:
            attributes["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "finish_reason": "stop",
                  "parts": [{"type": "text", "content": text}]}]
            )  # fmt: skip

    @contextmanager
    def step(self, event: str, source: str, ctx: PipelineContext | None) -> Iterator[None]:
        """The ``step {event}`` span around one transition (when tracing)."""

        def attributes() -> dict[str, Any]:
            found: dict[str, Any] = {"aptix.step.name": event, "aptix.step.from": source}
            if ctx is not None:
                found["aptix.context.type"] = str(ctx.type)
            return found

        with self._span(f"step {event}", SpanKind.INTERNAL, attributes) as span:
            self._step_span, self._step_taken = span, False
            try:
                yield
            finally:
                self._step_span = None

    def step_ended(self, target: str, ctx: PipelineContext | None) -> None:
        """Where the transition went and the mode it left (on the open step span).

        ``aptix.step.to`` only for a transition taken (the trace recorded it): a step
        stopped by its guard or by raising stays where it was and goes nowhere. The
        context type is set here too, for ``request_handler``, which makes the context.
        """
        span = self._step_span
        if span is None:
            return
        if self._step_taken:
            span.set_attribute("aptix.step.to", target)
        if ctx is not None:
            span.set_attribute("aptix.context.type", str(ctx.type))
        if ctx is not None and ctx.mode:
            span.set_attribute("aptix.mode", ctx.mode)

    def transition(self, record: TransitionRecord) -> None:
        """The machine took a transition (recorded once the step's work is done)."""
        self._step_taken = True
        self.entries.append(record)

    def check(self, record: CheckRecord) -> None:
        """A guard or exit hook ran."""
        self.entries.append(record)
        span = self._step_span
        if span is None:
            return
        prefix = "aptix.guard" if record.phase == "PRE" else "aptix.exit_hook"
        span.set_attributes(
            {
                f"{prefix}.rule_ids": list(record.rule_ids),
                f"{prefix}.failed_rule_ids": list(record.failed),
                f"{prefix}.outcome": record.outcome,
            }
        )
        for rule_id in record.failed:
            span.add_event(
                "aptix.rule.failed",
                {"aptix.rule.id": rule_id, "aptix.step.name": record.step,
                 "aptix.check.phase": record.phase},
            )  # fmt: skip

    def fault(self, step: str, errors: Sequence[InvokeError]) -> None:
        """The turn faulted at ``step`` with ``errors``."""
        record = FaultRecord(
            step,
            tuple(str(error.code) for error in errors),
            tuple(error.rule_id for error in errors if error.rule_id),
        )
        self.entries.append(record)
        span = self._step_span
        if span is None:
            return
        span.set_attribute(ERROR_TYPE, record.error_codes[0] if record.error_codes else "_OTHER")
        span.set_status(Status(StatusCode.ERROR, ", ".join(record.error_codes)))
        checked = {
            rule
            for check in self.entries
            if isinstance(check, CheckRecord)
            for rule in check.failed
        }
        for rule_id in record.rule_ids:
            if rule_id not in checked:  # a step's own rule (a guard's is already an event)
                span.add_event("aptix.rule.failed", {"aptix.rule.id": rule_id,
                                                     "aptix.step.name": step})  # fmt: skip

    # --- TurnObserver (steps side) -------------------------------------------------

    def _current_span(self) -> Span | None:
        """The span an event belongs to (a tool's, a model call's, a step's), when tracing."""
        if self.tracer is None:
            return None
        span = trace.get_current_span()
        return span if span.is_recording() else None

    @contextmanager
    def llm_call(self, request: LLMRequest) -> Iterator[_LLMCall]:
        """One model call: its ``chat`` span and its trace entry."""
        self._rounds += 1
        call = _LLMCall(self, request, self._rounds)
        name = f"chat {request.model}" if request.model else "chat"
        with self._span(
            name, SpanKind.CLIENT, lambda: self._chat_attributes(request, call.round)
        ) as span:
            call.span = span
            try:
                yield call
            except BaseException as error:
                call.failed(error)
                raise
            finally:
                self.entries.append(call.record)

    def _chat_attributes(self, request: LLMRequest, round_: int) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            OPERATION: "chat",
            PROVIDER: self.provider_name,
            "aptix.llm.round": round_,
            "aptix.mode": request.mode,
        }
        if request.model:
            attributes["gen_ai.request.model"] = request.model
        if self.capture_content:
            system, messages = _messages_json(request)
            attributes["gen_ai.system_instructions"] = system
            attributes["gen_ai.input.messages"] = messages
            attributes["gen_ai.tool.definitions"] = json.dumps(
                [{"type": "function", "name": t.name, "description": t.description,
                  "parameters": t.parameters} for t in request.tools]
            )  # fmt: skip
        return attributes

    @contextmanager
    def tool_execution(
        self, call: ToolCall, tool: ToolDefinition, arguments: Any
    ) -> Iterator[_ToolExecution]:
        """One server-side tool execution: its ``execute_tool`` span."""

        def attributes() -> dict[str, Any]:
            found: dict[str, Any] = {
                OPERATION: "execute_tool",
                "gen_ai.tool.name": tool.name,
                "gen_ai.tool.call.id": call.tool_call_id,
                "gen_ai.tool.type": "function",
            }
            if tool.description:
                found["gen_ai.tool.description"] = tool.description
            if self.capture_content:
                found["gen_ai.tool.call.arguments"] = json.dumps(arguments, default=str)
            return found

        with self._span(f"execute_tool {tool.name}", SpanKind.INTERNAL, attributes) as span:
            yield _ToolExecution(span, self.capture_content)

    def tool_call(self, record: ToolCallRecord, rejection_kind: str | None = None) -> None:
        """What became of one of the model's tool calls."""
        self.entries.append(record)
        if rejection_kind is None and record.rule_id is None:
            return
        span = self._current_span()
        if span is None:
            return
        event = {
            None: "aptix.rule.failed",  # a server tool's own refusal (agent_change_mode)
            "container_invocation": "aptix.tool.container_invocation_error",
            "argument_validation": "aptix.tool.argument_validation_error",
        }.get(rejection_kind, "aptix.tool.unknown")
        attributes: dict[str, Any] = {
            "gen_ai.tool.name": record.name,
            "gen_ai.tool.call.id": record.tool_call_id,
        }
        if record.rule_id:
            attributes["aptix.rule.id"] = record.rule_id
        span.add_event(event, attributes)

    def mode_changed(self, change: ModeChange) -> None:
        """A persisted mode change (AGN-011 §5.2); its reason only with content capture."""
        if not self.capture_content:
            change = replace(change, reason=None)
        self.entries.append(change)
        span = self._current_span()
        if span is None:
            return
        attributes: dict[str, Any] = {
            "aptix.mode.previous": change.previous_mode,
            "aptix.mode.new": change.new_mode,
            "aptix.mode.branch": change.branch,
            "gen_ai.tool.call.id": change.tool_call_id,
        }
        if change.reason is not None:
            attributes["aptix.mode.reason"] = change.reason
        span.add_event("aptix.mode.changed", attributes)

    def warned(self, warning: InvokeWarning) -> None:
        """A warning of the turn (DESIGN.md R8's several mode changes among them)."""
        self.entries.append(warning)
        span = self._current_span()
        if span is None:
            return
        attributes: dict[str, Any] = {"aptix.warning.code": warning.code}
        if warning.rule_id:
            attributes["aptix.rule.id"] = warning.rule_id
        span.add_event("aptix.warning", attributes)
