"""``Pipeline``: the entry point a host calls to run one agent turn.

``await pipeline.execute(request, caller)`` returns an ``InvokeResult`` holding
the AGN-033 response. It never raises for a bad request or a failing port: those
come back as an unsuccessful result whose errors name the rule id or field, and
the turn's store transaction is rolled back, so a failed turn persists nothing
(DESIGN.md "What every part promises"). ``run`` returns a ``TurnReport`` with the
same result plus what the turn did: the states it walked, the rules each guard
and exit hook checked, its tool calls, its mode changes and the ``branch`` flag
(DESIGN.md R7), and its ``StateTrace``. Every turn also emits OpenTelemetry spans
(``engine/telemetry.py``) when an SDK is set up, unless ``Telemetry.off()`` is given.

A turn is composed here: the interceptors around it (``engine/interceptors.py``;
recording is one, ``engine/replay/recorder.py``), its scope, its event stream
(``engine/events.py``) with the state trace, the spans, an interceptor's and the
host's listeners as subscribers, and the walk over the compiled machine
(``engine/runner.py``). Nothing here is global: each turn gets its own cursor,
scope and events, so many turns run concurrently in one event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    Caller,
    Clock,
    ContextType,
    ErrorCode,
    ForkRefusal,
    ForkRefusedError,
    IdSource,
    InvokeError,
    InvokeResult,
    KeptTrace,
    PipelineContext,
    PipelineStep,
    Session,
    SessionForks,
    SessionStore,
    StoreConflictError,
    ToolLedger,
    TraceLog,
    UsageLedger,
    scrubbed_logger,
)
from aptix_pipeline.steps import (
    PROPAGATED,
    STEP_FUNCTIONS,
    AnswerKeys,
    ErrorDetail,
    Hooks,
    PipelineOptions,
    Ports,
    StepFaultError,
    StepFunction,
    TurnScope,
    error_text,
    hooked_ports,
    ledgered_tools,
    port_failed,
    runtime_error_in,
)
from aptix_pipeline.validators import HostRule, HostRules

from .events import (
    CheckRan,
    EventSink,
    Listener,
    ModelCallFinished,
    ModelCallStarted,
    StepEnded,
    StepReporter,
    StepStarted,
    TraceBuilder,
    TransitionTaken,
    TurnEvent,
    TurnEvents,
    TurnFinished,
    TurnIdentified,
    TurnStarted,
    split_listeners,
)
from .guarded_ports import GuardedAgentCatalog, GuardedModeCatalog, GuardedStore
from .idempotency import AnswerBook, RequestKeys, SingleFlight, request_keys
from .interceptors import TurnCall, TurnInterceptor
from .machine import TurnRun, host_guards
from .report import RequestInput, ResponseResult, TurnReport, answered_report
from .runner import RUNTIMES, Runtime, TurnStop, Walked, compile_machine, walk
from .state_diff import StepChanges, changes_to_json
from .streaming import PROGRESS_EVENTS, TurnStream
from .telemetry import (
    SpanBuilder,
    SpanMode,
    Telemetry,
    WhileReplayingQuiet,
    answered_without_a_turn,
    provider_name_of,
)
from .tool_routing import check_tool_routing_now, verify_tool_routing
from .trace import CheckRecord, StateTrace, TransitionRecord

__all__ = ["Pipeline", "caller_key", "fork_session"]

logger = scrubbed_logger(__name__)


def _caller(caller: object) -> Caller:
    """The caller as given; anything else is taken as is so ValidateCore names what is missing."""
    if isinstance(caller, Caller):
        return caller
    if not isinstance(caller, Mapping):
        caller = {}
    org, user = caller.get("org", caller.get("Org")), caller.get("user", caller.get("User"))
    return Caller.model_construct(
        org=org if isinstance(org, str) else "", user=user if isinstance(user, str) else ""
    )


def caller_key(caller: object) -> tuple[str, str]:
    """The org and user a request is scoped to (its single-flight key, a durable turn's
    workflow id), read as ``Pipeline.run`` reads its ``caller``."""
    who = _caller(caller)
    return str(who.org), str(who.user)


_FORK_REFUSALS: Mapping[ForkRefusal, tuple[ErrorCode, str]] = {
    ForkRefusal.SESSION_NOT_FOUND: (ErrorCode.NOT_FOUND, "SessionId"),
    ForkRefusal.TURN_NOT_FOUND: (ErrorCode.NOT_FOUND, "TurnId"),
    ForkRefusal.TURN_PENDING: (ErrorCode.CONFLICT, "TurnId"),
}
"""The error of each refusal of ``Pipeline.fork``: its code and the field at fault."""


def _fork_refused(code: ErrorCode, field: str, message: str) -> InvokeResult[Session]:
    return InvokeResult[Session].failure([InvokeError(code=code, field=field, message=message)])


async def fork_session(
    store: SessionStore,
    ids: IdSource,
    clock: Clock,
    session_id: str,
    turn_id: str,
    caller: Caller | Mapping[str, Any],
    *,
    detail: ErrorDetail = "short",
) -> InvokeResult[Session]:
    """``Pipeline.fork`` on these ports: what ``aptix fork`` runs without a pipeline.

    The new session's id comes from ``ids``, its time from ``clock``; a store that
    raises is told per ``detail`` (``PipelineOptions.error_detail``).
    """
    who = _caller(caller)
    for field, value in (("Org", who.org), ("User", who.user)):
        if not isinstance(value, str) or not value:
            return _fork_refused(ErrorCode.INVALID_REQUEST, field, f"{field} is required")
    for field, value in (("SessionId", session_id), ("TurnId", turn_id)):
        if not isinstance(value, str) or not value.strip():
            return _fork_refused(
                ErrorCode.INVALID_REQUEST, field, f"{field} must be a non-empty string"
            )
    if not isinstance(store, SessionForks):
        return _fork_refused(
            ErrorCode.INVALID_REQUEST,
            "SessionStore",
            f"this session store ({type(store).__name__}) cannot fork sessions: it is "
            "no SessionForks (docs/FORKS.md)",
        )
    try:
        new_id = ids.new_id("session")
        fork = await store.fork_session(who.org, who.user, session_id, turn_id, new_id, clock.now())
    except ForkRefusedError as refused:
        code, field = _FORK_REFUSALS[refused.reason]
        return _fork_refused(code, field, str(refused))
    except StoreConflictError as error:
        return _fork_refused(ErrorCode.CONFLICT, "SessionId", str(error))
    except PROPAGATED:
        raise
    except Exception as error:
        described = error_text(error, detail)
        return _fork_refused(
            ErrorCode.PORT_FAILED, "SessionStore", f"SessionStore.fork_session failed: {described}"
        )
    return InvokeResult[Session].success(fork)


def _ledgered(ports: Ports, options: PipelineOptions) -> Ports:
    """``ports`` whose server tools run through the store's ``ToolLedger``, when it has
    one and ``options.tool_ledger`` says so (``steps/tool_ledger.py``)."""
    if not options.tool_ledger or not isinstance(ports.store, ToolLedger) or not ports.tools:
        return ports
    tools = ledgered_tools(ports.tools, ports.store, ports.clock, options.possibly_executed_policy)
    return replace(ports, tools=tools)


def _usage_kept(ports: Ports, options: PipelineOptions) -> Ports:
    """``ports`` with the usage ledger the turn keeps its model calls in: the host's
    ``Ports.usage``, else the store when it is a ``UsageLedger``; none when
    ``options.usage_ledger`` is off (docs/BUDGETS.md).

    Raises ``ValueError`` when budgets, or prices that refuse unpriced calls, are set
    and there is no ledger to check them against.
    """
    usage = ports.usage
    if usage is None and isinstance(ports.store, UsageLedger):
        usage = ports.store
    if not options.usage_ledger:
        usage = None
    prices = options.prices
    refuses = prices is not None and prices.refuses_unpriced
    if usage is None and (options.budgets or refuses):
        what = "budgets" if options.budgets else 'prices with unknown = "refuse"'
        raise ValueError(
            f"{what} need a usage ledger: a store that is a UsageLedger (memory, SQLite, "
            "PostgreSQL) or Ports.usage, with PipelineOptions.usage_ledger on"
        )
    return ports if usage is ports.usage else replace(ports, usage=usage)


def _guarded(ports: Ports, detail: ErrorDetail) -> Ports:
    """Ports whose store and catalogs report their own failures (``engine/guarded_ports.py``),
    told per ``detail`` (``PipelineOptions.error_detail``)."""
    return replace(
        ports,
        store=GuardedStore(ports.store, detail),
        modes=GuardedModeCatalog(ports.modes, detail),
        agents=GuardedAgentCatalog(ports.agents, detail),
    )


def _persisted_session_id(
    ctx: PipelineContext | None, errors: tuple[InvokeError, ...]
) -> str | None:
    """The session the turn ran in, if it exists in the store (a failed Initial turn's does not)."""
    if ctx is None or ctx.session is None or (errors and ctx.type is ContextType.INITIAL):
        return None
    return ctx.session.id


def _persisted_turn_id(ctx: PipelineContext | None, errors: tuple[InvokeError, ...]) -> str | None:
    """The turn, if it exists in the store (only a continued turn survives a failure)."""
    if ctx is None or ctx.turn is None:
        return None
    if errors and ctx.type is not ContextType.CLIENT_TOOL_CALL_CONTINUATION:
        return None
    return ctx.turn.id


_NOT_WALKED = Walked((), (), None)
"""What a turn walked until its walk returns (none of it, if it never does)."""


def _quiet(listener: Listener, replaying: Callable[[], bool]) -> Listener:
    """``listener``, deaf while ``replaying()`` (``Pipeline(replaying=...)``)."""
    call = getattr(listener, "__call__", None)  # noqa: B004 - a callable object's method
    if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(call):

        async def heard_later(event: TurnEvent) -> None:
            if not replaying():
                await listener(event)  # type: ignore[misc]

        return heard_later

    def heard(event: TurnEvent) -> None:
        if not replaying():
            listener(event)

    return heard


def _loop_running() -> bool:
    """Whether this thread runs an event loop now."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Pipeline:
    """Runs agent turns through the AGN-036 state machine; see the module docstring.

    ``steps`` replaces step functions by step (to wrap or instrument them); the
    machine, its guards and its exit hooks stay the same. ``telemetry`` says where
    spans go and whether user content is captured (default: the global
    OpenTelemetry provider, content per ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    ``interceptors`` wrap every turn (``engine/interceptors.py``), the first given
    outermost: ``Recorder(RecordingOptions(...))`` records each turn for replay
    (``engine/replay/recorder.py``).
    ``listeners`` get every event of every turn (``engine/events.py``): a plain
    function inline, a coroutine function in order from a task of the turn; one
    that raises is logged and changes nothing. ``runtime`` is ``"compiled"`` (the
    default: ``TurnMachine`` compiled into a table, ``engine/runner.py``) or
    ``"statechart"`` (python-statemachine's own runtime, the reference).

    Building refuses, with a ``ToolRoutingError`` naming each tool, executors in
    ``ports.tools`` that do not match where the catalog's tools run
    (``engine/tool_routing.py``) when the catalogs can be read at once
    (``ConfigCatalog``); ``await verify()`` checks catalogs that are read by
    awaiting.

    ``hooks`` run the host's code around each model request and each server tool
    run (``Hooks``, ``steps/hooks.py``): they wrap the model and the executors, so
    interceptors (a ``Recorder``) see the hooked ports in ``TurnCall.ports``.
    ``rules`` are the host's own guard rules (``HostRule``), each run in its step's
    guard once the step's PRE rules have passed; ``self.rules`` holds them
    (``HostRules``: refused when an id is outside ``host/`` or used twice).
    docs/EXTENDING.md "Hooks and host rules".

    ``replaying`` is the hosting runtime's "this code is being replayed" signal
    (the durable adapter gives Temporal's): while it returns true the turn's side
    channels stay quiet, as the worker that first ran this part already served
    them: no span is exported (``WhileReplayingQuiet``) and the ``listeners`` hear
    nothing. The state trace, an interceptor's listeners and a stream's progress
    are the turn's state and hear everything (docs/DURABLE.md, D532).
    A span that ends while ``replaying()`` is true (Temporal counts a workflow's
    eviction from its worker's cache as replay) is left open for the run that
    resumes the turn; so are the open spans of a run stopped by the runtime's own
    error (``propagate_also``).
    """

    def __init__(
        self,
        ports: Ports,
        options: PipelineOptions | None = None,
        *,
        steps: Mapping[PipelineStep, StepFunction] | None = None,
        telemetry: Telemetry | None = None,
        listeners: Sequence[Listener] = (),
        interceptors: Sequence[TurnInterceptor] = (),
        runtime: Runtime = "compiled",
        hooks: Hooks | None = None,
        rules: Iterable[HostRule] = (),
        replaying: Callable[[], bool] | None = None,
    ) -> None:
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
        if hooks is not None and not isinstance(hooks, Hooks):
            raise TypeError(f"hooks must be a Hooks, not {hooks!r}")
        check_tool_routing_now(ports)
        self.ports = ports
        self.hooks = hooks
        self.options = options or PipelineOptions()
        detail = self.options.error_detail
        self.rules = rules if isinstance(rules, HostRules) else HostRules(rules)
        self._host_guards = host_guards(self.rules)
        # The ledger wraps the host's server tools, and the hooks wrap them; interceptors
        # (a recording's tap) and the turn see them so (docs/TOOLS.md "Exactly once").
        ledgered = _usage_kept(_ledgered(ports, self.options), self.options)
        self._turn_ports = hooked_ports(ledgered, hooks, detail) if hooks is not None else ledgered
        store = self._turn_ports.store
        # Checked once: a runtime protocol's isinstance costs tens of µs a turn.
        self._trace_log: TraceLog | None = store if isinstance(store, TraceLog) else None
        self.runtime: Runtime = runtime
        self.telemetry = (telemetry or Telemetry()).resolved()
        self._tracer = self.telemetry.tracer()
        if replaying is not None and self._tracer is not None:
            self._tracer = WhileReplayingQuiet(self._tracer, replaying)
        self._capture_content = bool(self.telemetry.capture_content)
        self._provider_name = provider_name_of(ports.llm) or "aptix"
        # Steps see the store and catalogs through guards that name a failing port.
        self._ports = _guarded(self._turn_ports, detail)
        self.interceptors: tuple[TurnInterceptor, ...] = tuple(interceptors)
        unknown = set(steps or {}) - set(PipelineStep)
        if unknown:
            raise ValueError(f"not pipeline steps: {sorted(map(str, unknown))}")
        self._steps: Mapping[PipelineStep, StepFunction] = (
            {**STEP_FUNCTIONS, **steps} if steps else STEP_FUNCTIONS
        )
        self._given = (steps, tuple(listeners))
        self._listeners, self._async_listeners = split_listeners(
            listeners if replaying is None else [_quiet(each, replaying) for each in listeners]
        )
        self._single_flight = SingleFlight()
        self._answers = AnswerBook(self._ports.store, ports.clock)
        compile_machine()  # once per process: a machine the runner cannot run fails here

    def on_ports(
        self,
        ports: Ports,
        *,
        options: PipelineOptions | None = None,
        interceptors: Sequence[TurnInterceptor] = (),
        replaying: Callable[[], bool] | None = None,
    ) -> Pipeline:
        """A pipeline that runs this one's turns on ``ports``: the same steps, host
        rules, listeners, telemetry and runtime; ``options`` (default: this one's),
        ``interceptors`` and ``replaying`` as given.

        The hooks are not carried over: they wrap this pipeline's own model and
        executors (``turn_ports``), which ``ports`` stand in for. The durable runtime
        runs a turn this way inside its workflow, on ports whose calls are
        activities that run on ``turn_ports`` (docs/DURABLE.md).
        """
        steps, listeners = self._given
        return Pipeline(
            ports,
            options or self.options,
            steps=steps,
            telemetry=self.telemetry,  # resolved: building reads no environment
            listeners=listeners,
            interceptors=interceptors,
            runtime=self.runtime,
            rules=self.rules,
            replaying=replaying,
        )

    @property
    def turn_ports(self) -> Ports:
        """The ports a turn runs on: ``ports``, its server tools run through the store's
        tool ledger, with the ``hooks`` wrapped around the model and the server tools
        (``LivePorts.of_pipeline`` replays a recording on ``ports`` and the hooks)."""
        return self._turn_ports

    async def verify(self) -> None:
        """Check that the executors match where the catalog's tools run, reading the
        catalogs through their ports; raise ``ToolRoutingError`` naming each tool.

        A server tool that a mode offers needs an executor; an executor needs a
        server tool of its name; ``agent_change_mode`` is exempt
        (``engine/tool_routing.py``). Building the pipeline runs the same check
        when its catalogs can be read at once; a host's catalog that is read by
        awaiting is checked here, once, before the first turn.
        """
        await verify_tool_routing(self.ports)

    async def purge_tool_ledger(self) -> int:
        """Delete the store's tool-ledger entries reserved more than
        ``options.tool_ledger_ttl_seconds`` ago (by the clock port); how many.

        Nothing when the store is no ``ToolLedger`` or the option is ``None``. Nothing
        runs it on a schedule: a host calls it from a periodic job, as it would
        ``purge_outcomes`` (docs/TOOLS.md "Old entries").
        """
        ttl, store = self.options.tool_ledger_ttl_seconds, self.ports.store
        if ttl is None or not isinstance(store, ToolLedger):
            return 0
        return await store.purge_tool_calls(self.ports.clock.now() - timedelta(seconds=ttl))

    async def fork(
        self, session_id: str, turn_id: str, caller: Caller | Mapping[str, Any]
    ) -> InvokeResult[Session]:
        """Fork the caller's session after one of its settled turns (docs/FORKS.md).

        The result holds the new session: a new id (the ``IdSource`` port's), created
        now (the ``Clock``'s), its transcript, mode and mode history the source's as
        they stood after ``turn_id``, its ``forked_from`` naming the source and turn.
        The transcript is shared with the source, not copied. Never raises for bad
        input or a failing store: an unsuccessful result names why — ``not_found``
        (field ``SessionId``: no such session for this caller, another org's or user's
        included; field ``TurnId``: no such turn), ``conflict`` (field ``TurnId``: the
        turn is still pending), ``invalid_request`` (an empty id or caller; field
        ``SessionStore``: a store that cannot fork, no ``SessionForks``), or
        ``port_failed`` (the store raised).
        """
        ports = self.ports
        return await fork_session(
            ports.store,
            ports.ids,
            ports.clock,
            session_id,
            turn_id,
            caller,
            detail=self.options.error_detail,
        )

    async def execute(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> InvokeResult[AgentExecuteResponse]:
        """Run one turn; the response, or the errors that stopped it. Never raises for bad input.

        ``initial_mode`` is the mode of a new session (AGN-011 §3.1, DESIGN.md R2);
        it is ignored on follow-on turns, which take the session's mode.
        ``idempotency_key`` (1-255 visible ASCII characters, scoped to the caller)
        makes a retry of this request return the first committed answer instead
        of running another turn; the same key with another request is a
        ``conflict`` (``DESIGN/idempotency/key-reused``). See ``engine/idempotency.py``.
        """
        report = await self.run(
            request, caller, initial_mode=initial_mode, idempotency_key=idempotency_key
        )
        return report.result

    async def run(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> TurnReport:
        """Run one turn and report what it did (see ``TurnReport``).

        A request with answer keys (a continuation, or any request given an
        ``idempotency_key``) is answered from the answer its first copy stored,
        when there is one (``TurnReport.replayed``); identical copies in flight at
        once share one run (``engine/idempotency.py``, docs/CONFORMANCE.md D180-D185).
        """
        return await self._answer(request, caller, initial_mode, idempotency_key, (), None)

    def stream(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
        progress: Collection[type[TurnEvent]] = PROGRESS_EVENTS,
    ) -> TurnStream:
        """Run one turn as a stream (AGN-034 §4.7): progress, text deltas, then the result.

        The same turn as ``execute``, delivered as it happens (``engine/streaming.py``,
        docs/STREAMING.md): ``StreamProgress`` items for the event types in
        ``progress`` (no user content unless content is captured), ``StreamDelta``
        items with the model's text as it writes it (a model that is a
        ``StreamingLLM``; another gives its text in one piece), and last the
        ``StreamResult`` holding the ``InvokeResult`` that ``execute`` would return.
        Streamed text is provisional until the POST rules accept the response.
        Stopping early cancels the turn; nothing of it is stored.
        """
        unknown = [k for k in progress if not (isinstance(k, type) and issubclass(k, TurnEvent))]
        if unknown:
            raise TypeError(f"not turn event types: {unknown!r}")

        def start(listeners: Sequence[Listener], stop: TurnStop) -> Coroutine[Any, Any, TurnReport]:
            return self._answer(request, caller, initial_mode, idempotency_key, listeners, stop)

        return TurnStream(start, progress)

    async def _answer(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        initial_mode: str | None,
        idempotency_key: str | None,
        listeners: Sequence[Listener],
        stop: TurnStop | None,
    ) -> TurnReport:
        """``run``, with a stream's listeners and ``TurnStop`` (``stream``)."""
        org, user = caller_key(caller)
        keys = request_keys(
            request,
            org,
            user,
            idempotency_key=idempotency_key,
            initial_mode=initial_mode,
            max_depth=self.options.max_json_depth,
        )
        if keys is None:
            return await self._run(
                request, caller, initial_mode=initial_mode, listeners=listeners, stop=stop
            )
        if isinstance(keys, InvokeError):  # a malformed idempotency key: nothing runs
            return self._traced(answered_report(ResponseResult.failure([keys]), None, None))
        known = keys
        return await self._single_flight.run(
            keys.flight,
            lambda: self._run_keyed(
                request, caller, known, initial_mode, idempotency_key, listeners, stop
            ),
            # A stream whose consumer left cancelled its turn for itself alone.
            None if stop is None else lambda _: stop.requested,
        )

    async def _run_keyed(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        keys: RequestKeys,
        initial_mode: str | None,
        idempotency_key: str | None,
        listeners: Sequence[Listener],
        stop: TurnStop | None,
    ) -> TurnReport:
        """A turn with answer keys: the stored answer if there is one, else the turn.

        A turn that failed may have lost a race to another process's copy of the
        same request (its commit conflicted, or the turn was no longer pending):
        the answer is read again, and the winner's is returned when it answers the
        same request.
        """
        answered = await self._stored_answer(keys)
        if answered is not None:
            return answered
        report = await self._run(
            request,
            caller,
            initial_mode=initial_mode,
            answer_keys=keys.answer_keys(self.options.idempotency_ttl_seconds),
            idempotency_key=idempotency_key,
            listeners=listeners,
            stop=stop,
        )
        if report.successful:
            return report
        # Lost a race to a copy of this very request (its commit conflicted, or the turn
        # no longer awaited these results): the winner's answer is this request's answer.
        # A different request keeps its own failure, which says what went wrong here.
        answered = await self._stored_answer(keys)
        return answered if answered is not None and answered.replayed else report

    async def _stored_answer(self, keys: RequestKeys) -> TurnReport | None:
        """The report of a stored answer to ``keys``; ``None`` when none is stored.

        A store that cannot be read answers with its ``port_failed`` error, as a
        turn would: nothing ran, nothing changed.
        """
        try:
            stored = await self._answers.stored(keys)
            result = None if stored is None else self._answers.answer(keys, stored)
        except PROPAGATED:
            raise
        except BaseException as error:  # the store, the clock, or an answer that does not parse
            runtime_error = runtime_error_in(error)
            if runtime_error is not None:  # the hosting runtime's own error (D531)
                raise runtime_error from None
            fault = (
                error
                if isinstance(error, StepFaultError)
                else port_failed("SessionStore", "load_outcome", error, self.options.error_detail)
            )
            return answered_report(ResponseResult.failure(fault.errors), keys.context_type, None)
        if stored is None or result is None:
            return None
        logger.info(
            "%s %s from the answer stored for turn %s of session %s",
            keys.context_type,
            "answered" if result.successful else "refused",
            stored.turn_id,
            stored.session_id,
        )
        return self._traced(answered_report(result, keys.context_type, stored))

    def _traced(self, report: TurnReport) -> TurnReport:
        """``report`` of a call answered without a turn, after its ``aptix.stored_answer`` span."""
        if self._tracer is not None and self.telemetry.recording_spans():
            try:
                answered_without_a_turn(
                    self._tracer,
                    str(report.context_type) if report.context_type is not None else None,
                    report.session_id,
                    report.turn_id,
                    report.replayed,
                    [str(error.code) for error in report.result.errors],
                )
            except Exception:  # a failing tracer must not change the answer
                logger.exception("the call answered without a turn could not be traced")
        return report

    async def _run(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        answer_keys: AnswerKeys | None = None,
        idempotency_key: str | None = None,
        listeners: Sequence[Listener] = (),
        stop: TurnStop | None = None,
    ) -> TurnReport:
        if not self.interceptors:
            return await self._turn(
                request,
                caller,
                initial_mode=initial_mode,
                answer_keys=answer_keys,
                listeners=listeners,
                stop=stop,
                keep=True,
            )
        call = TurnCall(
            request=request,
            caller=_caller(caller),
            initial_mode=initial_mode,
            idempotency_key=idempotency_key,
            ports=self._turn_ports,
            options=self.options,
            telemetry=self.telemetry,
        )
        return await self._intercepted(call, 0, answer_keys, tuple(listeners), stop)

    def _intercepted(
        self,
        call: TurnCall,
        index: int,
        answer_keys: AnswerKeys | None,
        gathered: tuple[Listener, ...],
        stop: TurnStop | None,
    ) -> Awaitable[TurnReport]:
        """The turn inside the interceptors from ``index`` on (the first given is outermost).

        Each interceptor's ``proceed`` may hand the turn other ports and more
        listeners; the turn runs on the last ports given, guarded, with every
        listener given on the way in.
        """
        if index == len(self.interceptors):
            return self._turn(
                call.request,
                call.caller,
                initial_mode=call.initial_mode,
                answer_keys=answer_keys,
                ports=None
                if call.ports is self._turn_ports
                else _guarded(call.ports, self.options.error_detail),
                listeners=gathered,
                stop=stop,
                keep=True,
            )
        ran = False

        def proceed(
            *, ports: Ports | None = None, listeners: Sequence[Listener] = ()
        ) -> Awaitable[TurnReport]:
            nonlocal ran
            if ran:
                raise RuntimeError("an interceptor's proceed runs the turn once")
            ran = True
            inner = call if ports is None else replace(call, ports=ports)
            return self._intercepted(inner, index + 1, answer_keys, (*gathered, *listeners), stop)

        return self.interceptors[index].intercept(call, proceed)

    async def _turn(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        answer_keys: AnswerKeys | None = None,
        ports: Ports | None = None,
        listeners: Sequence[Listener] = (),
        stop: TurnStop | None = None,
        keep: bool = False,
    ) -> TurnReport:
        """One turn, with no stored answer read: on ``ports`` (default: this pipeline's,
        guarded), ``listeners`` hearing its events before the pipeline's own, ``stop``
        cancelling it from outside (a stream's consumer gone).

        ``keep``: keep its trace in this pipeline's store (a host's turn, recorded or
        not; a replay's is not kept), when ``options.keep_traces`` and the store keeps
        traces (``TraceLog``).

        ``answer_keys`` are where the commit keeps the turn's answer for retries.
        A replay (``engine/replay/replayer.py``) runs a recorded turn through here:
        the recorded turn ran, so its replay runs it, whatever answer is stored.
        """
        scope = TurnScope(
            ports=ports or self._ports,
            options=self.options,
            caller=_caller(caller),
            raw_request=request,
            initial_mode=initial_mode,
            answer_keys=answer_keys,
            capture_content=self._capture_content,
        )
        trace = TraceBuilder()
        subscribers: list[EventSink] = [trace]
        spans: SpanBuilder | None = None
        if self._tracer is not None and self.telemetry.recording_spans():
            spans = SpanBuilder.for_mode(
                SpanMode(self.telemetry.span_mode),
                self._tracer,
                self._capture_content,
                self._provider_name,
            )
            subscribers.append(spans)
        async_listeners = self._async_listeners
        if listeners:  # an interceptor's, for this turn only
            turn_listeners, turn_async_listeners = split_listeners(listeners)
            subscribers.extend(turn_listeners)
            async_listeners = [*turn_async_listeners, *async_listeners]
        subscribers.extend(self._listeners)
        events = TurnEvents(subscribers, async_listeners, capture_content=self._capture_content)
        emit, run_id = events.emit, events.run_id
        scope.observer = StepReporter(
            emit,
            run_id,
            self._capture_content,
            model_call_started=events.wants(ModelCallStarted),
            emit_text=events.emit_text if events.streamed else None,
            org=scope.caller.org,
            user=scope.caller.user,
            identified=events.wants(TurnIdentified),
            keep_model_call=events.entry_keeper(ModelCallFinished),
            prices=scope.options.prices,
        )
        run = TurnRun(
            scope=scope,
            step_functions=self._steps,
            emit=emit,
            run_id=run_id,
            step_events=events.wants(StepStarted) or events.wants(StepEnded),
            stop=stop,
            host_guards=self._host_guards,
            keep_check=events.entry_sink(CheckRan),
            keep_transition=events.entry_sink(TransitionTaken),
        )
        changes: StepChanges | None = None
        if keep and self.options.keep_traces and self._trace_log is not None:
            changes = StepChanges(scope, self._capture_content)
            if run.keep_transition is not None:
                run.keep_transition = changes.wrap(run.keep_transition)
        walked = _NOT_WALKED
        emit(TurnStarted(run_id, self._provider_name, scope.caller.org, scope.caller.user))
        suspended = False
        try:
            try:
                walked = await walk(run, self.runtime)
            finally:
                if walked.errors or not walked.states or walked.states[-1] != "done":
                    await self._rollback(scope)
            report = self._report(run, walked, trace)
            if changes is not None:  # the pipeline's own turn, not a replay's or a workflow's
                await self._keep_trace(report, scope, changes)
            if events.wants(TurnFinished):
                emit(self._finished(run_id, report, scope))
        except BaseException as error:
            # The hosting runtime stops this run to resume it elsewhere (a workflow
            # evicted): its open spans are continued there, not ended here (D532).
            suspended = runtime_error_in(error) is not None
            raise
        finally:
            if spans is not None and not suspended:
                spans.end_unfinished()  # a cancelled turn's spans end too
            await events.close()
        return report

    async def _keep_trace(self, report: TurnReport, scope: TurnScope, changes: StepChanges) -> None:
        """Keep the turn's state trace in the store's ``TraceLog`` (``options.keep_traces``).

        Its time is the turn's time stamp (the clock's reading when the request was
        taken), else the wall clock: keeping a trace reads neither the clock nor the
        id port, so it changes no time or id a turn gets. A failure is logged only.
        """
        store, trace = self._trace_log, report.trace
        if store is None or trace is None:  # pragma: no cover - a turn has one
            return
        ctx = scope.context
        at = ctx.time_stamp if ctx is not None and ctx.time_stamp is not None else None
        at = at or datetime.now(UTC)
        ttl = self.options.trace_ttl_seconds
        error = report.result.errors[0] if report.result.errors else None
        kept = KeptTrace(
            id=uuid.uuid4().hex,
            org=scope.caller.org,
            user=scope.caller.user,
            session_id=trace.session_id,
            turn_id=trace.turn_id,
            at=at,
            outcome=trace.outcome,
            trace=trace.to_json(indent=None),
            error_code=None if error is None else str(error.code),
            error_message=None if error is None else error.message,
            faulted_step=trace.faulted_step,
            expires_at=None if ttl is None else at + timedelta(seconds=ttl),
            steps=changes_to_json(changes.changes),
        )
        try:
            await store.keep_trace(kept)
        except PROPAGATED:
            raise
        except Exception:  # the turn is over: a trace not kept must not change its answer
            logger.exception("the turn's trace could not be kept")

    async def purge_traces(self) -> int:
        """Delete the store's kept traces past ``options.trace_ttl_seconds`` (by the
        clock port); how many. Nothing when the store is no ``TraceLog``. Each trace
        kept already sweeps a few; a host calls this from a periodic job to sweep all."""
        store = self.ports.store
        if not isinstance(store, TraceLog):
            return 0
        return await store.purge_traces(self.ports.clock.now())

    def _finished(self, run_id: int, report: TurnReport, scope: TurnScope) -> TurnEvent:
        ctx = scope.context
        agent = ctx.agent_context if ctx is not None else None
        return TurnFinished(
            run_id,
            report.result,
            context_type=str(ctx.type) if ctx is not None else None,
            session_id=report.session_id,
            turn_id=report.turn_id,
            mode=ctx.mode if ctx is not None else None,
            agent_name=agent.name if agent is not None else None,
            agent_id=agent.id if agent is not None else None,
            request_model=agent.model if agent is not None else None,
            response_type=str(ctx.response_type)
            if ctx is not None and ctx.response_type is not None
            else None,
            llm_calls=scope.observer.rounds if isinstance(scope.observer, StepReporter) else 0,
            usage=scope.usage,
            context=ctx if self._capture_content else None,
            org=scope.caller.org,
            user=scope.caller.user,
        )

    def execute_sync(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> InvokeResult[AgentExecuteResponse]:
        """``execute`` for scripts without an event loop of their own."""
        return self.run_sync(
            request, caller, initial_mode=initial_mode, idempotency_key=idempotency_key
        ).result

    def run_sync(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> TurnReport:
        """``run`` for scripts without an event loop of their own.

        ``asyncio.run`` is called outside any ``except`` block, so a traceback logged
        during the turn carries no chained ``RuntimeError`` of the loop check.
        """
        if _loop_running():
            raise RuntimeError("run_sync called inside a running event loop; await run() instead")
        return asyncio.run(
            self.run(request, caller, initial_mode=initial_mode, idempotency_key=idempotency_key)
        )

    @staticmethod
    async def _rollback(scope: TurnScope) -> None:
        if scope.tx is None:
            return
        try:
            await scope.tx.rollback()
        except PROPAGATED:
            raise
        except BaseException:  # the turn already failed; a failing rollback must not hide why
            logger.exception("rollback failed")

    @staticmethod
    def _report(run: TurnRun, walked: Walked, recorder: TraceBuilder) -> TurnReport:
        scope = run.scope
        states, errors, faulted_step = walked.states, walked.errors, walked.faulted_step
        ctx = scope.context
        warnings = tuple(scope.warnings)
        if errors:  # nothing was persisted, so no mode change happened
            warnings = tuple(w for w in warnings if w.code != "several_mode_changes")
            result = ResponseResult.failure(errors, warnings)
        elif ctx is not None and ctx.response is not None:
            result = ResponseResult.success(ctx.response, warnings)
        else:  # cannot happen: `done` is reached only after a response was built
            result = ResponseResult.failure(
                [InvokeError(code=ErrorCode.INTERNAL, message="the turn ended without a response")]
            )
        session_id = _persisted_session_id(ctx, errors)
        turn_id = _persisted_turn_id(ctx, errors)
        entries = recorder.entries
        transitions = tuple([entry for entry in entries if type(entry) is TransitionRecord])
        checks = tuple([entry for entry in entries if type(entry) is CheckRecord])
        response_type = None
        if ctx is not None and ctx.response_type is not None and not errors:
            response_type = str(ctx.response_type)
        trace = StateTrace(
            context_type=str(ctx.type) if ctx is not None else None,
            outcome="faulted" if errors else "done",
            states=states,
            entries=tuple(entries),
            session_id=session_id,
            turn_id=turn_id,
            mode=ctx.mode if ctx is not None else None,
            response_type=response_type,
            error_codes=tuple([str(e.code) for e in result.errors]) if result.errors else (),
            faulted_step=faulted_step,
            warnings=tuple([warning.code for warning in warnings]) if warnings else (),
        )
        return TurnReport(
            result=result,
            context_type=ctx.type if ctx is not None else None,
            states=states,
            transitions=transitions,
            checks=checks,
            tool_calls=tuple(scope.tool_calls),
            mode=ctx.mode if ctx is not None else None,
            mode_changes=() if errors else tuple(scope.mode_changes),
            llm_calls=scope.llm_calls,
            session_id=session_id,
            turn_id=turn_id,
            faulted_step=faulted_step,
            warnings=warnings,
            branch=None if errors else scope.branch,
            trace=trace,
        )
