"""AGN-036 §4.2 SessionRestorer: load the caller's session and the turn the request names.

FollowOn opens a new turn in the new mode snapshot (§4.2 POST ``turn-id-new``);
a continuation resumes the pending turn (DESIGN.md R4). The named turn must be in
the right state for the request (R10). The turn's mode is normalized from the
persisted session, never from the client (AGN-011 §3.3).
"""

from __future__ import annotations

from aptix_pipeline.contracts import ContextType, ErrorCode, Turn, TurnStatus
from aptix_pipeline.validators import validate_turn_protocol
from aptix_pipeline.validators.rules import rule

from .faults import StepFaultError
from .scope import TurnScope

__all__ = ["SESSION_FOUND", "TURN_FOUND", "session_restorer"]

SESSION_FOUND = rule(
    "AGN-033/3.1/session-found", "AGN-033 §3.1, DESIGN.md Isolation",
    "SessionId must name a session of the calling org and user", ErrorCode.NOT_FOUND)  # fmt: skip
TURN_FOUND = rule(
    "AGN-033/3.1/turn-in-session", "AGN-033 §3.1",
    "TurnId must name a turn of that session (TurnIds are scoped to their session)",
    ErrorCode.NOT_FOUND)  # fmt: skip


async def session_restorer(scope: TurnScope) -> None:
    """Populate ``ctx.session`` and ``ctx.turn``; fault when either is not the caller's."""
    ctx, tx = scope.ctx, scope.transaction
    session_id, turn_id = ctx.envelope.session_id or "", ctx.envelope.turn_id or ""
    session = await tx.load_session(session_id)
    if session is None:
        raise StepFaultError([SESSION_FOUND.error(repr(session_id), field="SessionId")])
    named = await tx.load_turn(session_id, turn_id)
    if named is None:
        raise StepFaultError([TURN_FOUND.error(repr(turn_id), field="TurnId")])
    protocol = validate_turn_protocol(ctx.type, named)
    if not protocol.successful:
        raise StepFaultError(protocol.errors)
    if ctx.type is ContextType.CLIENT_TOOL_CALL_CONTINUATION:
        turn = named
        scope.expanded = list(named.expanded_containers)
    else:
        turn = Turn(
            id=scope.ports.ids.new_id("turn"),
            session_id=session.id,
            mode=session.mode,
            status=TurnStatus.OPEN,
            created_at=ctx.time_stamp,
        )
        await tx.open_turn(turn)
    ctx.session = session
    ctx.turn = turn
    ctx.mode = session.mode
