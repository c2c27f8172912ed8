"""OpenTelemetry spans of a turn, built from its event stream.

``SpanBuilder`` is one subscriber of the turn's events (``engine/events.py``); the
``StateTrace`` is another. When tracing is on, it turns what the machine and the
steps do into spans that follow the OpenTelemetry GenAI semantic conventions
(Development status; ``GENAI_SEMCONV`` says which version):

- ``invoke_agent {agent name}`` (INTERNAL): the turn — ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.agent.name``/``id``, ``gen_ai.conversation.id``
  (the SessionId), ``gen_ai.request.model``, the usage totals of its model calls
  (tokens, cached and reasoning tokens, cost) with ``aptix.usage.unreported_calls``
  and ``aptix.usage.unpriced_calls``, the calls those sums leave out; status ERROR and
  ``error.type`` (the first error code) when the turn fails.
- ``step {step}`` (INTERNAL), a child per transition: the step, from/to state,
  context type, mode, the rule ids its guard and exit hook checked and their
  outcome; an ``aptix.rule.failed`` event per failed rule.
- ``chat {model}`` (CLIENT), per model call: request/response model, response id,
  finish reasons, ``gen_ai.usage.input_tokens``/``output_tokens`` and, when the
  model reports them, ``gen_ai.usage.cache_read.input_tokens`` and
  ``gen_ai.usage.reasoning.output_tokens``; ``aptix.usage.reported`` (false when the
  model reported no usage: then no token count at all, never 0), ``aptix.usage.priced``
  and, for a priced call, ``aptix.usage.cost`` (exact decimal text) and
  ``aptix.usage.currency`` (``PipelineOptions.prices``, issue 31); an
  ``aptix.llm.retry`` event per retry. A call answered as a stream (AGN-034 §4.7)
  also has ``gen_ai.request.stream`` (true) and
  ``gen_ai.response.time_to_first_chunk``: the seconds from the call's start to its
  first chunk (``ModelFirstChunk``), retries before it included.
- ``retrieval {collection}`` (CLIENT), per call of the ``Retriever`` port (AGN-034
  §4.4): ``gen_ai.operation.name`` ``retrieval``, ``gen_ai.data_source.id`` (the
  collection), ``gen_ai.retrieval.top_k`` (the limit), ``aptix.retrieval.hits`` and
  ``aptix.retrieval.conditions`` (how many RAG scope conditions; never their keys
  or values); its start and end are the retrieval's timing. With content capture,
  ``gen_ai.retrieval.query.text`` (the instruction) and ``gen_ai.retrieval.documents``
  (each passage's document id, score and text).
- ``execute_tool {tool}`` (INTERNAL), per server-side tool execution:
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``.

- ``aptix.recording`` (INTERNAL), only when a turn's recording failed after the
  turn ended (``recording_failed``): status ERROR, ``error.type``, the session
  and turn ids; the turn's own span has ended by then, and its answer stands.

Events: ``aptix.mode.changed``, ``aptix.warning`` (e.g. several mode changes),
``aptix.tool.container_invocation_error``, ``aptix.tool.argument_validation_error``,
``aptix.tool.unknown``, ``aptix.llm.retry``, ``aptix.rule.failed``, and the
conventions' ``exception``: what a host's code raised, on the innermost span it
happened in — the ``chat`` span of a model call that failed, the ``execute_tool``
span of a tool that raised, else the ``step`` span of the step the turn faulted in
(a store, a catalog, a hook, a host rule, a raising step); each exception once.
It holds ``exception.type`` and ``exception.stacktrace``; the message
(``exception.message``, and in the stack trace) only with content capture, since
an exception's message may quote user content.

A host's rules (``Pipeline(rules=...)``) show in their step's guard attributes and
``aptix.rule.failed`` events exactly as the DDR rules do, under their ``host/`` ids.

User content — instructions, images, the model's text and messages, tool arguments
and results, a mode change's reason — is recorded only when content capture is on
(``Telemetry(capture_content=True)`` or the conventions' switch
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``); ids, names, counts and
timings always (DESIGN.md "Observability without leaks").

The builder declares the events it reads (``SpanBuilder.event_types``): text deltas
(``ModelTextDelta``) are not among them, so they never reach it, content capture
or not — the whole reply is on the ``chat`` span already when content is captured.

With ``Telemetry(span_mode=SpanMode.COMPACT)`` (``CompactSpanBuilder``) there is no
``step`` span: each step is an ``aptix.step`` event on ``invoke_agent``, and a model
call, a retrieval or a tool is a child of ``invoke_agent``; the other spans and
their attributes are the same (docs/OBSERVABILITY.md "Compact spans").

With ``Telemetry(spans=False)`` no span is started at all (what a replay uses, so
a replayed turn never sends or duplicates spans); the trace is kept either way.

With content capture, each message of the conversation is serialized once per turn
and the ``chat`` span of every round joins the texts already made, so a round's
cost does not grow with the rounds before it.
"""

from __future__ import annotations

import base64
import json
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum
from typing import Any, ClassVar, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    TracerProvider,
)

from aptix_pipeline import __version__
from aptix_pipeline.contracts import (
    ChatMessage,
    ImagePart,
    LLMReply,
    LLMRequest,
    PipelineContext,
    TextPart,
    scrubbed_logger,
)
from aptix_pipeline.steps import RejectionKind

from .deep_json import dump_json, encode_value
from .events import (
    CheckRan,
    ModeChanged,
    ModelCallFinished,
    ModelCallRetried,
    ModelCallStarted,
    ModelFirstChunk,
    RetrievalFinished,
    RetrievalStarted,
    StepEnded,
    StepStarted,
    ToolCallHandled,
    ToolExecuted,
    ToolExecutionStarted,
    TransitionTaken,
    TurnEvent,
    TurnFaulted,
    TurnFinished,
    TurnStarted,
    WarningRaised,
)
from .machine import FAULT
from .trace import CallUsage, CheckRecord

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "GENAI_SEMCONV",
    "SCHEMA_URL",
    "CompactSpanBuilder",
    "SpanBuilder",
    "SpanMode",
    "Telemetry",
    "WhileReplayingQuiet",
    "answered_without_a_turn",
    "provider_name_of",
    "recording_failed",
]

