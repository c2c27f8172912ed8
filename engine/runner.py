"""The turn runner: ``TurnMachine`` compiled once per process into a table, run as a loop.

``compile_machine`` reads a machine class through python-statemachine's public
definition API — its ``states``, each state's ``transitions``, and each
transition's ``cond``, ``validators``, ``before``, ``on`` and ``after`` callback
specs — and makes a table: for each state, the transitions that leave it in
definition order, each with its callables resolved. Nothing about the path is
written here: add a transition to the class and the table has it.

A turn then walks that table (``walk``) with no ``StateChart`` instance and no
task per callback, in python-statemachine's order: the first transition whose
conditions hold is chosen (the path, by ``ctx.Type``); its validators run (the
guard, which raises to refuse), then its ``before`` and ``on`` callbacks (the
step); the machine moves to the target (``TransitionTaken``); then its ``after``
callbacks (the exit hook). An exception anywhere faults the turn: ``fault`` is
taken from wherever the machine stands, so a failed exit hook faults from the
target (the step was taken) and a failed guard or step from the source.

``StatechartCursor`` runs the same walk on python-statemachine's own runtime (one
``StateChart`` per turn, ``send`` per step): the reference the compiled runner is
held to (``Pipeline(runtime="statechart")``, tests/engine/test_runtimes.py).

What the compiled runner does not take, it refuses when it compiles (a
``MachineCompileError`` naming the callback): callbacks given by name rather than
as callables, the library's naming conventions (``on_<event>``, ``before_transition``
and the like) defined on the class, state entry and exit actions, and callback
parameters other than ``model``, ``event``, ``source`` and ``target``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from statemachine import State, StateChart

from aptix_pipeline.contracts import (
    AptixPipelineError,
    ErrorCode,
    InvokeError,
    PipelineStep,
    scrubbed_logger,
)
from aptix_pipeline.steps import (
    PROPAGATED,
    ErrorDetail,
    StepFaultError,
    exception_type,
    internal_text,
    runtime_error_in,
    settle_turn,
    traceback_text,
)
from aptix_pipeline.validators import TURN_CANCELLED, TURN_DEADLINE

from .events import StepEnded, StepReporter, StepStarted, TransitionTaken, TurnFaulted
from .machine import FAULT, UNINTERRUPTED, TurnMachine, TurnRun
from .records import quick_init
from .trace import FaultRecord, TransitionRecord

__all__ = [
    "FAULT_RECORD",
    "RUNTIMES",
    "CompiledMachine",
    "CompiledTransition",
    "MachineCompileError",
    "Runtime",
    "TurnStop",
    "Walked",
    "compile_machine",
    "walk",
]

logger = scrubbed_logger(__name__)

Runtime = Literal["compiled", "statechart"]
RUNTIMES: tuple[Runtime, ...] = ("compiled", "statechart")
"""``compiled`` (the default): the table loop; ``statechart``: python-statemachine's runtime."""

_PARAMETERS = frozenset({"model", "event", "source", "target"})


class MachineCompileError(AptixPipelineError, TypeError):
    """The machine class uses something the compiled runner does not run; the message says what."""


@dataclass(frozen=True, slots=True)
class _Callback:
    """One callback, resolved: how to call it and whether to await it.

    ``func`` is called with the model alone when that is all it asks for (``simple``),
    else through ``call`` with the arguments it names.
    """

    name: str
    func: Callable[..., Any]
    simple: bool
    call: Callable[[TurnRun, CompiledTransition], Any]
    is_async: bool
    expected: bool = True  # for a condition: True for ``cond``, False for ``unless``


