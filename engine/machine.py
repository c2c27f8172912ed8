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

Each step transition has the step's PRE rules (``validate_pre_step``) as its
validator — the guard that raises, so a failed rule faults the turn instead of
silently taking no transition — the step function as its action, and the step's
POST rules (``validate_post_step``) as its ``after`` hook (the exit hook). Two
transitions are not DDR steps: ``server_tool_round`` loops back for another model
call (DESIGN.md R5, guarded by the round limit) and ``complete`` commits the turn,
so ``done`` means persisted.

python-statemachine 3.x notes, read from its engine: a ``StateChart`` turns an
exception in a callback into an ``error.execution`` event and, when nothing
handles it, carries on — a raising step could reach ``done``. This machine sets
``catch_errors_as_events = False`` so every exception reaches the runner, which
sends ``fault``; and no transition into a final state does work that could fail
after the state is entered (an ``after`` hook there could no longer fault).
``allow_event_without_transition = False`` makes an event that takes no
transition an error rather than a silent no-op.

The class is built once per process; a turn costs one instance bound to one
``TurnRun``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statemachine import State, StateChart
from statemachine.transition_list import TransitionList

from aptix_pipeline.contracts import ContextType, PipelineContext, PipelineStep
from aptix_pipeline.steps import (
    STEP_FUNCTIONS,
    StepFaultError,
    StepFunction,
    TurnScope,
    check_round_limit,
    complete_turn,
)
from aptix_pipeline.validators import Phase, step_rule_ids, validate_post_step, validate_pre_step

from .telemetry import TurnRecorder
from .trace import CheckRecord, TransitionRecord

__all__ = [
    "COMPLETE",
    "FAULT",
    "SERVER_TOOL_ROUND",
    "CheckRecord",
    "TransitionRecord",
    "TurnMachine",
    "TurnRun",
    "next_event",
]

SERVER_TOOL_ROUND = "server_tool_round"
COMPLETE = "complete"
FAULT = "fault"


@dataclass(slots=True)
class TurnRun:
    """The machine's model: the turn's scope and the recorder of what it does.

    The recorder is also the scope's observer, so the steps and the machine write
    one ordered trace.
    """

    scope: TurnScope
    step_functions: Mapping[PipelineStep, StepFunction] = field(
        default_factory=lambda: STEP_FUNCTIONS
    )
    recorder: TurnRecorder = field(default_factory=TurnRecorder)
    state: Any = None
    before_response: PipelineContext | None = None

    def __post_init__(self) -> None:
        self.scope.observer = self.recorder


# --- path choice: by ctx.Type, never by trial (DESIGN.md "The machine") ---------------


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


Condition = Callable[[TurnRun], bool]
_ROUTES: list[tuple[State, str, Condition | None]] = []


def _guard(step: PipelineStep) -> Callable[[TurnRun], None]:
    rule_ids = step_rule_ids(step, Phase.PRE)

    def guard(model: TurnRun) -> None:
        if step is PipelineStep.REQUEST_HANDLER:
            return  # §4.1 PRE: N/A — and there is no context yet
        ctx = model.scope.ctx
        if step is PipelineStep.RESPONSE_BUILDER:
            model.before_response = ctx.model_copy(deep=True)
        result = validate_pre_step(ctx, step)
        model.recorder.check(CheckRecord(step.value, Phase.PRE.value, rule_ids, result.rule_ids))
        if not result.successful:
            raise StepFaultError(result.errors)

    guard.__name__ = f"pre_{step.value}"
    return guard


def _action(step: PipelineStep) -> Callable[..., Any]:
    async def action(model: TurnRun, source: State, target: State) -> None:
        await model.step_functions[step](model.scope)
        # Recorded once the step has done its work: a step that raised was not taken.
        model.recorder.transition(TransitionRecord(step.value, source.id, target.id))

    action.__name__ = f"run_{step.value}"
    return action


def _exit_hook(step: PipelineStep) -> Callable[[TurnRun], None]:
    rule_ids = step_rule_ids(step, Phase.POST)

    def exit_hook(model: TurnRun) -> None:
        if step is PipelineStep.LLM_CLIENT and model.scope.another_round:
            model.recorder.check(CheckRecord(step.value, Phase.POST.value, rule_ids, deferred=True))
            return
        before = model.before_response if step is PipelineStep.RESPONSE_BUILDER else None
        result = validate_post_step(model.scope.ctx, step, before=before)
        model.recorder.check(CheckRecord(step.value, Phase.POST.value, rule_ids, result.rule_ids))
        if not result.successful:
            raise StepFaultError(result.errors)

    exit_hook.__name__ = f"post_{step.value}"
    return exit_hook


