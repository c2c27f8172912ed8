"""AGN-036 §4.1-§4.10: every PRE and POST rule of every step, holding and broken.

Each case takes the context exactly as it stands when the step's PRE or POST rules
run on a correct turn (``builders.context_before/after``), breaks one thing, and
checks that ``validate_pre_step``/``validate_post_step`` reports that rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from builders import PATHS, PENDING_CALLS, context_after, context_before, continuation_response
from rulecases import rule_params

from aptix_pipeline.contracts import (
    ContextType,
    InvokeResult,
    PipelineContext,
    PipelineStep,
    ResponsePayload,
    ResponseType,
    Session,
    Turn,
)
from aptix_pipeline.validators import (
    Phase,
    all_rules,
    step_rule_ids,
    validate_post_step,
    validate_pre_step,
)
from aptix_pipeline.validators.core import CORE_CHECKS

S = PipelineStep
INITIAL = ContextType.INITIAL
FOLLOW_ON = ContextType.FOLLOW_ON
CONTINUATION = ContextType.CLIENT_TOOL_CALL_CONTINUATION
PRE, POST = Phase.PRE, Phase.POST

Change = Callable[[PipelineContext], None]


@dataclass(frozen=True)
class StepCase:
    """Step ``step``'s ``phase`` rules on a ``kind`` turn, after ``change``."""

    rule_id: str
    variant: str
    step: PipelineStep
    phase: Phase
    kind: ContextType
    change: Change
    decisions: tuple[str, ...] = ()


def _set(**values: object) -> Change:
    def change(ctx: PipelineContext) -> None:
        for name, value in values.items():
            setattr(ctx, name, value)

    return change


def _keep(ctx: PipelineContext) -> None:
    del ctx


def _envelope(**values: object) -> Change:
    def change(ctx: PipelineContext) -> None:
        for name, value in values.items():
            setattr(ctx.envelope, name, value)

    return change


def _session() -> Session:
    return Session(id="s", org="org-1", user="user-1", mode="general")


def _turn() -> Turn:
    return Turn(id="t-x", session_id="s")


def _reuse_envelope_turn_id(ctx: PipelineContext) -> None:
    assert ctx.turn is not None
    ctx.turn = ctx.turn.model_copy(update={"id": ctx.envelope.turn_id or ""})


def _other_turn_id(ctx: PipelineContext) -> None:
    assert ctx.turn is not None
    ctx.turn = ctx.turn.model_copy(update={"id": "some-other-turn"})


def _no_session_mode(ctx: PipelineContext) -> None:
    assert ctx.session is not None
    ctx.session = ctx.session.model_copy(update={"mode": ""})


def _swap_manifest_results(ctx: PipelineContext) -> None:
    assert ctx.tool_call_manifest is not None
    ctx.tool_call_manifest.tool_call_results.reverse()


def _both_outcomes(ctx: PipelineContext) -> None:
    ctx.client_tool_calls = list(PENDING_CALLS)


def _as_continuation(ctx: PipelineContext) -> None:
    ctx.response_payload = None
    ctx.client_tool_calls = list(PENDING_CALLS)
    ctx.response_type = ResponseType.TOOL_CONTINUATION


def _response_for_other_turn(ctx: PipelineContext) -> None:
    assert ctx.response is not None
    ctx.response = ctx.response.model_copy(update={"turn_id": "another-turn"})


def _response_with_other_text(ctx: PipelineContext) -> None:
    assert ctx.response is not None
    ctx.response = ctx.response.model_copy(update={"primary_output_text": "Something else."})


def _continuation_asking_for_other_calls(ctx: PipelineContext) -> None:
    _as_continuation(ctx)
    ctx.response = continuation_response(ctx)
    ctx.client_tool_calls = list(PENDING_CALLS[:1])


def _response_of_wrong_kind(ctx: PipelineContext) -> None:
    ctx.response = continuation_response(ctx)