@dataclass(frozen=True, slots=True)
class CompiledTransition:
    """One transition of the table: its event, states and callbacks in running order."""

    event: str
    source: State
    target: State
    conditions: tuple[_Callback, ...]
    validators: tuple[_Callback, ...]
    actions: tuple[_Callback, ...]  # ``before`` then ``on``
    after: tuple[_Callback, ...]
    record: TransitionRecord
    """What taking it puts in the trace (event, source id, target id)."""
    work: tuple[_Callback, ...] = ()
    """``validators`` then ``actions``: what runs before the machine moves."""
    before_move: tuple[tuple[Callable[[TurnRun], Any], bool], ...] = ()
    """``work`` as (a function of the model, whether it is a coroutine function)."""
    after_move: tuple[tuple[Callable[[TurnRun], Any], bool], ...] = ()
    """``after`` the same way."""
    keeps_usage: bool = False
    """Whether its record carries the model call's usage (``llm_client``, one call a round)."""

    def __post_init__(self) -> None:
        work = self.validators + self.actions
        object.__setattr__(self, "work", work)
        object.__setattr__(self, "keeps_usage", self.event == _LLM_CLIENT)
        object.__setattr__(self, "before_move", tuple(self._bound(c) for c in work))
        object.__setattr__(self, "after_move", tuple(self._bound(c) for c in self.after))

    def _bound(self, callback: _Callback) -> tuple[Callable[[TurnRun], Any], bool]:
        if callback.simple:
            return callback.func, callback.is_async
        call = callback.call
        return (lambda model: call(model, self)), callback.is_async

    def holds(self, model: TurnRun) -> bool:
        """Every condition has its expected value for this turn."""
        for condition in self.conditions:
            value = condition.func(model) if condition.simple else condition.call(model, self)
            if bool(value) is not condition.expected:
                return False
        return True


@dataclass(frozen=True, slots=True)
class CompiledMachine:
    """A machine class as a table; see the module docstring."""

    name: str
    initial: str
    finals: frozenset[str]
    routes: Mapping[str, tuple[CompiledTransition, ...]]
    """State id → the transitions that leave it, ``fault`` excepted, in definition order."""
    faults: Mapping[str, CompiledTransition]
    """State id → its ``fault`` transition."""

    def route(self, state: str, model: TurnRun) -> CompiledTransition:
        """The transition that moves the turn on from ``state``: the first whose conditions hold."""
        for transition in self.routes.get(state, ()):
            if not transition.conditions or transition.holds(model):
                return transition
        raise RuntimeError(f"no transition leaves state {state!r} for this turn")


def _value(name: str, model: TurnRun, transition: CompiledTransition) -> Any:
    if name == "model":
        return model
    if name == "event":
        return transition.event
    return transition.source if name == "source" else transition.target


def _resolve(spec: Any, machine: type[StateChart[Any]], where: str) -> _Callback:
    func = spec.func
    if not callable(func) or isinstance(func, property):
        raise MachineCompileError(
            f"{machine.__name__}.{where}: callback {func!r} is given by name; the compiled "
            "runner takes callables"
        )
    name = getattr(func, "__name__", repr(func))
    parameters = inspect.signature(func).parameters.values()
    names: list[str] = []
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            names.extend(sorted(_PARAMETERS - set(names)))
        elif parameter.name in _PARAMETERS:
            names.append(parameter.name)
        elif parameter.default is inspect.Parameter.empty:
            raise MachineCompileError(
                f"{machine.__name__}.{where}: callback {name} takes {parameter.name!r}; the "
                f"compiled runner passes only {', '.join(sorted(_PARAMETERS))}"
            )
    if names == ["model"]:

        def call(model: TurnRun, transition: CompiledTransition) -> Any:
            return func(model)

    else:
        keywords = tuple(names)

        def call(model: TurnRun, transition: CompiledTransition) -> Any:
            return func(**{key: _value(key, model, transition) for key in keywords})

    expected = spec.expected_value is not False
    is_async = inspect.iscoroutinefunction(func)
    return _Callback(name, func, names == ["model"], call, is_async, expected)


def _callbacks(specs: Any, machine: type[StateChart[Any]], where: str) -> tuple[_Callback, ...]:
    found = []
    for spec in specs:
        if spec.is_convention:  # e.g. on_<event>: only when the class defines one
            if hasattr(machine, str(spec.func)):
                raise MachineCompileError(
                    f"{machine.__name__}.{spec.func}: naming-convention callbacks are not run "
                    "by the compiled runner; attach the callable to the transition instead"
                )
            continue
        found.append(_resolve(spec, machine, where))
    return tuple(found)


def _check_state_actions(machine: type[StateChart[Any]], state: State) -> None:
    for group in (state.enter, state.exit):
        for spec in group:
            if not spec.is_convention or hasattr(machine, str(spec.func)):
                raise MachineCompileError(
                    f"{machine.__name__}.{state.id}: state entry/exit actions are not run by the "
                    "compiled runner; put the work on a transition"
                )


