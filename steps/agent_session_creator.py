"""AGN-036 §4.5 AgentSessionCreator: open a new session and its first turn.

The session starts in the mode the host passes, else ``"general"`` (AGN-011 §3.1,
DESIGN.md R2), and remembers its agent and conversation contexts so later turns
load the same ones (§4.6).
"""

from __future__ import annotations

from aptix_pipeline.contracts import DEFAULT_MODE, Session, Turn, TurnStatus
from aptix_pipeline.validators import INITIAL_MODE_KNOWN, has_text

from .faults import StepFaultError, shown
from .scope import TurnScope

__all__ = ["agent_session_creator"]


async def agent_session_creator(scope: TurnScope) -> None:
    """Create the session and open its first turn."""
    ctx, ids = scope.ctx, scope.ports.ids
    requested: object = scope.initial_mode
    if requested is not None and not isinstance(requested, str):
        raise StepFaultError([INITIAL_MODE_KNOWN.error(shown(requested), field="initial_mode")])
    mode = requested if isinstance(requested, str) and has_text(requested) else DEFAULT_MODE
    if await scope.ports.modes.get_mode(mode) is None:
        raise StepFaultError([INITIAL_MODE_KNOWN.error(shown(mode), field="initial_mode")])
    session = Session(
        id=ids.new_id("session"),
        org=scope.caller.org,
        user=scope.caller.user,
        mode=mode,
        agent_context_id=ctx.agent_context.id if ctx.agent_context else None,
        conversation_context_id=(ctx.conversation_context.id if ctx.conversation_context else None),
        solution_context_text=ctx.envelope.solution_context_text,
        created_at=ctx.time_stamp,
    )
    turn = Turn(
        id=ids.new_id("turn"),
        session_id=session.id,
        mode=mode,
        status=TurnStatus.OPEN,
        created_at=ctx.time_stamp,
    )
    await scope.transaction.create_session(session)
    await scope.transaction.open_turn(turn)
    ctx.session = session
    ctx.turn = turn
    scope.observer.identified(session.id, turn.id)
    ctx.mode = mode