def _response_breaking_agn_033(ctx: PipelineContext) -> None:
    assert ctx.response is not None
    ctx.response = ctx.response.model_copy(update={"tool_calls": []})


PAYLOAD = ResponsePayload(primary_output_text="x")

BROKEN = [
    # §4.2 SessionRestorer
    StepCase("AGN-036/4.2/PRE/session-id-present", "none", S.SESSION_RESTORER, PRE, FOLLOW_ON,
             _envelope(session_id=None)),
    StepCase("AGN-036/4.2/PRE/turn-id-present", "empty", S.SESSION_RESTORER, PRE,
             CONTINUATION, _envelope(turn_id="")),
    StepCase("AGN-036/4.2/PRE/session-null", "set", S.SESSION_RESTORER, PRE, FOLLOW_ON,
             _set(session=_session())),
    StepCase("AGN-036/4.2/PRE/turn-null", "set", S.SESSION_RESTORER, PRE, FOLLOW_ON,
             _set(turn=_turn())),
    StepCase("AGN-036/4.2/POST/session-populated", "none", S.SESSION_RESTORER, POST, FOLLOW_ON,
             _set(session=None)),
    StepCase("AGN-036/4.2/POST/turn-populated", "none", S.SESSION_RESTORER, POST, CONTINUATION,
             _set(turn=None)),
    StepCase("AGN-036/4.2/POST/turn-id-new", "reused-id", S.SESSION_RESTORER, POST, FOLLOW_ON,
             _reuse_envelope_turn_id),
    StepCase("AGN-036/4.2/POST/session-mode-present", "empty", S.SESSION_RESTORER, POST,
             FOLLOW_ON, _no_session_mode),
    # §4.3 AgentContextResolver
    StepCase("AGN-036/4.3/PRE/session-null", "set", S.AGENT_CONTEXT_RESOLVER, PRE, INITIAL,
             _set(session=_session())),
    StepCase("AGN-036/4.3/PRE/turn-null", "set", S.AGENT_CONTEXT_RESOLVER, PRE, INITIAL,
             _set(turn=_turn())),
    StepCase("AGN-036/4.3/POST/agent-context-populated", "none", S.AGENT_CONTEXT_RESOLVER, POST,
             INITIAL, _set(agent_context=None)),
    StepCase("AGN-036/4.3/POST/conversation-context-populated", "none",
             S.AGENT_CONTEXT_RESOLVER, POST, INITIAL, _set(conversation_context=None)),
    # §4.4 ClientToolContinuationResolver
    StepCase("AGN-036/4.4/PRE/session-populated", "none", S.CLIENT_TOOL_CONTINUATION_RESOLVER,
             PRE, CONTINUATION, _set(session=None)),
    StepCase("AGN-036/4.4/PRE/turn-populated", "none", S.CLIENT_TOOL_CONTINUATION_RESOLVER, PRE,
             CONTINUATION, _set(turn=None)),
    StepCase("AGN-036/4.4/PRE/tool-results-present", "empty",
             S.CLIENT_TOOL_CONTINUATION_RESOLVER, PRE, CONTINUATION, _envelope(tool_results=[])),
    StepCase("AGN-036/4.4/POST/tool-call-manifest-valid", "none",
             S.CLIENT_TOOL_CONTINUATION_RESOLVER, POST, CONTINUATION,
             _set(tool_call_manifest=None)),
    StepCase("AGN-036/4.4/POST/turn-id-matches-envelope", "other-turn",
             S.CLIENT_TOOL_CONTINUATION_RESOLVER, POST, CONTINUATION, _other_turn_id),
    # §4.5 AgentSessionCreator
    StepCase("AGN-036/4.5/PRE/agent-context-populated", "none", S.AGENT_SESSION_CREATOR, PRE,
             INITIAL, _set(agent_context=None)),
    StepCase("AGN-036/4.5/PRE/conversation-context-populated", "none", S.AGENT_SESSION_CREATOR,
             PRE, INITIAL, _set(conversation_context=None)),
    StepCase("AGN-036/4.5/PRE/session-null", "set", S.AGENT_SESSION_CREATOR, PRE, INITIAL,
             _set(session=_session())),
    StepCase("AGN-036/4.5/PRE/turn-null", "set", S.AGENT_SESSION_CREATOR, PRE, INITIAL,
             _set(turn=_turn())),
    StepCase("AGN-036/4.5/POST/session-populated", "none", S.AGENT_SESSION_CREATOR, POST,
             INITIAL, _set(session=None)),
    StepCase("AGN-036/4.5/POST/turn-populated", "none", S.AGENT_SESSION_CREATOR, POST, INITIAL,
             _set(turn=None)),
    # §4.6 AgentContextLoader
    StepCase("AGN-036/4.6/PRE/session-populated", "none", S.AGENT_CONTEXT_LOADER, PRE,
             FOLLOW_ON, _set(session=None)),
    StepCase("AGN-036/4.6/PRE/turn-populated", "none", S.AGENT_CONTEXT_LOADER, PRE,
             CONTINUATION, _set(turn=None)),
    StepCase("AGN-036/4.6/POST/agent-context-populated", "none", S.AGENT_CONTEXT_LOADER, POST,
             FOLLOW_ON, _set(agent_context=None)),
    StepCase("AGN-036/4.6/POST/conversation-context-populated", "none", S.AGENT_CONTEXT_LOADER,
             POST, CONTINUATION, _set(conversation_context=None)),
    # §4.7 PromptContentProviderInitializer
    StepCase("AGN-036/4.7/PRE/session-populated", "none", S.PROMPT_CONTENT_PROVIDER_INITIALIZER,
             PRE, INITIAL, _set(session=None)),
    StepCase("AGN-036/4.7/PRE/turn-populated", "none", S.PROMPT_CONTENT_PROVIDER_INITIALIZER,
             PRE, FOLLOW_ON, _set(turn=None)),
    StepCase("AGN-036/4.7/PRE/agent-context-populated", "none",
             S.PROMPT_CONTENT_PROVIDER_INITIALIZER, PRE, CONTINUATION, _set(agent_context=None)),
    StepCase("AGN-036/4.7/PRE/conversation-context-populated", "none",
             S.PROMPT_CONTENT_PROVIDER_INITIALIZER, PRE, INITIAL,
             _set(conversation_context=None)),
    StepCase("AGN-036/4.7/PRE/tool-call-manifest-present", "none",
             S.PROMPT_CONTENT_PROVIDER_INITIALIZER, PRE, CONTINUATION,
             _set(tool_call_manifest=None)),
    StepCase("AGN-036/4.7/POST/prompt-provider-ready", "not-ready",
             S.PROMPT_CONTENT_PROVIDER_INITIALIZER, POST, FOLLOW_ON,
             _set(prompt_provider_ready=False)),
    # §4.8 Reasoner
    StepCase("AGN-036/4.8/PRE/prompt-provider-ready", "not-ready", S.REASONER, PRE, INITIAL,
             _set(prompt_provider_ready=False)),
    # §4.9 LLMClient
    StepCase("AGN-036/4.9/PRE/response-payload-null", "set", S.LLM_CLIENT, PRE, FOLLOW_ON,
             _set(response_payload=PAYLOAD)),
    StepCase("AGN-036/4.9/PRE/tool-call-manifest-valid", "none", S.LLM_CLIENT, PRE,
             CONTINUATION, _set(tool_call_manifest=None)),
    StepCase("AGN-036/4.9/POST/exactly-one-outcome", "both", S.LLM_CLIENT, POST, INITIAL,
             _both_outcomes),
    StepCase("AGN-036/4.9/POST/exactly-one-outcome", "neither", S.LLM_CLIENT, POST, FOLLOW_ON,
             _set(response_payload=None)),
    StepCase("AGN-036/4.9/POST/exactly-one-outcome", "empty-client-calls", S.LLM_CLIENT, POST,
             FOLLOW_ON, _set(response_payload=None, client_tool_calls=[],
                             response_type=ResponseType.TOOL_CONTINUATION)),
    StepCase("AGN-036/4.9/POST/response-type-matches-outcome", "unset", S.LLM_CLIENT, POST,
             INITIAL, _set(response_type=None), decisions=("D11",)),
    StepCase("AGN-036/4.9/POST/response-type-matches-outcome", "wrong", S.LLM_CLIENT, POST,
             CONTINUATION, _set(response_type=ResponseType.TOOL_CONTINUATION), decisions=("D11",)),
    # §4.10 ResponseBuilder
    StepCase("AGN-036/4.10/PRE/response-type-valid", "unset", S.RESPONSE_BUILDER, PRE, INITIAL,
             _set(response_type=None)),
    StepCase("AGN-036/4.10/PRE/response-type-valid", "unknown", S.RESPONSE_BUILDER, PRE,
             FOLLOW_ON, _set(response_type="Partial")),
    StepCase("AGN-036/4.10/POST/context-unchanged", "correlation-id", S.RESPONSE_BUILDER, POST,
             INITIAL, _set(correlation_id="changed"), decisions=("D12",)),
    StepCase("AGN-036/4.10/POST/context-unchanged", "mode", S.RESPONSE_BUILDER, POST,
             CONTINUATION, _set(mode="research"), decisions=("D12",)),
    StepCase("AGN-036/4.10/POST/response-conforms", "none", S.RESPONSE_BUILDER, POST, FOLLOW_ON,
             _set(response=None)),
    StepCase("AGN-036/4.10/POST/response-matches-context", "other-turn", S.RESPONSE_BUILDER,
             POST, INITIAL, _response_for_other_turn, decisions=("D11",)),
    StepCase("AGN-036/4.10/POST/response-matches-context", "other-text", S.RESPONSE_BUILDER,
             POST, CONTINUATION, _response_with_other_text, decisions=("D11",)),
    StepCase("AGN-036/4.10/POST/response-matches-context", "other-tool-calls",
             S.RESPONSE_BUILDER, POST, FOLLOW_ON, _continuation_asking_for_other_calls,
             decisions=("D11",)),
    StepCase("AGN-036/4.10/POST/response-matches-context", "wrong-kind", S.RESPONSE_BUILDER,
             POST, FOLLOW_ON, _response_of_wrong_kind, decisions=("D11",)),
]  # fmt: skip