@functools.cache
def compile_machine(machine: type[StateChart[Any]] = TurnMachine) -> CompiledMachine:
    """The table of ``machine`` (built once per class and process); see the module docstring."""
    routes: dict[str, tuple[CompiledTransition, ...]] = {}
    faults: dict[str, CompiledTransition] = {}
    initial: str | None = None
    for state in machine.states:
        _check_state_actions(machine, state)
        if state.initial:
            initial = state.id
        leaving: list[CompiledTransition] = []
        for transition in state.transitions:
            target = transition.target
            if target is None or len(transition.targets) != 1:
                raise MachineCompileError(
                    f"{machine.__name__}.{transition.event}: the compiled runner takes "
                    "transitions with exactly one target"
                )
            for event in transition.events:
                where = f"{event} ({state.id} → {target.id})"
                compiled = CompiledTransition(
                    event=str(event),
                    source=state,
                    target=target,
                    conditions=_callbacks(transition.cond, machine, where),
                    validators=_callbacks(transition.validators, machine, where),
                    actions=_callbacks(transition.before, machine, where)
                    + _callbacks(transition.on, machine, where),
                    after=_callbacks(transition.after, machine, where),
                    record=TransitionRecord(str(event), state.id, target.id),
                )
                if compiled.event == FAULT:
                    faults[state.id] = compiled
                else:
                    leaving.append(compiled)
        routes[state.id] = tuple(leaving)
    if initial is None:
        raise MachineCompileError(f"{machine.__name__} has no initial state")
    finals = frozenset(state.id for state in machine.states if state.final)
    return CompiledMachine(machine.__name__, initial, finals, routes, faults)


# --- cursors: one turn's position, on either runtime -------------------------------------

_LLM_CLIENT = str(PipelineStep.LLM_CLIENT)


def _with_usage(record: TransitionRecord, model: TurnRun) -> TransitionRecord:
    """An ``llm_client`` transition's record with its model call's usage (``CallUsage``),
    which the turn's ``StepReporter`` kept when the call ended; as it was without one."""
    observer = model.scope.observer
    usage = observer.take_usage() if isinstance(observer, StepReporter) else None
    if usage is None:
        return record
    return TransitionRecord(record.event, record.source, record.target, usage)


class _Cursor(Protocol):
    @property
    def state(self) -> str: ...

    async def take(self, transition: CompiledTransition) -> None: ...

    async def fault(self) -> None: ...


class CompiledCursor:
    """A turn on the compiled table: a state id and a loop over the callbacks."""

    __slots__ = ("machine", "model", "state")

    def __init__(self, machine: CompiledMachine, model: TurnRun) -> None:
        self.machine, self.model, self.state = machine, model, machine.initial

    async def take(self, transition: CompiledTransition) -> None:
        """Guard and step (``validators``, ``before``, ``on``), move, exit hook (``after``).

        The first callback that raises stops the rest: before the move the turn stays
        where it was, after it the transition was taken.
        """
        model = self.model
        for run, is_async in transition.before_move:
            result = run(model)
            if result is not None and (is_async or inspect.isawaitable(result)):
                await result
        record = transition.record
        if transition.keeps_usage:
            record = _with_usage(record, model)
        self.state = record.target
        keep = model.keep_transition
        if keep is None:
            model.emit(TransitionTaken(model.run_id, record))
        else:
            keep(record)
        for run, is_async in transition.after_move:
            result = run(model)
            if result is not None and (is_async or inspect.isawaitable(result)):
                await result

    async def fault(self) -> None:
        """Take ``fault`` from where the turn stands."""
        await self.take(self.machine.faults[self.state])


class _TransitionListener:
    """python-statemachine listener: the reference runtime's ``TransitionTaken``."""

    def __init__(self, model: TurnRun) -> None:
        self.model = model

    def on_enter_state(self, event: Any, source: State | None, target: State) -> None:
        if source is None or str(event) == "__initial__":
            return
        model, record = self.model, TransitionRecord(str(event), source.id, target.id)
        if record.event == _LLM_CLIENT:
            record = _with_usage(record, model)
        if model.keep_transition is None:
            model.emit(TransitionTaken(model.run_id, record))
        else:
            model.keep_transition(record)


