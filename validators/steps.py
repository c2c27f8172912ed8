"""AGN-036 §4: the PRE and POST rule set of each pipeline step.

``validate_pre_step(ctx, step)`` is a step's guard and ``validate_post_step(ctx,
step)`` its exit hook (DESIGN.md "The machine"). Both are stateless and never
mutate the context. ``step_rule_ids`` tells which rules a phase checks, so traces
and spans can name them even when they pass.

Resolutions applied here:

- **R4** — ``AGN-036/4.2/POST/turn-id-new`` holds on the FollowOn path only; on the
  continuation path the restorer loads the pending turn and §4.4's
  ``turn-id-matches-envelope`` holds instead.
- §4.10's "context invariants unchanged (PRE == POST)" compares with the context as
  it was at PRE, passed as ``before=`` (a ``ContextSnapshot`` or a copy). Without
  it (the two-argument call) the always-true core invariants of §3 are checked
  instead.
- Decision: §4.9's POST also requires ``ResponseType`` to name the outcome
  produced, and §4.10's POST requires the response to carry the context's
  session, turn, kind and outcome — the final payload, or the client tool calls
  and message (``…/response-matches-context``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from types import MappingProxyType

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    ContextType,
    ErrorCode,
    InvokeError,
    InvokeResult,
    PipelineContext,
    PipelineStep,
    ResponseKind,
    ResponseType,
)

from .checks import Check, requirement, run_checks
from .core import CORE_CHECKS, has_text
from .manifest import MANIFEST_RULE_IDS, manifest_errors
from .response import RESPONSE_CHECKS, response_errors
from .rules import Rule, outcome, rule
from .snapshot import ContextSnapshot

__all__ = [
    "STEP_CHECKS",
    "Phase",
    "step_rule_ids",
    "validate_post_step",
    "validate_pre_step",
]

_FAILED = ErrorCode.PIPELINE_RULE_FAILED


class Phase(StrEnum):
    """When a step's rule set runs: as its guard (PRE) or its exit hook (POST)."""

    PRE = "PRE"
    POST = "POST"

    @classmethod
    def _missing_(cls, value: object) -> Phase | None:
        return cls.__members__.get(value.upper()) if isinstance(value, str) else None


def _rule(section: str, phase: Phase, name: str, message: str) -> Rule:
    return rule(
        f"AGN-036/{section}/{phase}/{name}",
        f"AGN-036 §{section}",
        message,
        _FAILED,
        module=__name__,
    )


_Ctx = PipelineContext
_PRE, _POST = Phase.PRE, Phase.POST


def _is_continuation(ctx: _Ctx) -> bool:
    return ctx.type == ContextType.CLIENT_TOOL_CALL_CONTINUATION


def _is_follow_on(ctx: _Ctx) -> bool:
    return ctx.type == ContextType.FOLLOW_ON


def _session_populated(section: str, phase: Phase) -> Check[_Ctx]:
    return requirement(
        _rule(section, phase, "session-populated", "ctx.Session must be populated"),
        lambda ctx: ctx.session is not None,
        field="Session",
    )


def _turn_populated(section: str, phase: Phase) -> Check[_Ctx]:
    return requirement(
        _rule(section, phase, "turn-populated", "ctx.Turn must be populated"),
        lambda ctx: ctx.turn is not None,
        field="Turn",
    )


def _session_null(section: str, phase: Phase) -> Check[_Ctx]:
    return requirement(
        _rule(section, phase, "session-null", "ctx.Session must be null"),
        lambda ctx: ctx.session is None,
        field="Session",
    )


def _turn_null(section: str, phase: Phase) -> Check[_Ctx]:
    return requirement(
        _rule(section, phase, "turn-null", "ctx.Turn must be null"),
        lambda ctx: ctx.turn is None,
        field="Turn",
    )


def _agent_context_populated(section: str, phase: Phase) -> Check[_Ctx]:
    return requirement(
        _rule(section, phase, "agent-context-populated", "ctx.AgentContext must be populated"),
        lambda ctx: ctx.agent_context is not None,
        field="AgentContext",
    )


def _conversation_context_populated(section: str, phase: Phase) -> Check[_Ctx]:
    return requirement(
        _rule(
            section,
            phase,
            "conversation-context-populated",
            "ctx.ConversationContext must be populated",
        ),
        lambda ctx: ctx.conversation_context is not None,
        field="ConversationContext",
    )