def _holding_cases() -> list[StepCase]:
    """Every step rule on the correct context of every path the step is on."""
    cases = []
    for kind, path in PATHS.items():
        for step in path:
            for phase in (PRE, POST):
                for rule_id in step_rule_ids(step, phase):
                    if rule_id.startswith("AGN-036/4."):
                        cases.append(StepCase(rule_id, "correct-turn", step, phase, kind, _keep))
    return cases


HOLDS = _holding_cases()


def _validate(case: StepCase) -> InvokeResult[None]:
    before = context_before(case.step, case.kind)
    if case.phase is PRE:
        case.change(before)
        return validate_pre_step(before, case.step)
    after = context_after(case.step, case.kind)
    case.change(after)
    return validate_post_step(after, case.step, before=before)


@pytest.mark.parametrize("case", rule_params(BROKEN, "broken", "kind"))
def test_step_rule_broken_faults_the_step(case: StepCase) -> None:
    result = _validate(case)

    assert not result.successful
    assert case.rule_id in result.rule_ids


@pytest.mark.parametrize("case", rule_params(HOLDS, "holds", "kind"))
def test_step_rule_holds_on_a_correct_turn(case: StepCase) -> None:
    result = _validate(case)

    assert result.successful, result.errors
    assert case.rule_id in step_rule_ids(case.step, case.phase)