class StatechartCursor:
    """A turn on python-statemachine's own runtime: one ``StateChart`` instance, ``send``."""

    __slots__ = ("chart", "model")

    def __init__(self, machine: type[StateChart[Any]], model: TurnRun) -> None:
        self.model = model
        self.chart = machine(model=model, listeners=[_TransitionListener(model)])

    @property
    def state(self) -> str:
        """The active state's id (the chart writes it on the model)."""
        return str(self.model.state)

    async def start(self) -> None:
        """Enter the initial state."""
        await self.chart.activate_initial_state()

    async def take(self, transition: CompiledTransition) -> None:
        """Send the transition's event (the chart checks cond and guard itself).

        Cancelled inside a step (the turn deadline), the chart has left the source and
        not entered the target; it is put back on the source, where ``fault`` leaves
        from, through the library's low-level ``current_state_value``.
        """
        try:
            await self.chart.send(transition.event)
        except asyncio.CancelledError:
            if not self.chart.configuration:
                self.chart.current_state_value = transition.source.value
            raise

    async def fault(self) -> None:
        """Send ``fault``."""
        await self.chart.send(FAULT)


# --- the walk: the one loop both runtimes share -----------------------------------------


class TurnStop:
    """Cancels a running turn from outside it: a stream whose consumer went away.

    ``request`` stops the turn the way its deadline would: the step running now is
    cancelled and the turn faults with ``DESIGN/streaming/consumer-gone``, so its
    transaction is rolled back and nothing is stored. A turn whose commit has begun
    is not stopped (``UNINTERRUPTED``): its answer stands. Call it from the turn's
    event loop.

    ``hold``, when given, is awaited before the commit starts (and within the
    deadline): a stream holds the turn there until its consumer has taken every
    item, so a turn is stored only once its client has seen all of its text.
    """

    __slots__ = ("_limit", "hold", "requested")

    def __init__(self, hold: Callable[[], Awaitable[None]] | None = None) -> None:
        self.requested = False
        self.hold = hold
        self._limit: asyncio.Timeout | None = None

    def request(self) -> None:
        """Stop the turn (a no-op once asked, or once the turn is past its commit)."""
        if self.requested:
            return
        self.requested = True
        limit = self._limit
        if limit is not None and not limit.expired():
            limit.reschedule(asyncio.get_running_loop().time())

    def _attach(self, limit: asyncio.Timeout | None) -> None:
        self._limit = limit
        if limit is not None and self.requested:
            limit.reschedule(asyncio.get_running_loop().time())


FAULT_RECORD = "aptix_turn_fault"
"""The attribute, true, of the log record that tells why a turn faulted (with the
traceback of what a host's code raised): the turn's ``InvokeResult`` says what failed,
so a terminal may show the record only when asked (``aptix run --verbose``)."""


def _log_cause(event: str, error: StepFaultError, cause: BaseException, capture: bool) -> None:
    """The traceback of what a host's port, tool, hook or rule raised, once (D292).

    Its messages, and the errors' (which quote them), only with content capture:
    they may quote user content (D162).
    """
    codes = ", ".join(str(e.code) for e in error.errors)
    marked = {FAULT_RECORD: True}  # a front door that shows the turn's errors can skip it
    if capture:
        logger.error("step %s faulted (%s): %s", event, codes, error, exc_info=cause, extra=marked)
    else:
        logger.error(
            "step %s faulted (%s): %s raised\n%s",
            event,
            codes,
            exception_type(cause),
            traceback_text(cause, messages=False),
            extra=marked,
        )


def _errors_of(
    event: str, error: BaseException, capture: bool = False, detail: ErrorDetail = "short"
) -> tuple[InvokeError, ...]:
    if isinstance(error, StepFaultError):
        cause = error.__cause__
        if cause is not None and (
            not isinstance(cause, AptixPipelineError) or cause.__cause__ is not None
        ):
            # The engine's own refusals (a PermanentPortError, a replay's divergence)
            # say all in words; anything else a host's code raised is logged.
            _log_cause(event, error, cause, capture)
        return error.errors
    logger.exception("step %s raised", event, exc_info=error)
    return (
        InvokeError(
            code=ErrorCode.INTERNAL,
            message=f"step {event} raised {internal_text(error, detail)}",
            field=event,
        ),
    )


