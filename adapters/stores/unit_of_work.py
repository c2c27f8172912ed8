"""One turn's store transaction, shared by the stores: read through, buffer writes, commit once.

A turn reads straight from the store and keeps every write in memory; ``commit``
hands them to the store in one atomic ``apply``. So a failed turn writes nothing,
and no store lock is held while the model thinks. Concurrency is optimistic: each
session a turn touches carries the version the turn read, and ``apply`` refuses
(``StoreConflictError``) when another turn committed to that session in between.
A session the turn creates has nothing stored yet, so its turns and messages are
never read from the store (an Initial turn reads nothing; a taken id is the
commit's conflict).

A store implements ``StoreBackend`` — five reads, each scoped to one org and user
(``read_session``, ``read_turn``, ``read_transcript``, ``read_pending_turn``,
``read_outcome``), and one atomic ``apply`` — and gets the full
``SessionTransaction`` port (contracts/ports.py) from ``BufferedTransaction``. The
memory, SQLite and PostgreSQL stores do, and so may a host's (docs/STORES.md "A
store of your own"). Sessions, turns and messages are frozen values: a
transaction hands out and keeps the objects it reads and is given, never copies;
a change is a new object.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aptix_pipeline.contracts import (
    ChatMessage,
    ForkPoint,
    ModeHistoryEntry,
    Session,
    StoredOutcome,
    Transcript,
    Turn,
    TurnStatus,
)

__all__ = [
    "BufferedTransaction",
    "SessionWrite",
    "StoreBackend",
    "TurnWrite",
    "TurnWrites",
    "outcome_replaceable",
    "session_from_row",
]


def session_from_row(
    row: Sequence[Any], history: Iterable[str], fork: Sequence[Any] = (None, None, 0)
) -> Session:
    """A session read by a SQL store: its columns in the order id, org, user, mode,
    agent context id, conversation context id, solution context text, created at,
    version; ``history`` its ModeHistory entries as JSON text, oldest first; ``fork``
    its parent's id, the turn it was forked after and its prefix length (``forks``),
    the id ``None`` when it is no fork."""
    parent, turn_id, messages = fork
    return Session(
        id=row[0],
        org=row[1],
        user=row[2],
        mode=row[3],
        agent_context_id=row[4],
        conversation_context_id=row[5],
        solution_context_text=row[6],
        created_at=row[7],
        version=row[8],
        mode_history=[ModeHistoryEntry.model_validate_json(entry) for entry in history],
        forked_from=None
        if parent is None
        else ForkPoint(session_id=parent, turn_id=turn_id, messages=messages),
    )


def outcome_replaceable(stored: StoredOutcome | None, new: StoredOutcome) -> bool:
    """Whether ``new`` may be written over ``stored`` (``SessionTransaction.save_outcome``).

    Only when there is none yet or the stored one has expired by ``new``'s time;
    otherwise another turn answered the key first and the commit is a conflict.
    """
    return stored is None or stored.expired(new.created_at)


@dataclass(slots=True)
class SessionWrite:
    """A session a turn created (``created``) or changed, as it stands after the turn.

    ``expected_version`` is the version the turn read (0 for a new session): the
    store writes the session with ``expected_version + 1``. ``new_history`` holds
    the ModeHistory entries this turn appended; ``session.mode_history`` already
    ends with them.
    """

    session: Session
    created: bool
    expected_version: int
    new_history: list[ModeHistoryEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TurnWrite:
    """A turn a transaction opened (``created``) or saved."""

    turn: Turn
    created: bool


@dataclass(slots=True)
class TurnWrites:
    """Everything one turn writes, applied at once by ``StoreBackend.apply``.

    ``org`` and ``user`` are the caller's; ``transcript`` holds (session id, turn
    id, message) in the order the messages are appended.
    """

    org: str
    user: str
    sessions: list[SessionWrite]
    turns: list[TurnWrite]
    transcript: list[tuple[str, str, ChatMessage]]
    outcomes: list[StoredOutcome] = field(default_factory=list)


class StoreBackend(Protocol):
    """What a store provides to ``BufferedTransaction``: five reads and one atomic ``apply``.

    Each read is scoped to org + user: another caller's session reads as not
    found. ``apply`` is the only write, called once per committed turn.
    """

    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        """The session, if it belongs to this org and user."""
        ...

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        """The turn of that session, if the session belongs to this org and user."""
        ...

    async def read_transcript(self, org: str, user: str, session_id: str) -> list[ChatMessage]:
        """The session's messages, oldest first."""
        ...

    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        """The session's turn that awaits client tool results, if any."""
        ...

    async def read_outcome(self, org: str, user: str, key: str) -> StoredOutcome | None:
        """This org and user's stored outcome under ``key``, expired or not."""
        ...

    async def apply(self, writes: TurnWrites) -> None:
        """Write everything atomically, or nothing and raise ``StoreConflictError`` when
        a created session's id is taken, a changed session's stored version is not its
        ``expected_version`` (another turn committed to it), a created turn's id is
        taken in its session, or an outcome's key holds one that is not
        ``outcome_replaceable``."""
        ...