def test_every_step_rule_has_a_breaking_and_a_holding_case() -> None:
    # The PRE/POST sets of validators/steps.py; the §4 rules the steps check while they
    # work (validators/turn_work.py) have their own tests.
    step_ids = {
        i
        for i, r in all_rules().items()
        if i.startswith("AGN-036/4.") and r.module == "aptix_pipeline.validators.steps"
    }

    assert step_ids == {c.rule_id for c in BROKEN}
    assert step_ids == {c.rule_id for c in HOLDS}


@pytest.mark.parametrize("step", list(S))
def test_each_step_has_both_rule_sets(step: PipelineStep) -> None:
    # N/A sets (§4.1 PRE, §4.8 POST) are empty tuples, never missing.
    assert isinstance(step_rule_ids(step, PRE), tuple)
    assert isinstance(step_rule_ids(step, POST), tuple)


def test_request_handler_post_is_validate_core() -> None:
    core_ids = tuple(i for check in CORE_CHECKS for i in check.rule_ids)
    ctx = context_after(S.REQUEST_HANDLER, INITIAL)
    ctx.correlation_id = ""

    result = validate_post_step(ctx, S.REQUEST_HANDLER)

    assert step_rule_ids(S.REQUEST_HANDLER, POST) == core_ids
    assert step_rule_ids(S.REQUEST_HANDLER, PRE) == ()
    assert result.rule_ids == ("AGN-036/3/correlation-id-present",)