logger = scrubbed_logger(__name__)

GENAI_SEMCONV = "OpenTelemetry GenAI semantic conventions v0.1.0 (semantic-conventions-genai)"
"""The conventions the spans follow: the first standalone GenAI release, the successor
of the GenAI part of semantic-conventions 1.41."""
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_VALUES = {"true", "1", "yes", "on", "span_only", "span_and_event"}


_NO_OP_PROVIDERS = (NoOpTracerProvider, ProxyTracerProvider)
"""The API's providers that record nothing (``ProxyTracerProvider`` is the global one
until an SDK is set; once set, ``get_tracer_provider`` returns the SDK's)."""


class _Deferred(trace.NonRecordingSpan):
    """A span started while the turn was being replayed (``WhileReplayingQuiet``).

    It records nothing while the replay lasts. If it is still open when the turn's
    live part starts a span under it or ends it, it becomes a real span then
    (``materialise``), marked ``aptix.durable.resumed``, and what the builder does to
    it from there on
    (a name, attributes, events, its end) reaches the real one: the spans of the
    part a worker runs live hang under one tree, and none is exported twice.
    """

    def __init__(
        self,
        tracer: Tracer,
        replaying: Callable[[], bool],
        name: str,
        kind: SpanKind,
        attributes: Any,
        parent: Any,
    ) -> None:
        super().__init__(trace.INVALID_SPAN_CONTEXT)
        self._tracer, self._replaying, self._name, self._kind = tracer, replaying, name, kind
        self._attributes = dict(attributes or {})
        self._parent = parent
        self.real: Span | None = None
        self._ended = False

    def materialise(self) -> Span:
        """The real span, started now under its parent (made real first)."""
        if self.real is None:
            parent = self._parent
            context = None
            if isinstance(parent, _Deferred) and not parent._ended:
                context = trace.set_span_in_context(parent.materialise())
            elif parent is not None and parent.get_span_context().is_valid:
                context = trace.set_span_in_context(parent)
            attributes = {**self._attributes, "aptix.durable.resumed": True}
            self.real = self._tracer.start_span(
                self._name, context=context, kind=self._kind, attributes=attributes
            )
        return self.real

    def get_span_context(self) -> trace.SpanContext:
        return self.real.get_span_context() if self.real is not None else super().get_span_context()

    def is_recording(self) -> bool:
        return self.real is not None and self.real.is_recording()

    def update_name(self, name: str) -> None:
        self._name = name
        if self.real is not None:
            self.real.update_name(name)

    def set_attribute(self, key: str, value: Any) -> None:
        self._attributes[key] = value
        if self.real is not None:
            self.real.set_attribute(key, value)

    def set_attributes(self, attributes: Any) -> None:
        self._attributes.update(attributes)
        if self.real is not None:
            self.real.set_attributes(attributes)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if self.real is not None:
            self.real.add_event(name, attributes, timestamp)

    def set_status(self, status: Any, description: str | None = None) -> None:
        if self.real is not None:
            self.real.set_status(status, description)

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        if self.real is not None:
            self.real.record_exception(exception, *args, **kwargs)

    def end(self, end_time: int | None = None) -> None:
        if self._replaying():
            # Ended in the replay: the worker that ran it live exported it. A live span
            # ended now is ended by an eviction (Temporal counts it as replay): it is left
            # open, and the run that resumes the turn continues it.
            if self.real is None:
                self._ended = True
            return
        if self.real is None and not self._ended:
            self.materialise()  # it ends live: its end is news, so it is exported
        self._ended = True
        if self.real is not None:
            self.real.end(end_time)


class WhileReplayingQuiet(Tracer):
    """A tracer that exports no span of the part of a turn being replayed.

    A durable runtime re-runs a turn's code from its history after a worker died
    (Temporal replays the workflow): the steps it replays already emitted their spans
    on the worker that ran them first. While ``replaying()`` is true, a span started
    here records nothing (a ``_Deferred`` span). Once the replay has caught up,
    spans are ``tracer``'s again; a replayed span still open then (the turn's root,
    its current step) is started for real the first time a live span is started
    under it, so the live part hangs under one tree, marked
    ``aptix.durable.resumed`` (``Pipeline(replaying=...)``, D532).
    """

    def __init__(self, tracer: Tracer, replaying: Callable[[], bool]) -> None:
        self._tracer = tracer
        self._replaying = replaying

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> Span:
        """``tracer``'s span, or a deferred one while replaying."""
        parent = trace.get_current_span(context)
        if self._replaying():
            return _Deferred(self._tracer, self._replaying, name, kind, attributes, parent)
        if isinstance(parent, _Deferred) and not parent._ended:
            context = trace.set_span_in_context(parent.materialise(), context)
        live = _Deferred(self._tracer, self._replaying, name, kind, attributes, parent)
        live.real = self._tracer.start_span(name, context, kind, attributes, *args, **kwargs)
        return live

    def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Spans made current by the engine go through ``start_span``; this one is the
        wrapped tracer's, or the non-recording span while replaying."""
        if self._replaying():
            return trace.use_span(trace.INVALID_SPAN)
        return self._tracer.start_as_current_span(name, *args, **kwargs)


def _capture_from_env() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CAPTURE_VALUES