def _manifest_valid(section: str, phase: Phase, when: Callable[[_Ctx], bool] | None) -> Check[_Ctx]:
    missing = _rule(
        section,
        phase,
        "tool-call-manifest-valid",
        "ctx.ToolCallManifest must be populated and valid (AGN-036 §5)",
    )

    def run(ctx: _Ctx) -> list[InvokeError]:
        if when is not None and not when(ctx):
            return []
        if ctx.tool_call_manifest is None:
            return [missing.error("no manifest", field="ToolCallManifest")]
        return manifest_errors(ctx.tool_call_manifest)

    return Check((missing.id, *MANIFEST_RULE_IDS), run)


def _turn_id_new() -> Check[_Ctx]:
    return requirement(
        _rule(
            "4.2",
            _POST,
            "turn-id-new",
            "FollowOn opens a new turn: ctx.Turn.Id must differ from Envelope.TurnId",
        ),
        lambda ctx: ctx.turn is not None and ctx.turn.id != ctx.envelope.turn_id,
        field="Turn.Id",
        when=_is_follow_on,
    )


def _exactly_one_outcome() -> Check[_Ctx]:
    one = _rule(
        "4.9",
        _POST,
        "exactly-one-outcome",
        "exactly one outcome: Final (ResponsePayload, no client tool calls) or "
        "ToolContinuation (client tool calls, no ResponsePayload)",
    )
    typed = _rule(
        "4.9",
        _POST,
        "response-type-matches-outcome",
        "ctx.ResponseType must name the outcome produced",
    )

    def run(ctx: _Ctx) -> list[InvokeError]:
        final = ctx.response_payload is not None
        continuation = bool(ctx.client_tool_calls)
        if final == continuation:
            detail = "both are present" if final else "neither is present"
            return [one.error(detail, field="ResponsePayload")]
        expected = ResponseType.FINAL if final else ResponseType.TOOL_CONTINUATION
        if ctx.response_type != expected:
            return [
                typed.error(f"expected {expected}, found {ctx.response_type}", field="ResponseType")
            ]
        return []

    return Check((one.id, typed.id), run)


_KIND_FOR = {
    ResponseType.FINAL: ResponseKind.FINAL,
    ResponseType.TOOL_CONTINUATION: ResponseKind.CLIENT_TOOL_CONTINUATION,
}


CONTEXT_UNCHANGED = _rule(
    "4.10",
    _POST,
    "context-unchanged",
    "context invariants must be unchanged by the ResponseBuilder (PRE == POST)",
)


def _response_agreement(ctx: _Ctx, response: AgentExecuteResponse) -> list[tuple[str, bool]]:
    """(response field, agrees with the context) for everything the response carries."""
    pairs = [
        ("SessionId", ctx.session is not None and response.session_id == ctx.session.id),
        ("TurnId", ctx.turn is not None and response.turn_id == ctx.turn.id),
        (
            "Kind",
            ctx.response_type is not None and _KIND_FOR.get(ctx.response_type) == response.kind,
        ),
    ]
    payload = ctx.response_payload
    if response.kind == ResponseKind.FINAL and payload is not None:
        pairs += [
            ("PrimaryOutputText", response.primary_output_text == payload.primary_output_text),
            ("Files", response.files == payload.files),
            ("ToolResults", response.tool_results == payload.tool_results),
            ("UserWarnings", response.user_warnings == payload.user_warnings),
            ("Usage", response.usage == payload.usage),
        ]
    if response.kind == ResponseKind.CLIENT_TOOL_CONTINUATION:
        pairs += [
            ("ToolCalls", response.tool_calls == ctx.client_tool_calls),
            (
                "ToolContinuationMessage",
                response.tool_continuation_message == ctx.tool_continuation_message,
            ),
        ]
    return pairs


def _response_builder_post() -> tuple[Check[_Ctx], ...]:
    conforms = _rule(
        "4.10", _POST, "response-conforms", "the returned response must conform to AGN-033"
    )
    matches = _rule(
        "4.10",
        _POST,
        "response-matches-context",
        "the response must carry the context's session, turn, kind and outcome",
    )

    def run_conforms(ctx: _Ctx) -> list[InvokeError]:
        if ctx.response is None:
            return [conforms.error("no response was built", field="Response")]
        return response_errors(ctx.response)

    def run_matches(ctx: _Ctx) -> list[InvokeError]:
        if ctx.response is None:
            return []  # reported by response-conforms
        mismatched = [field for field, same in _response_agreement(ctx, ctx.response) if not same]
        if mismatched:
            return [matches.error(f"differs in {', '.join(mismatched)}", field=mismatched[0])]
        return []

    response_rule_ids = tuple(i for c in RESPONSE_CHECKS for i in c.rule_ids)
    return (
        # Listed for step_rule_ids; it needs ``before``, so validate_post_step evaluates it.
        Check((CONTEXT_UNCHANGED.id,), lambda ctx: []),
        Check((conforms.id, *response_rule_ids), run_conforms),
        Check((matches.id,), run_matches),
    )


