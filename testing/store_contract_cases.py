"""The cases of the store contract kit (``StoreContract``; loaded through store_contract.py).

What every ``SessionStore`` (contracts/ports.py) keeps, checked through the port
alone: isolation by org and user (DESIGN.md "Isolation"); a transaction's reads
see its own writes, other transactions see nothing before its commit, and a
rollback (or no commit) writes nothing; turns round-trip with their status and
pending client tool calls, and ``find_pending_turn`` finds the one that awaits
results (AGN-036 §4.4); the transcript keeps its order, and a ``Transcript`` it is
read as knows where its newest image is (``Transcript.last_image``); SetSessionMode sets the
mode and appends to ModeHistory, refusing an entry that does not start from the
current mode (AGN-011 §3.2); the solution context is replaced at commit (AGN-034
§4.5); stored outcomes read back equal, and a key holding an unexpired one makes
the commit a conflict that writes nothing (docs/CONFORMANCE.md D181, D183, D186);
racing commits on one session let exactly one win (``StoreConflictError``); text
of every kind comes back exactly (D221); a session of three turns runs through
the engine on the store; and a store that is a ``ToolLedger`` (contracts/ledger.py)
keeps reserve → done per org and user, each write committed at once, with exactly
one of racing reservations winning, and purges the entries reserved before a time
(the ledger cases skip a store that is not one); and a store that is a
``UsageLedger`` (contracts/usage.py) reserves a model call only when every budget
check holds, stores settlements either way, counts each check's calls alone (its
org, user, mode, turn, window and currency) in exact decimals, and reads calls back
per org, narrowed, oldest first, and answers a reservation whose call id it holds
already as reserved, storing it once and applying the settlements it carries (D595;
the usage cases skip a store that is not one); and a store that is a
``SessionForks`` (contracts/ports.py, docs/FORKS.md) forks a session after a
settled turn with its transcript, mode and mode history as they stood then, later
turns of the source left out, the fork and the source going on apart, forks of
forks, and refuses a pending turn, an unknown turn and another caller's session
(the fork cases skip a store that is not one).

A refusal raises ``LookupError`` when the caller has no such session or turn, and
``ValueError`` when a write contradicts what is stored (docs/STORES.md).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from aptix_pipeline.adapters import (
    ConfigCatalog,
    ScriptedLLM,
    SequentialIds,
    SteppingClock,
    embedded_pipeline,
)
from aptix_pipeline.contracts import (
    BudgetCheck,
    BudgetMetric,
    Caller,
    Charge,
    ChatMessage,
    ChatRole,
    ForkPoint,
    ForkRefusal,
    ForkRefusedError,
    ImagePart,
    LedgerEntry,
    ModeHistoryEntry,
    Session,
    SessionForks,
    SessionStore,
    SessionTransaction,
    StoreConflictError,
    StoredOutcome,
    TextPart,
    ToolCall,
    ToolLedger,
    Transcript,
    Turn,
    TurnStatus,
    UsageCall,
    UsageLedger,
    UsageQuery,
)

__all__ = [
    "StoreContract",
    "assistant_says",
    "read_outcome",
    "sample_entry",
    "sample_outcome",
    "sample_session",
    "sample_turn",
    "sample_usage_call",
    "save_outcomes",
    "seed_store",
    "store_snapshot",
    "user_says",
]

_ORG, _USER = "acme", "ana"
_OTHER_CALLERS = (("globex", _USER), (_ORG, "bob"))
"""Another org with the same user name, and another user of the same org."""
_T0 = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
_PLUS_TWO = timezone(timedelta(hours=2))
_READ_FILE = ToolCall(tool_call_id="call_1", name="read_file", arguments_json='{"path": "a.py"}')
_RESULT = '{"Successful": true, "Result": {"PrimaryOutputText": "done"}}'
_RESULTS = {
    "plain": _RESULT,
    "escaped NUL": '{"Result": {"PrimaryOutputText": "a\\u0000b"}}',
    "raw NUL": "a\x00b\x00",
    "astral": '{"Result": {"PrimaryOutputText": "hi 👋🏽 𝄞 \U0010ffff"}}',
    "long": '{"Text": "' + "x" * 200_000 + '"}',
}
"""Outcome JSON texts a store keeps exactly, by what makes each hard."""
_TEXTS = {
    "NUL": "a\x00b\x00",
    "only NUL": "\x00",
    "emoji": "hi 👋🏽 𝄞",
    "combining marks": "e\u0301 n\u0303 \u0308",
    "noncharacters": "\uffff\ufffe\U0010ffff",
    "line and paragraph separators": "a\u2028b\u2029c",
    "bidi marks": "\u200f\u202eRTL\u202c\u200e",
    "long": "x" * 200_000 + "\x00" + "é" * 1000,
    "backslashes and quotes": '\\ \\\\ " \' \\n \\"',
    "literal escapes": "\\u0000 and \\x00",
    "control characters": "\x01\x1f\x7f\t\r\n",
}
"""Texts a store keeps exactly in every field, by what makes each hard."""
_CATALOG = """
[[modes]]
name = "general"
display_name = "General"

[[modes]]
name = "review"
display_name = "Review"

[[agents]]
id = "assistant"
name = "Assistant"
default = true

[[agents.client_tools]]
name = "read_file"
description = "Read a file of the user's workspace."
parameters = { type = "object", properties = { path = { type = "string" } }, required = ["path"] }

[[conversations]]
id = "workspace"
default = true
"""
"""The catalog of the whole-session case: two modes and one client tool."""


# --- what the cases are made of ------------------------------------------------------------


def sample_usage_call(
    call_id: str,
    *,
    org: str = _ORG,
    user: str = _USER,
    mode: str = "general",
    turn_id: str = "t1",
    session_id: str = "s1",
    model: str | None = "gpt-test",
    minute: int = 0,
    tokens: int = 0,
    cost: Decimal | str = "0",
    currency: str | None = "USD",
    settled: bool = False,
) -> UsageCall:
    """A model call of the usage ledger, made ``minute`` minutes after the cases' epoch,
    charging ``tokens`` tokens, ``cost`` and one model call."""
    return UsageCall(
        id=call_id,
        org=org,
        user=user,
        session_id=session_id,
        turn_id=turn_id,
        mode=mode,
        model=model,
        at=_T0 + timedelta(minutes=minute),
        settled=settled,
        charge=Charge(tokens=tokens, cost=Decimal(cost), model_calls=1),
        currency=currency,
    )


def sample_session(
    session_id: str = "s1",
    *,
    org: str = _ORG,
    user: str = _USER,
    mode: str | None = "general",
    history: Sequence[ModeHistoryEntry] = (),
) -> Session:
    """A session of ``org``/``user`` as the cases store it; a host's own store tests may use it."""
    return Session(
        id=session_id,
        org=org,
        user=user,
        mode=mode,
        mode_history=list(history),
        agent_context_id="assistant",
        conversation_context_id="workspace",
        solution_context_text="solution: aptix.sln",
        created_at=_T0,
    )


def sample_turn(
    turn_id: str = "t1",
    session_id: str = "s1",
    *,
    status: TurnStatus = TurnStatus.OPEN,
    pending: Sequence[ToolCall] = (),
    expanded: Sequence[str] = (),
) -> Turn:
    """A turn of ``session_id`` as the cases store it."""
    return Turn(
        id=turn_id,
        session_id=session_id,
        mode="general",
        status=status,
        pending_tool_calls=list(pending),
        expanded_containers=list(expanded),
        created_at=_T0 + timedelta(seconds=1),
    )


def sample_entry(
    previous: str, new: str, *, minute: int = 0, turn_id: str = "t1", reason: str | None = None
) -> ModeHistoryEntry:
    """A ModeHistory entry of acme/ana from ``previous`` to ``new``, ``minute`` minutes in."""
    return ModeHistoryEntry(
        previous_mode=previous,
        new_mode=new,
        timestamp=_T0 + timedelta(minutes=minute),
        reason=f"{previous} to {new}" if reason is None else reason,
        org=_ORG,
        user=_USER,
        branch=minute % 2 == 1,
        turn_id=turn_id,
    )


def user_says(text: str) -> ChatMessage:
    """A user message of the transcript."""
    return ChatMessage(role=ChatRole.USER, content=text)


def assistant_says(text: str) -> ChatMessage:
    """An assistant message of the transcript."""
    return ChatMessage(role=ChatRole.ASSISTANT, content=text)


def sample_outcome(
    key: str = "key:k1",
    *,
    session_id: str = "s1",
    turn_id: str = "t1",
    result_json: str = _RESULT,
    created_at: datetime = _T0,
    ttl: timedelta | None = timedelta(hours=1),
    digest: str = "d1",
) -> StoredOutcome:
    """A stored answer under ``key``, expiring ``ttl`` after ``created_at`` (never: ``None``)."""
    return StoredOutcome(
        key=key,
        request_digest=digest,
        session_id=session_id,
        turn_id=turn_id,
        result_json=result_json,
        created_at=created_at,
        expires_at=None if ttl is None else created_at + ttl,
    )


async def seed_store(
    store: SessionStore,
    session: Session | None = None,
    *,
    turns: Sequence[Turn] = (),
    messages: Sequence[ChatMessage] = (),
) -> Session:
    """Create and commit a session (by default ``s1`` of acme/ana) with turns and messages."""
    session = session or sample_session()
    tx = store.begin(session.org, session.user)
    await tx.create_session(session)
    for turn in turns:
        await tx.open_turn(turn)
    if messages:
        await tx.append_transcript(session.id, turns[0].id if turns else "t0", messages)
    await tx.commit()
    return session


_Snapshot = tuple[Session | None, list[Turn | None], list[ChatMessage]]


async def store_snapshot(
    store: SessionStore,
    session_id: str = "s1",
    turn_ids: Sequence[str] = ("t1", "t2"),
    *,
    org: str = _ORG,
    user: str = _USER,
) -> _Snapshot:
    """What the caller sees of a session now, read in a fresh transaction."""
    tx = store.begin(org, user)
    session = await tx.load_session(session_id)
    turns = [await tx.load_turn(session_id, turn_id) for turn_id in turn_ids]
    transcript = await tx.load_transcript(session_id)
    await tx.rollback()
    return session, turns, transcript