def test_reasoner_pre_checks_the_core_invariants_again() -> None:
    ctx = context_before(S.REASONER, FOLLOW_ON)
    ctx.envelope.user = None

    result = validate_pre_step(ctx, S.REASONER)

    assert result.rule_ids == ("AGN-036/3/user-present",)


@pytest.mark.decision("R4")
def test_r4_continuation_keeps_the_pending_turn_id_after_restoring() -> None:
    # DESIGN R4: §4.2's "Turn.Id != Envelope.TurnId" is a FollowOn rule only.
    ctx = context_after(S.SESSION_RESTORER, CONTINUATION)
    assert ctx.turn is not None
    assert ctx.turn.id == ctx.envelope.turn_id

    assert validate_post_step(ctx, S.SESSION_RESTORER).successful


@pytest.mark.decision("R4")
def test_r4_follow_on_must_open_a_new_turn() -> None:
    ctx = context_after(S.SESSION_RESTORER, FOLLOW_ON)
    _reuse_envelope_turn_id(ctx)

    result = validate_post_step(ctx, S.SESSION_RESTORER)

    assert result.rule_ids == ("AGN-036/4.2/POST/turn-id-new",)


def test_manifest_rules_bubble_up_through_llm_client_pre() -> None:
    ctx = context_before(S.LLM_CLIENT, CONTINUATION)
    _swap_manifest_results(ctx)

    result = validate_pre_step(ctx, S.LLM_CLIENT)

    assert set(result.rule_ids) == {"AGN-036/5/order-match"}
    assert {e.tool_call_id for e in result.errors} == {"call-1", "call-2"}


def test_manifest_is_not_checked_before_the_llm_on_other_paths() -> None:
    ctx = context_before(S.LLM_CLIENT, FOLLOW_ON)
    assert ctx.tool_call_manifest is None

    assert validate_pre_step(ctx, S.LLM_CLIENT).successful


@pytest.mark.decision("D12")
def test_response_builder_post_without_a_pre_snapshot_checks_the_core_invariants() -> None:
    # The two-argument ValidatePostStep (AGN-036 §2.1) still works on a correct turn ...
    ctx = context_after(S.RESPONSE_BUILDER, INITIAL)
    assert validate_post_step(ctx, S.RESPONSE_BUILDER).successful

    # ... and reports a broken core invariant under its own id.
    ctx.correlation_id = ""
    result = validate_post_step(ctx, S.RESPONSE_BUILDER)

    assert result.rule_ids == ("AGN-036/3/correlation-id-present",)


