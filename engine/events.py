"""The turn's event stream: typed, frozen facts, in the order they happen.

The runner emits what the machine does (a step starts, a guard or exit hook ran, a
transition was taken, a fault); the steps report what they do through the
``TurnObserver`` port (``steps/observer.py``), which ``StepReporter`` turns into
events (a model call started, retried, finished; a retrieval started, finished; a
tool executed; a tool call's verdict; a mode change; a warning). The ``StateTrace``
(``engine/trace.py``) and the OpenTelemetry spans (``engine/telemetry.py``) are two
subscribers of this stream; a host adds its own with ``Pipeline(listeners=[...])``
(DESIGN.md "One event stream", STYLE.md "Cross-cutting work listens").

What an event holds:

- every event carries ``run_id``, the turn's number in this process, so a listener
  shared by concurrent turns can tell them apart;
- no user content unless the pipeline captures content (``Telemetry(capture_content=
  True)``): the fields that hold it (``ModelCallStarted.request``,
  ``ModelCallFinished.reply``, ``RetrievalStarted.query``,
  ``RetrievalFinished.passages``, ``ToolExecutionStarted.arguments``,
  ``ToolExecuted.result_json``, ``ModeChanged``'s reason, ``TurnFinished.context``)
  are ``None`` otherwise. ``TurnFinished.result`` is the exception: it is the
  ``InvokeResult`` the host is handed anyway.

Text deltas (AGN-034 §4.7): a streamed turn emits ``ModelFirstChunk`` when the
model's first chunk of a call comes, and ``ModelTextDelta`` for each piece of its
text. A turn is streamed when a subscriber names ``ModelTextDelta`` in its
``event_types`` (``Pipeline.stream`` does); only then does the engine ask the model
to stream. A text delta is the model's own words, so it goes only to the
subscribers that name it, and to the others only with content capture.

Listeners: a listener is a callable taking one event. A plain function is called
inline, as the event happens, so it must be quick; a coroutine function is
awaited in event order by a task of the turn, so a slow one does not hold the turn
up, and the turn returns once it has seen ``TurnFinished``. A listener that raises
is logged with its traceback and changes nothing: the turn, the other listeners
and the following events go on.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeAlias

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    InvokeError,
    InvokeResult,
    InvokeWarning,
    LLMReply,
    LLMRequest,
    Passage,
    PipelineContext,
    PriceTable,
    RetrievalQuery,
    ToolCall,
    ToolDefinition,
    Usage,
    scrubbed_logger,
)
from aptix_pipeline.steps import (
    PROPAGATED,
    ModeChange,
    RejectionKind,
    ToolCallFate,
    ToolCallRecord,
)
from aptix_pipeline.validators import utf8_text

from .records import quick_init
from .trace import (
    CallUsage,
    CheckRecord,
    FaultRecord,
    LLMCallRecord,
    RetrievalRecord,
    TraceEntry,
    TransitionRecord,
)

__all__ = [
    "CheckRan",
    "EntrySink",
    "EventSink",
    "Listener",
    "ModeChanged",
    "ModelCallFinished",
    "ModelCallRetried",
    "ModelCallStarted",
    "ModelFirstChunk",
    "ModelTextDelta",
    "RetrievalFinished",
    "RetrievalStarted",
    "StepEnded",
    "StepReporter",
    "StepStarted",
    "ToolCallHandled",
    "ToolExecuted",
    "ToolExecutionStarted",
    "TraceBuilder",
    "TransitionTaken",
    "TurnEvent",
    "TurnEvents",
    "TurnFaulted",
    "TurnFinished",
    "TurnIdentified",
    "TurnStarted",
    "WarningRaised",
]

logger = scrubbed_logger(__name__)


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """Base of every event: ``run_id`` numbers the turn within this process.

    ``trace_entry`` names the field that holds the event's ``StateTrace`` entry, if
    it has one (``TraceBuilder``).
    """

    trace_entry: ClassVar[str] = ""

    run_id: int


@dataclass(frozen=True, slots=True)
class TurnStarted(TurnEvent):
    """A turn begins (before its request is parsed), for the caller ``org`` and ``user``
    (``Caller``): a listener shared by every turn can count them per tenant."""

    provider_name: str
    org: str
    user: str


@dataclass(frozen=True, slots=True)
class TurnIdentified(TurnEvent):
    """The turn's session and turn ids are known, with its caller: made for a new
    session (Initial, AGN-036 §4.2), or named by the request and found (§4.3).

    A turn refused before then (a malformed request, a session that is not the
    caller's) has none. The ids of a new session that then fails name nothing
    stored (``TurnFinished`` says what exists).
    """

    org: str
    user: str
    session_id: str
    turn_id: str


@dataclass(frozen=True, slots=True)
class StepStarted(TurnEvent):
    """The runner is about to take ``step`` from ``source`` (its guard runs next).

    ``context_type`` is ``None`` until the RequestHandler made the context.
    """

    step: str
    source: str
    context_type: str | None


@dataclass(frozen=True, slots=True)
class CheckRan(TurnEvent):
    """A guard (PRE) or exit hook (POST) ran: the rules it checked, those that failed."""

    trace_entry: ClassVar[str] = "check"

    check: CheckRecord

    @property
    def passed(self) -> bool:
        """No rule failed (a deferred check passes)."""
        return not self.check.failed


@dataclass(frozen=True, slots=True)
class TransitionTaken(TurnEvent):
    """The step's work is done and the machine moved to its target (its exit hook runs next)."""

    trace_entry: ClassVar[str] = "transition"

    transition: TransitionRecord


@dataclass(frozen=True, slots=True)
class StepEnded(TurnEvent):
    """The step is over: ``taken`` says whether the machine moved (``state`` is where it is)."""

    step: str
    state: str
    taken: bool
    context_type: str | None
    mode: str | None


@dataclass(frozen=True, slots=True)
class ModelCallStarted(TurnEvent):
    """A call of the LLM port begins (AGN-036 §4.9); ``round`` counts from 1 (DESIGN.md R5).

    ``request`` is the request itself only with content capture.
    """

    round: int
    mode: str
    model: str | None
    tools: tuple[str, ...]
    messages: int
    request: LLMRequest | None = None
    streamed: bool = False
    """The model is asked to stream its reply (a streamed turn, a ``StreamingLLM``)."""


@dataclass(frozen=True, slots=True)
class ModelCallRetried(TurnEvent):
    """Attempt ``attempt`` of a model call failed; the next starts after ``wait_seconds``.

    ``exception`` is what the attempt raised (its message may quote user content).
    """

    round: int
    attempt: int
    error_type: str
    wait_seconds: float
    exception: BaseException | None = None


@dataclass(frozen=True, slots=True)
class ModelCallFinished(TurnEvent):
    """A model call ended: ``call`` is its trace entry (``call.error`` when it failed).

    ``replied`` says whether the model answered (a call can fail after its reply, when
    the step raises); ``reply`` is the model's reply only with content capture.
    ``exception`` is what the model port raised when the call failed for it (its
    last attempt's exception; its message may quote user content). ``usage`` is the
    call's usage and cost when the model answered (``CallUsage``: unreported or
    unpriced said so), priced by ``PipelineOptions.prices``.
    """

    trace_entry: ClassVar[str] = "call"

    call: LLMCallRecord
    replied: bool
    reply: LLMReply | None = None
    exception: BaseException | None = None
    usage: CallUsage | None = None


@dataclass(frozen=True, slots=True)
class ModelFirstChunk(TurnEvent):
    """A streamed model call's first chunk came (time to first token; AGN-034 §4.7)."""

    round: int


@dataclass(frozen=True, slots=True)
class ModelTextDelta(TurnEvent):
    """The next piece of a streamed reply's text (user content: see the module docstring).

    Provisional: the response's ``PrimaryOutputText`` is the assembled text once the
    POST rules accept it (DESIGN.md R11), which may differ (AGN-033 §4.1's fences).
    """

    round: int
    text: str


@dataclass(frozen=True, slots=True)
class RetrievalStarted(TurnEvent):
    """A call of the ``Retriever`` port begins (AGN-034 §4.4, ``steps/retrieval.py``).

    ``conditions`` counts the RAG scope conditions; ``query`` (the instruction and
    the conditions) only with content capture.
    """

    collection: str
    limit: int
    conditions: int
    query: RetrievalQuery | None = None


@dataclass(frozen=True, slots=True)
class RetrievalFinished(TurnEvent):
    """A retrieval ended: ``retrieval`` is its trace entry (``retrieval.error`` when it
    failed); ``passages`` what the prompt got, only with content capture; ``exception``
    what the retriever raised, when it raised (its message may quote user content).
    """

    trace_entry: ClassVar[str] = "retrieval"

    retrieval: RetrievalRecord
    passages: tuple[Passage, ...] | None = None
    exception: BaseException | None = None


@dataclass(frozen=True, slots=True)
class ToolExecutionStarted(TurnEvent):
    """A server-side tool starts (AGN-011 §5, DESIGN.md R5); ``arguments`` with capture only."""

    tool_call_id: str
    name: str
    description: str | None
    arguments: Any = None


@dataclass(frozen=True, slots=True)
class ToolExecuted(TurnEvent):
    """A server-side tool ended.

    ``outcome`` is ``ToolCallRecord.outcome`` (``None`` when the execution stopped
    before it reported one); ``failed`` when it ended in an error; ``result_json``
    with capture only; ``exception`` what the tool raised, when it raised (its
    message may quote user content).
    """

    tool_call_id: str
    name: str
    outcome: ToolCallFate | None
    failed: bool
    result_json: str | None = None
    exception: BaseException | None = None


@dataclass(frozen=True, slots=True)
class ToolCallHandled(TurnEvent):
    """What became of one of the model's tool calls (sent to the client, executed, refused).

    ``rejection_kind`` says why a call was refused.
    """

    trace_entry: ClassVar[str] = "record"

    record: ToolCallRecord
    rejection_kind: RejectionKind | None = None


@dataclass(frozen=True, slots=True)
class ModeChanged(TurnEvent):
    """A mode change was persisted (AGN-011 §5.2); its reason only with content capture."""

    trace_entry: ClassVar[str] = "change"

    change: ModeChange


@dataclass(frozen=True, slots=True)
class WarningRaised(TurnEvent):
    """The turn raised a warning (DESIGN.md R8's several mode changes among them)."""

    trace_entry: ClassVar[str] = "warning"

    warning: InvokeWarning


@dataclass(frozen=True, slots=True)
class TurnFaulted(TurnEvent):
    """The turn faulted at ``fault.step``; ``errors`` are the result's errors.

    ``cause`` is the exception behind a fault the engine named, when one is: what a
    host's port, tool, hook or rule raised (its message may quote user content). A
    step that raised is logged with its traceback instead.
    """

    trace_entry: ClassVar[str] = "fault"

    fault: FaultRecord
    errors: tuple[InvokeError, ...]
    cause: BaseException | None = None


@dataclass(frozen=True, slots=True)
class TurnFinished(TurnEvent):
    """The turn is over: its result, and what the store holds afterwards.

    ``session_id``/``turn_id`` name what exists in the store (a failed Initial turn
    created nothing); ``llm_calls`` counts this request's model calls; ``usage`` is
    the turn's total over its continuations too (the response's ``Usage``);
    ``context`` is the turn's pipeline context, with content capture only; ``org`` and
    ``user`` are the caller's (``TurnStarted``).
    """

    result: InvokeResult[AgentExecuteResponse]
    context_type: str | None
    session_id: str | None
    turn_id: str | None
    mode: str | None
    agent_name: str | None
    agent_id: str | None
    request_model: str | None
    response_type: str | None
    llm_calls: int
    usage: Usage | None
    context: PipelineContext | None = None
    org: str = ""
    user: str = ""

    @property
    def successful(self) -> bool:
        """Whether the turn produced a response."""
        return self.result.successful


_EVENT_TYPES: tuple[type[TurnEvent], ...] = (
    TurnStarted,
    TurnIdentified,
    StepStarted,
    CheckRan,
    TransitionTaken,
    StepEnded,
    ModelCallStarted,
    ModelCallRetried,
    ModelCallFinished,
    ModelFirstChunk,
    ModelTextDelta,
    RetrievalStarted,
    RetrievalFinished,
    ToolExecutionStarted,
    ToolExecuted,
    ToolCallHandled,
    ModeChanged,
    WarningRaised,
    TurnFaulted,
    TurnFinished,
)
"""Every event type a turn emits."""

for _kind in _EVENT_TYPES:
    quick_init(_kind)  # events are made many times a turn (engine/records.py)
del _kind

EventSink: TypeAlias = Callable[[TurnEvent], None]
"""Where the machine's callbacks and the steps' reports send an event."""

EntryEvent: TypeAlias = type[CheckRan] | type[TransitionTaken]
EntrySink: TypeAlias = Callable[[Any], None]
"""Where the runner sends the trace entry of a ``CheckRan`` or a ``TransitionTaken``
(``TurnEvents.entry_sink``)."""

Listener: TypeAlias = Callable[[TurnEvent], None] | Callable[[TurnEvent], Awaitable[None]]
"""A host's subscriber: a function, or a coroutine function, of one event."""

_RUN_IDS = itertools.count(1)


def _is_async(listener: Listener) -> bool:
    call = getattr(listener, "__call__", None)  # noqa: B004 - a callable object's method
    return inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(call)


_Plan: TypeAlias = tuple[frozenset[type[TurnEvent]] | None, tuple[bool, ...], bool]
_PLANS: dict[tuple[object, ...], _Plan] = {}
_MAX_PLANS = 64


def _plan(declared: tuple[Any, ...], has_async: bool, capture_content: bool) -> _Plan:
    """What ``TurnEvents`` works out from its subscribers' declared event types: the
    types wanted (``None``: every type), which subscribers get text deltas, whether
    the turn is streamed. The same subscribers come every turn: kept once worked out."""
    key = (declared, has_async, capture_content)
    try:
        return _PLANS[key]
    except KeyError:
        pass
    except TypeError:  # a subscriber declares its types in a set: work it out each time
        return _make_plan(declared, has_async, capture_content)
    plan = _make_plan(declared, has_async, capture_content)
    if len(_PLANS) < _MAX_PLANS:
        _PLANS[key] = plan
    return plan


def _make_plan(declared: tuple[Any, ...], has_async: bool, capture_content: bool) -> _Plan:
    everything = has_async or any(kinds is None for kinds in declared)
    wanted = None if everything else frozenset(k for kinds in declared for k in kinds or ())
    text = tuple(
        ModelTextDelta in kinds if kinds is not None else capture_content for kinds in declared
    )
    streamed = any(kinds is not None and ModelTextDelta in kinds for kinds in declared)
    return wanted, text, streamed


class TurnEvents:
    """One turn's dispatcher: calls each subscriber, in order, for each event.

    ``subscribers`` are called inline; ``async_listeners`` get the events through a
    queue and a task of the turn (started at the first event, drained by ``close``).
    A subscriber may declare the event types it reads (an ``event_types`` attribute,
    as ``TraceBuilder`` does; it must then ignore the others itself); ``wants``
    tells the emitters which events nobody reads, so they need not be made at all.
    ``ModelTextDelta`` goes through ``emit_text``, to the subscribers that declare
    it, and to the others only when ``capture_content`` (the module docstring).
    """

    __slots__ = (
        "_async",
        "_async_text",
        "_pending",
        "_queue",
        "_streamed",
        "_subscribers",
        "_task",
        "_text_subscribers",
        "_wanted",
        "run_id",
    )

    def __init__(
        self,
        subscribers: Sequence[EventSink],
        async_listeners: Sequence[Listener] = (),
        *,
        capture_content: bool = False,
    ) -> None:
        self.run_id = next(_RUN_IDS)
        self._subscribers = subscribed = tuple(subscribers)
        self._async = tuple(async_listeners)
        declared = tuple([getattr(s, "event_types", None) for s in subscribed])
        plan = _plan(declared, bool(self._async), capture_content)
        self._wanted, text, self._streamed = plan
        self._text_subscribers = (
            tuple(s for s, reads in zip(subscribed, text, strict=True) if reads)
            if True in text
            else ()
        )
        self._async_text = bool(self._async) and capture_content
        self._queue: asyncio.Queue[TurnEvent | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: list[TurnEvent] = []

    def wants(self, kind: type[TurnEvent]) -> bool:
        """Whether any subscriber or listener reads events of type ``kind``."""
        return self._wanted is None or kind in self._wanted

    def entry_sink(self, kind: EntryEvent) -> EntrySink:
        """How to emit the events of ``kind``, one whose only field is its trace entry
        (``CheckRan``, ``TransitionTaken``): a function of the entry.

        When every subscriber that reads ``kind`` is a ``TraceBuilder`` (a turn with
        no listener that reads it and no spans), the function hands the entry to the
        builders and the event is never made; else it makes the event and emits it.
        """
        keep = self.entry_keeper(kind)
        if keep is not None:
            return keep
        emit, run_id = self.emit, self.run_id
        return lambda entry: emit(kind(run_id, entry))

    def entry_keeper(self, kind: type[TurnEvent]) -> EntrySink | None:
        """The function that hands an event's trace entry to the ``TraceBuilder``s, when
        they are all that read ``kind`` (the event need not be made); else ``None``."""
        if self._async:
            return None
        builders: list[TraceBuilder] = []
        for subscriber in self._subscribers:
            if kind not in getattr(subscriber, "event_types", (kind,)):
                continue
            if not isinstance(subscriber, TraceBuilder) or type(subscriber) is not TraceBuilder:
                return None
            builders.append(subscriber)
        if len(builders) == 1:
            return builders[0].entries.append
        kept = tuple(builder.entries for builder in builders)

        def keep(entry: Any) -> None:
            for entries in kept:
                entries.append(entry)

        return keep

    @property
    def streamed(self) -> bool:
        """Whether a subscriber declares ``ModelTextDelta``: the turn is streamed."""
        return self._streamed

    def emit_text(self, event: ModelTextDelta) -> None:
        """Hand a text delta to the subscribers that may read it (see the class docstring)."""
        for subscriber in self._text_subscribers:
            try:
                subscriber(event)
            except PROPAGATED:
                raise
            except BaseException:  # SystemExit too: a listener never stops the turn
                logger.exception("event listener %r raised on ModelTextDelta", subscriber)
        if self._async_text:
            self._deliver_later(event)

    def emit(self, event: TurnEvent) -> None:
        """Hand ``event`` to every subscriber; one that raises is logged and skipped."""
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except PROPAGATED:
                raise
            except BaseException:  # SystemExit too: a listener never stops the turn
                logger.exception(
                    "event listener %r raised on %s; the turn goes on",
                    subscriber,
                    type(event).__name__,
                )
        if self._async:
            self._deliver_later(event)

    def _deliver_later(self, event: TurnEvent) -> None:
        if self._queue is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # no loop (a step run alone): keep it for close()
                self._pending.append(event)
                return
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._deliver())
            for pending in self._pending:
                self._queue.put_nowait(pending)
            self._pending.clear()
        self._queue.put_nowait(event)

    async def _deliver(self) -> None:
        queue = self._queue
        assert queue is not None
        while (event := await queue.get()) is not None:
            for listener in self._async:
                try:
                    await listener(event)  # type: ignore[misc]
                except PROPAGATED:
                    raise
                except BaseException:
                    logger.exception(
                        "event listener %r raised on %s; the turn goes on",
                        listener,
                        type(event).__name__,
                    )

    async def close(self) -> None:
        """Wait until the async listeners have seen every event (a no-op without them)."""
        if not self._async:
            return
        if self._queue is None:
            for event in self._pending:  # every event came before the loop: deliver now
                self._deliver_later(event)
        if self._queue is None or self._task is None:
            return
        self._queue.put_nowait(None)
        await self._task


def split_listeners(listeners: Sequence[Listener]) -> tuple[list[EventSink], list[Listener]]:
    """(plain functions, coroutine functions): how ``TurnEvents`` calls each."""
    plain: list[EventSink] = []
    coroutines: list[Listener] = []
    for listener in listeners:
        if not callable(listener):
            raise TypeError(f"a listener is a callable of one event, not {listener!r}")
        if _is_async(listener):
            coroutines.append(listener)
        else:
            plain.append(listener)  # type: ignore[arg-type]
    return plain, coroutines


# --- the steps' reports (the TurnObserver port) as events ------------------------------


class _ModelCall:
    """One model call: the ``LLMCallObservation`` a step reports to, and its context manager.

    Entering emits ``ModelCallStarted``; leaving, however the call ended, emits
    ``ModelCallFinished`` with its trace entry.
    """

    __slots__ = (
        "_attempts",
        "_chunked",
        "_flush",
        "_pending",
        "_reporter",
        "_request",
        "_round",
        "_tools",
        "failure",
        "reply",
        "retries",
        "streamed",
        "streaming",
    )

    def __init__(
        self, reporter: StepReporter, request: LLMRequest, round_: int, streamed: bool
    ) -> None:
        self._reporter: StepReporter | None = reporter
        self._request: LLMRequest | None = request
        self._round = round_
        self._tools = tuple(tool.name for tool in request.tools)
        self.retries: list[str] = []
        self.reply: LLMReply | None = None
        self.failure: str | None = None
        self._attempts = 1
        self.streaming = reporter.streaming
        self.streamed = streamed
        self._chunked = False
        self._pending: list[str] = []
        self._flush: asyncio.Handle | None = None

    def __enter__(self) -> _ModelCall:
        reporter, request = self._reporter, self._request
        assert reporter is not None
        assert request is not None
        if reporter.model_call_started:
            reporter.emit(
                ModelCallStarted(
                    reporter.run_id,
                    self._round,
                    request.mode,
                    request.model,
                    self._tools,
                    len(request.messages),
                    request if reporter.capture_content else None,
                    self.streamed,
                )
            )
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        reporter = self._reporter
        if reporter is None:
            return
        if self._flush is not None:  # the text kept for the next delta goes first
            self._flush.cancel()
            self._send_text()
        raised = None
        if error is not None:
            raised = error.__cause__  # the port's own error, not the step's wrapping
            self.failure = type(raised or error).__name__
        record = self._record(reporter.capture_content)
        reply = self.reply
        usage = None
        if reply is not None:  # the llm_client transition after it takes it (take_usage)
            model = reply.model or record.request_model  # the model that answered (D586)
            usage = reporter.last_usage = CallUsage.of(reply.usage, model, reporter.prices)
        keep = reporter.keep_model_call
        if keep is not None:
            keep(record)
        else:
            shown = reply if reporter.capture_content else None
            reporter.emit(
                ModelCallFinished(reporter.run_id, record, reply is not None, shown, raised, usage)
            )
        # A retry library may keep the observation in a reference cycle until the
        # garbage collector runs: let it not keep the turn and its events with it.
        self._reporter = self._request = self.reply = None

    def _record(self, capture: bool) -> LLMCallRecord:
        request, reply = self._request, self.reply
        assert request is not None
        usage = reply.usage if reply is not None else None
        failed = self.failure is not None
        return LLMCallRecord(
            round=self._round,
            mode=request.mode,
            request_model=request.model,
            tools=self._tools,
            messages=len(request.messages),
            attempts=len(self.retries) + 1 if failed or reply is None else self._attempts,
            retries=tuple(self.retries),
            response_model=reply.model if reply is not None else None,
            response_id=reply.response_id if reply is not None else None,
            finish_reason=reply.finish_reason if reply is not None else None,
            tool_calls=tuple((c.tool_call_id, c.name) for c in reply.tool_calls)
            if reply is not None
            else (),
            has_text=bool(reply is not None and reply.text and reply.text.strip()),
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            error=self.failure,
            text=reply.text if capture and reply is not None else None,
        )

    def retry(self, attempt: int, error: BaseException, wait_seconds: float) -> None:
        self.retries.append(type(error).__name__)
        reporter = self._reporter
        if reporter is None:
            return
        reporter.emit(
            ModelCallRetried(
                reporter.run_id,
                self._round,
                attempt,
                type(error).__name__,
                float(wait_seconds),
                exception=error,
            )
        )

    def replied(self, reply: LLMReply, attempts: int) -> None:
        self.reply, self._attempts = reply, attempts

    def first_chunk(self) -> None:
        reporter = self._reporter
        if reporter is None or self._chunked:  # a retried attempt's first chunk is not the call's
            return
        self._chunked = True
        reporter.emit(ModelFirstChunk(reporter.run_id, self._round))

    def text_delta(self, text: str) -> None:
        """Keep ``text`` for the delta this turn of the event loop sends.

        Pieces handed in while the turn keeps the loop (a model whose chunks are
        ready back to back) go out joined as one ``ModelTextDelta`` when the loop
        next runs, or when the call ends: no consumer could have read them sooner,
        and one delta costs less than many.
        """
        pending = self._pending
        pending.append(text)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_soon(self._send_text)

    def _send_text(self) -> None:
        self._flush = None
        reporter, pending = self._reporter, self._pending
        if not pending or reporter is None or reporter.emit_text is None:
            return
        text = pending[0] if len(pending) == 1 else "".join(pending)
        pending.clear()
        reporter.emit_text(ModelTextDelta(reporter.run_id, self._round, utf8_text(text)))


class _ToolRun:
    """One server-side tool execution: the ``ToolObservation``, and its context manager."""

    __slots__ = (
        "_reporter",
        "arguments",
        "call_id",
        "description",
        "exception",
        "failed",
        "name",
        "outcome",
        "result_json",
    )

    def __init__(
        self, reporter: StepReporter, call: ToolCall, tool: ToolDefinition, arguments: Any
    ) -> None:
        self._reporter = reporter
        self.call_id, self.name, self.description = (
            call.tool_call_id,
            tool.name,
            tool.description or None,
        )
        self.arguments = arguments if reporter.capture_content else None
        self.outcome: ToolCallFate | None = None
        self.failed = False
        self.result_json: str | None = None
        self.exception: BaseException | None = None

    def __enter__(self) -> _ToolRun:
        reporter = self._reporter
        reporter.emit(
            ToolExecutionStarted(
                reporter.run_id, self.call_id, self.name, self.description, self.arguments
            )
        )
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        reporter = self._reporter
        shown = self.result_json if reporter.capture_content else None
        reporter.emit(
            ToolExecuted(
                reporter.run_id,
                self.call_id,
                self.name,
                self.outcome,
                self.failed,
                shown,
                self.exception,
            )
        )

    def finished(
        self,
        outcome: ToolCallFate,
        result_json: str,
        error: str | None,
        exception: BaseException | None = None,
    ) -> None:
        self.outcome, self.result_json, self.failed = outcome, result_json, error is not None
        self.exception = exception


class _Retrieval:
    """One retrieval: the ``RetrievalObservation``, and its context manager.

    Entering emits ``RetrievalStarted``; leaving, however it ended, ``RetrievalFinished``.
    """

    __slots__ = ("_collection", "_query", "_reporter", "passages")

    def __init__(self, reporter: StepReporter, collection: str, query: RetrievalQuery) -> None:
        self._reporter, self._collection, self._query = reporter, collection, query
        self.passages: tuple[Passage, ...] = ()

    def __enter__(self) -> _Retrieval:
        reporter, query = self._reporter, self._query
        shown = query if reporter.capture_content else None
        reporter.emit(
            RetrievalStarted(
                reporter.run_id, self._collection, query.limit, len(query.conditions), shown
            )
        )
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        reporter, query, passages = self._reporter, self._query, self.passages
        raised = None if error is None else error.__cause__  # the port's own error
        capture = reporter.capture_content
        record = RetrievalRecord(
            collection=self._collection,
            limit=query.limit,
            conditions=len(query.conditions),
            hits=len(passages),
            error=None if error is None else type(raised or error).__name__,
            document_ids=tuple(p.source.document_id for p in passages) if capture else None,
        )
        shown = passages if capture else None
        reporter.emit(RetrievalFinished(reporter.run_id, record, shown, raised))

    def found(self, passages: Sequence[Passage]) -> None:
        self.passages = tuple(passages)


class StepReporter:
    """The ``TurnObserver`` the engine gives each turn: what the steps report, as events."""

    __slots__ = (
        "capture_content",
        "emit",
        "emit_text",
        "identified_wanted",
        "keep_model_call",
        "last_usage",
        "model_call_started",
        "org",
        "prices",
        "rounds",
        "run_id",
        "user",
    )

    def __init__(
        self,
        emit: EventSink,
        run_id: int,
        capture_content: bool,
        *,
        model_call_started: bool = True,
        emit_text: Callable[[ModelTextDelta], None] | None = None,
        org: str = "",
        user: str = "",
        identified: bool = True,
        keep_model_call: EntrySink | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.emit, self.run_id, self.capture_content = emit, run_id, capture_content
        self.prices = prices
        """The price table each call's cost comes from (``PipelineOptions.prices``)."""
        self.last_usage: CallUsage | None = None
        """The usage of the last call that got a reply, until ``take_usage``."""
        self.keep_model_call = keep_model_call
        """Where a model call's record goes when only the trace reads ``ModelCallFinished``
        (``TurnEvents.entry_keeper``); ``None``: the event is made and emitted."""
        self.org, self.user = org, user
        self.identified_wanted = identified
        """Whether anyone reads ``TurnIdentified`` (else none is made)."""
        self.model_call_started = model_call_started
        """Whether anyone reads ``ModelCallStarted`` (else none is made)."""
        self.emit_text = emit_text
        """Where text deltas go; ``None`` when the turn is not streamed."""
        self.rounds = 0

    @property
    def streaming(self) -> bool:
        """Whether the turn is streamed (someone reads its text deltas)."""
        return self.emit_text is not None

    def llm_call(self, request: LLMRequest, *, streamed: bool = False) -> _ModelCall:
        """One model call: ``ModelCallStarted``, then ``ModelCallFinished`` however it ends;
        ``streamed`` when the model is asked to stream."""
        self.rounds += 1
        return _ModelCall(self, request, self.rounds, streamed)

    def take_usage(self) -> CallUsage | None:
        """The last answered call's usage, once: its ``llm_client`` transition keeps it."""
        usage, self.last_usage = self.last_usage, None
        return usage

    def retrieval(self, collection: str, query: RetrievalQuery) -> _Retrieval:
        """One retrieval: ``RetrievalStarted``, then ``RetrievalFinished`` however it ends."""
        return _Retrieval(self, collection, query)

    def tool_execution(self, call: ToolCall, tool: ToolDefinition, arguments: Any) -> _ToolRun:
        """One server-side tool execution: ``ToolExecutionStarted``, then ``ToolExecuted``."""
        return _ToolRun(self, call, tool, arguments)

    def tool_call(
        self, record: ToolCallRecord, rejection_kind: RejectionKind | None = None
    ) -> None:
        """What became of one of the model's tool calls."""
        self.emit(ToolCallHandled(self.run_id, record, rejection_kind))

    def identified(self, session_id: str, turn_id: str) -> None:
        """The turn's ids are known: ``TurnIdentified``, with its caller (when anyone reads it)."""
        if self.identified_wanted:
            self.emit(TurnIdentified(self.run_id, self.org, self.user, session_id, turn_id))

    def mode_changed(self, change: ModeChange) -> None:
        """A persisted mode change; its reason only with content capture."""
        if not self.capture_content and change.reason is not None:
            change = replace(change, reason=None)
        self.emit(ModeChanged(self.run_id, change))

    def warned(self, warning: InvokeWarning) -> None:
        """A warning of the turn."""
        self.emit(WarningRaised(self.run_id, warning))


# --- the StateTrace as a subscriber ---------------------------------------------------------


class TraceBuilder:
    """The subscriber that keeps a turn's ``StateTrace`` entries, in event order."""

    __slots__ = ("entries",)

    event_types: ClassVar[frozenset[type[TurnEvent]]] = frozenset(
        kind for kind in _EVENT_TYPES if kind.trace_entry
    )
    """The events that carry a trace entry: the only ones it reads."""

    def __init__(self) -> None:
        self.entries: list[TraceEntry] = []

    def __call__(self, event: TurnEvent) -> None:
        """Keep the trace entry ``event`` carries, if it carries one."""
        name = event.trace_entry
        if name:
            self.entries.append(getattr(event, name))
