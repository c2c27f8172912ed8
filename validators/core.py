"""AGN-036 §3 and §3.1: the core context invariants (``ValidateCore``).

They must hold after context creation (the RequestHandler's POST, §4.1) and again
before reasoning (the Reasoner's PRE, §4.8).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aptix_pipeline.contracts import (
    ClipboardImage,
    ContextType,
    ErrorCode,
    InputArtifact,
    InvokeError,
    InvokeResult,
    PipelineContext,
)

from .checks import Check, requirement, run_checks
from .rules import outcome, rule

__all__ = ["CORE_CHECKS", "core_errors", "has_text", "has_user_input", "validate_core"]

_FAILED = ErrorCode.PIPELINE_RULE_FAILED


def has_text(value: str | None) -> bool:
    """Present and not blank: ``None``, ``""`` and whitespace-only text count as empty."""
    return bool(value and value.strip())


def has_user_input(
    instruction: str | None,
    artifacts: Sequence[InputArtifact] | None,
    images: Sequence[ClipboardImage] | None,
) -> bool:
    """At least one user input: a non-blank instruction, an artifact or an image.

    Shared by AGN-036 §3.1 and AGN-034 §2.1, which state the same rule.
    """
    return bool(has_text(instruction) or artifacts or images)


def _type_of(ctx: PipelineContext) -> ContextType | None:
    if type(ctx.type) is ContextType:  # as validated; assignment may have set plain text
        return ctx.type
    try:
        return ContextType(ctx.type)
    except ValueError:
        return None


TYPE_VALID = rule(
    "AGN-036/3/type-valid",
    "AGN-036 §3",
    "ctx.Type must be a valid AgentPipelineContextTypes value",
    _FAILED,
    module=__name__,
)
TIME_STAMP_PRESENT = rule(
    "AGN-036/3/time-stamp-present",
    "AGN-036 §3",
    "ctx.TimeStamp must not be empty",
    _FAILED,
    module=__name__,
)
CORRELATION_ID_PRESENT = rule(
    "AGN-036/3/correlation-id-present",
    "AGN-036 §3",
    "ctx.CorrelationId must not be empty",
    _FAILED,
    module=__name__,
)
ORG_PRESENT = rule(
    "AGN-036/3/org-present",
    "AGN-036 §3",
    "ctx.Envelope.Org must be present",
    _FAILED,
    module=__name__,
)
USER_PRESENT = rule(
    "AGN-036/3/user-present",
    "AGN-036 §3",
    "ctx.Envelope.User must be present",
    _FAILED,
    module=__name__,
)
INPUT_PRESENT = rule(
    "AGN-036/3.1/input-present",
    "AGN-036 §3.1",
    "Initial and FollowOn need Envelope.Instructions, InputArtifacts or ClipBoardImages",
    _FAILED,
    module=__name__,
)
INITIAL_SESSION_ID_EMPTY = rule(
    "AGN-036/3.1/initial-session-id-empty",
    "AGN-036 §3.1",
    "Initial: Envelope.SessionId must be empty",
    _FAILED,
    module=__name__,
)
INITIAL_TURN_ID_EMPTY = rule(
    "AGN-036/3.1/initial-turn-id-empty",
    "AGN-036 §3.1",
    "Initial: Envelope.TurnId must be empty",
    _FAILED,
    module=__name__,
)
INITIAL_TOOL_RESULTS_EMPTY = rule(
    "AGN-036/3.1/initial-tool-results-empty",
    "AGN-036 §3.1",
    "Initial: Envelope.ToolResults must be empty",
    _FAILED,
    module=__name__,
)
FOLLOW_ON_SESSION_ID_PRESENT = rule(
    "AGN-036/3.1/follow-on-session-id-present",
    "AGN-036 §3.1",
    "FollowOn: Envelope.SessionId must be present",
    _FAILED,
    module=__name__,
)
FOLLOW_ON_TURN_ID_PRESENT = rule(
    "AGN-036/3.1/follow-on-turn-id-present",
    "AGN-036 §3.1",
    "FollowOn: Envelope.TurnId must be present",
    _FAILED,
    module=__name__,
)
FOLLOW_ON_TOOL_RESULTS_EMPTY = rule(
    "AGN-036/3.1/follow-on-tool-results-empty",
    "AGN-036 §3.1",
    "FollowOn: Envelope.ToolResults must be empty",
    _FAILED,
    module=__name__,
)
CONTINUATION_SESSION_ID_PRESENT = rule(
    "AGN-036/3.1/continuation-session-id-present",
    "AGN-036 §3.1",
    "ClientToolCallContinuation: Envelope.SessionId must be present",
    _FAILED,
    module=__name__,
)
CONTINUATION_TURN_ID_PRESENT = rule(
    "AGN-036/3.1/continuation-turn-id-present",
    "AGN-036 §3.1",
    "ClientToolCallContinuation: Envelope.TurnId must be present",
    _FAILED,
    module=__name__,
)
CONTINUATION_TOOL_RESULTS_PRESENT = rule(
    "AGN-036/3.1/continuation-tool-results-present",
    "AGN-036 §3.1",
    "ClientToolCallContinuation: Envelope.ToolResults must contain one or more entries",
    _FAILED,
    module=__name__,
)


def _when(*kinds: ContextType) -> Callable[[PipelineContext], bool]:
    """A condition: the context is of one of ``kinds``."""
    return lambda ctx: _type_of(ctx) in kinds


_INITIAL = ContextType.INITIAL
_FOLLOW_ON = ContextType.FOLLOW_ON
_CONTINUATION = ContextType.CLIENT_TOOL_CALL_CONTINUATION


CORE_CHECKS: tuple[Check[PipelineContext], ...] = (
    requirement(TYPE_VALID, lambda ctx: _type_of(ctx) is not None, field="Type"),
    requirement(TIME_STAMP_PRESENT, lambda ctx: ctx.time_stamp is not None, field="TimeStamp"),
    requirement(
        CORRELATION_ID_PRESENT, lambda ctx: has_text(ctx.correlation_id), field="CorrelationId"
    ),
    requirement(ORG_PRESENT, lambda ctx: has_text(ctx.envelope.org), field="Envelope.Org"),
    requirement(USER_PRESENT, lambda ctx: has_text(ctx.envelope.user), field="Envelope.User"),
    requirement(
        INPUT_PRESENT,
        lambda ctx: has_user_input(
            ctx.envelope.instructions, ctx.envelope.input_artifacts, ctx.envelope.clip_board_images
        ),
        field="Envelope.Instructions",
        when=_when(_INITIAL, _FOLLOW_ON),
    ),
    requirement(
        INITIAL_SESSION_ID_EMPTY,
        lambda ctx: not has_text(ctx.envelope.session_id),
        field="Envelope.SessionId",
        when=_when(_INITIAL),
    ),
    requirement(
        INITIAL_TURN_ID_EMPTY,
        lambda ctx: not has_text(ctx.envelope.turn_id),
        field="Envelope.TurnId",
        when=_when(_INITIAL),
    ),
    requirement(
        INITIAL_TOOL_RESULTS_EMPTY,
        lambda ctx: not ctx.envelope.tool_results,
        field="Envelope.ToolResults",
        when=_when(_INITIAL),
    ),
    requirement(
        FOLLOW_ON_SESSION_ID_PRESENT,
        lambda ctx: has_text(ctx.envelope.session_id),
        field="Envelope.SessionId",
        when=_when(_FOLLOW_ON),
    ),
    requirement(
        FOLLOW_ON_TURN_ID_PRESENT,
        lambda ctx: has_text(ctx.envelope.turn_id),
        field="Envelope.TurnId",
        when=_when(_FOLLOW_ON),
    ),
    requirement(
        FOLLOW_ON_TOOL_RESULTS_EMPTY,
        lambda ctx: not ctx.envelope.tool_results,
        field="Envelope.ToolResults",
        when=_when(_FOLLOW_ON),
    ),
    requirement(
        CONTINUATION_SESSION_ID_PRESENT,
        lambda ctx: has_text(ctx.envelope.session_id),
        field="Envelope.SessionId",
        when=_when(_CONTINUATION),
    ),
    requirement(
        CONTINUATION_TURN_ID_PRESENT,
        lambda ctx: has_text(ctx.envelope.turn_id),
        field="Envelope.TurnId",
        when=_when(_CONTINUATION),
    ),
    requirement(
        CONTINUATION_TOOL_RESULTS_PRESENT,
        lambda ctx: bool(ctx.envelope.tool_results),
        field="Envelope.ToolResults",
        when=_when(_CONTINUATION),
    ),
)
"""The ValidateCore rule set, in the order AGN-036 §3 and §3.1 list it."""


def core_errors(ctx: PipelineContext) -> list[InvokeError]:
    """The broken core invariants of ``ctx`` (AGN-036 §3, §3.1)."""
    return run_checks(CORE_CHECKS, ctx)


def validate_core(ctx: PipelineContext) -> InvokeResult[None]:
    """``ValidateCore(ctx)`` (AGN-036 §2.1, §3): stateless, non-mutating, never raises."""
    return outcome(core_errors(ctx))