class SpanMode(StrEnum):
    """How a turn's steps are traced (``Telemetry(span_mode=...)``).

    - ``full`` (the default): a ``step`` span per transition, ``chat``,
      ``retrieval`` and ``execute_tool`` spans its children.
    - ``compact``: each step is an ``aptix.step`` event on the ``invoke_agent``
      span; ``chat``, ``retrieval`` and ``execute_tool`` stay spans, children of
      ``invoke_agent``. Two spans for a simple turn instead of ten.
    """

    FULL = "full"
    COMPACT = "compact"


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
    - ``span_mode``: ``SpanMode.FULL`` (default) or ``SpanMode.COMPACT`` (each
      step an event on ``invoke_agent``), also given as ``"full"``/``"compact"``;
      any other value is a ``ValueError`` naming ``span_mode``.
    """

    spans: bool = True
    tracer_provider: TracerProvider | None = None
    capture_content: bool | None = None
    span_mode: SpanMode | Literal["full", "compact"] = SpanMode.FULL

    def __post_init__(self) -> None:
        try:
            mode = SpanMode(self.span_mode)
        except (ValueError, TypeError):
            choices = ", ".join(repr(str(m)) for m in SpanMode)
            raise ValueError(
                f"Telemetry span_mode must be one of {choices}, not {self.span_mode!r}"
            ) from None
        object.__setattr__(self, "span_mode", mode)  # frozen: the one normalisation

    @classmethod
    def off(cls) -> Telemetry:
        """No spans (a replay); the state trace is still kept."""
        return cls(spans=False)

    def resolved(self) -> Telemetry:
        """This setting with ``capture_content`` read from the environment when unset."""
        if self.capture_content is not None:
            return self
        return replace(self, capture_content=_capture_from_env())

    def recording_spans(self) -> bool:
        """Whether a span started now would be recorded by an SDK.

        ``False`` with spans off, and while the provider is the API's no-op — the
        global one until the host installs an SDK (checked per turn, so an SDK set
        up later is used from the next turn on). The engine then builds no spans at
        all: a no-op span records nothing, so skipping it is not observable.
        """
        if not self.spans:
            return False
        provider = self.tracer_provider or trace.get_tracer_provider()
        return not isinstance(provider, _NO_OP_PROVIDERS)

    def tracer(self) -> Tracer | None:
        """The tracer spans come from, or ``None`` when spans are off."""
        if not self.spans:
            return None
        return trace.get_tracer(
            "aptix_pipeline",
            __version__,
            tracer_provider=self.tracer_provider,
            schema_url=SCHEMA_URL,
        )


# --- attribute names (GenAI conventions, and ours under aptix.*) ----------------------

INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHED_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
"""The conventions' name (semantic-conventions' ``GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS``)."""
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
"""The conventions' name (``GEN_AI_USAGE_REASONING_OUTPUT_TOKENS``)."""
USAGE_REPORTED = "aptix.usage.reported"
USAGE_PRICED = "aptix.usage.priced"
USAGE_COST = "aptix.usage.cost"
USAGE_CURRENCY = "aptix.usage.currency"
UNREPORTED_CALLS = "aptix.usage.unreported_calls"
UNPRICED_CALLS = "aptix.usage.unpriced_calls"


def _call_usage(usage: CallUsage, attributes: dict[str, Any]) -> None:
    """One model call's usage on its ``chat`` span: tokens only when the model reported
    them (never 0 for unknown), its cost only when it is priced (issue 31)."""
    attributes[USAGE_REPORTED] = usage.reported
    attributes[USAGE_PRICED] = usage.priced
    if usage.reported:
        attributes[INPUT_TOKENS] = usage.input_tokens
        attributes[OUTPUT_TOKENS] = usage.output_tokens
        if usage.cached_input_tokens is not None:
            attributes[CACHED_INPUT_TOKENS] = usage.cached_input_tokens
        if usage.reasoning_tokens is not None:
            attributes[REASONING_TOKENS] = usage.reasoning_tokens
    if usage.cost is not None:
        attributes[USAGE_COST] = format(usage.cost, "f")
        attributes[USAGE_CURRENCY] = usage.currency


def _usage_totals(calls: Sequence[CallUsage], attributes: dict[str, Any]) -> None:
    """The turn's model calls summed on ``invoke_agent``: the reported calls' tokens, the
    cost of the priced ones, and how many calls each sum leaves out.

    Cached and reasoning tokens are summed over the calls that report them, and left
    off when none does. Calls priced in different currencies are not added up:
    ``aptix.usage.cost`` is then a list of ``"<amount> <currency>"``, one per currency.
    """
    reported = [call for call in calls if call.reported]
    unpriced = sum(1 for call in calls if not call.priced)
    attributes[UNREPORTED_CALLS] = len(calls) - len(reported)
    attributes[UNPRICED_CALLS] = unpriced
    if reported:
        attributes[INPUT_TOKENS] = sum(call.input_tokens or 0 for call in reported)
        attributes[OUTPUT_TOKENS] = sum(call.output_tokens or 0 for call in reported)
        cached = [c.cached_input_tokens for c in reported if c.cached_input_tokens is not None]
        if cached:
            attributes[CACHED_INPUT_TOKENS] = sum(cached)
        reasoning = [c.reasoning_tokens for c in reported if c.reasoning_tokens is not None]
        if reasoning:
            attributes[REASONING_TOKENS] = sum(reasoning)
    costs: dict[str, Decimal] = {}
    for call in calls:
        if call.cost is not None and call.currency is not None:
            costs[call.currency] = costs.get(call.currency, Decimal(0)) + call.cost
    if len(costs) == 1:
        ((currency, cost),) = costs.items()
        attributes[USAGE_COST] = format(cost, "f")
        attributes[USAGE_CURRENCY] = currency
    elif costs:
        attributes[USAGE_COST] = [f"{format(cost, 'f')} {c}" for c, cost in sorted(costs.items())]


OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
ERROR_TYPE = "error.type"
REQUEST_STREAM = "gen_ai.request.stream"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"