def _reraise_runtime_error(error: BaseException) -> None:
    """Raise the hosting runtime's own error when one is in ``error``'s chain.

    A step, guard or exit hook that failed because the runtime hosting the turn
    refused something (Temporal's nondeterminism or sandbox errors, registered by
    the durable adapter with ``propagate_also``) does not fault the turn: the error
    leaves ``Pipeline.run`` so that the runtime retries the work (D531).
    """
    runtime_error = runtime_error_in(error)
    if runtime_error is not None:
        raise runtime_error


def _cause_of(error: BaseException) -> BaseException | None:
    """The exception behind a fault the engine named: a ``StepFaultError``'s cause (what a
    host's port, tool, hook or rule raised). A step that raised is logged, not carried:
    its traceback runs through the runtime, which differs between runtimes."""
    return error.__cause__ if isinstance(error, StepFaultError) else None


@quick_init
@dataclass(frozen=True, slots=True)
class Walked:
    """Where a walk ended: the states entered in order, the errors and the faulted step."""

    states: tuple[str, ...]
    errors: tuple[InvokeError, ...]
    faulted_step: str | None


class _Walk:
    """One walk's position and outcome, kept across the deadline's scope (``walk``)."""

    __slots__ = (
        "compiled",
        "cursor",
        "errors",
        "event",
        "faulted_step",
        "in_step",
        "model",
        "source",
        "states",
    )

    def __init__(self, model: TurnRun, compiled: CompiledMachine, cursor: _Cursor) -> None:
        self.model, self.compiled, self.cursor = model, compiled, cursor
        self.states = [cursor.state]
        self.errors: tuple[InvokeError, ...] = ()
        self.faulted_step: str | None = None
        self.event, self.source, self.in_step = "?", cursor.state, False

    def _started(self, event: str) -> None:
        model = self.model
        self.event, self.source, self.in_step = event, self.states[-1], True
        if model.step_events:
            ctx = model.scope.context
            context_type = str(ctx.type) if ctx is not None else None
            model.emit(StepStarted(model.run_id, event, self.source, context_type))

    def _ended(self) -> None:
        model, state = self.model, self.cursor.state
        self.in_step = False
        if model.step_events:
            ctx = model.scope.context
            context_type, mode = (str(ctx.type), ctx.mode) if ctx is not None else (None, None)
            model.emit(
                StepEnded(model.run_id, self.event, state, state != self.source, context_type, mode)
            )

    def _faulted(
        self, event: str, errors: tuple[InvokeError, ...], cause: BaseException | None = None
    ) -> None:
        self.errors, self.faulted_step = errors, event
        self.model.emit(TurnFaulted(self.model.run_id, _fault_record(event, errors), errors, cause))

    async def advance(self, stop_before: frozenset[str] = frozenset()) -> None:
        """Take transitions until a final state, or until the next is one of ``stop_before``.

        The step events are made inline here, not through ``_started``/``_ended``: this
        loop runs a dozen times a turn.
        """
        compiled, cursor, model, states = self.compiled, self.cursor, self.model, self.states
        emit, run_id, scope, step_events = model.emit, model.run_id, model.scope, model.step_events
        finals = compiled.finals
        while states[-1] not in finals:
            if self.errors:  # faulted where a deadline stopped the walk: finish the fault
                await self._fault()
                continue
            source, event = states[-1], "?"
            try:
                transition = compiled.route(source, model)
                event = transition.event
                if event in stop_before:
                    return
                self.event, self.source, self.in_step = event, source, True
                if step_events:
                    ctx = scope.context
                    context_type = str(ctx.type) if ctx is not None else None
                    emit(StepStarted(run_id, event, source, context_type))
                try:
                    await cursor.take(transition)
                except PROPAGATED:
                    raise
                except BaseException as error:  # a failed guard or exit hook, a raising step
                    _reraise_runtime_error(error)
                    detail = scope.options.error_detail
                    errors = _errors_of(event, error, scope.capture_content, detail)
                    self._faulted(event, errors, _cause_of(error))
                self.in_step = False
                if step_events:
                    ctx, state = scope.context, cursor.state
                    context_type, mode = (
                        (str(ctx.type), ctx.mode) if ctx is not None else (None, None)
                    )
                    emit(StepEnded(run_id, event, state, state != source, context_type, mode))
            except Exception as error:  # no route leaves the state: never raise
                _reraise_runtime_error(error)
                self._faulted(event, _errors_of(event, error), _cause_of(error))
            if self.errors:
                await self._fault()
            else:
                states.append(cursor.state)

    async def _fault(self) -> None:
        cursor, states = self.cursor, self.states
        if cursor.state != states[-1]:  # a failed exit hook: the step was taken
            states.append(cursor.state)
        if cursor.state not in self.compiled.finals:
            await cursor.fault()
            states.append(cursor.state)

    def expired(self, error: InvokeError) -> None:
        """The deadline or a ``TurnStop`` stopped the walk (inside ``self.event``, if a step
        was running): the turn faults there with ``error``."""
        if self.errors:  # it stopped the fault of an earlier error: that error stands
            return
        if not self.in_step:
            self._started(self.event)
        self._faulted(self.event, (error,))
        self._ended()