@pytest.mark.decision("D12")
def test_context_unchanged_names_the_changed_fields_by_their_wire_names() -> None:
    before = context_before(S.RESPONSE_BUILDER, FOLLOW_ON)
    ctx = context_after(S.RESPONSE_BUILDER, FOLLOW_ON)
    ctx.correlation_id, ctx.mode = "other", "research"

    result = validate_post_step(ctx, S.RESPONSE_BUILDER, before=before)

    assert result.rule_ids == ("AGN-036/4.10/POST/context-unchanged",)
    assert result.errors[0].field == "CorrelationId"
    assert "CorrelationId, Mode" in result.errors[0].message


def test_response_builder_post_reports_agn_033_violations() -> None:
    before = context_before(S.RESPONSE_BUILDER, INITIAL)
    ctx = context_after(S.RESPONSE_BUILDER, INITIAL)
    _response_breaking_agn_033(ctx)

    result = validate_post_step(ctx, S.RESPONSE_BUILDER, before=before)

    assert result.rule_ids == ("AGN-033/3.4/final-tool-calls-forbidden",)


def test_a_continuation_outcome_satisfies_llm_client_post() -> None:
    ctx = context_after(S.LLM_CLIENT, CONTINUATION)
    _as_continuation(ctx)

    assert validate_post_step(ctx, S.LLM_CLIENT).successful


def test_a_step_name_given_as_text_is_accepted() -> None:
    ctx = context_before(S.SESSION_RESTORER, FOLLOW_ON)

    assert validate_pre_step(ctx, "session_restorer").successful  # type: ignore[arg-type]


@pytest.mark.rule("AGN-036/4/step-known", "broken")
@pytest.mark.parametrize("validate", [validate_pre_step, validate_post_step])
@pytest.mark.parametrize("step", ["session_restore", "", 3, None], ids=repr)
def test_an_unknown_step_is_answered_not_raised(
    validate: Callable[[PipelineContext, PipelineStep], InvokeResult[None]], step: object
) -> None:
    ctx = context_before(S.SESSION_RESTORER, FOLLOW_ON)

    result = validate(ctx, step)  # type: ignore[arg-type]

    assert result.rule_ids == ("AGN-036/4/step-known",)
    assert result.errors[0].field == "step"


@pytest.mark.rule("AGN-036/4/step-known", "holds")
@pytest.mark.parametrize("step", list(S))
def test_every_pipeline_step_is_known(step: PipelineStep) -> None:
    ctx = context_before(S.SESSION_RESTORER, FOLLOW_ON)

    for result in (validate_pre_step(ctx, step), validate_post_step(ctx, step)):
        assert "AGN-036/4/step-known" not in result.rule_ids


@pytest.mark.decision("D11")
def test_a_continuation_response_matching_the_context_passes_response_builder_post() -> None:
    before = context_before(S.RESPONSE_BUILDER, FOLLOW_ON)
    _as_continuation(before)
    before.tool_continuation_message = "Running two tools."
    ctx = before.model_copy(deep=True)
    ctx.response = continuation_response(ctx)

    result = validate_post_step(ctx, S.RESPONSE_BUILDER, before=before)

    assert result.successful, result.errors


@pytest.mark.decision("D23")
@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("SessionRestorer", S.SESSION_RESTORER),
        ("LLMClient", S.LLM_CLIENT),
        ("PromptContentProviderInitializer", S.PROMPT_CONTENT_PROVIDER_INITIALIZER),
        ("ClientToolContinuationResolver", S.CLIENT_TOOL_CONTINUATION_RESOLVER),
    ],
)
def test_steps_are_also_known_by_their_ddr_names(name: str, step: PipelineStep) -> None:
    ctx = context_before(step, CONTINUATION)

    assert PipelineStep(name) is step
    assert validate_pre_step(ctx, name) == validate_pre_step(ctx, step)  # type: ignore[arg-type]


def test_rule_ids_can_be_asked_for_by_text() -> None:
    assert step_rule_ids("SessionRestorer", "pre") == step_rule_ids(S.SESSION_RESTORER, PRE)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Phase"):
        step_rule_ids(S.SESSION_RESTORER, "during")  # type: ignore[arg-type]