def _part_json(part: TextPart | ImagePart) -> dict[str, Any]:
    """One content part: text, or an image as the conventions' ``blob`` with its base64."""
    if isinstance(part, TextPart):
        return {"type": "text", "content": part.text}
    source = (
        {"clipboard_image_id": part.clipboard_image_id}
        if part.clipboard_image_id is not None
        else {"name": part.relative_path}
    )
    return {
        "type": "blob",
        "modality": "image",
        "mime_type": part.mime_type,
        "size_bytes": part.size_bytes,
        **source,
        "content": base64.b64encode(part.data).decode("ascii"),
    }


def _message_json(message: ChatMessage) -> dict[str, Any]:
    """One non-system message in the conventions' input-message shape.

    A message with parts is sent as its parts (images as ``blob``); this is called
    only with content capture, so without it no image byte reaches a span.
    """
    if message.parts and message.role != "tool":
        return {"role": str(message.role), "parts": [_part_json(p) for p in message.parts]}
    parts: list[dict[str, Any]] = []
    if message.content:
        if message.role == "tool":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": message.tool_call_id,
                    "response": message.content,
                }
            )
        else:
            parts.append({"type": "text", "content": message.content})
    for call in message.tool_calls or ():
        parts.append(
            {
                "type": "tool_call",
                "id": call.tool_call_id,
                "name": call.name,
                "arguments": call.arguments_json,
            }
        )
    return {"role": str(message.role), "parts": parts}


def _output_json(reply: LLMReply) -> str:
    parts: list[dict[str, Any]] = []
    if reply.text:
        parts.append({"type": "text", "content": reply.text})
    for call in reply.tool_calls:
        parts.append(
            {
                "type": "tool_call",
                "id": call.tool_call_id,
                "name": call.name,
                "arguments": call.arguments_json,
            }
        )
    message = {"role": "assistant", "parts": parts, "finish_reason": reply.finish_reason or ""}
    return json.dumps([message])


def _turn_content(ctx: PipelineContext, attributes: dict[str, Any]) -> None:
    """The request's user content and the response text (content capture only)."""
    envelope = ctx.envelope
    parts: list[dict[str, Any]] = []
    if envelope.instructions:
        parts.append({"type": "text", "content": envelope.instructions})
    for artifact in envelope.input_artifacts or ():
        parts.append(
            {
                "type": "file",
                "name": artifact.relative_path,
                "mime_type": artifact.mime_type,
                "content": artifact.contents,
            }
        )
    for image in envelope.clip_board_images or ():
        parts.append(
            {
                "type": "blob",
                "modality": "image",
                "mime_type": image.mime_type,
                "content": image.data_base64,
            }
        )
    if parts:
        attributes["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": parts}])
    response = ctx.response
    text = response.primary_output_text if response is not None else None
    if text:
        attributes["gen_ai.output.messages"] = json.dumps(
            [
                {
                    "role": "assistant",
                    "finish_reason": "stop",
                    "parts": [{"type": "text", "content": text}],
                }
            ]
        )


class _Open:
    """A span of the turn and the context token that made it current."""

    __slots__ = ("span", "token")

    def __init__(self, span: Span, token: object) -> None:
        self.span, self.token = span, token

    def close(self) -> None:
        try:
            self.span.end()
        finally:  # the context is left as it was found, whatever the span did
            otel_context.detach(self.token)  # type: ignore[arg-type]