async def save_outcomes(store: SessionStore, *outcomes: StoredOutcome, org: str = _ORG) -> None:
    """Commit ``outcomes`` in one transaction of ``org``/ana."""
    tx = store.begin(org, _USER)
    for each in outcomes:
        await tx.save_outcome(each)
    await tx.commit()


async def read_outcome(
    store: SessionStore, key: str, org: str = _ORG, user: str = _USER
) -> StoredOutcome | None:
    """The caller's outcome under ``key``, read in a fresh transaction."""
    tx = store.begin(org, user)
    found = await tx.load_outcome(key)
    await tx.rollback()
    return found


def _without_version(session: Session | None) -> dict[str, object]:
    assert session is not None
    return session.model_dump(exclude={"version"})


# --- how a case runs -----------------------------------------------------------------------

_Case = Callable[["StoreContract", SessionStore], Awaitable[None]]
_Test = Callable[["StoreContract"], None]


def _case(*, race: bool = False) -> Callable[[_Case], _Test]:
    """Make ``async def test_x(self, store)`` the plain test method ``test_x(self)``.

    The method runs the case in an event loop of its own on a store from
    ``make_store``. A ``race`` case is skipped when the class says its store does
    not check conflicts.
    """

    def plain(case: _Case) -> _Test:
        def test(self: StoreContract) -> None:
            if race and not self.checks_conflicts:
                pytest.skip(f"{type(self).__name__}.checks_conflicts is False")
            self.run_case(case)

        # Not functools.wraps: pytest would read the case's signature and look for a
        # `store` fixture, and an asyncio plugin might take the method for a coroutine.
        test.__name__, test.__qualname__ = case.__name__, case.__qualname__
        test.__doc__, test.__module__ = case.__doc__, case.__module__
        return test

    return plain


