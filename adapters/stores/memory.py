"""An in-memory ``SessionStore``: for tests, examples and hosts that keep nothing.

Same behaviour as the SQLite store — scoped reads, one atomic commit per turn,
optimistic version checks — minus durability. ``apply`` runs without awaiting,
so within one event loop it is atomic. It is a ``ToolLedger`` too
(``contracts/ledger.py``), its entries as lasting as the store, and a
``UsageLedger`` (``contracts/usage.py``): each org's model calls in the order of
their time, so a window's calls are found by bisection. It forks sessions
(``SessionForks``, ``stores/forks.py``): a fork keeps its parent and cut, and its
transcript is read through them, never copied. It keeps turn traces
(``TraceLog``, ``contracts/traces.py``), each owner's in the order kept.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from aptix_pipeline.contracts import (
    BudgetCheck,
    BudgetWindow,
    ChatMessage,
    KeptTrace,
    LedgerEntry,
    ReserveOutcome,
    Session,
    StoreConflictError,
    StoredOutcome,
    Transcript,
    Turn,
    TurnStatus,
    UsageCall,
    UsageQuery,
    last_image_at,
)

from .forks import check_forkable, forked_session, no_session
from .session_browser import (
    DEFAULT_PAGE,
    OwnerSummary,
    SessionSummary,
    TranscriptEntry,
    check_page,
    turn_order,
)
from .unit_of_work import BufferedTransaction, TurnWrites, outcome_replaceable
from .usage_ledger import check_reservation

__all__ = ["MemoryStore"]


class MemoryStore:
    """Sessions, turns and transcripts in dictionaries; see the module docstring."""

    def __init__(self) -> None:
        # Sessions, turns and messages are frozen values (contracts), so the store
        # hands out and keeps the very objects it is given: no copies either way.
        self._sessions: dict[str, Session] = {}
        self._turns: dict[str, dict[str, Turn]] = {}
        """Each session's turns by id, in the order they were first written."""
        self._pending: dict[str, set[str]] = {}
        """Each session's turns that await client tool results: a follow-on's lookup is O(1)."""
        self._transcript: dict[str, list[ChatMessage]] = {}
        self._transcript_turns: dict[str, list[str]] = {}
        """The turn that appended each message of ``_transcript``, position for position."""
        self._turn_last: dict[str, dict[str, int]] = {}
        """Each session's turns by the seq (from 1) of the last message each appended."""
        self._cuts: dict[str, tuple[str, int]] = {}
        """Each fork's parent and how many of the parent's own messages it starts with."""
        self._forks: dict[str, list[str]] = {}
        """Each session's forks, oldest first."""
        self._last_image: dict[str, int] = {}
        """Each session's ``Transcript.last_image``: where its newest message with an image is."""
        self._outcomes: dict[tuple[str, str, str], StoredOutcome] = {}
        """Stored outcomes by org, user and key; an expired one stays until replaced."""
        self._ledger: dict[tuple[str, str, str], LedgerEntry] = {}
        """Tool ledger entries by org, user and key."""
        self._usage: dict[str, list[UsageCall]] = {}
        """Each org's model calls, ordered by ``at`` (``UsageLedger``)."""
        self._usage_index: dict[str, UsageCall] = {}
        """Every model call by id."""
        self._usage_turns: dict[str, list[UsageCall]] = {}
        """Each turn's model calls."""
        self._totals: dict[str, dict[tuple[object, ...], list[Any]]] = {}
        """Each org's running totals of calendar-window checks: ``[check, total]``."""
        self._traces: dict[tuple[str, str], list[KeptTrace]] = {}
        """Each org and user's kept traces, in the order kept (``TraceLog``)."""

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
        return self._owned(org, user, session_id)

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        """The turn of the caller's session, or ``None``."""
        if self._owned(org, user, session_id) is None:
            return None
        return self._turns.get(session_id, {}).get(turn_id)

    async def read_transcript(self, org: str, user: str, session_id: str) -> Transcript:
        """The session's messages, oldest first."""
        if self._owned(org, user, session_id) is None:
            return Transcript()
        if session_id in self._cuts:  # a fork: its parent's prefix, then its own
            return Transcript(*self._messages(session_id, None))
        messages = self._transcript.get(session_id, ())
        return Transcript(messages, self._last_image.get(session_id, -1))

    def _messages(self, session_id: str, upto: int | None) -> tuple[list[ChatMessage], int]:
        """The session's whole transcript, its own messages only up to ``upto``, and where
        its newest image is (``Transcript.last_image``), known without looking."""
        own = self._transcript.get(session_id, [])
        last = self._last_image.get(session_id, -1)
        if upto is not None and upto < len(own):
            own = own[:upto]
            if last >= upto:  # the newest image is after the cut: look for one before it
                last = last_image_at(own)
        cut = self._cuts.get(session_id)
        if cut is None:
            return list(own), last
        prefix, prefix_last = self._messages(*cut)
        return [*prefix, *own], prefix_last if last < 0 else len(prefix) + last

    # --- SessionForks (contracts/ports.py, stores/forks.py): no await, so atomic ---------

    async def fork_session(
        self,
        org: str,
        user: str,
        session_id: str,
        turn_id: str,
        new_session_id: str,
        created_at: datetime,
    ) -> Session:
        """See ``SessionForks``."""
        source = self._owned(org, user, session_id)
        if source is None:
            raise no_session(session_id)
        turns = self._turns.get(session_id, {})
        check_forkable(session_id, turn_id, turns.get(turn_id))
        if new_session_id in self._sessions:
            raise StoreConflictError(f"session {new_session_id!r} already exists")
        last = self._turn_last.get(session_id, {})
        cut = last.get(turn_id, 0)
        prefix = 0 if source.forked_from is None else source.forked_from.messages

        def later(entry_turn: str) -> bool:
            return entry_turn in turns and last.get(entry_turn, cut + 1) > cut

        fork = forked_session(source, turn_id, new_session_id, created_at, prefix + cut, later)
        self._sessions[new_session_id] = fork
        self._cuts[new_session_id] = (session_id, cut)
        self._forks.setdefault(session_id, []).append(new_session_id)
        return fork

    async def forks_of(self, org: str, user: str, session_id: str) -> list[Session] | None:
        """See ``SessionForks``."""
        if self._owned(org, user, session_id) is None:
            return None
        return [self._sessions[fork] for fork in self._forks.get(session_id, ())]

    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        """The session's turn that awaits client tool results, if any."""
        if self._owned(org, user, session_id) is None:
            return None
        pending = self._pending.get(session_id)
        if not pending:
            return None
        turns = self._turns[session_id]
        if len(pending) == 1:
            return turns[next(iter(pending))]
        # Several (only a caller driving transactions by hand makes them): the first written.
        return next(turn for turn_id, turn in turns.items() if turn_id in pending)

    async def read_outcome(self, org: str, user: str, key: str) -> StoredOutcome | None:
        """This org and user's outcome under ``key``, expired or not."""
        return self._outcomes.get((org, user, key))

    async def purge_outcomes(self, now: datetime) -> int:
        """Forget every outcome expired by ``now``; how many there were."""
        expired = [key for key, outcome in self._outcomes.items() if outcome.expired(now)]
        for key in expired:
            del self._outcomes[key]
        return len(expired)

    # --- ToolLedger (contracts/ledger.py): no await, so each call is atomic -------------

    async def reserve_tool_call(
        self, org: str, user: str, key: str, now: datetime
    ) -> LedgerEntry | None:
        """See ``ToolLedger``."""
        held = self._ledger.get((org, user, key))
        if held is None:
            self._ledger[(org, user, key)] = LedgerEntry(key=key, reserved_at=now)
        return held

    async def complete_tool_call(
        self, org: str, user: str, key: str, result: str, now: datetime
    ) -> None:
        """See ``ToolLedger``."""
        held = self._ledger.get((org, user, key))
        if held is None or held.result is None:
            reserved_at = now if held is None else held.reserved_at
            self._ledger[(org, user, key)] = LedgerEntry(
                key=key, result=result, reserved_at=reserved_at, done_at=now
            )

    async def release_tool_call(self, org: str, user: str, key: str) -> None:
        """See ``ToolLedger``."""
        held = self._ledger.get((org, user, key))
        if held is not None and held.result is None:
            del self._ledger[(org, user, key)]

    async def purge_tool_calls(self, before: datetime) -> int:
        """Forget every ledger entry reserved before ``before``, done or not; how many."""
        old = [key for key, entry in self._ledger.items() if entry.reserved_at < before]
        for key in old:
            del self._ledger[key]
        return len(old)

    # --- TraceLog (contracts/traces.py): no await, so each call is atomic -------------

    async def keep_trace(self, trace: KeptTrace) -> None:
        """See ``TraceLog``: also forgets the owner's oldest traces expired by its time."""
        kept = self._traces.setdefault((trace.org, trace.user), [])
        while kept and kept[0].expires_at is not None and kept[0].expires_at <= trace.at:
            kept.pop(0)
        kept.append(trace)

    async def list_traces(
        self,
        org: str,
        user: str,
        session_id: str | None = None,
        *,
        limit: int = DEFAULT_PAGE,
        offset: int = 0,
    ) -> list[KeptTrace]:
        """See ``TraceLog``."""
        check_page(limit, offset)
        kept = reversed(self._traces.get((org, user), []))
        chosen = [t for t in kept if session_id is None or t.session_id == session_id]
        return chosen[offset : offset + limit]

    async def read_trace(self, org: str, user: str, trace_id: str) -> KeptTrace | None:
        """See ``TraceLog``."""
        return next((t for t in self._traces.get((org, user), []) if t.id == trace_id), None)

    async def purge_traces(self, now: datetime) -> int:
        """See ``TraceLog``."""
        gone = 0
        for owner, kept in self._traces.items():
            left = [t for t in kept if t.expires_at is None or t.expires_at > now]
            gone += len(kept) - len(left)
            self._traces[owner] = left
        return gone

    # --- UsageLedger (contracts/usage.py): no await, so each call is atomic -----------

    async def reserve_usage(
        self,
        call: UsageCall,
        checks: Sequence[BudgetCheck],
        settle: Sequence[UsageCall] = (),
    ) -> ReserveOutcome:
        """See ``UsageLedger``. A call whose id is stored already (a reservation run
        again, its first answer lost: a durable turn's retried activity) is answered as
        reserved and not stored twice; the settlements are applied all the same (D595)."""
        self._settle(settle)
        if call.id in self._usage_index:
            return ReserveOutcome(reserved=True)
        used: dict[str, Decimal] = {}
        oldest: dict[str, datetime | None] = {}
        for check in checks:
            used[check.budget_id], oldest[check.budget_id] = self._counted(check)
        outcome = check_reservation(checks, used, oldest)
        if outcome.reserved:
            self._keep(call)
        return outcome

    async def settle_usage(self, calls: Sequence[UsageCall]) -> None:
        """See ``UsageLedger``."""
        self._settle(calls)

    async def usage_calls(self, query: UsageQuery) -> list[UsageCall]:
        """See ``UsageLedger``."""
        calls = self._usage.get(query.org, [])
        start = 0 if query.since is None else bisect_left(calls, query.since, key=_at)
        return [call for call in calls[start:] if query.matches(call)]

    def _counted(self, check: BudgetCheck) -> tuple[Decimal, datetime | None]:
        """What ``check``'s calls hold, and when the earliest was made.

        A turn's calls are found by the turn's index; a calendar window's total is
        kept running once asked for (each call kept or settled after adds to it), so
        a day of calls is not summed again call after call; a rolling window's calls
        are found by bisection and summed.
        """
        if check.turn_id is not None:
            counted = [
                held for held in self._usage_turns.get(check.turn_id, ()) if check.matches(held)
            ]
            return _sum(counted, check), min((held.at for held in counted), default=None)
        if check.window in _CALENDAR and check.since is not None:
            key = _total_key(check)
            running = self._totals.setdefault(check.org, {})
            held_total = running.get(key)
            if held_total is None:
                self._drop_older(running, key)
                held_total = running[key] = [check, self._scan(check)[0]]
            return held_total[1], None
        return self._scan(check)

    def _scan(self, check: BudgetCheck) -> tuple[Decimal, datetime | None]:
        calls = self._usage.get(check.org, [])
        start = 0 if check.since is None else bisect_left(calls, check.since, key=_at)
        counted = [held for held in calls[start:] if check.matches(held)]
        return _sum(counted, check), counted[0].at if counted else None

    @staticmethod
    def _drop_older(running: dict[tuple[object, ...], list[Any]], key: tuple[object, ...]) -> None:
        """Forget the totals of the same budget's earlier windows."""
        stale = [held for held in running if held[:-1] == key[:-1] and held[-1] != key[-1]]
        for held in stale:
            del running[held]

    def _settle(self, calls: Sequence[UsageCall]) -> None:
        for call in calls:
            held = self._usage_index.get(call.id)
            if held is not None:
                org_calls = self._usage[held.org]
                at = bisect_left(org_calls, held.at, key=_at)
                while org_calls[at] is not held:
                    at += 1
                del org_calls[at]
                turn = self._usage_turns[held.turn_id]
                turn.remove(held)
                self._count(held, -1)
            self._keep(call)

    def _keep(self, call: UsageCall) -> None:
        self._usage_index[call.id] = call
        insort(self._usage.setdefault(call.org, []), call, key=_at)
        self._usage_turns.setdefault(call.turn_id, []).append(call)
        self._count(call, 1)

    def _count(self, call: UsageCall, sign: int) -> None:
        """Add ``call`` to (or take it from) the running totals it counts in."""
        for check_total in self._totals.get(call.org, {}).values():
            check = check_total[0]
            if check.matches(call):
                check_total[1] += sign * call.charge.of(check.metric)

    # --- SessionBrowser (stores/session_browser.py) ------------------------------------------

    async def list_owners(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[OwnerSummary]:
        """The org and user pairs holding sessions, by org then user."""
        check_page(limit, offset)
        counts = Counter((session.org, session.user) for session in self._sessions.values())
        owners = [OwnerSummary(org, user, count) for (org, user), count in sorted(counts.items())]
        return owners[offset : offset + limit]

    def _summary(self, session: Session) -> SessionSummary:
        turns = self._turns.get(session.id, {}).values()
        return SessionSummary.of_session(session, [turn.created_at for turn in turns])

    async def list_sessions(
        self, org: str, user: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[SessionSummary]:
        """The caller's sessions, most recent activity first."""
        check_page(limit, offset)
        owned = (s for s in self._sessions.values() if (s.org, s.user) == (org, user))
        summaries = sorted((self._summary(s) for s in owned), key=SessionSummary.sort_key)
        return summaries[offset : offset + limit]

    async def list_turns(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[Turn] | None:
        """The session's turns in creation order; ``None`` when the caller has no such session."""
        check_page(limit, offset)
        if self._owned(org, user, session_id) is None:
            return None
        turns = sorted(self._turns.get(session_id, {}).values(), key=turn_order)
        return turns[offset : offset + limit]

    async def read_transcript_page(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[TranscriptEntry] | None:
        """The session's messages in order; ``None`` when the caller has no such session."""
        check_page(limit, offset)
        if self._owned(org, user, session_id) is None:
            return None
        messages = self._transcript.get(session_id, [])[offset : offset + limit]
        turn_ids = self._transcript_turns.get(session_id, [])[offset : offset + limit]
        return [
            TranscriptEntry(seq=offset + n + 1, turn_id=turn_id, message=message)
            for n, (turn_id, message) in enumerate(zip(turn_ids, messages, strict=True))
        ]

    async def apply(self, writes: TurnWrites) -> None:
        """Check every version first, then write everything (no await in between)."""
        for write in writes.sessions:
            stored = self._sessions.get(write.session.id)
            if write.created and stored is not None:
                raise StoreConflictError(f"session {write.session.id!r} already exists")
            if not write.created and (stored is None or stored.version != write.expected_version):
                raise StoreConflictError(f"session {write.session.id!r} changed since it was read")
        for turn_write in writes.turns:
            turn = turn_write.turn
            if turn_write.created and turn.id in self._turns.get(turn.session_id, {}):
                raise StoreConflictError(f"turn {turn.id!r} already exists")
        for outcome in writes.outcomes:
            if not outcome_replaceable(
                self._outcomes.get((writes.org, writes.user, outcome.key)), outcome
            ):
                raise StoreConflictError(f"outcome {outcome.key!r} is already stored")
        for write in writes.sessions:
            version = write.expected_version + 1
            self._sessions[write.session.id] = write.session.model_copy(update={"version": version})
        for turn_write in writes.turns:
            turn = turn_write.turn
            self._turns.setdefault(turn.session_id, {})[turn.id] = turn
            pending = self._pending.setdefault(turn.session_id, set())
            if turn.status is TurnStatus.AWAITING_CLIENT_TOOLS:
                pending.add(turn.id)
            else:
                pending.discard(turn.id)
        for session_id, turn_id, message in writes.transcript:
            messages = self._transcript.setdefault(session_id, [])
            if message.parts and message.images:
                self._last_image[session_id] = len(messages)
            messages.append(message)
            self._transcript_turns.setdefault(session_id, []).append(turn_id)
            self._turn_last.setdefault(session_id, {})[turn_id] = len(messages)
        for outcome in writes.outcomes:
            self._outcomes[(writes.org, writes.user, outcome.key)] = outcome


def _at(call: UsageCall) -> datetime:
    return call.at


_CALENDAR = frozenset({BudgetWindow.DAY, BudgetWindow.MONTH})


def _total_key(check: BudgetCheck) -> tuple[object, ...]:
    """A calendar check's running total: its budget, whose, and its window's start last."""
    return (check.budget_id, check.metric, check.user, check.mode, check.currency, check.since)


def _sum(calls: Sequence[UsageCall], check: BudgetCheck) -> Decimal:
    return sum((held.charge.of(check.metric) for held in calls), Decimal(0))