class SpanBuilder:
    """The subscriber that turns one turn's events into OpenTelemetry spans.

    See the module docstring for the spans and their attributes. Each span is made
    current while it is open, so a host's own spans (an HTTP client's, a tool's)
    nest under the step, model call or tool execution that made them.
    """

    event_types: ClassVar[frozenset[type[TurnEvent]]]
    """The events it reads (every one it has a handler for): the dispatcher hands it
    no other, text deltas among them (``TurnEvents``)."""
    _handlers: ClassVar[dict[type[TurnEvent], Callable[[Any, Any], None]]]

    __slots__ = (
        "_chat",
        "_chat_began",
        "_exceptions",
        "_messages",
        "_retrieval",
        "_step",
        "_step_attributes",
        "_step_failed_rules",
        "_tool",
        "_tool_definitions",
        "_turn",
        "_usage",
        "capture_content",
        "provider_name",
        "tracer",
    )

    def __init__(self, tracer: Tracer, capture_content: bool, provider_name: str) -> None:
        self.tracer, self.capture_content, self.provider_name = (
            tracer,
            capture_content,
            provider_name,
        )
        self._turn: _Open | None = None
        self._step: _Open | None = None
        self._chat: _Open | None = None
        self._chat_began = 0.0
        self._tool: _Open | None = None
        self._retrieval: _Open | None = None
        self._step_failed_rules: set[str] = set()
        # What a step learns while it runs goes on its span in one call when it ends:
        # the SDK's per-call cost, not the attributes, dominated.
        self._step_attributes: dict[str, Any] = {}
        self._usage: list[CallUsage] = []  # the answered model calls' usage, in order
        # Content capture: each message is serialized once per turn, not once per round.
        self._messages: dict[int, tuple[ChatMessage, str]] = {}
        self._tool_definitions: tuple[tuple[int, ...], str] | None = None
        self._exceptions: list[BaseException] | None = None  # those on a span already

    def __call__(self, event: TurnEvent) -> None:
        """Update the spans for ``event``."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(self, event)

    @staticmethod
    def for_mode(
        mode: SpanMode, tracer: Tracer, capture_content: bool, provider_name: str
    ) -> SpanBuilder:
        """The builder of ``mode``: this one, or ``CompactSpanBuilder``."""
        kind = CompactSpanBuilder if mode is SpanMode.COMPACT else SpanBuilder
        return kind(tracer, capture_content, provider_name)

    def end_unfinished(self) -> None:
        """End the spans still open, innermost first: a turn stopped before its end.

        A cancelled turn (its task cancelled, its consumer gone) emits no
        ``TurnFinished``; its spans still end, and leave the context as they found it.
        It runs after the turn ended, so a span that fails to end is logged, never
        raised (docs/CONFORMANCE.md D160).
        """
        for name in ("_tool", "_retrieval", "_chat", "_step", "_turn"):
            opened: _Open | None = getattr(self, name)
            if opened is not None:
                setattr(self, name, None)
                try:
                    opened.close()
                except Exception:  # a host's tracer that fails must not fail the turn
                    logger.exception("a span of the turn could not be ended")

    def _open(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> _Open:
        span = self.tracer.start_span(name, kind=kind, attributes=attributes)
        return _Open(span, otel_context.attach(trace.set_span_in_context(span)))

    def _exception(self, span: Span, error: BaseException) -> None:
        """``error`` as the conventions' ``exception`` event on ``span``, once per turn."""
        recorded = self._exceptions
        if recorded is None:
            recorded = self._exceptions = []
        elif any(known is error for known in recorded):
            return
        recorded.append(error)
        if self.capture_content:
            span.record_exception(error)
            return
        kind = type(error)
        name = kind.__qualname__
        if kind.__module__ not in ("builtins", None):
            name = f"{kind.__module__}.{name}"
        frames = "".join(traceback.format_tb(error.__traceback__))
        stacktrace = f"Traceback (most recent call last):\n{frames}{name}"
        span.add_event("exception", {"exception.type": name, "exception.stacktrace": stacktrace})

    @staticmethod
    def _current() -> Span | None:
        """The span an event belongs to (a tool's, a model call's, a step's)."""
        span = trace.get_current_span()
        return span if span.is_recording() else None

    # --- the turn --------------------------------------------------------------------

    def _turn_started(self, event: TurnStarted) -> None:
        attributes = {OPERATION: "invoke_agent", PROVIDER: self.provider_name}
        self._turn = self._open("invoke_agent", SpanKind.INTERNAL, attributes)

    def _turn_finished(self, event: TurnFinished) -> None:
        """Name the turn's span after its agent and set what is known only at the end.

        ``session_id``/``turn_id`` are what the store holds afterwards: a failed
        Initial turn's ids name nothing, so they are not put on the span (D59).

        ``gen_ai.usage.*`` sum this request's own model calls (its ``chat`` spans), so
        adding up ``invoke_agent`` spans counts each call once; ``usage`` — the
        turn's total over its continuations too, the response's ``Usage`` (D31) —
        goes to ``aptix.turn.usage.*``.
        """
        opened = self._turn
        if opened is None:
            return
        self._turn = None
        span = opened.span
        attributes: dict[str, Any] = {"aptix.llm.calls": event.llm_calls}
        if event.context_type is not None:
            attributes["aptix.context.type"] = event.context_type
            if event.session_id is not None:
                attributes["gen_ai.conversation.id"] = event.session_id
            if event.turn_id is not None:
                attributes["aptix.turn.id"] = event.turn_id
            if event.mode:
                attributes["aptix.mode"] = event.mode
            if event.agent_name is not None:
                attributes["gen_ai.agent.name"] = event.agent_name
                attributes["gen_ai.agent.id"] = event.agent_id
                if event.request_model:
                    attributes["gen_ai.request.model"] = event.request_model
                span.update_name(f"invoke_agent {event.agent_name}")
            if event.response_type is not None:
                attributes["aptix.response.type"] = event.response_type
            if event.context is not None:
                _turn_content(event.context, attributes)
        if self._usage:
            _usage_totals(self._usage, attributes)
        usage = event.usage
        if usage is not None:
            attributes["aptix.turn.usage.input_tokens"] = usage.input_tokens
            attributes["aptix.turn.usage.output_tokens"] = usage.output_tokens
        errors = event.result.errors
        if errors:
            codes = [str(error.code) for error in errors]
            attributes[ERROR_TYPE] = codes[0]
            attributes["aptix.error.codes"] = codes
            rules = [error.rule_id for error in errors if error.rule_id]
            if rules:
                attributes["aptix.rule.failed_ids"] = rules
            span.set_status(Status(StatusCode.ERROR, codes[0]))
        span.set_attributes(attributes)
        opened.close()

    # --- the steps -------------------------------------------------------------------

    def _step_started(self, event: StepStarted) -> None:
        attributes: dict[str, Any] = {
            "aptix.step.name": event.step,
            "aptix.step.from": event.source,
        }
        if event.context_type is not None:
            attributes["aptix.context.type"] = event.context_type
        self._step = self._open(f"step {event.step}", SpanKind.INTERNAL, attributes)
        self._step_attributes = {}

    def _step_ended(self, event: StepEnded) -> None:
        """Where the transition went and the mode it left.

        ``aptix.step.to`` only for a transition taken: a step stopped by its guard or
        by raising stays where it was and goes nowhere. The context type is set here
        too, for ``request_handler``, which makes the context.
        """
        opened = self._step
        if opened is None:
            return
        self._step = None
        attributes = self._step_attributes
        if event.taken:
            attributes["aptix.step.to"] = event.state
        if event.context_type is not None:
            attributes["aptix.context.type"] = event.context_type
            if event.mode:
                attributes["aptix.mode"] = event.mode
        opened.span.set_attributes(attributes)
        opened.close()

    def _check(self, event: CheckRan) -> None:
        record = event.check
        self._step_failed_rules.update(record.failed)
        if self._step is None:
            return
        span = self._step.span
        rule_ids_key, failed_key, outcome_key = _CHECK_KEYS[record.phase == "PRE"]
        attributes = self._step_attributes
        attributes[rule_ids_key] = record.rule_ids
        attributes[failed_key] = record.failed
        attributes[outcome_key] = record.outcome
        _rules_failed(span, record, record.failed)

    def _fault(self, event: TurnFaulted) -> None:
        if self._step is None:
            return
        record, span = event.fault, self._step.span
        if event.cause is not None:
            self._exception(span, event.cause)
        self._step_attributes[ERROR_TYPE] = (
            record.error_codes[0] if record.error_codes else "_OTHER"
        )
        span.set_status(Status(StatusCode.ERROR, ", ".join(record.error_codes)))
        for rule_id in record.rule_ids:
            if rule_id not in self._step_failed_rules:  # a step's own rule, not a guard's
                span.add_event(
                    "aptix.rule.failed", {"aptix.rule.id": rule_id, "aptix.step.name": record.step}
                )

    # --- model calls -----------------------------------------------------------------

    def _chat_started(self, event: ModelCallStarted) -> None:
        attributes: dict[str, Any] = {
            OPERATION: "chat",
            PROVIDER: self.provider_name,
            "aptix.llm.round": event.round,
            "aptix.mode": event.mode,
        }
        if event.model:
            attributes["gen_ai.request.model"] = event.model
        if event.streamed:
            attributes[REQUEST_STREAM] = True
        if event.request is not None:
            self._chat_content(event.request, attributes)
        name = f"chat {event.model}" if event.model else "chat"
        self._chat = self._open(name, SpanKind.CLIENT, attributes)
        self._chat_began = time.perf_counter()

    def _chat_first_chunk(self, event: ModelFirstChunk) -> None:
        """A streamed call's first chunk: its time to it."""
        if self._chat is None:
            return
        elapsed = time.perf_counter() - self._chat_began
        self._chat.span.set_attribute(TIME_TO_FIRST_CHUNK, elapsed)

    def _chat_content(self, request: LLMRequest, attributes: dict[str, Any]) -> None:
        """The conversation, as the conventions want it, from per-message JSON kept per turn."""
        system = [
            {"type": "text", "content": m.content} for m in request.messages if m.role == "system"
        ]
        texts = []
        for message in request.messages:
            if message.role == "system":
                continue
            known = self._messages.get(id(message))
            if known is None or known[0] is not message:
                known = (message, json.dumps(_message_json(message)))
                self._messages[id(message)] = known
            texts.append(known[1])
        attributes["gen_ai.system_instructions"] = json.dumps(system)
        attributes["gen_ai.input.messages"] = f"[{', '.join(texts)}]"
        key = tuple(id(tool) for tool in request.tools)
        if self._tool_definitions is None or self._tool_definitions[0] != key:
            definitions = json.dumps(
                [
                    {
                        "type": "function",
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                    for t in request.tools
                ]
            )
            self._tool_definitions = (key, definitions)
        attributes["gen_ai.tool.definitions"] = self._tool_definitions[1]

    def _chat_retried(self, event: ModelCallRetried) -> None:
        if self._chat is None:
            return
        self._chat.span.add_event(
            "aptix.llm.retry",
            {
                "aptix.llm.attempt": event.attempt,
                ERROR_TYPE: event.error_type,
                "aptix.llm.retry_wait_seconds": event.wait_seconds,
            },
        )

    def _chat_finished(self, event: ModelCallFinished) -> None:
        call, usage = event.call, event.usage
        if usage is not None:
            self._usage.append(usage)
        opened = self._chat
        if opened is None:
            return
        self._chat = None
        span = opened.span
        if event.replied:
            attributes: dict[str, Any] = {"aptix.llm.attempts": call.attempts}
            if call.response_model:
                attributes["gen_ai.response.model"] = call.response_model
            if call.response_id:
                attributes["gen_ai.response.id"] = call.response_id
            if call.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = [call.finish_reason]
            if usage is not None:
                _call_usage(usage, attributes)
            if event.reply is not None:
                attributes["gen_ai.output.messages"] = _output_json(event.reply)
            span.set_attributes(attributes)
        if call.error is not None:
            span.set_attribute(ERROR_TYPE, call.error)
            span.set_status(Status(StatusCode.ERROR, call.error))
        if event.exception is not None:
            self._exception(span, event.exception)
        opened.close()

    # --- retrievals -------------------------------------------------------------------

    def _retrieval_started(self, event: RetrievalStarted) -> None:
        attributes: dict[str, Any] = {
            OPERATION: "retrieval",
            "gen_ai.data_source.id": event.collection,
            "gen_ai.retrieval.top_k": event.limit,
            "aptix.retrieval.conditions": event.conditions,
        }
        if event.query is not None:
            attributes["gen_ai.retrieval.query.text"] = event.query.instruction
        self._retrieval = self._open(f"retrieval {event.collection}", SpanKind.CLIENT, attributes)

    def _retrieval_finished(self, event: RetrievalFinished) -> None:
        opened = self._retrieval
        if opened is None:
            return
        self._retrieval = None
        span, record = opened.span, event.retrieval
        span.set_attribute("aptix.retrieval.hits", record.hits)
        if event.passages is not None:
            documents = [
                {"id": p.source.document_id, "score": p.score, "content": p.text}
                for p in event.passages
            ]
            span.set_attribute("gen_ai.retrieval.documents", json.dumps(documents))
        if record.error is not None:
            span.set_attribute(ERROR_TYPE, record.error)
            span.set_status(Status(StatusCode.ERROR, record.error))
        if event.exception is not None:
            self._exception(span, event.exception)
        opened.close()

    # --- tools, mode changes, warnings -----------------------------------------------

    def _tool_started(self, event: ToolExecutionStarted) -> None:
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            "gen_ai.tool.name": event.name,
            "gen_ai.tool.call.id": event.tool_call_id,
            "gen_ai.tool.type": "function",
        }
        if event.description:
            attributes["gen_ai.tool.description"] = event.description
        if self.capture_content:
            try:
                arguments = json.dumps(event.arguments, default=str)
            except RecursionError:  # nested deeper than json goes (engine/deep_json.py)
                arguments = dump_json(encode_value(event.arguments))
            attributes["gen_ai.tool.call.arguments"] = arguments
        self._tool = self._open(f"execute_tool {event.name}", SpanKind.INTERNAL, attributes)

    def _tool_finished(self, event: ToolExecuted) -> None:
        opened = self._tool
        if opened is None:
            return
        self._tool = None
        span = opened.span
        if event.outcome is not None:
            outcome = event.outcome.value  # span attributes hold plain strings
            span.set_attribute("aptix.tool.outcome", outcome)
            if event.result_json is not None:
                span.set_attribute("gen_ai.tool.call.result", event.result_json)
            if event.failed:
                span.set_attribute(ERROR_TYPE, outcome)
                span.set_status(Status(StatusCode.ERROR, outcome))
        if event.exception is not None:
            self._exception(span, event.exception)
        opened.close()

    def _tool_call(self, event: ToolCallHandled) -> None:
        record, kind = event.record, event.rejection_kind
        if kind is None and record.rule_id is None:
            return
        span = self._current()
        if span is None:
            return
        name = _REJECTION_EVENTS.get(kind, "aptix.tool.unknown")
        attributes: dict[str, Any] = {
            "gen_ai.tool.name": record.name,
            "gen_ai.tool.call.id": record.tool_call_id,
        }
        if record.rule_id:
            attributes["aptix.rule.id"] = record.rule_id
        span.add_event(name, attributes)

    def _mode_changed(self, event: ModeChanged) -> None:
        span = self._current()
        if span is None:
            return
        change = event.change
        attributes: dict[str, Any] = {
            "aptix.mode.previous": change.previous_mode,
            "aptix.mode.new": change.new_mode,
            "aptix.mode.branch": change.branch,
            "gen_ai.tool.call.id": change.tool_call_id,
        }
        if change.reason is not None:
            attributes["aptix.mode.reason"] = change.reason
        span.add_event("aptix.mode.changed", attributes)

    def _warned(self, event: WarningRaised) -> None:
        span = self._current()
        if span is None:
            return
        warning = event.warning
        attributes: dict[str, Any] = {"aptix.warning.code": warning.code}
        if warning.rule_id:
            attributes["aptix.rule.id"] = warning.rule_id
        span.add_event("aptix.warning", attributes)


