"""AGN-036 §4 as a statechart: states are the points between steps, transitions the steps.

Three paths leave ``validated``, chosen by ``ctx.Type`` (DESIGN.md "The machine"):

```
Initial:       request_handler → agent_context_resolver → agent_session_creator ─┐
FollowOn:      request_handler → session_restorer → agent_context_loader ────────┤
Continuation:  request_handler → session_restorer → client_tool_continuation_resolver
                                                  → agent_context_loader ────────┤
   prompt_content_provider_initializer → reasoner → llm_client (⟲ server_tool_round)
                                       → response_builder → complete → done
any failed rule, failing port or raising step → fault → faulted
```

Every step transition names its four parts, the four columns of AGN-036 §4:
``cond=`` the path it belongs to, ``validators=`` its PRE rules (the guard, which
raises, so a failed rule faults the turn instead of silently taking no transition),
``on=`` the step itself and ``after=`` its POST rules (the exit hook). The three
places where a step departs from that pattern are named callbacks attached where
they apply: §4.1 has no ``validators=`` (PRE is N/A, and there is no context yet),
§4.10's guard first takes ``snapshot_before_response`` (its POST compares against
it), and §4.9's exit hook is ``post_llm_client_once_settled`` (the POST waits while
another server round follows, DESIGN.md R5). Two transitions are not DDR steps:
``server_tool_round`` loops back for another model call (guarded by the round
limit) and ``complete`` commits the turn, so ``done`` means persisted. ``fault``
leaves every state that is not final.

A host's own guard rules (``HostRule``, ``Pipeline(rules=...)``) join a step's
guard: once its PRE rules have passed, the guard runs the step's host rules
(``TurnRun.host_guards``), and its one check record names both (D290). The class
stays the same for every pipeline; the rules come with the turn.

This class is the one definition of the path: the diagram is drawn from it
(``engine/diagram.py``), and turns run on a runner compiled from it once per
process (``engine/runner.py``), or on python-statemachine's own runtime as the
reference (``Pipeline(runtime="statechart")``).

python-statemachine 3.x notes, read from its engine: a ``StateChart`` turns an
exception in a callback into an ``error.execution`` event and, when nothing
handles it, carries on — a raising step could reach ``done``. This machine sets
``catch_errors_as_events = False`` so every exception reaches the runner, which
sends ``fault``; and no transition into a final state does work that could fail
after the state is entered (an ``after`` hook there could no longer fault).
``allow_event_without_transition = False`` makes an event that takes no
transition an error rather than a silent no-op.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from statemachine import State, StateChart

from aptix_pipeline.contracts import (
    ContextType,
    InvokeError,
    PipelineStep,
    scrubbed_logger,
)
from aptix_pipeline.steps import (
    MAX_RULE_DETAIL_CHARS,
    PROPAGATED,
    STEP_FUNCTIONS,
    StepFaultError,
    StepFunction,
    TurnScope,
    bounded,
    check_round_limit,
    complete_turn,
    error_text,
    model_request,
    reserve_call,
)
from aptix_pipeline.validators import (
    BUDGET_UNPRICED,
    BUDGET_WITHIN,
    ContextSnapshot,
    HostRule,
    HostRules,
    Phase,
    snapshot_context,
    step_rule_ids,
    utf8_text,
    validate_post_step,
    validate_pre_step,
)

from .events import CheckRan, EntrySink, EventSink
from .trace import CheckRecord

__all__ = [
    "COMPLETE",
    "FAULT",
    "SERVER_TOOL_ROUND",
    "UNINTERRUPTED",
    "HostGuard",
    "TurnMachine",
    "TurnRun",
    "host_guards",
]

logger = scrubbed_logger(__name__)

SERVER_TOOL_ROUND = "server_tool_round"
COMPLETE = "complete"
FAULT = "fault"
UNINTERRUPTED = frozenset({COMPLETE})
"""Transitions the turn deadline never interrupts: the commit. Past the deadline a turn
does not start one; once started, it finishes and the turn's answer stands."""