STEP_CHECKS: Mapping[tuple[PipelineStep, Phase], tuple[Check[_Ctx], ...]] = MappingProxyType(
    {
        # §4.1 RequestHandler — PRE: N/A; POST: ValidateCore(ctx) must succeed.
        (PipelineStep.REQUEST_HANDLER, _PRE): (),
        (PipelineStep.REQUEST_HANDLER, _POST): CORE_CHECKS,
        # §4.2 SessionRestorer
        (PipelineStep.SESSION_RESTORER, _PRE): (
            requirement(
                _rule("4.2", _PRE, "session-id-present", "Envelope.SessionId must be present"),
                lambda ctx: has_text(ctx.envelope.session_id),
                field="Envelope.SessionId",
            ),
            requirement(
                _rule("4.2", _PRE, "turn-id-present", "Envelope.TurnId must be present"),
                lambda ctx: has_text(ctx.envelope.turn_id),
                field="Envelope.TurnId",
            ),
            _session_null("4.2", _PRE),
            _turn_null("4.2", _PRE),
        ),
        (PipelineStep.SESSION_RESTORER, _POST): (
            _session_populated("4.2", _POST),
            _turn_populated("4.2", _POST),
            _turn_id_new(),
            requirement(
                _rule("4.2", _POST, "session-mode-present", "Session.Mode must have a value"),
                lambda ctx: ctx.session is None or has_text(ctx.session.mode),
                field="Session.Mode",
            ),
        ),
        # §4.3 AgentContextResolver
        (PipelineStep.AGENT_CONTEXT_RESOLVER, _PRE): (
            _session_null("4.3", _PRE),
            _turn_null("4.3", _PRE),
        ),
        (PipelineStep.AGENT_CONTEXT_RESOLVER, _POST): (
            _agent_context_populated("4.3", _POST),
            _conversation_context_populated("4.3", _POST),
        ),
        # §4.4 ClientToolContinuationResolver
        (PipelineStep.CLIENT_TOOL_CONTINUATION_RESOLVER, _PRE): (
            _session_populated("4.4", _PRE),
            _turn_populated("4.4", _PRE),
            requirement(
                _rule("4.4", _PRE, "tool-results-present", "Envelope.ToolResults must be present"),
                lambda ctx: bool(ctx.envelope.tool_results),
                field="Envelope.ToolResults",
            ),
        ),
        (PipelineStep.CLIENT_TOOL_CONTINUATION_RESOLVER, _POST): (
            _manifest_valid("4.4", _POST, None),
            requirement(
                _rule(
                    "4.4",
                    _POST,
                    "turn-id-matches-envelope",
                    "the continued turn is the pending one: ctx.Turn.Id must equal Envelope.TurnId",
                ),
                lambda ctx: ctx.turn is not None and ctx.turn.id == ctx.envelope.turn_id,
                field="Turn.Id",
            ),
        ),
        # §4.5 AgentSessionCreator
        (PipelineStep.AGENT_SESSION_CREATOR, _PRE): (
            _agent_context_populated("4.5", _PRE),
            _conversation_context_populated("4.5", _PRE),
            _session_null("4.5", _PRE),
            _turn_null("4.5", _PRE),
        ),
        (PipelineStep.AGENT_SESSION_CREATOR, _POST): (
            _session_populated("4.5", _POST),
            _turn_populated("4.5", _POST),
        ),
        # §4.6 AgentContextLoader
        (PipelineStep.AGENT_CONTEXT_LOADER, _PRE): (
            _session_populated("4.6", _PRE),
            _turn_populated("4.6", _PRE),
        ),
        (PipelineStep.AGENT_CONTEXT_LOADER, _POST): (
            _agent_context_populated("4.6", _POST),
            _conversation_context_populated("4.6", _POST),
        ),
        # §4.7 PromptContentProviderInitializer
        (PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER, _PRE): (
            _session_populated("4.7", _PRE),
            _turn_populated("4.7", _PRE),
            _agent_context_populated("4.7", _PRE),
            _conversation_context_populated("4.7", _PRE),
            requirement(
                _rule(
                    "4.7",
                    _PRE,
                    "tool-call-manifest-present",
                    "a tool continuation needs a non-null ToolCallManifest",
                ),
                lambda ctx: ctx.tool_call_manifest is not None,
                field="ToolCallManifest",
                when=_is_continuation,
            ),
        ),
        (PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER, _POST): (
            requirement(
                _rule(
                    "4.7",
                    _POST,
                    "prompt-provider-ready",
                    "the prompt knowledge provider must be Ready",
                ),
                lambda ctx: ctx.prompt_provider_ready,
                field="PromptProviderReady",
            ),
        ),
        # §4.8 Reasoner — PRE: core context valid, prompt provider Ready; POST: N/A.
        (PipelineStep.REASONER, _PRE): (
            *CORE_CHECKS,
            requirement(
                _rule(
                    "4.8",
                    _PRE,
                    "prompt-provider-ready",
                    "the prompt knowledge provider must be Ready",
                ),
                lambda ctx: ctx.prompt_provider_ready,
                field="PromptProviderReady",
            ),
        ),
        (PipelineStep.REASONER, _POST): (),
        # §4.9 LLMClient
        (PipelineStep.LLM_CLIENT, _PRE): (
            requirement(
                _rule("4.9", _PRE, "response-payload-null", "ctx.ResponsePayload must be null"),
                lambda ctx: ctx.response_payload is None,
                field="ResponsePayload",
            ),
            _manifest_valid("4.9", _PRE, _is_continuation),
        ),
        (PipelineStep.LLM_CLIENT, _POST): (_exactly_one_outcome(),),
        # §4.10 ResponseBuilder
        (PipelineStep.RESPONSE_BUILDER, _PRE): (
            requirement(
                _rule(
                    "4.10",
                    _PRE,
                    "response-type-valid",
                    "ctx.ResponseType must be Final or ToolContinuation",
                ),
                lambda ctx: (
                    ctx.response_type in (ResponseType.FINAL, ResponseType.TOOL_CONTINUATION)
                ),
                field="ResponseType",
            ),
        ),
        (PipelineStep.RESPONSE_BUILDER, _POST): _response_builder_post(),
    }
)
"""Every step's PRE and POST checks, keyed by (step, phase), in AGN-036 §4 order."""


