"""What the built-in stores share to fork a session (``SessionForks``, docs/FORKS.md).

A fork is a session row that points at its parent: the parent's id, the settled
turn it was forked after, and ``parent_seq``, the parent's own message (its
``seq``, counted from 1 in the parent) that turn appended last. Nothing of the
transcript is copied. A session's transcript is its ancestors' messages up to each
cut, then its own; ``ForkPoint.messages`` (the ``prefix_len`` the SQL stores keep)
is how many come before its own, so a message's place in the whole transcript is
``prefix_len + seq`` — the number the transcript cache counts by (``transcript_cache``),
the same for a fork as for a session that never was one.

The mode history is small and is copied: the source's entries up to the first one a
later turn of the source made (a turn of the source other than the fork turn that
appended nothing up to the cut). Entries the source copied from its own parent, and
entries made outside a turn before that one, are kept.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from aptix_pipeline.contracts import (
    ForkPoint,
    ForkRefusal,
    ForkRefusedError,
    ModeHistoryEntry,
    Session,
    Turn,
    TurnStatus,
)

__all__ = ["check_forkable", "forked_session", "no_session", "no_turn"]


def no_session(session_id: str) -> ForkRefusedError:
    """The refusal of a session the caller does not have."""
    return ForkRefusedError(
        ForkRefusal.SESSION_NOT_FOUND,
        f"no session {session_id!r} for this caller (a session of another org or user "
        "reads as not found)",
    )


def no_turn(session_id: str, turn_id: str) -> ForkRefusedError:
    """The refusal of a turn the session does not have."""
    return ForkRefusedError(
        ForkRefusal.TURN_NOT_FOUND, f"session {session_id!r} has no turn {turn_id!r}"
    )


def check_forkable(session_id: str, turn_id: str, turn: Turn | None) -> Turn:
    """``turn``, when it is a settled turn; else the ``ForkRefusedError`` saying why."""
    if turn is None:
        raise no_turn(session_id, turn_id)
    if turn.status is not TurnStatus.COMPLETED:
        raise ForkRefusedError(
            ForkRefusal.TURN_PENDING,
            f"turn {turn_id!r} of session {session_id!r} is still pending "
            f"({turn.status.value}): only a settled turn can be forked",
        )
    return turn


def forked_session(
    source: Session,
    turn_id: str,
    new_session_id: str,
    created_at: datetime,
    messages: int,
    later: Callable[[str], bool],
) -> Session:
    """The fork of ``source`` after ``turn_id``, starting with ``messages`` messages.

    ``later(turn_id)`` tells whether a turn id of a mode-history entry is a later
    turn of ``source`` (module docstring); it is asked only about the entries'
    turns, a handful, never about every turn of the session.
    """
    kept: list[ModeHistoryEntry] = []
    for entry in source.mode_history:
        if entry.turn_id is not None and entry.turn_id != turn_id and later(entry.turn_id):
            break
        kept.append(entry)
    mode: str | None
    if kept:
        mode = kept[-1].new_mode
    elif source.mode_history:
        mode = source.mode_history[0].previous_mode
    else:
        mode = source.mode
    return Session(
        id=new_session_id,
        org=source.org,
        user=source.user,
        mode=mode,
        mode_history=kept,
        agent_context_id=source.agent_context_id,
        conversation_context_id=source.conversation_context_id,
        solution_context_text=source.solution_context_text,
        created_at=created_at,
        version=1,
        forked_from=ForkPoint(session_id=source.id, turn_id=turn_id, messages=messages),
    )
