"""DESIGN.md R10: the pending-turn protocol of client tool continuations.

A FollowOn that names a turn still awaiting client tool results, and a
continuation that names a turn awaiting nothing, are client protocol faults
(AGN-033 §3.3): a clear error, nothing changes. The SessionRestorer checks the
turn the request names with ``validate_turn_protocol`` before it opens or resumes
anything.
"""

from __future__ import annotations

from aptix_pipeline.contracts import (
    ContextType,
    ErrorCode,
    InvokeError,
    InvokeResult,
    Turn,
    TurnStatus,
)

from .core import TYPE_VALID
from .rules import outcome, rule

__all__ = ["validate_turn_protocol"]

FOLLOW_ON_TURN_SETTLED = rule(
    "DESIGN/R10/follow-on-turn-settled", "DESIGN.md R10, AGN-033 §3.3",
    "a follow-on request must not name a turn that still awaits client tool results; "
    "submit the tool results first", ErrorCode.INVALID_REQUEST)  # fmt: skip
CONTINUATION_TURN_PENDING = rule(
    "DESIGN/R10/continuation-turn-pending", "DESIGN.md R10, AGN-033 §3.3",
    "a tool continuation must name a turn that awaits client tool results",
    ErrorCode.INVALID_REQUEST)  # fmt: skip


def _awaits_tools(turn: Turn) -> bool:
    return turn.status is TurnStatus.AWAITING_CLIENT_TOOLS and bool(turn.pending_tool_calls)


def validate_turn_protocol(kind: ContextType | str, turn: Turn) -> InvokeResult[None]:
    """Check that the turn a FollowOn or continuation names is in the right state (R10).

    ``kind`` may be the enum or its value (``"FollowOn"``); an unknown kind fails
    ``AGN-036/3/type-valid``.
    """
    try:
        kind = ContextType(kind)
    except ValueError:
        return outcome([TYPE_VALID.error(repr(kind), field="Type")])
    errors: list[InvokeError] = []
    if kind is ContextType.FOLLOW_ON and _awaits_tools(turn):
        pending = [call.tool_call_id for call in turn.pending_tool_calls]
        errors.append(
            FOLLOW_ON_TURN_SETTLED.error(f"turn {turn.id!r} awaits {pending}", field="TurnId")
        )
    if kind is ContextType.CLIENT_TOOL_CALL_CONTINUATION and not _awaits_tools(turn):
        errors.append(
            CONTINUATION_TURN_PENDING.error(f"turn {turn.id!r} is {turn.status}", field="TurnId")
        )
    return outcome(errors)
