"""AGN-036 §4.2 SessionRestorer: load the caller's session and the turn the request names.

FollowOn opens a new turn in the new mode snapshot (§4.2 POST ``turn-id-new``);
a continuation resumes the pending turn (DESIGN.md R4). The named turn must be in
the right state for the request (R10) — and a FollowOn is refused while *any*
turn of the session awaits client tool results, whichever turn it names: the
emitted call set must be answered first (AGN-033 §3.3). The turn's mode is
normalized from the persisted session, never from the client (AGN-011 §3.3); a
FollowOn's SolutionContextText replaces the session's (AGN-034 §4.5). A forked
session's first FollowOn names the turn it was forked after, which is its parent's
(``Session.forked_from``, docs/FORKS.md): that turn is read from the parent.
"""

from __future__ import annotations

from aptix_pipeline.contracts import (
    ContextType,
    InvokeWarning,
    Session,
    Turn,
    TurnStatus,
    scrubbed_logger,
)
from aptix_pipeline.validators import (
    FOLLOW_ON_TURN_SETTLED,
    SESSION_FOUND,
    TURN_FOUND,
    validate_turn_protocol,
)

from .faults import StepFaultError, shown
from .scope import TurnScope

__all__ = ["session_restorer"]

logger = scrubbed_logger(__name__)


async def session_restorer(scope: TurnScope) -> None:
    """Populate ``ctx.session`` and ``ctx.turn``; fault when either is not the caller's."""
    ctx, tx = scope.ctx, scope.transaction
    session_id, turn_id = ctx.envelope.session_id or "", ctx.envelope.turn_id or ""
    session = await tx.load_session(session_id)
    if session is None:
        raise StepFaultError([SESSION_FOUND.error(shown(session_id), field="SessionId")])
    named = await tx.load_turn(session_id, turn_id)
    fork = session.forked_from
    if named is None and fork is not None and fork.turn_id == turn_id:
        named = await tx.load_turn(fork.session_id, turn_id)  # the turn it was forked after
    if named is None:
        raise StepFaultError([TURN_FOUND.error(shown(turn_id), field="TurnId")])
    protocol = validate_turn_protocol(ctx.type, named)
    if not protocol.successful:
        raise StepFaultError(protocol.errors)
    if ctx.type is ContextType.CLIENT_TOOL_CALL_CONTINUATION:
        turn = named
        scope.expanded = list(named.expanded_containers)
        scope.usage = named.usage
        scope.server_results = list(named.server_tool_results)
        scope.files = list(named.files or ())
    else:
        pending = await tx.find_pending_turn(session_id)
        if pending is not None:  # R10 for the session: its open call set must be answered first
            raise StepFaultError(
                [
                    FOLLOW_ON_TURN_SETTLED.error(
                        f"turn {pending.id!r} of this session awaits "
                        f"{[call.tool_call_id for call in pending.pending_tool_calls]}",
                        field="TurnId",
                    )
                ]
            )
        if ctx.envelope.solution_context_text is not None:  # AGN-034 §4.5: session-latched
            session = await tx.set_solution_context(session.id, ctx.envelope.solution_context_text)
        turn = Turn(
            id=scope.ports.ids.new_id("turn"),
            session_id=session.id,
            mode=session.mode,
            status=TurnStatus.OPEN,
            created_at=ctx.time_stamp,
        )
        await tx.open_turn(turn)
    _warn_about_ignored_inputs(scope, session)
    ctx.session = session
    ctx.turn = turn
    scope.observer.identified(session.id, turn.id)
    ctx.mode = session.mode


def _warn_about_ignored_inputs(scope: TurnScope, session: Session) -> None:
    """A restored session keeps its mode and contexts; say so when the caller asked otherwise."""
    ignored = []
    if scope.initial_mode is not None and scope.initial_mode != session.mode:
        # AGN-011 §3.3: a mismatched mode is overwritten by the persisted one, with a warning.
        ignored.append(
            (
                "mode_mismatch",
                f"initial mode {scope.initial_mode!r} ignored: the session is in {session.mode!r}",
            )
        )
    envelope = scope.ctx.envelope
    for field, asked, kept in (
        ("AgentContextId", envelope.agent_context_id, session.agent_context_id),
        (
            "ConversationContextId",
            envelope.conversation_context_id,
            session.conversation_context_id,
        ),
    ):
        if asked is not None and asked.strip() and asked != kept:
            ignored.append(
                ("context_id_ignored", f"{field} {asked!r} ignored: the session runs in {kept!r}")
            )
    for code, message in ignored:
        logger.warning("session %s: %s", session.id, message)
        scope.warn(InvokeWarning(code=code, message=message))