class CompactSpanBuilder(SpanBuilder):
    """``SpanMode.COMPACT``: the same spans, but each step is an event of the turn's.

    ``invoke_agent``, ``chat``, ``retrieval`` and ``execute_tool`` are made exactly
    as ``SpanBuilder`` makes them, except that a model call or a tool is a child of
    ``invoke_agent`` (no step span is open). Each transition is one ``aptix.step``
    event on ``invoke_agent``, added when the step is over (when the next one begins,
    or the turn ends):

    - ``aptix.step.name``; ``aptix.step.to``, the state it went to, for a transition
      taken;
    - a guard or exit hook that did not pass: its outcome (``aptix.guard.outcome``,
      ``aptix.exit_hook.outcome``: ``failed``, or ``deferred`` for §4.9's POST in a
      round that goes on) and its ``…failed_rule_ids``;
    - the step the turn faulted in: ``error.type``.

    What a step span would hold of a failure (``aptix.rule.failed``, ``exception``)
    goes on ``invoke_agent``. Left out, to keep it cheap: the rule ids each check
    ran and the outcomes that passed (the state trace has both), ``aptix.step.from``
    (the previous event's ``to``) and the step's context type and mode (on
    ``invoke_agent``; a mode change has its ``aptix.mode.changed`` event). It reads
    the transitions the state trace reads (``TransitionTaken``), not
    ``StepStarted``/``StepEnded``, so the runner makes none of those for it.
    """

    __slots__ = ("_pending",)

    def __init__(self, tracer: Tracer, capture_content: bool, provider_name: str) -> None:
        super().__init__(tracer, capture_content, provider_name)
        self._pending: dict[str, Any] | None = None  # the step whose event is not added yet

    def _flush(self) -> None:
        """Add the pending step's event to the turn's span."""
        pending, self._pending = self._pending, None
        if pending is not None and self._turn is not None:
            self._turn.span.add_event(_STEP_EVENT, pending)

    def _step_named(self, step: str) -> dict[str, Any]:
        """The pending step's attributes, after adding another step's event if pending."""
        pending = self._pending
        if pending is None or pending[_STEP_NAME] != step:
            self._flush()
            pending = self._pending = {_STEP_NAME: step}
        return pending

    def _transition(self, event: TransitionTaken) -> None:
        record = event.transition
        if record.event == FAULT:  # the machine's move to ``faulted``, not a step
            return
        pending = self._pending
        if pending is not None and _STEP_TO in pending:  # a step taken twice in a row
            self._flush()
        self._step_named(record.event)[_STEP_TO] = record.target

    def _check(self, event: CheckRan) -> None:
        record = event.check
        failed = record.failed
        if failed:
            self._step_failed_rules.update(failed)
        if record.phase == "PRE":  # a guard: its step begins
            self._flush()
        if not failed and not record.deferred:
            if self._pending is None or self._pending[_STEP_NAME] != record.step:
                self._step_named(record.step)
            return
        attributes = self._step_named(record.step)
        _, failed_key, outcome_key = _CHECK_KEYS[record.phase == "PRE"]
        attributes[outcome_key] = record.outcome
        if failed and self._turn is not None:
            attributes[failed_key] = failed
            _rules_failed(self._turn.span, record, failed)

    def _fault(self, event: TurnFaulted) -> None:
        if self._turn is None:
            return
        record, span = event.fault, self._turn.span
        attributes = self._step_named(record.step)
        if event.cause is not None:
            self._exception(span, event.cause)
        attributes[ERROR_TYPE] = record.error_codes[0] if record.error_codes else "_OTHER"
        for rule_id in record.rule_ids:
            if rule_id not in self._step_failed_rules:  # a step's own rule, not a guard's
                span.add_event(
                    "aptix.rule.failed", {"aptix.rule.id": rule_id, "aptix.step.name": record.step}
                )

    def _turn_finished(self, event: TurnFinished) -> None:
        self._flush()
        super()._turn_finished(event)

    def end_unfinished(self) -> None:
        """Add the event of the step a stopped turn was in, then end its spans."""
        try:
            self._flush()
        except Exception:  # a host's tracer that fails must not fail the turn
            logger.exception("a step event of the turn could not be added")
        super().end_unfinished()