def _step(
    source: State, target: State, step: PipelineStep, cond: Condition | None = None
) -> TransitionList:
    """One DDR step: PRE as its validator, the step as its action, POST as its exit hook."""
    _ROUTES.append((source, step.value, cond))
    transitions: TransitionList = source.to(
        target,
        cond=cond,
        validators=_guard(step),
        on=_action(step),
        after=_exit_hook(step),
    )
    return transitions


def _round_guard(model: TurnRun) -> None:
    check_round_limit(model.scope)


async def _record_round(model: TurnRun, source: State, target: State) -> None:
    model.recorder.transition(TransitionRecord(SERVER_TOOL_ROUND, source.id, target.id))


async def _complete(model: TurnRun, source: State, target: State) -> None:
    await complete_turn(model.scope)
    model.recorder.transition(TransitionRecord(COMPLETE, source.id, target.id))


async def _record_fault(model: TurnRun, source: State, target: State) -> None:
    model.recorder.transition(TransitionRecord(FAULT, source.id, target.id))


def _faults(*sources: State, target: State) -> TransitionList:
    """``fault``: from every state that is not final to ``faulted``."""
    transitions: TransitionList = sources[0].to(target, on=_record_fault)
    for source in sources[1:]:
        transitions = transitions | source.to(target, on=_record_fault)
    return transitions


_S = PipelineStep


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

    # §4.1
    request_handler = _step(received, validated, _S.REQUEST_HANDLER)
    # §4.2, §4.3 — the path out of `validated` is chosen by ctx.Type
    session_restorer = _step(validated, session_restored, _S.SESSION_RESTORER, is_resumed)
    agent_context_resolver = _step(
        validated, agent_context_resolved, _S.AGENT_CONTEXT_RESOLVER, is_initial
    )
    # §4.4
    client_tool_continuation_resolver = _step(
        session_restored,
        continuation_resolved,
        _S.CLIENT_TOOL_CONTINUATION_RESOLVER,
        is_continuation,
    )
    # §4.5
    agent_session_creator = _step(agent_context_resolved, session_created, _S.AGENT_SESSION_CREATOR)
    # §4.6
    agent_context_loader = _step(
        session_restored, agent_context_loaded, _S.AGENT_CONTEXT_LOADER, is_follow_on
    ) | _step(continuation_resolved, agent_context_loaded, _S.AGENT_CONTEXT_LOADER)
    # §4.7
    prompt_content_provider_initializer = _step(
        session_created, prompt_ready, _S.PROMPT_CONTENT_PROVIDER_INITIALIZER
    ) | _step(agent_context_loaded, prompt_ready, _S.PROMPT_CONTENT_PROVIDER_INITIALIZER)
    # §4.8
    reasoner = _step(prompt_ready, reasoning, _S.REASONER)
    # §4.9, and DESIGN.md R5's server-tool rounds
    llm_client = _step(reasoning, llm_answered, _S.LLM_CLIENT)
    server_tool_round = llm_answered.to(
        reasoning, cond=needs_another_round, validators=_round_guard, on=_record_round
    )
    # §4.10
    response_builder = _step(llm_answered, response_built, _S.RESPONSE_BUILDER, has_outcome)
    complete = response_built.to(done, on=_complete)

    fault = _faults(
        received,
        validated,
        session_restored,
        agent_context_resolved,
        continuation_resolved,
        session_created,
        agent_context_loaded,
        prompt_ready,
        reasoning,
        llm_answered,
        response_built,
        target=faulted,
    )


_ROUTES.append((TurnMachine.llm_answered, SERVER_TOOL_ROUND, needs_another_round))
_ROUTES.append((TurnMachine.response_built, COMPLETE, None))

_OUTGOING: dict[str, tuple[tuple[str, Condition | None], ...]] = {}
for _source, _event, _cond in _ROUTES:
    _OUTGOING[_source.id] = (*_OUTGOING.get(_source.id, ()), (_event, _cond))
del _source, _event, _cond


def next_event(state: str, model: TurnRun) -> str:
    """The event that moves the turn on from ``state``: the first route whose condition holds.

    The same condition callables are the transitions' ``cond``, so the runner and the
    machine agree on the path by construction.
    """
    for event, cond in _OUTGOING.get(state, ()):
        if cond is None or cond(model):
            return event
    raise RuntimeError(f"no transition leaves state {state!r} for this turn")
