"""An in-memory ``SessionStore``: for tests, examples and hosts that keep nothing.

Same behaviour as the SQLite store — scoped reads, one atomic commit per turn,
optimistic version checks — minus durability. ``apply`` runs without awaiting,
so within one event loop it is atomic.
"""

from __future__ import annotations

from aptix_pipeline.contracts import ChatMessage, Session, StoreConflictError, Turn, TurnStatus

from .unit_of_work import BufferedTransaction, TurnWrites

__all__ = ["MemoryStore"]


class MemoryStore:
    """Sessions, turns and transcripts in dictionaries; see the module docstring."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._turns: dict[tuple[str, str], Turn] = {}
        self._transcript: dict[str, list[ChatMessage]] = {}

    def begin(self, org: str, user: str) -> BufferedTransaction:
        """Start one turn's transaction for this caller."""
        return BufferedTransaction(self, org, user)

    def _owned(self, org: str, user: str, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None or (session.org, session.user) != (org, user):
            return None
        return session

    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        """The session, if it belongs to this org and user."""
        session = self._owned(org, user, session_id)
        return None if session is None else session.model_copy(deep=True)

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        """The turn of the caller's session, or ``None``."""
        if self._owned(org, user, session_id) is None:
            return None
        turn = self._turns.get((session_id, turn_id))
        return None if turn is None else turn.model_copy(deep=True)

    async def read_transcript(self, org: str, user: str, session_id: str) -> list[ChatMessage]:
        """The session's messages, oldest first."""
        if self._owned(org, user, session_id) is None:
            return []
        return [message.model_copy(deep=True) for message in self._transcript.get(session_id, [])]

    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        """The session's turn that awaits client tool results, if any."""
        if self._owned(org, user, session_id) is None:
            return None
        for (sid, _), turn in self._turns.items():
            if sid == session_id and turn.status is TurnStatus.AWAITING_CLIENT_TOOLS:
                return turn.model_copy(deep=True)
        return None

    async def apply(self, writes: TurnWrites) -> None:
        """Check every version first, then write everything (no await in between)."""
        for write in writes.sessions:
            stored = self._sessions.get(write.session.id)
            if write.created and stored is not None:
                raise StoreConflictError(f"session {write.session.id!r} already exists")
            if not write.created and (stored is None or stored.version != write.expected_version):
                raise StoreConflictError(f"session {write.session.id!r} changed since it was read")
        for turn_write in writes.turns:
            key = (turn_write.turn.session_id, turn_write.turn.id)
            if turn_write.created and key in self._turns:
                raise StoreConflictError(f"turn {turn_write.turn.id!r} already exists")
        for write in writes.sessions:
            version = write.expected_version + 1
            self._sessions[write.session.id] = write.session.model_copy(
                update={"version": version}, deep=True
            )
        for turn_write in writes.turns:
            turn = turn_write.turn
            self._turns[(turn.session_id, turn.id)] = turn.model_copy(deep=True)
        for session_id, _, message in writes.transcript:
            self._transcript.setdefault(session_id, []).append(message.model_copy(deep=True))