class StoreContract:
    """The cases every ``SessionStore`` passes; a test class subclasses it with ``make_store``.

    Name the subclass so pytest collects it (``TestMyStore``); this class itself
    is not collected. Each case is a plain (not ``async``) test method: it makes a
    fresh store with ``make_store`` inside an event loop of its own
    (``asyncio.Runner``), runs on it, and awaits ``close_store`` in the same loop.
    So the kit needs pytest alone; pytest-asyncio (any mode) and anyio leave it
    be. A store whose set-up needs a pytest fixture (``tmp_path``, a database URL)
    takes it in an ``autouse`` fixture of the subclass that keeps it on ``self``.
    A case can also be called by hand: ``TestMyStore().test_rollback_writes_nothing()``.
    """

    checks_conflicts: ClassVar[bool] = True
    """``False`` for a store that never sees two turns of one session at once (the host
    runs them one by one): the cases where a racing commit must lose are skipped."""

    def make_store(self) -> SessionStore | Awaitable[SessionStore]:
        """A fresh, empty store for one case; ``async def`` is fine too."""
        raise NotImplementedError(f"{type(self).__name__} must define make_store()")

    async def close_store(self, store: SessionStore) -> None:
        """Release ``store`` after its case: by default its ``aclose()``, else its ``close()``."""
        close = getattr(store, "aclose", None) or getattr(store, "close", None)
        if close is not None:
            closed = close()
            if inspect.isawaitable(closed):
                await closed

    def run_case(self, case: Callable[[StoreContract, SessionStore], Awaitable[None]]) -> None:
        """Run one ``async`` case (``case(self, store)``) to its end in an event loop of its own."""

        async def main() -> None:
            made = self.make_store()
            store = await made if inspect.isawaitable(made) else made
            try:
                await case(self, store)
            finally:
                await self.close_store(store)

        with asyncio.Runner() as runner:
            runner.run(main())

    # --- the transaction is a SessionTransaction ----------------------------------------

    @_case()
    async def test_begin_gives_a_session_transaction(self, store: SessionStore) -> None:
        tx = store.begin(_ORG, _USER)

        assert isinstance(store, SessionStore)
        assert isinstance(tx, SessionTransaction)
        await tx.rollback()

    # --- round trips ----------------------------------------------------------------------

    @_case()
    async def test_created_session_round_trips_every_field(self, store: SessionStore) -> None:
        session = sample_session(mode="review")

        await seed_store(store, session)
        loaded, _, _ = await store_snapshot(store)

        assert loaded is not None
        assert _without_version(loaded) == _without_version(session)
        assert loaded.created_at == _T0
        assert loaded.created_at.tzinfo is not None

    @_case()
    async def test_mode_history_given_at_creation_is_kept(self, store: SessionStore) -> None:
        history = [
            sample_entry("general", "review", minute=1),
            sample_entry("review", "debug", minute=2),
        ]

        await seed_store(store, sample_session(mode="debug", history=history))
        loaded, _, _ = await store_snapshot(store)

        assert loaded is not None
        assert loaded.mode == "debug"
        assert loaded.mode_history == history

    @_case()
    async def test_turn_round_trips_pending_calls_expanded_containers_and_status(
        self, store: SessionStore
    ) -> None:
        second = ToolCall(tool_call_id="call_2", name="run_tests", arguments_json="{}")
        turn = sample_turn(
            status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[_READ_FILE, second], expanded=["Math"]
        )

        await seed_store(store, turns=[turn])
        _, (loaded, missing), _ = await store_snapshot(store)

        assert loaded == turn
        assert missing is None

    @_case()
    async def test_transcript_keeps_order_across_turns(self, store: SessionStore) -> None:
        first_turn = [
            user_says("read a.py"),
            ChatMessage(role=ChatRole.ASSISTANT, content="", tool_calls=[_READ_FILE]),
        ]
        second_turn = [
            ChatMessage(
                role=ChatRole.TOOL, content='{"text": "x"}', tool_call_id="call_1", name="read_file"
            ),
            assistant_says("a.py holds x"),
            user_says("thanks"),
        ]
        await seed_store(store, turns=[sample_turn("t1")], messages=first_turn)

        tx = store.begin(_ORG, _USER)
        await tx.open_turn(sample_turn("t2"))
        await tx.append_transcript("s1", "t2", second_turn[:2])
        await tx.append_transcript("s1", "t2", second_turn[2:])
        await tx.commit()
        _, _, transcript = await store_snapshot(store)

        assert transcript == [*first_turn, *second_turn]

    @_case()
    async def test_completed_turn_is_saved_with_its_new_status(self, store: SessionStore) -> None:
        waiting = sample_turn(status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[_READ_FILE])
        await seed_store(store, turns=[waiting])

        tx = store.begin(_ORG, _USER)
        await tx.complete_turn(sample_turn(status=TurnStatus.COMPLETED, expanded=["Math"]))
        await tx.commit()
        _, (turn, _), _ = await store_snapshot(store)

        assert turn is not None
        assert turn.status is TurnStatus.COMPLETED
        assert turn.pending_tool_calls == []
        assert turn.expanded_containers == ["Math"]

    @_case()
    async def test_a_transcript_read_knows_where_its_newest_image_is(
        self, store: SessionStore
    ) -> None:
        """Where ``load_transcript`` answers a ``Transcript``, its ``last_image`` is right:
        none yet, then one the transaction appended, then one committed, read again
        after later messages without one."""
        image = ChatMessage.of_parts(
            ChatRole.USER, [TextPart(text="look"), ImagePart(mime_type="image/png", data=b"png")]
        )
        await seed_store(store, turns=[sample_turn("t1")], messages=[user_says("hi")])
        reads: list[tuple[list[ChatMessage], int]] = []

        async def read(tx: SessionTransaction, newest_image: int) -> None:
            reads.append((await tx.load_transcript("s1"), newest_image))

        tx = store.begin(_ORG, _USER)
        await read(tx, -1)
        await tx.open_turn(sample_turn("t2"))
        await tx.append_transcript("s1", "t2", [assistant_says("hello"), image])
        await read(tx, 2)
        await tx.commit()
        for turn_id in ("t3", "t4"):
            tx = store.begin(_ORG, _USER)
            await read(tx, 2)
            await tx.open_turn(sample_turn(turn_id))
            await tx.append_transcript("s1", turn_id, [assistant_says("a cat"), user_says("ok")])
            await tx.commit()
        tx = store.begin(_ORG, _USER)
        await read(tx, 2)
        await tx.rollback()

        assert [len(transcript) for transcript, _ in reads] == [1, 3, 3, 5, 7]
        assert reads[-1][0][2] == image
        for transcript, newest_image in reads:
            if isinstance(transcript, Transcript):
                assert transcript.last_image == newest_image

    @_case()
    async def test_sessions_do_not_share_turns_or_transcripts(self, store: SessionStore) -> None:
        await seed_store(
            store,
            sample_session("s1"),
            turns=[sample_turn("t1", "s1")],
            messages=[user_says("one")],
        )
        await seed_store(
            store,
            sample_session("s2"),
            turns=[sample_turn("t9", "s2")],
            messages=[user_says("two")],
        )

        tx = store.begin(_ORG, _USER)

        assert await tx.load_turn("s1", "t9") is None
        assert await tx.load_turn("s2", "t1") is None
        assert await tx.load_transcript("s1") == [user_says("one")]
        assert await tx.load_transcript("s2") == [user_says("two")]

    # --- what a transaction sees, and what others see -------------------------------------

    @_case()
    async def test_reads_see_the_transactions_own_writes_before_commit(
        self, store: SessionStore
    ) -> None:
        tx = store.begin(_ORG, _USER)

        await tx.create_session(sample_session())
        await tx.open_turn(sample_turn())
        await tx.append_transcript("s1", "t1", [user_says("hi")])
        changed = await tx.set_session_mode("s1", sample_entry("general", "review"))

        loaded = await tx.load_session("s1")
        assert loaded is not None
        assert loaded.mode == "review"
        assert loaded.mode_history == [sample_entry("general", "review")]
        assert changed.mode == "review"
        assert await tx.load_turn("s1", "t1") == sample_turn()
        assert await tx.load_transcript("s1") == [user_says("hi")]

    @_case()
    async def test_uncommitted_writes_are_invisible_to_other_transactions(
        self, store: SessionStore
    ) -> None:
        await seed_store(
            store,
            sample_session("old"),
            turns=[sample_turn("t1", "old")],
            messages=[user_says("a")],
        )
        writer = store.begin(_ORG, _USER)
        await writer.create_session(sample_session("new"))
        await writer.open_turn(sample_turn("t1", "new"))
        await writer.append_transcript("new", "t1", [user_says("hidden")])
        await writer.open_turn(sample_turn("t2", "old"))
        await writer.append_transcript("old", "t2", [user_says("hidden too")])
        await writer.set_session_mode("old", sample_entry("general", "review"))

        reader = store.begin(_ORG, _USER)

        assert await reader.load_session("new") is None
        assert await reader.load_turn("new", "t1") is None
        assert await reader.load_transcript("new") == []
        old = await reader.load_session("old")
        assert old is not None
        assert old.mode == "general"
        assert old.mode_history == []
        assert await reader.load_turn("old", "t2") is None
        assert await reader.load_transcript("old") == [user_says("a")]

    @_case()
    async def test_rollback_writes_nothing(self, store: SessionStore) -> None:
        await seed_store(store, turns=[sample_turn("t1")], messages=[user_says("kept")])
        before = await store_snapshot(store)

        tx = store.begin(_ORG, _USER)
        await tx.create_session(sample_session("s2"))
        await tx.open_turn(sample_turn("t2"))
        await tx.complete_turn(sample_turn("t1", status=TurnStatus.COMPLETED))
        await tx.append_transcript("s1", "t2", [user_says("dropped")])
        await tx.set_session_mode("s1", sample_entry("general", "review"))
        await tx.set_solution_context("s1", "dropped")
        await tx.rollback()

        assert await store_snapshot(store) == before
        assert (await store_snapshot(store, "s2"))[0] is None

    @_case()
    async def test_a_transaction_never_committed_writes_nothing(self, store: SessionStore) -> None:
        await seed_store(store, messages=[user_says("kept")])
        before = await store_snapshot(store)

        abandoned = store.begin(_ORG, _USER)
        await abandoned.create_session(sample_session("s2"))
        await abandoned.append_transcript("s1", "t1", [user_says("dropped")])
        await abandoned.set_session_mode("s1", sample_entry("general", "review"))
        del abandoned

        assert await store_snapshot(store) == before
        assert (await store_snapshot(store, "s2"))[0] is None

    @_case()
    async def test_a_commit_with_no_writes_changes_nothing(self, store: SessionStore) -> None:
        await seed_store(store, messages=[user_says("kept")])
        before = await store_snapshot(store)

        empty = store.begin(_ORG, _USER)
        await empty.commit()
        reads_only = store.begin(_ORG, _USER)
        await reads_only.load_session("s1")
        await reads_only.load_transcript("s1")
        await reads_only.load_turn("s1", "t1")
        await reads_only.commit()

        assert await store_snapshot(store) == before

    # --- isolation by org and user --------------------------------------------------------

    @_case()
    async def test_another_caller_sees_nothing_of_the_session(self, store: SessionStore) -> None:
        await seed_store(
            store,
            turns=[sample_turn(status=TurnStatus.AWAITING_CLIENT_TOOLS)],
            messages=[user_says("private")],
        )

        for org, user in _OTHER_CALLERS:
            tx = store.begin(org, user)
            seen = (
                await tx.load_session("s1"),
                await tx.load_turn("s1", "t1"),
                await tx.load_transcript("s1"),
                await tx.find_pending_turn("s1"),
            )
            await tx.rollback()
            assert seen == (None, None, [], None), f"{org}/{user} sees acme/ana's session"

    @_case()
    async def test_another_caller_cannot_write_into_the_session(self, store: SessionStore) -> None:
        await seed_store(store, turns=[sample_turn()], messages=[user_says("private")])
        before = await store_snapshot(store)

        for org, user in _OTHER_CALLERS:
            tx = store.begin(org, user)
            with pytest.raises(LookupError):
                await tx.open_turn(sample_turn("t2"))
            with pytest.raises(LookupError):
                await tx.set_session_mode("s1", sample_entry("general", "review"))
            with pytest.raises(LookupError):
                await tx.complete_turn(sample_turn(status=TurnStatus.COMPLETED))
            with pytest.raises(LookupError):
                await tx.append_transcript("s1", "t1", [user_says("intruder")])
            with pytest.raises(LookupError):
                await tx.set_solution_context("s1", "stolen")
            await tx.commit()

        assert await store_snapshot(store) == before

    @_case()
    async def test_another_caller_cannot_take_over_a_session_id(self, store: SessionStore) -> None:
        await seed_store(store, messages=[user_says("private")])
        before = await store_snapshot(store)

        for org, user in _OTHER_CALLERS:
            tx = store.begin(org, user)
            await tx.create_session(sample_session(org=org, user=user, mode="review"))
            with pytest.raises(StoreConflictError):
                await tx.commit()

        assert await store_snapshot(store) == before

    @_case()
    async def test_creating_a_session_for_another_org_or_user_is_refused(
        self, store: SessionStore
    ) -> None:
        tx = store.begin(_ORG, _USER)

        for org, user in _OTHER_CALLERS:
            with pytest.raises(ValueError, match=org if org != _ORG else user):
                await tx.create_session(sample_session(org=org, user=user))
        await tx.commit()

        assert (await store_snapshot(store))[0] is None

    @_case()
    async def test_creating_an_existing_session_is_refused(self, store: SessionStore) -> None:
        await seed_store(store)
        tx = store.begin(_ORG, _USER)
        await tx.load_session("s1")

        with pytest.raises(ValueError, match="s1"):
            await tx.create_session(sample_session())

    @_case()
    async def test_the_same_new_session_created_by_two_transactions_commits_once(
        self, store: SessionStore
    ) -> None:
        first, second = store.begin(_ORG, _USER), store.begin(_ORG, _USER)
        await first.create_session(sample_session(mode="general"))
        await second.create_session(sample_session(mode="review"))
        await first.commit()

        with pytest.raises(StoreConflictError):
            await second.commit()

        session, _, _ = await store_snapshot(store)
        assert session is not None
        assert session.mode == "general"

    # --- turns ------------------------------------------------------------------------------

    @_case()
    async def test_opening_an_existing_turn_is_refused(self, store: SessionStore) -> None:
        await seed_store(store, turns=[sample_turn("t1")])
        tx = store.begin(_ORG, _USER)

        with pytest.raises(ValueError, match="t1"):
            await tx.open_turn(sample_turn("t1"))
        await tx.open_turn(sample_turn("t2"))
        with pytest.raises(ValueError, match="t2"):
            await tx.open_turn(sample_turn("t2"))

    @_case()
    async def test_opening_a_turn_in_a_missing_session_is_a_lookup_error(
        self, store: SessionStore
    ) -> None:
        tx = store.begin(_ORG, _USER)

        with pytest.raises(LookupError, match="nope"):
            await tx.open_turn(sample_turn("t1", "nope"))

    @_case()
    async def test_completing_an_unknown_turn_is_a_lookup_error(self, store: SessionStore) -> None:
        await seed_store(store, turns=[sample_turn("t1")])
        tx = store.begin(_ORG, _USER)

        with pytest.raises(LookupError, match="t9"):
            await tx.complete_turn(sample_turn("t9", status=TurnStatus.COMPLETED))

    @_case()
    async def test_find_pending_turn_sees_stored_and_buffered_turns(
        self, store: SessionStore
    ) -> None:
        waiting = sample_turn("t1", status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[_READ_FILE])
        await seed_store(store, turns=[waiting, sample_turn("t2", status=TurnStatus.COMPLETED)])

        tx = store.begin(_ORG, _USER)
        found = await tx.find_pending_turn("s1")
        await tx.complete_turn(waiting.model_copy(update={"status": TurnStatus.COMPLETED}))
        after_settling = await tx.find_pending_turn("s1")
        await tx.open_turn(sample_turn("t3", status=TurnStatus.AWAITING_CLIENT_TOOLS))
        buffered = await tx.find_pending_turn("s1")

        assert found is not None
        assert (found.id, found.pending_tool_calls) == ("t1", [_READ_FILE])
        assert after_settling is None
        assert buffered is not None
        assert buffered.id == "t3"

    @_case()
    async def test_find_pending_turn_is_none_when_no_turn_awaits_results(
        self, store: SessionStore
    ) -> None:
        await seed_store(
            store, turns=[sample_turn("t1", status=TurnStatus.COMPLETED), sample_turn("t2")]
        )

        tx = store.begin(_ORG, _USER)

        assert await tx.find_pending_turn("s1") is None
        assert await tx.find_pending_turn("missing") is None

    @_case()
    async def test_find_pending_turn_finds_its_own_sessions_turn_among_many_sessions(
        self, store: SessionStore
    ) -> None:
        for n in range(12):
            await seed_store(
                store,
                sample_session(f"s{n}"),
                turns=[
                    sample_turn(f"done{n}", f"s{n}", status=TurnStatus.COMPLETED),
                    sample_turn(f"wait{n}", f"s{n}", status=TurnStatus.AWAITING_CLIENT_TOOLS),
                ],
            )
        settle = store.begin(_ORG, _USER)
        waiting = await settle.load_turn("s3", "wait3")
        assert waiting is not None
        await settle.complete_turn(waiting.model_copy(update={"status": TurnStatus.COMPLETED}))
        await settle.commit()

        tx = store.begin(_ORG, _USER)
        found = {n: await tx.find_pending_turn(f"s{n}") for n in range(12)}

        assert found.pop(3) is None
        assert {n: (turn.id, turn.session_id) for n, turn in found.items() if turn} == {
            n: (f"wait{n}", f"s{n}") for n in found
        }

    # --- SetSessionMode (AGN-011 §3.2) ------------------------------------------------------

    @_case()
    async def test_set_session_mode_changes_mode_and_appends_history(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        tx = store.begin(_ORG, _USER)

        returned = await tx.set_session_mode("s1", sample_entry("general", "review"))
        await tx.commit()
        loaded, _, _ = await store_snapshot(store)

        assert returned.mode == "review"
        assert returned.mode_history == [sample_entry("general", "review")]
        assert loaded is not None
        assert loaded.mode == "review"
        assert loaded.mode_history == [sample_entry("general", "review")]

    @_case()
    async def test_several_mode_changes_are_kept_in_order(self, store: SessionStore) -> None:
        await seed_store(store)
        changes = [
            sample_entry("general", "review", minute=1),
            sample_entry("review", "general", minute=2),
            sample_entry("general", "debug", minute=3),
        ]
        tx = store.begin(_ORG, _USER)
        for change in changes:
            await tx.set_session_mode("s1", change)
        await tx.commit()
        later = sample_entry("debug", "review", minute=4, turn_id="t2")
        tx = store.begin(_ORG, _USER)
        await tx.set_session_mode("s1", later)
        await tx.commit()

        loaded, _, _ = await store_snapshot(store)

        assert loaded is not None
        assert loaded.mode == "review"
        assert loaded.mode_history == [*changes, later]

    @_case()
    async def test_mode_change_of_a_session_created_in_the_same_transaction_is_kept(
        self, store: SessionStore
    ) -> None:
        tx = store.begin(_ORG, _USER)
        await tx.create_session(sample_session())
        await tx.set_session_mode("s1", sample_entry("general", "review"))
        await tx.commit()

        loaded, _, _ = await store_snapshot(store)

        assert loaded is not None
        assert loaded.mode == "review"
        assert loaded.mode_history == [sample_entry("general", "review")]

    @_case()
    async def test_set_session_mode_from_the_wrong_previous_mode_is_a_value_error(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        tx = store.begin(_ORG, _USER)

        with pytest.raises(ValueError, match="review"):
            await tx.set_session_mode("s1", sample_entry("review", "debug"))

        loaded = await tx.load_session("s1")
        assert loaded is not None
        assert loaded.mode == "general"
        assert loaded.mode_history == []

    @_case()
    async def test_set_session_mode_on_a_missing_session_is_a_lookup_error(
        self, store: SessionStore
    ) -> None:
        tx = store.begin(_ORG, _USER)

        with pytest.raises(LookupError, match="nope"):
            await tx.set_session_mode("nope", sample_entry("general", "review"))

    # --- the solution context (AGN-034 §4.5) ------------------------------------------------

    @_case()
    async def test_set_solution_context_replaces_it_at_commit_only(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)

        tx = store.begin(_ORG, _USER)
        updated = await tx.set_solution_context("s1", "solution: other.sln")
        seen_by_others, _, _ = await store_snapshot(store)
        await tx.commit()
        committed, _, _ = await store_snapshot(store)

        assert updated.solution_context_text == "solution: other.sln"
        assert seen_by_others is not None
        assert seen_by_others.solution_context_text == "solution: aptix.sln"
        assert committed is not None
        assert committed.solution_context_text == "solution: other.sln"
        assert committed.mode == "general"

    # --- racing commits ---------------------------------------------------------------------

    @_case(race=True)
    async def test_the_second_of_two_racing_commits_conflicts_and_writes_nothing(
        self, store: SessionStore
    ) -> None:
        await seed_store(
            store,
            turns=[sample_turn("t1", status=TurnStatus.AWAITING_CLIENT_TOOLS)],
            messages=[user_says("start")],
        )
        winner, loser = store.begin(_ORG, _USER), store.begin(_ORG, _USER)
        assert await winner.load_session("s1") is not None
        assert await loser.load_session("s1") is not None

        await winner.append_transcript("s1", "t1", [assistant_says("winner")])
        await winner.commit()
        await loser.open_turn(sample_turn("t2"))
        await loser.complete_turn(sample_turn("t1", status=TurnStatus.COMPLETED))
        await loser.append_transcript("s1", "t2", [assistant_says("loser")])
        await loser.set_session_mode("s1", sample_entry("general", "review"))
        with pytest.raises(StoreConflictError):
            await loser.commit()

        session, (t1, t2), transcript = await store_snapshot(store)
        assert session is not None
        assert session.mode == "general"
        assert session.mode_history == []
        assert t1 is not None
        assert t1.status is TurnStatus.AWAITING_CLIENT_TOOLS
        assert t2 is None
        assert transcript == [user_says("start"), assistant_says("winner")]

    @_case(race=True)
    async def test_a_conflicting_turn_succeeds_when_retried_in_a_new_transaction(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        winner, loser = store.begin(_ORG, _USER), store.begin(_ORG, _USER)
        await winner.load_session("s1")
        await loser.load_session("s1")
        await winner.set_session_mode("s1", sample_entry("general", "review"))
        await winner.commit()
        await loser.append_transcript("s1", "t1", [user_says("lost")])
        with pytest.raises(StoreConflictError):
            await loser.commit()

        retry = store.begin(_ORG, _USER)
        await retry.set_session_mode("s1", sample_entry("review", "debug"))
        await retry.append_transcript("s1", "t1", [user_says("retried")])
        await retry.commit()

        session, _, transcript = await store_snapshot(store)
        assert session is not None
        assert session.mode_history == [
            sample_entry("general", "review"),
            sample_entry("review", "debug"),
        ]
        assert transcript == [user_says("retried")]

    @_case(race=True)
    async def test_of_many_concurrent_turns_on_one_session_exactly_one_commits(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        all_read = asyncio.Barrier(10)

        async def turn(index: int) -> bool:
            tx = store.begin(_ORG, _USER)
            await tx.load_session("s1")
            await all_read.wait()
            await tx.append_transcript("s1", f"t{index}", [user_says(f"turn {index}")])
            try:
                await tx.commit()
            except StoreConflictError:
                return False
            return True

        outcomes = await asyncio.gather(*(turn(i) for i in range(10)))

        assert outcomes.count(True) == 1
        winner = outcomes.index(True)
        assert (await store_snapshot(store))[2] == [user_says(f"turn {winner}")]

    @_case()
    async def test_transactions_on_different_sessions_do_not_conflict(
        self, store: SessionStore
    ) -> None:
        await seed_store(store, sample_session("s1"))
        await seed_store(store, sample_session("s2"))
        one, two = store.begin(_ORG, _USER), store.begin(_ORG, _USER)
        await one.load_session("s1")
        await two.load_session("s2")

        await one.append_transcript("s1", "t1", [user_says("one")])
        await two.append_transcript("s2", "t1", [user_says("two")])
        await one.commit()
        await two.commit()

        assert (await store_snapshot(store, "s1"))[2] == [user_says("one")]
        assert (await store_snapshot(store, "s2"))[2] == [user_says("two")]

    @_case()
    async def test_a_commit_without_writes_does_not_make_others_conflict(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        writer, reader = store.begin(_ORG, _USER), store.begin(_ORG, _USER)
        await writer.load_session("s1")
        await reader.load_session("s1")
        await reader.load_transcript("s1")

        await reader.commit()
        await writer.append_transcript("s1", "t1", [user_says("after a read-only commit")])
        await writer.commit()

        assert (await store_snapshot(store))[2] == [user_says("after a read-only commit")]

    @_case()
    async def test_a_refused_write_leaves_nothing_to_commit(self, store: SessionStore) -> None:
        await seed_store(store, turns=[sample_turn("t1")])
        refusals: dict[str, Callable[[SessionTransaction], Awaitable[object]]] = {
            "set_session_mode": lambda tx: tx.set_session_mode(
                "s1", sample_entry("review", "debug")
            ),
            "open_turn": lambda tx: tx.open_turn(sample_turn("t1")),
            "complete_turn": lambda tx: tx.complete_turn(sample_turn("t9")),
        }

        for name, refused in refusals.items():
            other = store.begin(_ORG, _USER)
            await other.load_session("s1")
            tx = store.begin(_ORG, _USER)
            with pytest.raises((ValueError, LookupError)):
                await refused(tx)
            await tx.commit()
            await other.append_transcript("s1", "t1", [user_says(f"after {name}")])
            await other.commit()  # the refused write made no conflict

        transcript = (await store_snapshot(store))[2]
        assert transcript == [user_says(f"after {name}") for name in refusals]

    # --- stored outcomes (D181, D183, D186) -------------------------------------------------

    @_case()
    async def test_a_committed_outcome_reads_back_equal(self, store: SessionStore) -> None:
        await seed_store(store, turns=[sample_turn()])
        kept = {
            name: sample_outcome(f"key:{n}", result_json=text, created_at=_T0.astimezone(_PLUS_TWO))
            for n, (name, text) in enumerate(_RESULTS.items())
        }

        await save_outcomes(store, *kept.values())

        for name, outcome in kept.items():
            loaded = await read_outcome(store, outcome.key)
            assert loaded == outcome, f"the {name} outcome changed in the store"
            assert loaded is not None
            assert loaded.expires_at is not None
            assert loaded.created_at.utcoffset() is not None

    @_case()
    async def test_an_outcome_that_never_expires_reads_back_without_expiry(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)

        await save_outcomes(store, sample_outcome(ttl=None))

        assert await read_outcome(store, "key:k1") == sample_outcome(ttl=None)

    @_case()
    async def test_the_outcome_of_a_turn_creating_its_session_is_kept(
        self, store: SessionStore
    ) -> None:
        tx = store.begin(_ORG, _USER)  # an Initial turn: session, turn and answer in one commit
        await tx.create_session(sample_session())
        await tx.open_turn(sample_turn())
        await tx.save_outcome(sample_outcome())
        await tx.commit()

        assert await read_outcome(store, "key:k1") == sample_outcome()

    @_case()
    async def test_another_caller_reads_no_outcome_and_may_store_its_own_under_the_key(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        await save_outcomes(store, sample_outcome())

        for n, (org, user) in enumerate(_OTHER_CALLERS):
            assert await read_outcome(store, "key:k1", org, user) is None, f"{org}/{user} reads it"
            theirs = sample_outcome(session_id=f"other{n}", digest=f"other{n}")
            await seed_store(store, sample_session(f"other{n}", org=org, user=user))
            tx = store.begin(org, user)
            await tx.save_outcome(theirs)
            await tx.commit()  # another caller's key is another key: no conflict
            assert await read_outcome(store, "key:k1", org, user) == theirs

        assert await read_outcome(store, "key:k1") == sample_outcome()

    @_case()
    async def test_a_transaction_sees_its_own_outcome_before_commit_and_a_rollback_keeps_none(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        tx = store.begin(_ORG, _USER)
        await tx.save_outcome(sample_outcome())
        assert await tx.load_outcome("key:k1") == sample_outcome()
        assert await read_outcome(store, "key:k1") is None  # invisible to others until commit

        await tx.rollback()

        assert await read_outcome(store, "key:k1") is None

    @_case()
    async def test_a_second_outcome_under_a_held_key_makes_the_commit_conflict_and_write_nothing(
        self, store: SessionStore
    ) -> None:
        for ttl in (timedelta(hours=1), None):  # unexpired, and never expiring
            session_id = "s1" if ttl else "s2"
            await seed_store(
                store,
                sample_session(session_id),
                turns=[sample_turn("t1", session_id)],
                messages=[user_says("hi")],
            )
            first = sample_outcome(f"key:{session_id}", session_id=session_id, ttl=ttl)
            await save_outcomes(store, first)
            before = await store_snapshot(store, session_id)

            tx = store.begin(_ORG, _USER)
            await tx.set_session_mode(session_id, sample_entry("general", "review", turn_id="t2"))
            await tx.set_solution_context(session_id, "changed")
            await tx.open_turn(sample_turn("t2", session_id))
            await tx.complete_turn(sample_turn("t2", session_id, status=TurnStatus.COMPLETED))
            await tx.append_transcript(session_id, "t2", [user_says("again")])
            await tx.save_outcome(sample_outcome(f"key:other-{session_id}", turn_id="t2"))
            later = _T0 + timedelta(minutes=30)
            await tx.save_outcome(
                first.model_copy(
                    update={"turn_id": "t2", "request_digest": "d2", "created_at": later}
                )
            )
            with pytest.raises(StoreConflictError):
                await tx.commit()

            assert await store_snapshot(store, session_id) == before  # nothing of the turn stored
            assert await read_outcome(store, first.key) == first
            assert await read_outcome(store, f"key:other-{session_id}") is None

    @_case()
    async def test_an_expired_outcome_is_replaced(self, store: SessionStore) -> None:
        await seed_store(store, turns=[sample_turn(), sample_turn("t2")])
        await save_outcomes(store, sample_outcome(ttl=timedelta(minutes=5)))
        again = sample_outcome(turn_id="t2", digest="d2", created_at=_T0 + timedelta(minutes=5))

        await save_outcomes(store, again)  # expired exactly at the new outcome's time

        assert await read_outcome(store, "key:k1") == again

    # --- text of every kind -----------------------------------------------------------------

    @_case()
    async def test_every_stored_text_field_round_trips_exactly(self, store: SessionStore) -> None:
        for n, (name, text) in enumerate(_TEXTS.items()):
            session_id = f"s{n}"
            call = ToolCall(tool_call_id="call_1", name="read_file", arguments_json=text)
            messages = [
                ChatMessage(role=ChatRole.USER, content=text),
                ChatMessage(role=ChatRole.ASSISTANT, content=text, tool_calls=[call]),
                ChatMessage(role=ChatRole.TOOL, content=text, tool_call_id="call_1"),
            ]
            session = sample_session(
                session_id, history=[sample_entry("x", "general", reason=text)]
            )
            await seed_store(
                store,
                session.model_copy(update={"solution_context_text": text}),
                turns=[sample_turn("t1", session_id, pending=[call])],
                messages=messages,
            )
            tx = store.begin(_ORG, _USER)  # a change keeps it too
            await tx.set_solution_context(session_id, text + "!")
            await tx.set_session_mode(session_id, sample_entry("general", "review", reason=text))
            await tx.commit()

            loaded, [turn, _], transcript = await store_snapshot(store, session_id)
            assert loaded is not None
            assert loaded.solution_context_text == text + "!", name
            assert [e.reason for e in loaded.mode_history] == [text, text], name
            assert turn is not None
            assert turn.pending_tool_calls == [call], name
            assert transcript == messages, name

    # --- whole turns through the engine -----------------------------------------------------

    @_case()
    async def test_a_session_of_three_turns_runs_on_the_store(self, store: SessionStore) -> None:
        change = {"mode": "review", "reason": "asked"}
        script: list[dict[str, Any]] = [
            {"tool_calls": [{"id": "m1", "name": "agent_change_mode", "arguments": change}]},
            {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}]},
            {"text": "a.py looks fine"},
            {"text": "you are welcome"},
        ]
        llm = ScriptedLLM(script)
        pipeline = embedded_pipeline(
            llm=llm,
            store=store,
            catalog=ConfigCatalog.from_toml(_CATALOG),
            clock=SteppingClock(),
            ids=SequentialIds(),
        )
        caller = Caller(org=_ORG, user=_USER)

        first = await pipeline.execute({"Instruction": "review a.py"}, caller)
        assert first.successful, first.errors  # an Initial turn awaiting read_file's result
        assert first.result is not None
        session_id, turn_id = first.result.session_id, first.result.turn_id
        result = {"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": '{"text": "x"}'}
        answer = {"SessionId": session_id, "TurnId": turn_id, "ToolResults": [result]}
        second = await pipeline.execute(answer, caller)
        assert second.successful, second.errors
        assert second.result is not None
        settled = second.result.turn_id  # a FollowOn names the last settled turn
        third = await pipeline.execute(
            {"SessionId": session_id, "TurnId": settled, "Instruction": "thanks"}, caller
        )
        assert third.successful, third.errors
        assert third.result is not None

        session, turns, transcript = await store_snapshot(
            store, session_id, [turn_id, third.result.turn_id]
        )
        assert session is not None
        assert session.mode == "review"
        assert [(e.previous_mode, e.new_mode) for e in session.mode_history] == [
            ("general", "review")
        ]
        assert [turn.status if turn else None for turn in turns] == [TurnStatus.COMPLETED] * 2
        assert [m.content for m in transcript if m.role is ChatRole.USER] == [
            "review a.py",
            "thanks",
        ]
        assert transcript[-1] == assistant_says("you are welcome")
        assert await store_snapshot(store, session_id, [], org="globex") == (None, [], [])

    # --- forks (a store that is a SessionForks) ---------------------------------------------

    @_case()
    async def test_a_fork_after_turn_two_holds_the_sources_transcript_mode_and_history_then(
        self, store: SessionStore
    ) -> None:
        forks = _forks_of(store)
        turn_ids = await _seed_turns(store, modes={1: "review", 3: "plan"})

        fork = await forks.fork_session(_ORG, _USER, "s1", turn_ids[1], "f1", _T0)

        assert fork.forked_from == ForkPoint(session_id="s1", turn_id="s1-t2", messages=4)
        session, turns, transcript = await store_snapshot(store, "f1", turn_ids)
        assert session is not None
        assert session == fork.model_copy(update={"version": session.version})
        assert session.mode == "review"
        assert [(e.previous_mode, e.new_mode, e.turn_id) for e in session.mode_history] == [
            ("general", "review", "s1-t1")
        ]
        source = (await store_snapshot(store, "s1", []))[0]
        assert source is not None
        assert session.agent_context_id == source.agent_context_id == "assistant"
        assert session.conversation_context_id == source.conversation_context_id
        assert session.solution_context_text == source.solution_context_text
        assert (session.org, session.user, session.created_at) == (_ORG, _USER, _T0)
        assert _said(transcript) == _qa(1, 2)
        assert turns == [None] * 4  # the source's turns stay the source's
        assert source.mode == "plan"
        assert _said((await store_snapshot(store, "s1", []))[2]) == _qa(1, 2, 3, 4)

    @_case()
    async def test_a_fork_before_any_mode_change_starts_in_the_sources_first_mode(
        self, store: SessionStore
    ) -> None:
        forks = _forks_of(store)
        turn_ids = await _seed_turns(store, modes={2: "review"})

        fork = await forks.fork_session(_ORG, _USER, "s1", turn_ids[0], "f1", _T0)

        assert (fork.mode, fork.mode_history) == ("general", [])
        assert _said((await store_snapshot(store, "f1", []))[2]) == _qa(1)

    @_case()
    async def test_a_fork_and_its_source_go_on_apart_and_never_mix(
        self, store: SessionStore
    ) -> None:
        forks = _forks_of(store)
        turn_ids = await _seed_turns(store)
        await forks.fork_session(_ORG, _USER, "s1", turn_ids[1], "f1", _T0)
        before = (await store_snapshot(store, "f1", []))[2]  # read once: a SQL store caches it

        await _seed_turns(store, "f1", 2, first=10, modes={11: "review"})
        await _seed_turns(store, "s1", 1, first=5)

        fork, fork_turns, fork_transcript = await store_snapshot(store, "f1", ["f1-t10", "s1-t3"])
        source, source_turns, source_transcript = await store_snapshot(
            store, "s1", ["s1-t5", "f1-t10"]
        )
        assert _said(before) == _qa(1, 2)
        assert _said(fork_transcript) == _qa(1, 2, 10, 11)
        assert _said(source_transcript) == _qa(1, 2, 3, 4, 5)
        assert fork is not None
        assert source is not None
        assert (fork.mode, source.mode) == ("review", "general")
        assert [turn is not None for turn in fork_turns] == [True, False]
        assert [turn is not None for turn in source_turns] == [True, False]

    @_case()
    async def test_a_fork_of_a_fork_reads_every_ancestors_prefix(self, store: SessionStore) -> None:
        forks = _forks_of(store)
        turn_ids = await _seed_turns(store, modes={1: "review"})
        await forks.fork_session(_ORG, _USER, "s1", turn_ids[1], "f1", _T0)
        fork_turns = await _seed_turns(store, "f1", 2, first=10, modes={10: "plan", 11: "debug"})

        grandchild = await forks.fork_session(_ORG, _USER, "f1", fork_turns[0], "g1", _T0)
        await _seed_turns(store, "g1", 1, first=20)

        assert grandchild.forked_from == ForkPoint(session_id="f1", turn_id="f1-t10", messages=6)
        session, _, transcript = await store_snapshot(store, "g1", [])
        assert session is not None
        assert _said(transcript) == _qa(1, 2, 10, 20)
        assert [e.new_mode for e in session.mode_history] == ["review", "plan"]
        assert session.mode == "plan"
        assert _said((await store_snapshot(store, "f1", []))[2]) == _qa(1, 2, 10, 11)
        assert _said((await store_snapshot(store, "s1", []))[2]) == _qa(1, 2, 3, 4)

    @_case()
    async def test_forks_of_lists_a_sessions_forks_for_its_caller_only(
        self, store: SessionStore
    ) -> None:
        forks = _forks_of(store)
        turn_ids = await _seed_turns(store)
        await forks.fork_session(_ORG, _USER, "s1", turn_ids[0], "f1", _T0)
        await forks.fork_session(_ORG, _USER, "s1", turn_ids[2], "f2", _T0 + timedelta(seconds=1))

        listed = await forks.forks_of(_ORG, _USER, "s1")

        assert listed is not None
        assert [(f.id, f.forked_from) for f in listed] == [
            ("f1", ForkPoint(session_id="s1", turn_id="s1-t1", messages=2)),
            ("f2", ForkPoint(session_id="s1", turn_id="s1-t3", messages=6)),
        ]
        assert await forks.forks_of(_ORG, _USER, "f1") == []
        for org, user in _OTHER_CALLERS:
            assert await forks.forks_of(org, user, "s1") is None

    @_case()
    async def test_a_turn_still_pending_is_not_forked(self, store: SessionStore) -> None:
        forks = _forks_of(store)
        await _seed_turns(store, turns=1)
        tx = store.begin(_ORG, _USER)
        await tx.open_turn(sample_turn("s1-t2", "s1", pending=[_READ_FILE]))
        waiting = sample_turn("s1-t3", "s1", status=TurnStatus.AWAITING_CLIENT_TOOLS)
        await tx.open_turn(waiting.model_copy(update={"pending_tool_calls": [_READ_FILE]}))
        await tx.append_transcript("s1", "s1-t3", [user_says("q3")])
        await tx.commit()

        for turn_id, status in (("s1-t2", "open"), ("s1-t3", "awaiting_client_tools")):
            with pytest.raises(ForkRefusedError) as refused:
                await forks.fork_session(_ORG, _USER, "s1", turn_id, "f1", _T0)
            assert refused.value.reason is ForkRefusal.TURN_PENDING
            assert "still pending" in str(refused.value)
            assert status in str(refused.value)
        assert await store_snapshot(store, "f1", []) == (None, [], [])
        assert await forks.forks_of(_ORG, _USER, "s1") == []

    @_case()
    async def test_another_callers_session_is_not_found_to_fork(self, store: SessionStore) -> None:
        forks = _forks_of(store)
        turn_ids = await _seed_turns(store, turns=1)

        for org, user in _OTHER_CALLERS:
            with pytest.raises(ForkRefusedError) as refused:
                await forks.fork_session(org, user, "s1", turn_ids[0], "f1", _T0)
            assert refused.value.reason is ForkRefusal.SESSION_NOT_FOUND
            assert "another org or user" in str(refused.value)
            assert await store_snapshot(store, "f1", [], org=org, user=user) == (None, [], [])
        assert await forks.forks_of(_ORG, _USER, "s1") == []

    @_case()
    async def test_an_unknown_session_or_turn_is_not_forked(self, store: SessionStore) -> None:
        forks = _forks_of(store)
        await _seed_turns(store, turns=1)
        await _seed_turns(store, "s2", turns=1)

        with pytest.raises(ForkRefusedError) as no_session:
            await forks.fork_session(_ORG, _USER, "nope", "s1-t1", "f1", _T0)
        with pytest.raises(ForkRefusedError) as no_turn:
            await forks.fork_session(_ORG, _USER, "s1", "s1-t9", "f1", _T0)
        with pytest.raises(ForkRefusedError) as other_sessions_turn:
            await forks.fork_session(_ORG, _USER, "s1", "s2-t1", "f1", _T0)

        assert no_session.value.reason is ForkRefusal.SESSION_NOT_FOUND
        assert no_turn.value.reason is ForkRefusal.TURN_NOT_FOUND
        assert "'s1-t9'" in str(no_turn.value)
        assert other_sessions_turn.value.reason is ForkRefusal.TURN_NOT_FOUND
        assert await store_snapshot(store, "f1", []) == (None, [], [])

    @_case()
    async def test_a_fork_into_a_taken_session_id_conflicts_and_changes_nothing(
        self, store: SessionStore
    ) -> None:
        forks = _forks_of(store)
        turn_ids = await _seed_turns(store)
        await _seed_turns(store, "s2", turns=1)

        with pytest.raises(StoreConflictError):
            await forks.fork_session(_ORG, _USER, "s1", turn_ids[1], "s2", _T0)

        session, _, transcript = await store_snapshot(store, "s2", [])
        assert session is not None
        assert session.forked_from is None
        assert _said(transcript) == _qa(1)

    @_case()
    async def test_a_fork_from_turn_two_of_four_continues_through_the_engine(
        self, store: SessionStore
    ) -> None:
        _forks_of(store)
        llm = ScriptedLLM([{"text": f"answer {n}"} for n in range(1, 7)])
        pipeline = embedded_pipeline(
            llm=llm,
            store=store,
            catalog=ConfigCatalog.from_toml(_CATALOG),
            clock=SteppingClock(),
            ids=SequentialIds(),
        )
        caller = Caller(org=_ORG, user=_USER)
        turns: list[str] = []
        session_id: str | None = None
        for n in range(1, 5):
            request: dict[str, Any] = {"Instruction": f"question {n}"}
            if session_id is not None:
                request |= {"SessionId": session_id, "TurnId": turns[-1]}
            done = await pipeline.execute(request, caller)
            assert done.successful, done.errors
            assert done.result is not None
            session_id = done.result.session_id
            turns.append(done.result.turn_id)
        assert session_id is not None

        forked = await pipeline.fork(session_id, turns[1], caller)
        assert forked.successful, forked.errors
        assert forked.result is not None
        fork_id = forked.result.id
        went_on = await pipeline.execute(
            {"SessionId": fork_id, "TurnId": turns[1], "Instruction": "question 2b"}, caller
        )

        assert went_on.successful, went_on.errors
        assert went_on.result is not None
        assert went_on.result.session_id == fork_id
        assert went_on.result.primary_output_text == "answer 5"
        assert llm.requests[-1].messages[-5:] == [
            user_says("question 1"),
            assistant_says("answer 1"),
            user_says("question 2"),
            assistant_says("answer 2"),
            user_says("question 2b"),
        ]
        assert "question 3" not in str(llm.requests[-1].messages)
        _, _, source = await store_snapshot(store, session_id, [])
        assert len(source) == 8
        assert "question 2b" not in str(source)

    # --- the tool ledger (a store that is a ToolLedger) --------------------------------------

    @_case()
    async def test_a_ledger_reservation_is_taken_once_and_reads_back_done_with_its_result(
        self, store: SessionStore
    ) -> None:
        ledger = _ledger_of(store)

        first = await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)
        again = await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0 + timedelta(seconds=1))
        await ledger.complete_tool_call(_ORG, _USER, "tk1-a", _RESULTS["astral"], _T0)
        done = await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)

        assert first is None
        assert again is not None
        assert (again.key, again.result, again.done) == ("tk1-a", None, False)
        assert again.reserved_at == _T0
        assert done is not None
        assert (done.result, done.done) == (_RESULTS["astral"], True)

    @_case()
    async def test_a_done_ledger_entry_keeps_its_first_result_and_is_not_released(
        self, store: SessionStore
    ) -> None:
        ledger = _ledger_of(store)
        await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)
        await ledger.complete_tool_call(_ORG, _USER, "tk1-a", '{"text": "first"}', _T0)

        await ledger.complete_tool_call(_ORG, _USER, "tk1-a", '{"text": "second"}', _T0)
        await ledger.release_tool_call(_ORG, _USER, "tk1-a")
        entry = await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)

        assert entry is not None
        assert entry.result == '{"text": "first"}'

    @_case()
    async def test_a_released_ledger_reservation_can_be_taken_again(
        self, store: SessionStore
    ) -> None:
        ledger = _ledger_of(store)
        await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)

        await ledger.release_tool_call(_ORG, _USER, "tk1-a")

        assert await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0) is None

    @_case()
    async def test_a_ledger_call_done_without_a_reservation_is_recorded_done(
        self, store: SessionStore
    ) -> None:
        ledger = _ledger_of(store)

        await ledger.complete_tool_call(_ORG, _USER, "tk1-a", '{"text": "x"}', _T0)
        entry = await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)

        assert entry is not None
        assert entry.result == '{"text": "x"}'

    @_case()
    async def test_ledger_entries_belong_to_their_org_and_user(self, store: SessionStore) -> None:
        ledger = _ledger_of(store)
        await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)
        await ledger.complete_tool_call(_ORG, _USER, "tk1-a", '{"text": "mine"}', _T0)

        others = [
            await ledger.reserve_tool_call(org, user, "tk1-a", _T0) for org, user in _OTHER_CALLERS
        ]
        for org, user in _OTHER_CALLERS:
            await ledger.release_tool_call(org, user, "tk1-a")
        mine = await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)

        assert others == [None, None]
        assert mine is not None
        assert mine.result == '{"text": "mine"}'

    @_case()
    async def test_ledger_writes_are_committed_at_once_whatever_the_turn_does(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        ledger = _ledger_of(store)
        tx = store.begin(_ORG, _USER)
        await tx.load_session("s1")
        await tx.append_transcript("s1", "t9", [user_says("never committed")])

        await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)
        await ledger.complete_tool_call(_ORG, _USER, "tk1-a", '{"text": "x"}', _T0)
        await ledger.reserve_tool_call(_ORG, _USER, "tk1-b", _T0)
        await tx.rollback()

        done = await ledger.reserve_tool_call(_ORG, _USER, "tk1-a", _T0)
        reserved = await ledger.reserve_tool_call(_ORG, _USER, "tk1-b", _T0)
        assert done is not None
        assert done.done
        assert reserved is not None
        assert not reserved.done

    @_case()
    async def test_of_many_racing_ledger_reservations_of_one_key_exactly_one_wins(
        self, store: SessionStore
    ) -> None:
        ledger = _ledger_of(store)

        answers = await asyncio.gather(
            *(ledger.reserve_tool_call(_ORG, _USER, "tk1-race", _T0) for _ in range(10))
        )

        assert answers.count(None) == 1
        assert all(isinstance(entry, LedgerEntry) and not entry.done for entry in answers if entry)

    @_case()
    async def test_purging_the_ledger_deletes_the_entries_reserved_before_the_time(
        self, store: SessionStore
    ) -> None:
        ledger = _ledger_of(store)
        hour = timedelta(hours=1)
        await ledger.reserve_tool_call(_ORG, _USER, "tk1-old", _T0.astimezone(_PLUS_TWO))
        await ledger.complete_tool_call(_ORG, _USER, "tk1-old-done", '{"text": "x"}', _T0 + hour)
        await ledger.reserve_tool_call("globex", _USER, "tk1-other", _T0 + hour)
        await ledger.reserve_tool_call(_ORG, _USER, "tk1-new", _T0 + 2 * hour)

        purged = await ledger.purge_tool_calls(_T0 + 2 * hour)
        again = await ledger.purge_tool_calls(_T0 + 2 * hour)

        assert (purged, again) == (3, 0)  # done or not, of every org and user; once
        for org, key in ((_ORG, "tk1-old"), (_ORG, "tk1-old-done"), ("globex", "tk1-other")):
            assert await ledger.reserve_tool_call(org, _USER, key, _T0 + 3 * hour) is None
        kept = await ledger.reserve_tool_call(_ORG, _USER, "tk1-new", _T0 + 3 * hour)
        assert kept is not None
        assert kept.reserved_at == _T0 + 2 * hour

    # --- the usage ledger (a store that is a UsageLedger) -------------------------------------

    @_case()
    async def test_usage_is_reserved_within_a_limit_and_refused_over_it_unstored(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        first = sample_usage_call("u1", tokens=30)
        second = sample_usage_call("u2", minute=1, tokens=60)

        one = await ledger.reserve_usage(first, [_tokens_check(100, 30)])
        two = await ledger.reserve_usage(second, [_tokens_check(100, 60)])
        refused = await ledger.reserve_usage(
            sample_usage_call("u3", minute=2, tokens=20),
            [_tokens_check(1000, 20, "wide"), _tokens_check(100, 20)],
        )

        assert (one.reserved, one.used, one.refused_by) == (True, _amounts({"b": 0}), None)
        assert (two.reserved, two.used) == (True, _amounts({"b": 30}))
        assert (refused.reserved, refused.refused_by) == (False, "b")
        assert refused.used == {"wide": 90, "b": 90}
        assert refused.oldest == first.at
        assert await ledger.usage_calls(UsageQuery(org=_ORG)) == [first, second]

    @_case()
    async def test_usage_limit_met_exactly_holds_and_one_more_is_refused(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        await ledger.reserve_usage(sample_usage_call("u1", tokens=60), [_tokens_check(100, 60)])

        exact = await ledger.reserve_usage(
            sample_usage_call("u2", minute=1, tokens=40), [_tokens_check(100, 40)]
        )
        over = await ledger.reserve_usage(
            sample_usage_call("u3", minute=2, tokens=1), [_tokens_check(100, 1)]
        )

        assert (exact.reserved, over.reserved, over.used) == (True, False, _amounts({"b": 100}))

    @_case()
    async def test_a_usage_reservation_tried_again_stands_without_a_second_charge(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        call = sample_usage_call("u1", tokens=60)
        await ledger.reserve_usage(call, [_tokens_check(100, 60)])

        again = await ledger.reserve_usage(call, [_tokens_check(100, 60)])  # a durable retry
        other = await ledger.reserve_usage(
            sample_usage_call("u2", minute=1, tokens=60), [_tokens_check(100, 60)]
        )

        assert again.reserved
        assert (other.reserved, other.used) == (False, _amounts({"b": 60}))
        assert await ledger.usage_calls(UsageQuery(org=_ORG)) == [call]

    @_case()
    async def test_usage_settlements_are_stored_whether_the_next_call_is_reserved_or_not(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        estimate = sample_usage_call("u1", tokens=80)
        await ledger.reserve_usage(estimate, [_tokens_check(100, 80)])
        actual = sample_usage_call("u1", tokens=40, settled=True)

        fits = await ledger.reserve_usage(
            sample_usage_call("u2", minute=1, tokens=50), [_tokens_check(100, 50)], [actual]
        )
        grown = sample_usage_call("u2", minute=1, tokens=55, settled=True)
        refused = await ledger.reserve_usage(
            sample_usage_call("u3", minute=2, tokens=10), [_tokens_check(100, 10)], [grown]
        )

        assert fits.reserved
        assert fits.used == {"b": 40}  # the settlement counted, not the estimate
        assert (refused.reserved, refused.used) == (False, _amounts({"b": 95}))
        assert await ledger.usage_calls(UsageQuery(org=_ORG)) == [actual, grown]

    @_case()
    async def test_settling_usage_replaces_the_reservation_and_stores_an_unreserved_call(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        await ledger.reserve_usage(sample_usage_call("u1", tokens=500), [])
        settled = replace(
            sample_usage_call("u1", tokens=120, cost="0.0042", settled=True),
            reported=True,
            input_tokens=100,
            output_tokens=20,
            cached_input_tokens=64,
            reasoning_tokens=8,
            priced=True,
            cost=Decimal("0.0042"),
            tool_calls=2,
            server_tool_round=True,
            round=3,
            step="llm_client",
        )
        unreserved = replace(
            sample_usage_call("u2", minute=1, settled=True), failed=True, model=None, currency=None
        )

        await ledger.settle_usage([settled, unreserved])
        again = await ledger.reserve_usage(
            sample_usage_call("u3", minute=2), [_tokens_check(1000, 0)]
        )

        assert await ledger.usage_calls(UsageQuery(org=_ORG, until=_T0 + timedelta(minutes=2))) == [
            settled,
            unreserved,
        ]
        assert again.used == {"b": 120}

    @_case()
    async def test_a_usage_call_round_trips_its_time_and_offset_and_every_figure(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        call = replace(
            sample_usage_call("u1", cost="0.000012345678901234567890123"),
            at=_T0.astimezone(_PLUS_TWO),
            reported=True,
            input_tokens=7,
        )

        await ledger.reserve_usage(call, [])
        (read,) = await ledger.usage_calls(UsageQuery(org=_ORG))

        assert read == call
        assert read.at == _T0
        assert read.charge.cost == Decimal("0.000012345678901234567890123")

    @_case()
    async def test_a_per_turn_usage_check_counts_only_its_turn(self, store: SessionStore) -> None:
        ledger = _usage_of(store)
        await ledger.reserve_usage(sample_usage_call("u1", turn_id="t1", tokens=70), [])
        await ledger.reserve_usage(sample_usage_call("u2", turn_id="t2", minute=1, tokens=20), [])

        turn = await ledger.reserve_usage(
            sample_usage_call("u3", turn_id="t2", minute=2, tokens=50),
            [_tokens_check(100, 50, "turn", turn_id="t2"), _tokens_check(100, 50, "org")],
        )

        assert (turn.used, turn.refused_by) == (_amounts({"turn": 20, "org": 90}), "org")

    @_case()
    async def test_a_usage_window_counts_only_the_calls_made_since_its_start(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        for n, minute in enumerate((0, 10, 20)):
            await ledger.reserve_usage(sample_usage_call(f"u{n}", minute=minute, tokens=40), [])
        since = (_T0 + timedelta(minutes=10)).astimezone(_PLUS_TWO)

        outcome = await ledger.reserve_usage(
            sample_usage_call("u9", minute=30, tokens=30), [_tokens_check(110, 30, since=since)]
        )
        refused = await ledger.reserve_usage(
            sample_usage_call("u10", minute=31, tokens=1), [_tokens_check(110, 1, since=since)]
        )

        assert (outcome.reserved, outcome.used) == (
            True,
            _amounts({"b": 80}),
        )  # the call at 10 counts
        assert (refused.reserved, refused.used) == (False, _amounts({"b": 110}))
        assert refused.oldest == _T0 + timedelta(minutes=10)

    @_case()
    async def test_usage_checks_narrowed_to_a_user_or_a_mode_count_only_theirs(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        await ledger.reserve_usage(
            sample_usage_call("u1", user="ana", mode="general", tokens=1), []
        )
        await ledger.reserve_usage(
            sample_usage_call("u2", user="bob", mode="general", tokens=10), []
        )
        await ledger.reserve_usage(
            sample_usage_call("u3", user="ana", mode="review", tokens=100), []
        )

        outcome = await ledger.reserve_usage(
            sample_usage_call("u4", minute=1),
            [
                _tokens_check(10**6, 0, "ana", user="ana"),
                _tokens_check(10**6, 0, "general", mode="general"),
                _tokens_check(10**6, 0, "ana-general", user="ana", mode="general"),
                _tokens_check(10**6, 0, "everyone"),
            ],
        )

        assert outcome.used == {"ana": 101, "general": 11, "ana-general": 1, "everyone": 111}

    @_case()
    async def test_a_cost_usage_check_counts_only_its_currency_in_exact_decimals(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        await ledger.reserve_usage(sample_usage_call("u1", cost="0.1"), [])
        await ledger.reserve_usage(sample_usage_call("u2", minute=1, cost="0.2"), [])
        await ledger.reserve_usage(sample_usage_call("u3", minute=2, cost="5", currency="EUR"), [])
        await ledger.reserve_usage(sample_usage_call("u4", minute=3, cost="7", currency=None), [])

        exact = await ledger.reserve_usage(
            sample_usage_call("u5", minute=4, cost="0.0000001"),
            [_cost_check("0.3000001", "0.0000001"), _cost_check("5", "0", "eur", "EUR")],
        )
        over = await ledger.reserve_usage(
            sample_usage_call("u6", minute=5, cost="0.0000001"),
            [_cost_check("0.3000001", "0.0000001")],
        )

        assert exact.reserved
        assert exact.used == {"usd": Decimal("0.3"), "eur": Decimal(5)}
        assert str(exact.used["usd"].normalize()) == "0.3"
        assert (over.reserved, over.used) == (False, {"usd": Decimal("0.3000001")})

    @_case()
    async def test_usage_of_another_org_is_never_counted_nor_read(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        mine = sample_usage_call("u1", tokens=5)
        await ledger.reserve_usage(mine, [])
        await ledger.reserve_usage(sample_usage_call("u2", org="globex", tokens=1000), [])

        outcome = await ledger.reserve_usage(
            sample_usage_call("u3", minute=1, tokens=10), [_tokens_check(20, 10)]
        )

        assert (outcome.reserved, outcome.used) == (True, _amounts({"b": 5}))
        read = await ledger.usage_calls(UsageQuery(org=_ORG, until=_T0 + timedelta(minutes=1)))
        assert read == [mine]
        assert [c.id for c in await ledger.usage_calls(UsageQuery(org="globex"))] == ["u2"]
        assert await ledger.usage_calls(UsageQuery(org="initech")) == []

    @_case()
    async def test_usage_calls_are_read_narrowed_and_oldest_first(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)
        calls = [
            sample_usage_call("u1", minute=3, user="ana", mode="general", model="m-a"),
            sample_usage_call("u2", minute=1, user="bob", mode="review", model="m-b"),
            sample_usage_call("u3", minute=2, user="ana", mode="review", session_id="s2"),
            sample_usage_call("u4", minute=0, user="ana", turn_id="t2", model=None),
        ]
        for call in calls:
            await ledger.reserve_usage(call, [])

        async def ids(**narrowing: Any) -> list[str]:
            return [c.id for c in await ledger.usage_calls(UsageQuery(org=_ORG, **narrowing))]

        assert await ids() == ["u4", "u2", "u3", "u1"]
        assert await ids(user="ana") == ["u4", "u3", "u1"]
        assert await ids(mode="review") == ["u2", "u3"]
        assert await ids(model="m-b") == ["u2"]
        assert await ids(session_id="s2") == ["u3"]
        assert await ids(turn_id="t2") == ["u4"]
        assert await ids(since=_T0 + timedelta(minutes=1)) == ["u2", "u3", "u1"]
        assert await ids(until=_T0 + timedelta(minutes=2)) == ["u4", "u2"]
        window = {
            "since": _T0.astimezone(_PLUS_TWO) + timedelta(minutes=1),
            "until": _T0 + timedelta(minutes=3),
        }
        assert await ids(**window, user="ana") == ["u3"]

    @_case()
    async def test_usage_reservations_are_committed_at_once_whatever_the_turn_does(
        self, store: SessionStore
    ) -> None:
        await seed_store(store)
        ledger = _usage_of(store)
        tx = store.begin(_ORG, _USER)
        await tx.load_session("s1")
        await tx.append_transcript("s1", "t9", [user_says("never committed")])

        await ledger.reserve_usage(sample_usage_call("u1", tokens=3), [])
        await tx.rollback()

        assert [c.id for c in await ledger.usage_calls(UsageQuery(org=_ORG))] == ["u1"]

    @_case()
    async def test_of_many_racing_usage_reservations_exactly_those_within_the_limit_win(
        self, store: SessionStore
    ) -> None:
        ledger = _usage_of(store)

        outcomes = await asyncio.gather(
            *(
                ledger.reserve_usage(
                    sample_usage_call(f"race-{n}", tokens=10), [_tokens_check(75, 10)]
                )
                for n in range(20)
            )
        )

        assert [outcome.reserved for outcome in outcomes].count(True) == 7
        stored = await ledger.usage_calls(UsageQuery(org=_ORG))
        assert sum(call.charge.tokens for call in stored) == 70

    # --- the usage ledger (a store that is a UsageLedger) ----------------------------------

    @_case()
    async def test_a_usage_ledger_reservation_run_again_is_reserved_once_and_settles_its_calls(
        self, store: SessionStore
    ) -> None:
        """A durable turn's reservation activity retried after its answer was lost (D595)."""
        usage = _usage_of(store)

        def model_call(number: int, tokens: int, *, settled: bool = False) -> UsageCall:
            return UsageCall(
                id=f"turn-1/corr-1/{number}",
                org=_ORG,
                user=_USER,
                session_id="session-1",
                turn_id="turn-1",
                mode="general",
                at=_T0 + timedelta(seconds=number),
                round=number,
                settled=settled,
                charge=Charge(tokens=tokens, model_calls=1),
            )

        def within(limit: int, amount: int) -> list[BudgetCheck]:
            check = BudgetCheck(
                budget_id="b1",
                metric=BudgetMetric.TOKENS,
                limit=Decimal(limit),
                amount=Decimal(amount),
                org=_ORG,
            )
            return [check]

        first = model_call(1, 100)
        assert (await usage.reserve_usage(first, within(250, 100))).reserved
        second = model_call(2, 100)
        settled_first = model_call(1, 40, settled=True)
        assert (await usage.reserve_usage(second, within(250, 100), [settled_first])).reserved
        # Run again: the same call, the same settlement. Counted anew it would not fit.
        again = await usage.reserve_usage(second, within(150, 100), [settled_first])

        assert again.reserved
        held = await usage.usage_calls(UsageQuery(org=_ORG))
        assert [(c.id, c.settled, c.charge.tokens) for c in held] == [
            ("turn-1/corr-1/1", True, 40),
            ("turn-1/corr-1/2", False, 100),
        ]


def _forks_of(store: SessionStore) -> SessionForks:
    """The store as a ``SessionForks``; the case is skipped for a store that is not one."""
    if not isinstance(store, SessionForks):
        pytest.skip(f"{type(store).__name__} is not a SessionForks")
    return store


async def _seed_turns(
    store: SessionStore,
    session_id: str = "s1",
    turns: int = 4,
    *,
    modes: dict[int, str] | None = None,
    first: int = 1,
) -> list[str]:
    """Commit ``turns`` settled turns of two messages each (``q<n>``, ``a<n>``) to the
    caller's session ``session_id`` (made first when missing), turn ``n`` changing the
    mode to ``modes[n]``; the turns' ids (``<session>-t<n>``)."""
    check = store.begin(_ORG, _USER)
    exists = await check.load_session(session_id) is not None
    await check.rollback()
    if not exists:
        await seed_store(store, sample_session(session_id))
    ids = []
    for n in range(first, first + turns):
        tx = store.begin(_ORG, _USER)
        turn = sample_turn(f"{session_id}-t{n}", session_id, status=TurnStatus.COMPLETED)
        await tx.open_turn(turn)
        await tx.append_transcript(
            session_id, turn.id, [user_says(f"q{n}"), assistant_says(f"a{n}")]
        )
        if modes and n in modes:
            current = await tx.load_session(session_id)
            assert current is not None
            assert current.mode is not None
            entry = sample_entry(current.mode, modes[n], minute=n, turn_id=turn.id)
            await tx.set_session_mode(session_id, entry)
        await tx.commit()
        ids.append(turn.id)
    return ids


def _said(transcript: Sequence[ChatMessage]) -> list[str]:
    return [str(message.content) for message in transcript]


def _qa(*turns: int, prefix: str = "") -> list[str]:
    return [text for n in turns for text in (f"{prefix}q{n}", f"{prefix}a{n}")]


def _ledger_of(store: SessionStore) -> ToolLedger:
    """The store as a ``ToolLedger``; the case is skipped for a store that is not one."""
    if not isinstance(store, ToolLedger):
        pytest.skip(f"{type(store).__name__} is not a ToolLedger")
    return store


def _usage_of(store: SessionStore) -> UsageLedger:
    """The store as a ``UsageLedger``; the case is skipped for a store that is not one."""
    if not isinstance(store, UsageLedger):
        pytest.skip(f"{type(store).__name__} is not a UsageLedger")
    return store


def _amounts(counts: dict[str, int]) -> dict[str, Decimal]:
    """Budgets' counts as ``ReserveOutcome.used`` holds them."""
    return {budget_id: Decimal(count) for budget_id, count in counts.items()}


def _tokens_check(limit: int, amount: int, budget_id: str = "b", **narrowing: Any) -> BudgetCheck:
    """A check of the cases' org on tokens, narrowed as given."""
    return BudgetCheck(
        budget_id=budget_id,
        metric=BudgetMetric.TOKENS,
        limit=Decimal(limit),
        amount=Decimal(amount),
        org=_ORG,
        **narrowing,
    )


def _cost_check(
    limit: str, amount: str, budget_id: str = "usd", currency: str = "USD"
) -> BudgetCheck:
    """A check of the cases' org on cost in ``currency``."""
    return BudgetCheck(
        budget_id=budget_id,
        metric=BudgetMetric.COST,
        limit=Decimal(limit),
        amount=Decimal(amount),
        org=_ORG,
        currency=currency,
    )