def step_rule_ids(step: PipelineStep, phase: Phase) -> tuple[str, ...]:
    """The ids of the rules a step's PRE or POST set checks, in order, without repeats."""
    ids = (i for check in STEP_CHECKS[(PipelineStep(step), Phase(phase))] for i in check.rule_ids)
    return tuple(dict.fromkeys(ids))


def _unchanged_errors(ctx: _Ctx, before: _Ctx | ContextSnapshot | None) -> list[InvokeError]:
    """§4.10 "context invariants unchanged (PRE == POST)".

    With the PRE state — a ``ContextSnapshot``, or a copy of the context — every
    field but ``Response`` must be equal. Without one (the two-argument call of
    AGN-036 §2.1) the invariants that must always hold — the core invariants of
    §3 — are checked instead, under their own ids.
    """
    if before is None:
        return run_checks(CORE_CHECKS, ctx)
    fields = type(ctx).model_fields
    if isinstance(before, ContextSnapshot):
        names = before.changed_fields(ctx)
    else:
        names = [
            name
            for name in fields
            if name != "response" and getattr(ctx, name) != getattr(before, name)
        ]
    if names:
        changed = [fields[name].alias or name for name in names]
        return [CONTEXT_UNCHANGED.error(f"changed: {', '.join(changed)}", field=changed[0])]
    return []


STEP_KNOWN = rule(
    "AGN-036/4/step-known",
    "AGN-036 §2.1, §4",
    "the step must be one of the ten pipeline steps of AGN-036 §4",
    _FAILED,
    module=__name__,
)


def _known_step(step: object) -> PipelineStep | None:
    if type(step) is PipelineStep:
        return step
    if not isinstance(step, str):
        return None
    try:
        return PipelineStep(step)
    except ValueError:
        return None


def _unknown_step(step: object) -> InvokeResult[None]:
    return outcome([STEP_KNOWN.error(repr(step), field="step")])


def validate_pre_step(ctx: PipelineContext, step: PipelineStep) -> InvokeResult[None]:
    """``ValidatePreStep(ctx, step)`` (AGN-036 §2.1, §4): the step's guard."""
    known = _known_step(step)
    if known is None:
        return _unknown_step(step)
    return outcome(run_checks(STEP_CHECKS[(known, _PRE)], ctx))


def validate_post_step(
    ctx: PipelineContext,
    step: PipelineStep,
    *,
    before: PipelineContext | ContextSnapshot | None = None,
) -> InvokeResult[None]:
    """``ValidatePostStep(ctx, step)`` (AGN-036 §2.1, §4): the step's exit hook.

    ``before`` is the context as it was when the step's PRE ran — best a
    ``snapshot_context(ctx)``, far cheaper than a copy; only the ResponseBuilder's
    "context invariants unchanged" rule (§4.10) reads it.
    """
    known = _known_step(step)
    if known is None:
        return _unknown_step(step)
    errors = run_checks(STEP_CHECKS[(known, _POST)], ctx)
    if known is PipelineStep.RESPONSE_BUILDER:
        errors = _unchanged_errors(ctx, before) + errors
    return outcome(errors)