def _stopped_error(model: TurnRun, seconds: float | None, event: str) -> InvokeError:
    """Why the walk was stopped during ``event``: its ``TurnStop``, else its deadline."""
    stop = model.stop
    if (stop is not None and stop.requested) or seconds is None:
        return TURN_CANCELLED.error(f"the consumer left during {event}", field="Stream")
    return TURN_DEADLINE.error(
        f"{seconds:g} s passed during {event}", field="turn_deadline_seconds"
    )


async def walk(
    model: TurnRun,
    runtime: Runtime = "compiled",
    machine: type[StateChart[Any]] = TurnMachine,
) -> Walked:
    """Run one turn from the initial state to a final one; never raises for a failing step.

    Emits ``StepStarted``/``StepEnded`` around each transition and ``TurnFaulted``
    when one fails; the runtime emits ``TransitionTaken`` and the callbacks
    ``CheckRan``.

    The turn deadline (``PipelineOptions.turn_deadline_seconds``) cancels whatever
    step is running when it passes, and the turn faults with ``deadline_exceeded``
    (``DESIGN/limits/turn-deadline``). It never interrupts the commit
    (``UNINTERRUPTED``): those transitions run after the deadline's scope has
    closed, and only if the deadline has not passed by then. The turn's
    ``TurnStop``, when it has one, stops it the same way, with
    ``DESIGN/streaming/consumer-gone``.
    """
    compiled = compile_machine(machine)
    cursor: _Cursor
    if runtime == "statechart":
        chart = StatechartCursor(machine, model)
        await chart.start()
        cursor = chart
    else:
        cursor = CompiledCursor(compiled, model)
    walking = _Walk(model, compiled, cursor)
    seconds = model.scope.options.turn_deadline_seconds
    stop: TurnStop | None = model.stop
    if seconds is None and stop is None:
        await walking.advance()
    else:
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        try:
            async with asyncio.timeout_at(deadline) as limit:
                if stop is not None:
                    stop._attach(limit)
                await walking.advance(stop_before=UNINTERRUPTED)
                hold = stop.hold if stop is not None else None
                if hold is not None and walking.states[-1] not in compiled.finals:
                    # the commit is next: a stop while held faults there, as the deadline does
                    walking.event = compiled.route(walking.states[-1], model).event
                    await hold()
        except TimeoutError:
            walking.expired(_stopped_error(model, seconds, walking.event))
        else:
            past = deadline is not None and loop.time() >= deadline
            if walking.states[-1] not in compiled.finals and (
                past or (stop is not None and stop.requested)
            ):
                walking.event = compiled.route(walking.states[-1], model).event
                # past the deadline, or stopped: no commit starts
                walking.expired(_stopped_error(model, seconds, walking.event))
        finally:
            if stop is not None:
                stop._attach(None)
        await walking.advance()
    if model.scope.unsettled or model.scope.reserved is not None:
        await settle_turn(model.scope)  # the request's last model call (steps/budget.py)
    return Walked(tuple(walking.states), walking.errors, walking.faulted_step)


def _fault_record(step: str, errors: Sequence[InvokeError]) -> FaultRecord:
    return FaultRecord(
        step,
        tuple(str(error.code) for error in errors),
        tuple(error.rule_id for error in errors if error.rule_id),
    )