_REJECTION_EVENTS: dict[RejectionKind | None, str] = {
    None: "aptix.rule.failed",  # a server tool's own refusal (agent_change_mode)
    RejectionKind.CONTAINER_INVOCATION: "aptix.tool.container_invocation_error",
    RejectionKind.ARGUMENT_VALIDATION: "aptix.tool.argument_validation_error",
    RejectionKind.UNKNOWN_TOOL: "aptix.tool.unknown",
}
"""The span event of a refused call (or of a server tool's own refusal), by its kind."""

_SPAN_HANDLERS: dict[type[TurnEvent], Callable[[SpanBuilder, Any], None]] = {
    TurnStarted: SpanBuilder._turn_started,
    TurnFinished: SpanBuilder._turn_finished,
    StepStarted: SpanBuilder._step_started,
    StepEnded: SpanBuilder._step_ended,
    CheckRan: SpanBuilder._check,
    TurnFaulted: SpanBuilder._fault,
    ModelCallStarted: SpanBuilder._chat_started,
    ModelCallRetried: SpanBuilder._chat_retried,
    ModelFirstChunk: SpanBuilder._chat_first_chunk,
    ModelCallFinished: SpanBuilder._chat_finished,
    RetrievalStarted: SpanBuilder._retrieval_started,
    RetrievalFinished: SpanBuilder._retrieval_finished,
    ToolExecutionStarted: SpanBuilder._tool_started,
    ToolExecuted: SpanBuilder._tool_finished,
    ToolCallHandled: SpanBuilder._tool_call,
    ModeChanged: SpanBuilder._mode_changed,
    WarningRaised: SpanBuilder._warned,
}
"""Event type → the ``SpanBuilder`` method that handles it (a class-level table: a per-turn
table of bound methods would be a reference cycle for the collector to find)."""