class BufferedTransaction:
    """``SessionTransaction`` over a ``StoreBackend``; see the module docstring."""

    def __init__(self, backend: StoreBackend, org: str, user: str) -> None:
        self._backend = backend
        self._org = org
        self._user = user
        self._sessions: dict[str, SessionWrite] = {}
        self._read: dict[str, Session] = {}
        self._turns: dict[tuple[str, str], TurnWrite] = {}
        self._transcript: list[tuple[str, str, ChatMessage]] = []
        self._outcomes: dict[str, StoredOutcome] = {}
        self._closed = False

    def _open(self) -> None:
        if self._closed:
            raise RuntimeError("this transaction was already committed or rolled back")

    async def load_session(self, session_id: str) -> Session | None:
        """The caller's session (with this transaction's changes), or ``None``."""
        self._open()
        if session_id in self._sessions:
            return self._sessions[session_id].session
        if session_id not in self._read:
            found = await self._backend.read_session(self._org, self._user, session_id)
            if found is None:
                return None
            self._read[session_id] = found
        return self._read[session_id]

    async def create_session(self, session: Session) -> None:
        """Buffer a new session of the caller."""
        self._open()
        if (session.org, session.user) != (self._org, self._user):
            raise ValueError(
                f"a session is created for the caller's own org and user "
                f"({self._org!r}/{self._user!r}), not for {session.org!r}/{session.user!r}"
            )
        if session.id in self._sessions or session.id in self._read:
            raise ValueError(f"session {session.id!r} already exists")
        self._sessions[session.id] = SessionWrite(session, True, 0)

    def _created(self, session_id: str) -> bool:
        """Whether this transaction creates the session: the backend holds none of its turns
        or messages (a taken id makes the commit a conflict)."""
        write = self._sessions.get(session_id)
        return write is not None and write.created

    async def _touch(self, session_id: str) -> SessionWrite:
        """The session's write record, made on first write; ``LookupError`` if not the caller's."""
        if session_id not in self._sessions:
            session = await self.load_session(session_id)
            if session is None:
                raise LookupError(f"no session {session_id!r} for this caller")
            self._sessions[session_id] = SessionWrite(session, False, session.version)
        return self._sessions[session_id]

    async def load_turn(self, session_id: str, turn_id: str) -> Turn | None:
        """The turn inside the caller's session, or ``None``."""
        self._open()
        buffered = self._turns.get((session_id, turn_id))
        if buffered is not None:
            return buffered.turn
        if await self.load_session(session_id) is None:
            return None
        if self._created(session_id):  # nothing of it is stored yet: no read (D483)
            return None
        return await self._backend.read_turn(self._org, self._user, session_id, turn_id)

    async def open_turn(self, turn: Turn) -> None:
        """Buffer a new turn of a session of the caller."""
        self._open()
        key = (turn.session_id, turn.id)
        if await self.load_session(turn.session_id) is None:
            raise LookupError(f"no session {turn.session_id!r} for this caller")
        if key in self._turns or await self.load_turn(*key) is not None:
            raise ValueError(f"turn {turn.id!r} already exists in session {turn.session_id!r}")
        await self._touch(turn.session_id)
        self._turns[key] = TurnWrite(turn, True)

    async def complete_turn(self, turn: Turn) -> None:
        """Buffer a turn's new status and pending calls."""
        self._open()
        key = (turn.session_id, turn.id)
        previous = self._turns.get(key)
        if previous is None and await self.load_turn(*key) is None:
            raise LookupError(f"no turn {turn.id!r} in session {turn.session_id!r}")
        await self._touch(turn.session_id)
        created = previous is not None and previous.created
        self._turns[key] = TurnWrite(turn, created)

    async def find_pending_turn(self, session_id: str) -> Turn | None:
        """The turn awaiting client tool results, as this transaction sees it."""
        self._open()
        if await self.load_session(session_id) is None:
            return None
        buffered = {tid: w.turn for (sid, tid), w in self._turns.items() if sid == session_id}
        for turn in reversed(buffered.values()):
            if turn.status is TurnStatus.AWAITING_CLIENT_TOOLS:
                return turn
        stored = await self._backend.read_pending_turn(self._org, self._user, session_id)
        if stored is None or stored.id in buffered:  # settled by this transaction
            return None
        return stored

    async def load_transcript(self, session_id: str) -> Transcript:
        """The session's messages, then this transaction's, oldest first.

        A ``Transcript``: where the backend answers one, its ``last_image`` is carried
        over, not looked for again (the memory and SQL stores keep it as they append).
        """
        self._open()
        if await self.load_session(session_id) is None:
            return Transcript()
        stored: list[ChatMessage] = []
        if not self._created(session_id):
            stored = await self._backend.read_transcript(self._org, self._user, session_id)
        added = [message for sid, _, message in self._transcript if sid == session_id]
        if isinstance(stored, Transcript):
            return stored.joined(added)
        return Transcript([*stored, *added])

    async def append_transcript(
        self, session_id: str, turn_id: str, messages: Sequence[ChatMessage]
    ) -> None:
        """Buffer messages of a turn."""
        self._open()
        await self._touch(session_id)
        self._transcript.extend((session_id, turn_id, message) for message in messages)

    async def set_session_mode(self, session_id: str, entry: ModeHistoryEntry) -> Session:
        """SetSessionMode (AGN-011 §3.2): new mode plus a ModeHistory entry, both buffered."""
        self._open()
        current = await self.load_session(session_id)
        if current is None:
            raise LookupError(f"no session {session_id!r} for this caller")
        if entry.previous_mode != current.mode:
            raise ValueError(
                f"ModeHistory entry starts from {entry.previous_mode!r}, "
                f"but the session is in {current.mode!r}"
            )
        write = await self._touch(session_id)  # only once the change is known to be valid
        write.session = current.model_copy(
            update={"mode": entry.new_mode, "mode_history": [*current.mode_history, entry]}
        )
        write.new_history.append(entry)
        return write.session

    async def set_solution_context(self, session_id: str, text: str) -> Session:
        """Replace the session's solution context (AGN-034 §4.5), buffered."""
        self._open()
        write = await self._touch(session_id)
        write.session = write.session.model_copy(update={"solution_context_text": text})
        return write.session

    async def load_outcome(self, key: str) -> StoredOutcome | None:
        """The caller's outcome under ``key`` (this transaction's own first), or ``None``."""
        self._open()
        if key in self._outcomes:
            return self._outcomes[key]
        return await self._backend.read_outcome(self._org, self._user, key)

    async def save_outcome(self, outcome: StoredOutcome) -> None:
        """Buffer an outcome of the caller; ``commit`` writes it with the turn."""
        self._open()
        self._outcomes[outcome.key] = outcome

    async def commit(self) -> None:
        """Apply every buffered write at once."""
        self._open()
        self._closed = True
        writes = TurnWrites(
            org=self._org,
            user=self._user,
            sessions=list(self._sessions.values()),
            turns=list(self._turns.values()),
            transcript=list(self._transcript),
            outcomes=list(self._outcomes.values()),
        )
        if writes.sessions or writes.turns or writes.transcript or writes.outcomes:
            await self._backend.apply(writes)

    async def rollback(self) -> None:
        """Forget every buffered write."""
        self._closed = True
        self._sessions.clear()
        self._turns.clear()
        self._transcript.clear()
        self._outcomes.clear()