def _no_events(event: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class HostGuard:
    """A step's host rules, as its guard runs them once its PRE rules have passed.

    ``passed`` is the guard's record when every rule held: the step's PRE rule ids,
    then its host rule ids.
    """

    rules: tuple[HostRule, ...]
    passed: CheckRecord


_NO_HOST_GUARDS: Mapping[PipelineStep, HostGuard] = MappingProxyType({})


def host_guards(rules: HostRules) -> Mapping[PipelineStep, HostGuard]:
    """Each step's ``HostGuard`` for a pipeline's host rules (made once per pipeline)."""
    guards = {
        step: HostGuard(
            hosted,
            CheckRecord(
                step.value, "PRE", (*step_rule_ids(step, Phase.PRE), *(r.id for r in hosted))
            ),
        )
        for step, hosted in rules.by_step.items()
    }
    return MappingProxyType(guards) if guards else _NO_HOST_GUARDS


@dataclass(slots=True)
class TurnRun:
    """The machine's model: the turn's scope, its step functions and where its events go.

    ``state`` is python-statemachine's state field (the reference runtime writes it;
    the compiled runner keeps its own cursor).
    """

    scope: TurnScope
    step_functions: Mapping[PipelineStep, StepFunction] = field(
        default_factory=lambda: STEP_FUNCTIONS
    )
    emit: EventSink = _no_events
    run_id: int = 0
    step_events: bool = True
    """Whether anyone reads ``StepStarted``/``StepEnded`` (else the runner makes none)."""
    state: Any = None
    before_response: ContextSnapshot | None = None
    stop: Any = None
    """A ``TurnStop`` (``engine/runner.py``) that cancels the turn from outside, or ``None``."""
    host_guards: Mapping[PipelineStep, HostGuard] = field(default_factory=lambda: _NO_HOST_GUARDS)
    """The host's rules, by step (``host_guards``); empty for a pipeline without any."""
    keep_check: EntrySink | None = None
    """Where a check's record goes (``TurnEvents.entry_sink(CheckRan)``); ``None``: it is
    emitted as ``CheckRan``."""
    keep_transition: EntrySink | None = None
    """Where a transition's record goes (``TurnEvents.entry_sink(TransitionTaken)``);
    ``None``: it is emitted as ``TransitionTaken``."""

    def check_ran(self, record: CheckRecord) -> None:
        """A guard or exit hook ran: ``CheckRan``, or its record alone (``keep_check``)."""
        keep = self.keep_check
        if keep is None:
            self.emit(CheckRan(self.run_id, record))
        else:
            keep(record)


# --- cond=: the path, by ctx.Type, never by trial (DESIGN.md "The machine") -------------


def is_initial(model: TurnRun) -> bool:
    """The Initial path: a new session."""
    return model.scope.ctx.type is ContextType.INITIAL


def is_resumed(model: TurnRun) -> bool:
    """FollowOn or continuation: an existing session is restored."""
    return model.scope.ctx.type is not ContextType.INITIAL


def is_follow_on(model: TurnRun) -> bool:
    """The FollowOn path."""
    return model.scope.ctx.type is ContextType.FOLLOW_ON


def is_continuation(model: TurnRun) -> bool:
    """The client tool call continuation path."""
    return model.scope.ctx.type is ContextType.CLIENT_TOOL_CALL_CONTINUATION


def needs_another_round(model: TurnRun) -> bool:
    """The model's reply was answered by the engine itself (DESIGN.md R5)."""
    return model.scope.another_round


def has_outcome(model: TurnRun) -> bool:
    """The loop has exited: Final or ToolContinuation (AGN-036 §4.9)."""
    return not model.scope.another_round


# --- validators= / on= / after=: a step's PRE rules, its work, its POST rules -----------


def _checked(model: TurnRun, passed: CheckRecord, result: Any) -> None:
    """Report the check (``CheckRan``) and raise its errors when a rule failed.

    ``passed`` is the step's record of a check that passed, made once: a passing
    check (nearly all of them) allocates nothing for the trace but its event.
    """
    if result.successful:
        keep = model.keep_check
        if keep is None:
            model.emit(CheckRan(model.run_id, passed))
        else:
            keep(passed)
        return
    model.check_ran(CheckRecord(passed.step, passed.phase, passed.rule_ids, result.rule_ids))
    raise StepFaultError(result.errors)


def _verdict(rule: HostRule, model: TurnRun) -> InvokeError | None:
    """What ``rule``'s check says of the turn's context: ``None`` when it holds.

    A check that raises (any exception but ``PROPAGATED``'s) or answers other than
    ``True``, ``False`` or a string faults the turn under the rule's own id and
    code, the exception told per ``PipelineOptions.error_detail``; the runner logs
    the cause. A string is the rule's own words, cut to ``MAX_RULE_DETAIL_CHARS``.
    """
    try:
        verdict = rule.check(model.scope.ctx)
    except PROPAGATED:
        raise
    except BaseException as error:
        told = error_text(error, model.scope.options.error_detail)
        raise StepFaultError([rule.error(f"the rule raised {told}")]) from error
    if verdict is True:
        return None
    if verdict is False:
        return rule.error()
    if isinstance(verdict, str):
        return rule.error(bounded(utf8_text(verdict), MAX_RULE_DETAIL_CHARS) or None)
    raise StepFaultError(
        [rule.error(f"the rule returned {type(verdict).__name__}, not True, False or a str")]
    )


def _host_checked(model: TurnRun, hosted: HostGuard) -> None:
    """Run a step's host rules (its PRE rules passed); report one check for the guard."""
    errors: list[InvokeError] = []
    try:
        for rule in hosted.rules:
            error = _verdict(rule, model)
            if error is not None:
                errors.append(error)
    except StepFaultError as fault:  # the rules before it reported too
        errors.extend(fault.errors)
        _report_host_check(model, hosted, errors)
        raise StepFaultError(errors) from fault.__cause__
    _report_host_check(model, hosted, errors)
    if errors:
        raise StepFaultError(errors)


def _report_host_check(model: TurnRun, hosted: HostGuard, errors: list[InvokeError]) -> None:
    passed = hosted.passed
    if not errors:
        model.check_ran(passed)
        return
    failed = tuple(error.rule_id for error in errors if error.rule_id)
    model.check_ran(CheckRecord(passed.step, "PRE", passed.rule_ids, failed))


@functools.cache
def pre(step: PipelineStep) -> Callable[[TurnRun], None]:
    """The guard of ``step``: its PRE rule set (``validate_pre_step``, AGN-036 §4), then
    the host's rules for it, if any (``TurnRun.host_guards``)."""
    rule_ids = step_rule_ids(step, Phase.PRE)
    passed = CheckRecord(step.value, "PRE", rule_ids)

    def guard(model: TurnRun) -> None:
        result = validate_pre_step(model.scope.ctx, step)
        if not result.successful:
            _checked(model, passed, result)
            return
        hosted = model.host_guards.get(step) if model.host_guards else None
        if hosted is not None:
            _host_checked(model, hosted)
            return
        keep = model.keep_check  # _checked's passing case, inline: it runs every step
        if keep is None:
            model.emit(CheckRan(model.run_id, passed))
        else:
            keep(passed)

    guard.__name__ = guard.__qualname__ = f"pre_{step.value}"
    guard.__doc__ = f"AGN-036 PRE of {step.value}: {', '.join(rule_ids)}"
    return guard


@functools.cache
def run(step: PipelineStep) -> Callable[[TurnRun], Awaitable[None]]:
    """The action of ``step``: its step function (``Pipeline(steps=...)`` may replace it).

    The action hands back the step function's awaitable for the runtime to await
    (both runtimes await what a callback returns): no coroutine of its own per step.
    """

    def action(model: TurnRun) -> Awaitable[None]:
        return model.step_functions[step](model.scope)

    action.__name__ = action.__qualname__ = step.value
    action.__doc__ = f"AGN-036 step {step.value}"
    return action


@functools.cache
def post(step: PipelineStep) -> Callable[[TurnRun], None]:
    """The exit hook of ``step``: its POST rule set (``validate_post_step``, AGN-036 §4)."""
    rule_ids = step_rule_ids(step, Phase.POST)
    passed = CheckRecord(step.value, "POST", rule_ids)

    def exit_hook(model: TurnRun) -> None:
        result = validate_post_step(model.scope.ctx, step, before=model.before_response)
        if not result.successful:
            _checked(model, passed, result)
            return
        keep = model.keep_check  # _checked's passing case, inline: it runs every step
        if keep is None:
            model.emit(CheckRan(model.run_id, passed))
        else:
            keep(passed)

    exit_hook.__name__ = exit_hook.__qualname__ = f"post_{step.value}"
    exit_hook.__doc__ = f"AGN-036 POST of {step.value}: {', '.join(rule_ids)}"
    return exit_hook


def snapshot_before_response(model: TurnRun) -> None:
    """§4.10: keep the context as PRE saw it; POST checks that nothing but Response changed."""
    model.before_response = snapshot_context(model.scope.ctx)


def post_llm_client_once_settled(model: TurnRun) -> None:
    """§4.9 POST, deferred while another server round follows (DESIGN.md R5).

    "Exactly one outcome" holds when the loop exits; a round that goes on records
    the check as deferred.
    """
    if model.scope.another_round:
        model.check_ran(_LLM_CLIENT_POST_DEFERRED)
        return
    post(PipelineStep.LLM_CLIENT)(model)


_LLM_CLIENT_POST_DEFERRED = CheckRecord(
    PipelineStep.LLM_CLIENT.value,
    "POST",
    step_rule_ids(PipelineStep.LLM_CLIENT, Phase.POST),
    deferred=True,
)


_BUDGET_RULES = (BUDGET_WITHIN.id, BUDGET_UNPRICED.id)
_BUDGET_PASSED = CheckRecord(PipelineStep.LLM_CLIENT.value, "PRE", _BUDGET_RULES)


def within_budget(model: TurnRun) -> Awaitable[None] | None:
    """The guard of ``llm_client``: reserve the model call against the budgets
    (``DESIGN/budget/within``, ``DESIGN/budget/unpriced``; ``steps/budget.py``).

    Nothing to await for a turn that keeps no usage. A turn with budgets, or whose
    prices refuse unpriced calls, records the check; one that only keeps usage
    reserves without a check to record.
    """
    scope = model.scope
    if scope.ports.usage is None:
        return None
    return _reserve(model)


async def _reserve(model: TurnRun) -> None:
    scope = model.scope
    request = model_request(scope)
    scope.next_request = None if scope.resumed else request  # resumed calls add messages
    options = scope.options
    prices = options.prices
    checked = bool(options.budgets) or (prices is not None and prices.refuses_unpriced)
    try:
        await reserve_call(scope, request)
    except StepFaultError as fault:
        if checked:
            failed = tuple(error.rule_id for error in fault.errors if error.rule_id)
            model.check_ran(CheckRecord(_BUDGET_PASSED.step, "PRE", _BUDGET_RULES, failed))
        raise
    if checked:
        model.check_ran(_BUDGET_PASSED)


def within_round_limit(model: TurnRun) -> None:
    """The guard of ``server_tool_round``: ``max_server_tool_rounds`` (DESIGN.md R5)."""
    check_round_limit(model.scope)


async def commit(model: TurnRun) -> None:
    """``complete``: persist the turn and commit its transaction.

    Once begun, the commit runs to its end even if the turn's task is cancelled: a
    store never sees half a commit abandoned, and the turn deadline is never checked
    inside it (``engine/runner.py``, ``UNINTERRUPTED``). See ``uninterrupted``.
    """
    await uninterrupted(complete_turn(model.scope))


async def uninterrupted(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end, whatever cancels the task awaiting it (D201).

    ``work`` runs inline, in the caller's task, until it first waits: a cancellation
    reaches a task only where it waits, so a commit that never waits (a memory
    store's) cannot be interrupted and needs no task of its own. At its first wait,
    the rest of it becomes a task of its own, awaited through ``asyncio.shield``: a
    cancelled caller leaves it running, and its failure is logged, not lost.
    """
    try:
        waiting = work.send(None)
    except StopIteration:
        return
    except BaseException:
        work.close()
        raise
    committing = asyncio.ensure_future(_Resumed(work, waiting))
    try:
        await asyncio.shield(committing)
    except asyncio.CancelledError:
        # The caller is gone; the commit goes on, and its failure is logged, not lost.
        committing.add_done_callback(_log_orphaned_commit)
        raise


class _Resumed(Coroutine[Any, Any, None]):
    """The rest of a coroutine that has begun and waits on ``waiting``, as a coroutine a
    task can run: its first step hands that wait to the task; then every step, and
    anything thrown in (a cancellation, even before the task's first step), goes to
    the work itself, as ``await`` would."""

    __slots__ = ("_waiting", "_work")

    def __init__(self, work: Coroutine[Any, Any, None], waiting: Any) -> None:
        self._work, self._waiting = work, waiting

    def send(self, value: Any) -> Any:
        """The wait the work began with, the first time; then the work's next wait."""
        waiting = self._waiting
        if waiting is not _HANDED_OVER:
            self._waiting = _HANDED_OVER
            return waiting
        return self._work.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any:
        """Throw into the work, where it waits."""
        self._waiting = _HANDED_OVER
        if val is None and tb is None:
            return self._work.throw(typ)
        return self._work.throw(typ, val, tb)  # pragma: no cover - asyncio throws one

    def close(self) -> None:
        """Close the work."""
        self._work.close()

    def __await__(self) -> Generator[Any, None, None]:
        raise TypeError("the rest of a commit runs as a task, it is not awaited")


_HANDED_OVER = object()


def _log_orphaned_commit(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("a cancelled turn's commit failed", exc_info=task.exception())


class TurnMachine(StateChart[TurnRun]):
    """One agent turn (AGN-036 §4); see the module docstring."""

    catch_errors_as_events = False
    allow_event_without_transition = False

    received = State(initial=True)
    validated = State()
    session_restored = State()
    agent_context_resolved = State()
    continuation_resolved = State()
    session_created = State()
    agent_context_loaded = State()
    prompt_ready = State()
    reasoning = State()
    llm_answered = State()
    response_built = State()
    done = State(final=True)
    faulted = State(final=True)

    # §4.1 RequestHandler: PRE is N/A
    request_handler = received.to(
        validated,
        on=run(PipelineStep.REQUEST_HANDLER),
        after=post(PipelineStep.REQUEST_HANDLER),
    )
    # §4.2 SessionRestorer: FollowOn and continuation
    session_restorer = validated.to(
        session_restored,
        cond=is_resumed,
        validators=pre(PipelineStep.SESSION_RESTORER),
        on=run(PipelineStep.SESSION_RESTORER),
        after=post(PipelineStep.SESSION_RESTORER),
    )
    # §4.3 AgentContextResolver: Initial
    agent_context_resolver = validated.to(
        agent_context_resolved,
        cond=is_initial,
        validators=pre(PipelineStep.AGENT_CONTEXT_RESOLVER),
        on=run(PipelineStep.AGENT_CONTEXT_RESOLVER),
        after=post(PipelineStep.AGENT_CONTEXT_RESOLVER),
    )
    # §4.4 ClientToolContinuationResolver: continuation
    client_tool_continuation_resolver = session_restored.to(
        continuation_resolved,
        cond=is_continuation,
        validators=pre(PipelineStep.CLIENT_TOOL_CONTINUATION_RESOLVER),
        on=run(PipelineStep.CLIENT_TOOL_CONTINUATION_RESOLVER),
        after=post(PipelineStep.CLIENT_TOOL_CONTINUATION_RESOLVER),
    )
    # §4.5 AgentSessionCreator: Initial
    agent_session_creator = agent_context_resolved.to(
        session_created,
        validators=pre(PipelineStep.AGENT_SESSION_CREATOR),
        on=run(PipelineStep.AGENT_SESSION_CREATOR),
        after=post(PipelineStep.AGENT_SESSION_CREATOR),
    )
    # §4.6 AgentContextLoader: FollowOn, and continuation once resolved
    agent_context_loader = session_restored.to(
        agent_context_loaded,
        cond=is_follow_on,
        validators=pre(PipelineStep.AGENT_CONTEXT_LOADER),
        on=run(PipelineStep.AGENT_CONTEXT_LOADER),
        after=post(PipelineStep.AGENT_CONTEXT_LOADER),
    ) | continuation_resolved.to(
        agent_context_loaded,
        validators=pre(PipelineStep.AGENT_CONTEXT_LOADER),
        on=run(PipelineStep.AGENT_CONTEXT_LOADER),
        after=post(PipelineStep.AGENT_CONTEXT_LOADER),
    )
    # §4.7 PromptContentProviderInitializer: every path joins here
    prompt_content_provider_initializer = session_created.to(
        prompt_ready,
        validators=pre(PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER),
        on=run(PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER),
        after=post(PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER),
    ) | agent_context_loaded.to(
        prompt_ready,
        validators=pre(PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER),
        on=run(PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER),
        after=post(PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER),
    )
    # §4.8 Reasoner
    reasoner = prompt_ready.to(
        reasoning,
        validators=pre(PipelineStep.REASONER),
        on=run(PipelineStep.REASONER),
        after=post(PipelineStep.REASONER),
    )
    # §4.9 LLMClient
    llm_client = reasoning.to(
        llm_answered,
        validators=[pre(PipelineStep.LLM_CLIENT), within_budget],
        on=run(PipelineStep.LLM_CLIENT),
        after=post_llm_client_once_settled,
    )
    # DESIGN.md R5: the engine answered the model's tool calls; call the model again
    server_tool_round = llm_answered.to(
        reasoning,
        cond=needs_another_round,
        validators=within_round_limit,
    )
    # §4.10 ResponseBuilder
    response_builder = llm_answered.to(
        response_built,
        cond=has_outcome,
        validators=[snapshot_before_response, pre(PipelineStep.RESPONSE_BUILDER)],
        on=run(PipelineStep.RESPONSE_BUILDER),
        after=post(PipelineStep.RESPONSE_BUILDER),
    )
    complete = response_built.to(done, on=commit)

    fault = faulted.from_.any()  # type: ignore[no-untyped-call]