_COMPACT_HANDLERS: dict[type[TurnEvent], Callable[[Any, Any], None]] = {
    **{k: v for k, v in _SPAN_HANDLERS.items() if k not in (StepStarted, StepEnded)},
    TransitionTaken: CompactSpanBuilder._transition,
    CheckRan: CompactSpanBuilder._check,
    TurnFaulted: CompactSpanBuilder._fault,
    TurnFinished: CompactSpanBuilder._turn_finished,
}
"""The same for ``CompactSpanBuilder``: transitions, not step starts and ends."""

_CHECK_KEYS = {
    is_guard: (f"{prefix}.rule_ids", f"{prefix}.failed_rule_ids", f"{prefix}.outcome")
    for is_guard, prefix in ((True, "aptix.guard"), (False, "aptix.exit_hook"))
}
"""A check's attribute names on its step's span, by whether it is a guard (PRE) or an
exit hook: made once, not per check."""

_STEP_EVENT = "aptix.step"
_STEP_NAME = "aptix.step.name"
_STEP_TO = "aptix.step.to"

SpanBuilder.event_types = frozenset(_SPAN_HANDLERS)
SpanBuilder._handlers = _SPAN_HANDLERS
CompactSpanBuilder.event_types = frozenset(_COMPACT_HANDLERS)
CompactSpanBuilder._handlers = _COMPACT_HANDLERS


def _rules_failed(span: Span, record: CheckRecord, failed: Sequence[str]) -> None:
    """An ``aptix.rule.failed`` event on ``span`` for each of ``failed``, the rules of
    ``record`` that did not pass (a step span's in full mode, the turn's in compact)."""
    for rule_id in failed:
        span.add_event(
            "aptix.rule.failed",
            {
                "aptix.rule.id": rule_id,
                "aptix.step.name": record.step,
                "aptix.check.phase": record.phase,
            },
        )


def recording_failed(
    tracer: Tracer, session_id: str | None, turn_id: str | None, error: BaseException
) -> None:
    """Trace a recording that failed after its turn ended: an ``aptix.recording`` span.

    The span says that and what kind of failure (``error.type``, the exception's
    class), never the exception's message, which may quote user content
    (DESIGN.md "Observability without leaks"; docs/RECORDING.md, D160).
    """
    attributes: dict[str, Any] = {ERROR_TYPE: type(error).__name__}
    if session_id is not None:
        attributes["gen_ai.conversation.id"] = session_id
    if turn_id is not None:
        attributes["aptix.turn.id"] = turn_id
    span = tracer.start_span("aptix.recording", kind=SpanKind.INTERNAL, attributes=attributes)
    span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    span.end()


def answered_without_a_turn(
    tracer: Tracer,
    context_type: str | None,
    session_id: str | None,
    turn_id: str | None,
    replayed: bool,
    error_codes: Sequence[str],
) -> None:
    """Trace a call answered without running a turn: an ``aptix.stored_answer`` span.

    A retry answered from a stored answer (``aptix.replayed`` true), or refused for
    its idempotency key or for other results of answered calls (status ERROR with
    the first error code as ``error.type``); docs/CONFORMANCE.md D181.
    """
    attributes: dict[str, Any] = {"aptix.replayed": replayed}
    if context_type is not None:
        attributes["aptix.context_type"] = context_type
    if session_id is not None:
        attributes["gen_ai.conversation.id"] = session_id
    if turn_id is not None:
        attributes["aptix.turn.id"] = turn_id
    if error_codes:
        attributes[ERROR_TYPE] = error_codes[0]
    span = tracer.start_span("aptix.stored_answer", kind=SpanKind.INTERNAL, attributes=attributes)
    if error_codes:
        span.set_status(Status(StatusCode.ERROR, error_codes[0]))
    span.end()


def provider_name_of(llm: object) -> str | None:
    """The LLM adapter's ``provider_name`` (spans name it), when it has one."""
    name = getattr(llm, "provider_name", None)
    return name if isinstance(name, str) and name else None
