"""The SessionStore port contract (contracts/ports.py), on the memory store, a SQLite file
and a PostgreSQL database.

Every test taking the ``store`` fixture runs once per store (PostgreSQL-only tests are
in tests/test_postgres_store.py). The SQLite-only tests
at the end check what only a real file can show: durability, WAL, the schema
version, two processes, and that the store keeps off the event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from engine_kit import ALL_STORE_KINDS, open_store_of_kind
from pydantic import ValidationError

from aptix_pipeline.adapters.memory_store import MemoryStore
from aptix_pipeline.adapters.sqlite_store import SCHEMA_VERSION, SQLiteStore
from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ModeHistoryEntry,
    Session,
    SessionStore,
    SessionTransaction,
    StoreConflictError,
    ToolCall,
    Turn,
    TurnStatus,
)

ORG, USER = "acme", "ana"
OTHER_CALLERS = [("globex", USER), (ORG, "bob")]
T0 = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """Each contract test on the memory store, a SQLite file and a PostgreSQL database."""
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        yield opened


# --- builders ------------------------------------------------------------------------


def make_session(
    session_id: str = "s1",
    *,
    org: str = ORG,
    user: str = USER,
    mode: str | None = "general",
    history: Sequence[ModeHistoryEntry] = (),
) -> Session:
    return Session(
        id=session_id,
        org=org,
        user=user,
        mode=mode,
        mode_history=list(history),
        agent_context_id="assistant",
        conversation_context_id="workspace",
        solution_context_text="solution: aptix.sln",
        created_at=T0,
    )


def make_turn(
    turn_id: str = "t1",
    session_id: str = "s1",
    *,
    status: TurnStatus = TurnStatus.OPEN,
    pending: Sequence[ToolCall] = (),
    expanded: Sequence[str] = (),
) -> Turn:
    return Turn(
        id=turn_id,
        session_id=session_id,
        mode="general",
        status=status,
        pending_tool_calls=list(pending),
        expanded_containers=list(expanded),
        created_at=T0 + timedelta(seconds=1),
    )


def entry(previous: str, new: str, *, minute: int = 0, turn_id: str = "t1") -> ModeHistoryEntry:
    return ModeHistoryEntry(
        previous_mode=previous,
        new_mode=new,
        timestamp=T0 + timedelta(minutes=minute),
        reason=f"{previous} to {new}",
        org=ORG,
        user=USER,
        branch=minute % 2 == 1,
        turn_id=turn_id,
    )


def user_says(text: str) -> ChatMessage:
    return ChatMessage(role=ChatRole.USER, content=text)


def assistant_says(text: str) -> ChatMessage:
    return ChatMessage(role=ChatRole.ASSISTANT, content=text)


READ_FILE = ToolCall(tool_call_id="call_1", name="read_file", arguments_json='{"path": "a.py"}')


async def seed(
    store: SessionStore,
    session: Session | None = None,
    *,
    turns: Sequence[Turn] = (),
    messages: Sequence[ChatMessage] = (),
) -> Session:
    """Create and commit a session (default ``s1`` of acme/ana) with turns and messages."""
    session = session or make_session()
    tx = store.begin(session.org, session.user)
    await tx.create_session(session)
    for turn in turns:
        await tx.open_turn(turn)
    if messages:
        await tx.append_transcript(session.id, turns[0].id if turns else "t0", messages)
    await tx.commit()
    return session


async def snapshot(
    store: SessionStore, session_id: str = "s1", turn_ids: Sequence[str] = ("t1", "t2")
) -> tuple[Session | None, list[Turn | None], list[ChatMessage]]:
    """What the owner sees now, read in a fresh transaction."""
    tx = store.begin(ORG, USER)
    session = await tx.load_session(session_id)
    turns = [await tx.load_turn(session_id, turn_id) for turn_id in turn_ids]
    transcript = await tx.load_transcript(session_id)
    await tx.rollback()
    return session, turns, transcript


def without_version(session: Session | None) -> dict[str, object]:
    assert session is not None
    return session.model_dump(exclude={"version"})


# --- the transaction is a SessionTransaction -----------------------------------------


def test_begin_gives_a_session_transaction(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)
    assert isinstance(store.begin(ORG, USER), SessionTransaction)


# --- round trip ----------------------------------------------------------------------


@pytest.mark.decision("D61", "D67")
async def test_created_session_round_trips_every_field(store: SessionStore) -> None:
    session = make_session(mode="review")

    await seed(store, session)
    loaded, _, _ = await snapshot(store)

    assert loaded is not None
    assert without_version(loaded) == without_version(session)
    assert loaded.created_at == T0
    assert loaded.created_at.tzinfo is not None


async def test_mode_history_given_at_creation_is_kept(store: SessionStore) -> None:
    history = [entry("general", "review", minute=1), entry("review", "debug", minute=2)]
    session = make_session(mode="debug", history=history)

    await seed(store, session)
    loaded, _, _ = await snapshot(store)

    assert loaded is not None
    assert loaded.mode == "debug"
    assert loaded.mode_history == history


async def test_turn_round_trips_pending_calls_expanded_containers_and_status(
    store: SessionStore,
) -> None:
    second = ToolCall(tool_call_id="call_2", name="run_tests", arguments_json="{}")
    turn = make_turn(
        status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[READ_FILE, second], expanded=["Math"]
    )

    await seed(store, turns=[turn])
    _, (loaded, missing), _ = await snapshot(store)

    assert loaded == turn
    assert missing is None


async def test_transcript_keeps_order_across_turns(store: SessionStore) -> None:
    first_turn = [
        user_says("read a.py"),
        ChatMessage(role=ChatRole.ASSISTANT, content="", tool_calls=[READ_FILE]),
    ]
    second_turn = [
        ChatMessage(
            role=ChatRole.TOOL, content='{"text": "x"}', tool_call_id="call_1", name="read_file"
        ),
        assistant_says("a.py holds x"),
        user_says("thanks"),
    ]
    await seed(store, turns=[make_turn("t1")], messages=first_turn)

    tx = store.begin(ORG, USER)
    await tx.open_turn(make_turn("t2"))
    await tx.append_transcript("s1", "t2", second_turn[:2])
    await tx.append_transcript("s1", "t2", second_turn[2:])
    await tx.commit()
    _, _, transcript = await snapshot(store)

    assert transcript == [*first_turn, *second_turn]


async def test_completed_turn_is_saved_with_its_new_status(store: SessionStore) -> None:
    await seed(
        store, turns=[make_turn(status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[READ_FILE])]
    )

    tx = store.begin(ORG, USER)
    await tx.complete_turn(make_turn(status=TurnStatus.COMPLETED, expanded=["Math"]))
    await tx.commit()
    _, (turn, _), _ = await snapshot(store)

    assert turn is not None
    assert turn.status is TurnStatus.COMPLETED
    assert turn.pending_tool_calls == []
    assert turn.expanded_containers == ["Math"]


async def test_sessions_do_not_share_turns_or_transcripts(store: SessionStore) -> None:
    await seed(
        store, make_session("s1"), turns=[make_turn("t1", "s1")], messages=[user_says("one")]
    )
    await seed(
        store, make_session("s2"), turns=[make_turn("t9", "s2")], messages=[user_says("two")]
    )

    tx = store.begin(ORG, USER)

    assert await tx.load_turn("s1", "t9") is None
    assert await tx.load_turn("s2", "t1") is None
    assert await tx.load_transcript("s1") == [user_says("one")]
    assert await tx.load_transcript("s2") == [user_says("two")]


# --- visibility ------------------------------------------------------------------------


async def test_reads_see_the_transactions_own_writes_before_commit(store: SessionStore) -> None:
    session = make_session()
    tx = store.begin(ORG, USER)

    await tx.create_session(session)
    await tx.open_turn(make_turn())
    await tx.append_transcript("s1", "t1", [user_says("hi")])
    changed = await tx.set_session_mode("s1", entry("general", "review"))

    loaded = await tx.load_session("s1")
    assert loaded is not None
    assert loaded.mode == "review"
    assert loaded.mode_history == [entry("general", "review")]
    assert changed.mode == "review"
    assert await tx.load_turn("s1", "t1") == make_turn()
    assert await tx.load_transcript("s1") == [user_says("hi")]


@pytest.mark.decision("D63")
async def test_uncommitted_writes_are_invisible_to_other_transactions(
    store: SessionStore,
) -> None:
    await seed(
        store, make_session("old"), turns=[make_turn("t1", "old")], messages=[user_says("a")]
    )
    writer = store.begin(ORG, USER)
    await writer.create_session(make_session("new"))
    await writer.open_turn(make_turn("t1", "new"))
    await writer.append_transcript("new", "t1", [user_says("hidden")])
    await writer.open_turn(make_turn("t2", "old"))
    await writer.append_transcript("old", "t2", [user_says("hidden too")])
    await writer.set_session_mode("old", entry("general", "review"))

    reader = store.begin(ORG, USER)

    assert await reader.load_session("new") is None
    assert await reader.load_turn("new", "t1") is None
    assert await reader.load_transcript("new") == []
    old = await reader.load_session("old")
    assert old is not None
    assert old.mode == "general"
    assert old.mode_history == []
    assert await reader.load_turn("old", "t2") is None
    assert await reader.load_transcript("old") == [user_says("a")]


async def test_loaded_session_cannot_change_the_transactions_state(store: SessionStore) -> None:
    await seed(store)
    tx = store.begin(ORG, USER)

    loaded = await tx.load_session("s1")
    assert loaded is not None
    with pytest.raises(ValidationError):  # a session is a frozen value: shared, never copied
        setattr(loaded, "mode", "tampered")  # noqa: B010
    with pytest.raises(ValidationError):
        setattr(loaded, "mode_history", [entry("x", "y")])  # noqa: B010

    again = await tx.load_session("s1")
    assert again is not None
    assert again.mode == "general"
    assert again.mode_history == []


# --- rollback ------------------------------------------------------------------------


async def test_rollback_writes_nothing(store: SessionStore) -> None:
    await seed(store, turns=[make_turn("t1")], messages=[user_says("kept")])
    before = await snapshot(store)

    tx = store.begin(ORG, USER)
    await tx.create_session(make_session("s2"))
    await tx.open_turn(make_turn("t2"))
    await tx.complete_turn(make_turn("t1", status=TurnStatus.COMPLETED))
    await tx.append_transcript("s1", "t2", [user_says("dropped")])
    await tx.set_session_mode("s1", entry("general", "review"))
    await tx.rollback()

    assert await snapshot(store) == before
    assert (await snapshot(store, "s2"))[0] is None


async def test_a_transaction_never_committed_writes_nothing(store: SessionStore) -> None:
    await seed(store, messages=[user_says("kept")])
    before = await snapshot(store)

    abandoned = store.begin(ORG, USER)
    await abandoned.create_session(make_session("s2"))
    await abandoned.append_transcript("s1", "t1", [user_says("dropped")])
    await abandoned.set_session_mode("s1", entry("general", "review"))
    del abandoned

    assert await snapshot(store) == before
    assert (await snapshot(store, "s2"))[0] is None


# --- isolation -----------------------------------------------------------------------


@pytest.mark.parametrize(("org", "user"), OTHER_CALLERS, ids=["other-org", "other-user"])
async def test_another_caller_sees_nothing_of_the_session(
    store: SessionStore, org: str, user: str
) -> None:
    await seed(store, turns=[make_turn()], messages=[user_says("private")])

    tx = store.begin(org, user)

    assert await tx.load_session("s1") is None
    assert await tx.load_turn("s1", "t1") is None
    assert await tx.load_transcript("s1") == []


@pytest.mark.parametrize(("org", "user"), OTHER_CALLERS, ids=["other-org", "other-user"])
async def test_another_caller_cannot_write_into_the_session(
    store: SessionStore, org: str, user: str
) -> None:
    await seed(store, turns=[make_turn()], messages=[user_says("private")])
    before = await snapshot(store)
    tx = store.begin(org, user)

    with pytest.raises(LookupError):
        await tx.open_turn(make_turn("t2"))
    with pytest.raises(LookupError):
        await tx.set_session_mode("s1", entry("general", "review"))
    with pytest.raises(LookupError):
        await tx.complete_turn(make_turn(status=TurnStatus.COMPLETED))
    with pytest.raises(LookupError):
        await tx.append_transcript("s1", "t1", [user_says("intruder")])
    await tx.commit()

    assert await snapshot(store) == before


@pytest.mark.parametrize(("org", "user"), OTHER_CALLERS, ids=["other-org", "other-user"])
async def test_another_caller_cannot_take_over_a_session_id(
    store: SessionStore, org: str, user: str
) -> None:
    await seed(store, messages=[user_says("private")])
    before = await snapshot(store)
    tx = store.begin(org, user)
    await tx.create_session(make_session(org=org, user=user, mode="review"))

    with pytest.raises(StoreConflictError):
        await tx.commit()

    assert await snapshot(store) == before


@pytest.mark.parametrize(("org", "user"), OTHER_CALLERS, ids=["other-org", "other-user"])
async def test_create_session_for_another_org_or_user_is_refused(
    store: SessionStore, org: str, user: str
) -> None:
    tx = store.begin(ORG, USER)

    with pytest.raises(ValueError, match="own org and user"):
        await tx.create_session(make_session(org=org, user=user))
    await tx.commit()

    assert (await snapshot(store))[0] is None


async def test_creating_an_existing_session_is_refused(store: SessionStore) -> None:
    await seed(store)
    tx = store.begin(ORG, USER)
    await tx.load_session("s1")

    with pytest.raises(ValueError, match="already exists"):
        await tx.create_session(make_session())


async def test_the_same_new_session_created_twice_concurrently_conflicts(
    store: SessionStore,
) -> None:
    first, second = store.begin(ORG, USER), store.begin(ORG, USER)
    await first.create_session(make_session(mode="general"))
    await second.create_session(make_session(mode="review"))
    await first.commit()

    with pytest.raises(StoreConflictError):
        await second.commit()

    session, _, _ = await snapshot(store)
    assert session is not None
    assert session.mode == "general"


# --- SetSessionMode ------------------------------------------------------------------


async def test_set_session_mode_changes_mode_and_appends_history(store: SessionStore) -> None:
    await seed(store)
    tx = store.begin(ORG, USER)

    returned = await tx.set_session_mode("s1", entry("general", "review"))
    await tx.commit()
    loaded, _, _ = await snapshot(store)

    assert returned.mode == "review"
    assert returned.mode_history == [entry("general", "review")]
    assert loaded is not None
    assert loaded.mode == "review"
    assert loaded.mode_history == [entry("general", "review")]


async def test_several_mode_changes_are_kept_in_order(store: SessionStore) -> None:
    await seed(store)
    changes = [
        entry("general", "review", minute=1),
        entry("review", "general", minute=2),
        entry("general", "debug", minute=3),
    ]
    tx = store.begin(ORG, USER)
    for change in changes:
        await tx.set_session_mode("s1", change)
    await tx.commit()
    later = entry("debug", "review", minute=4, turn_id="t2")
    tx = store.begin(ORG, USER)
    await tx.set_session_mode("s1", later)
    await tx.commit()

    loaded, _, _ = await snapshot(store)

    assert loaded is not None
    assert loaded.mode == "review"
    assert loaded.mode_history == [*changes, later]


async def test_mode_change_of_a_session_created_in_the_same_transaction_is_kept(
    store: SessionStore,
) -> None:
    tx = store.begin(ORG, USER)
    await tx.create_session(make_session())
    await tx.set_session_mode("s1", entry("general", "review"))
    await tx.commit()

    loaded, _, _ = await snapshot(store)

    assert loaded is not None
    assert loaded.mode == "review"
    assert loaded.mode_history == [entry("general", "review")]


async def test_set_session_mode_from_the_wrong_previous_mode_is_refused(
    store: SessionStore,
) -> None:
    await seed(store)
    tx = store.begin(ORG, USER)

    with pytest.raises(ValueError, match="'review'"):
        await tx.set_session_mode("s1", entry("review", "debug"))

    loaded = await tx.load_session("s1")
    assert loaded is not None
    assert loaded.mode == "general"
    assert loaded.mode_history == []


async def test_set_session_mode_on_a_missing_session_is_a_lookup_error(
    store: SessionStore,
) -> None:
    tx = store.begin(ORG, USER)

    with pytest.raises(LookupError):
        await tx.set_session_mode("nope", entry("general", "review"))


# --- optimistic concurrency ----------------------------------------------------------


async def test_the_second_of_two_racing_commits_conflicts_and_writes_nothing(
    store: SessionStore,
) -> None:
    await seed(
        store,
        turns=[make_turn("t1", status=TurnStatus.AWAITING_CLIENT_TOOLS)],
        messages=[user_says("start")],
    )
    winner, loser = store.begin(ORG, USER), store.begin(ORG, USER)
    assert await winner.load_session("s1") is not None
    assert await loser.load_session("s1") is not None

    await winner.append_transcript("s1", "t1", [assistant_says("winner")])
    await winner.commit()
    await loser.open_turn(make_turn("t2"))
    await loser.complete_turn(make_turn("t1", status=TurnStatus.COMPLETED))
    await loser.append_transcript("s1", "t2", [assistant_says("loser")])
    await loser.set_session_mode("s1", entry("general", "review"))
    with pytest.raises(StoreConflictError):
        await loser.commit()

    session, (t1, t2), transcript = await snapshot(store)
    assert session is not None
    assert session.mode == "general"
    assert session.mode_history == []
    assert t1 is not None
    assert t1.status is TurnStatus.AWAITING_CLIENT_TOOLS
    assert t2 is None
    assert transcript == [user_says("start"), assistant_says("winner")]


async def test_a_conflicting_turn_succeeds_when_retried_in_a_new_transaction(
    store: SessionStore,
) -> None:
    await seed(store)
    winner, loser = store.begin(ORG, USER), store.begin(ORG, USER)
    await winner.load_session("s1")
    await loser.load_session("s1")
    await winner.set_session_mode("s1", entry("general", "review"))
    await winner.commit()
    await loser.append_transcript("s1", "t1", [user_says("lost")])
    with pytest.raises(StoreConflictError):
        await loser.commit()

    retry = store.begin(ORG, USER)
    await retry.set_session_mode("s1", entry("review", "debug"))
    await retry.append_transcript("s1", "t1", [user_says("retried")])
    await retry.commit()

    session, _, transcript = await snapshot(store)
    assert session is not None
    assert session.mode_history == [entry("general", "review"), entry("review", "debug")]
    assert transcript == [user_says("retried")]


async def test_transactions_on_different_sessions_do_not_conflict(store: SessionStore) -> None:
    await seed(store, make_session("s1"))
    await seed(store, make_session("s2"))
    one, two = store.begin(ORG, USER), store.begin(ORG, USER)
    await one.load_session("s1")
    await two.load_session("s2")

    await one.append_transcript("s1", "t1", [user_says("one")])
    await two.append_transcript("s2", "t1", [user_says("two")])
    await one.commit()
    await two.commit()

    assert (await snapshot(store, "s1"))[2] == [user_says("one")]
    assert (await snapshot(store, "s2"))[2] == [user_says("two")]


async def test_a_commit_without_writes_does_not_make_others_conflict(store: SessionStore) -> None:
    await seed(store)
    writer, reader = store.begin(ORG, USER), store.begin(ORG, USER)
    await writer.load_session("s1")
    await reader.load_session("s1")
    await reader.load_transcript("s1")

    await reader.commit()
    await writer.append_transcript("s1", "t1", [user_says("after a read-only commit")])
    await writer.commit()

    assert (await snapshot(store))[2] == [user_says("after a read-only commit")]


Use = Callable[[SessionTransaction], Awaitable[object]]
REFUSED: dict[str, Use] = {
    "set_session_mode": lambda tx: tx.set_session_mode("s1", entry("review", "debug")),
    "open_turn": lambda tx: tx.open_turn(make_turn("t1")),
    "complete_turn": lambda tx: tx.complete_turn(make_turn("t9")),
}


@pytest.mark.parametrize("refused", REFUSED.values(), ids=REFUSED.keys())
async def test_a_refused_write_leaves_nothing_to_commit(store: SessionStore, refused: Use) -> None:
    await seed(store, turns=[make_turn("t1")])
    other = store.begin(ORG, USER)
    await other.load_session("s1")
    tx = store.begin(ORG, USER)

    with pytest.raises((ValueError, LookupError)):
        await refused(tx)
    await tx.commit()
    await other.append_transcript("s1", "t1", [user_says("not a conflict")])
    await other.commit()

    assert (await snapshot(store))[2] == [user_says("not a conflict")]


async def test_of_many_concurrent_turns_on_one_session_exactly_one_commits(
    store: SessionStore,
) -> None:
    await seed(store)
    all_read = asyncio.Barrier(10)

    async def turn(index: int) -> bool:
        tx = store.begin(ORG, USER)
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
    assert (await snapshot(store))[2] == [user_says(f"turn {winner}")]


# --- misuse --------------------------------------------------------------------------

USES: dict[str, Use] = {
    "load_session": lambda tx: tx.load_session("s1"),
    "create_session": lambda tx: tx.create_session(make_session("s2")),
    "load_turn": lambda tx: tx.load_turn("s1", "t1"),
    "open_turn": lambda tx: tx.open_turn(make_turn("t2")),
    "complete_turn": lambda tx: tx.complete_turn(make_turn()),
    "load_transcript": lambda tx: tx.load_transcript("s1"),
    "append_transcript": lambda tx: tx.append_transcript("s1", "t1", [user_says("late")]),
    "set_session_mode": lambda tx: tx.set_session_mode("s1", entry("general", "review")),
    "commit": lambda tx: tx.commit(),
}


@pytest.mark.parametrize("use", USES.values(), ids=USES.keys())
@pytest.mark.parametrize("close", ["commit", "rollback"])
async def test_a_transaction_used_after_it_ended_raises(
    store: SessionStore, use: Use, close: str
) -> None:
    await seed(store, turns=[make_turn()])
    before = await snapshot(store)
    tx = store.begin(ORG, USER)
    await tx.load_session("s1")
    await (tx.commit() if close == "commit" else tx.rollback())

    with pytest.raises(RuntimeError):
        await use(tx)

    assert await snapshot(store) == before


async def test_opening_an_existing_turn_is_refused(store: SessionStore) -> None:
    await seed(store, turns=[make_turn("t1")])
    tx = store.begin(ORG, USER)

    with pytest.raises(ValueError, match="'t1'"):
        await tx.open_turn(make_turn("t1"))
    await tx.open_turn(make_turn("t2"))
    with pytest.raises(ValueError, match="'t2'"):
        await tx.open_turn(make_turn("t2"))


async def test_opening_a_turn_in_a_missing_session_is_a_lookup_error(
    store: SessionStore,
) -> None:
    tx = store.begin(ORG, USER)

    with pytest.raises(LookupError):
        await tx.open_turn(make_turn("t1", "nope"))


async def test_completing_an_unknown_turn_is_a_lookup_error(store: SessionStore) -> None:
    await seed(store, turns=[make_turn("t1")])
    tx = store.begin(ORG, USER)

    with pytest.raises(LookupError, match="'t9'"):
        await tx.complete_turn(make_turn("t9", status=TurnStatus.COMPLETED))


async def test_a_commit_with_no_writes_is_fine(store: SessionStore) -> None:
    await seed(store, messages=[user_says("kept")])
    before = await snapshot(store)

    empty = store.begin(ORG, USER)
    await empty.commit()
    reads_only = store.begin(ORG, USER)
    await reads_only.load_session("s1")
    await reads_only.load_transcript("s1")
    await reads_only.load_turn("s1", "t1")
    await reads_only.commit()

    assert await snapshot(store) == before


# --- pending turns and solution context ---------------------------------------------------


async def test_find_pending_turn_sees_stored_and_buffered_turns(store: SessionStore) -> None:
    waiting = make_turn("t1", status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[READ_FILE])
    await seed(store, turns=[waiting, make_turn("t2", status=TurnStatus.COMPLETED)])

    tx = store.begin(ORG, USER)
    found = await tx.find_pending_turn("s1")
    await tx.complete_turn(waiting.model_copy(update={"status": TurnStatus.COMPLETED}))
    after_settling = await tx.find_pending_turn("s1")
    await tx.open_turn(make_turn("t3", status=TurnStatus.AWAITING_CLIENT_TOOLS))
    buffered = await tx.find_pending_turn("s1")

    assert found is not None
    assert (found.id, found.pending_tool_calls) == ("t1", [READ_FILE])
    assert after_settling is None
    assert buffered is not None
    assert buffered.id == "t3"


async def test_find_pending_turn_is_none_without_one_or_for_another_caller(
    store: SessionStore,
) -> None:
    await seed(store, turns=[make_turn("t1", status=TurnStatus.COMPLETED)])
    await seed(
        store,
        make_session("s2"),
        turns=[make_turn("t9", "s2", status=TurnStatus.AWAITING_CLIENT_TOOLS)],
    )

    own = store.begin(ORG, USER)
    other = store.begin("globex", USER)

    assert await own.find_pending_turn("s1") is None
    assert (await own.find_pending_turn("s2")) is not None
    assert await other.find_pending_turn("s2") is None


async def test_find_pending_turn_finds_its_own_session_s_turn_among_many_sessions(
    store: SessionStore,
) -> None:
    for n in range(12):
        await seed(
            store,
            make_session(f"s{n}"),
            turns=[
                make_turn(f"done{n}", f"s{n}", status=TurnStatus.COMPLETED),
                make_turn(f"wait{n}", f"s{n}", status=TurnStatus.AWAITING_CLIENT_TOOLS),
            ],
        )
    settle = store.begin(ORG, USER)
    waiting = await settle.load_turn("s3", "wait3")
    assert waiting is not None
    await settle.complete_turn(waiting.model_copy(update={"status": TurnStatus.COMPLETED}))
    await settle.commit()

    tx = store.begin(ORG, USER)
    found = {n: await tx.find_pending_turn(f"s{n}") for n in range(12)}

    assert found.pop(3) is None
    assert {n: (turn.id, turn.session_id) for n, turn in found.items() if turn} == {
        n: (f"wait{n}", f"s{n}") for n in found
    }


async def test_memory_store_finds_a_pending_turn_among_many_other_turns() -> None:
    store = MemoryStore()
    for n in range(200):
        await seed(
            store,
            make_session(f"s{n}"),
            turns=[make_turn(f"t{n}.{k}", f"s{n}", status=TurnStatus.COMPLETED) for k in range(50)],
        )
    await seed(
        store,
        make_session("target"),
        turns=[
            make_turn("first", "target", status=TurnStatus.AWAITING_CLIENT_TOOLS),
            make_turn("second", "target", status=TurnStatus.AWAITING_CLIENT_TOOLS),
        ],
    )

    tx = store.begin(ORG, USER)
    found = await tx.find_pending_turn("target")
    others = [await tx.find_pending_turn(f"s{n}") for n in range(200)]

    assert found is not None
    assert found.id == "first"  # several pending turns (set by hand): the first written
    assert others == [None] * 200


async def test_set_solution_context_replaces_it_at_commit_only(store: SessionStore) -> None:
    await seed(store)

    tx = store.begin(ORG, USER)
    updated = await tx.set_solution_context("s1", "solution: other.sln")
    seen_by_others, _, _ = await snapshot(store)
    await tx.commit()
    committed, _, _ = await snapshot(store)

    assert updated.solution_context_text == "solution: other.sln"
    assert seen_by_others is not None
    assert seen_by_others.solution_context_text == "solution: aptix.sln"
    assert committed is not None
    assert committed.solution_context_text == "solution: other.sln"
    assert committed.mode == "general"


async def test_set_solution_context_of_another_callers_session_is_a_lookup_error(
    store: SessionStore,
) -> None:
    await seed(store)

    with pytest.raises(LookupError):
        await store.begin("globex", USER).set_solution_context("s1", "stolen")


# --- SQLite only -----------------------------------------------------------------------


async def test_sqlite_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"
    turn = make_turn(
        status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[READ_FILE], expanded=["Math"]
    )
    with SQLiteStore(path) as first:
        await seed(first, turns=[turn], messages=[user_says("hi"), assistant_says("hello")])
        tx = first.begin(ORG, USER)
        await tx.set_session_mode("s1", entry("general", "review"))
        await tx.commit()

    with SQLiteStore(path) as reopened:
        session, (t1, _), transcript = await snapshot(reopened)

    assert session is not None
    assert without_version(session) == without_version(
        make_session(mode="review", history=[entry("general", "review")])
    )
    assert t1 == turn
    assert transcript == [user_says("hi"), assistant_says("hello")]


def test_sqlite_file_is_in_wal_mode_at_schema_version_2(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"

    with SQLiteStore(path) as store:
        assert store.schema_version == 2 == SCHEMA_VERSION
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert raw.execute("PRAGMA user_version").fetchone()[0] == 2


def test_sqlite_reopening_a_current_file_keeps_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"
    SQLiteStore(path).close()

    with SQLiteStore(path) as again:
        assert again.schema_version == SCHEMA_VERSION


def test_sqlite_refuses_a_file_from_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")

    with pytest.raises(
        RuntimeError, match=rf"schema version {SCHEMA_VERSION + 1}.*knows up to {SCHEMA_VERSION}"
    ):
        SQLiteStore(path)

    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert raw.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


async def test_sqlite_store_used_after_close_raises(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "aptix.db")
    await seed(store)
    tx = store.begin(ORG, USER)
    await tx.load_session("s1")
    await tx.append_transcript("s1", "t1", [user_says("too late")])
    store.close()

    with pytest.raises(RuntimeError):
        await store.begin(ORG, USER).load_session("s1")
    with pytest.raises(RuntimeError):
        await tx.commit()
    with pytest.raises(RuntimeError):
        _ = store.schema_version


async def test_sqlite_two_stores_on_one_file_see_each_others_commits_and_conflict(
    tmp_path: Path,
) -> None:
    path = tmp_path / "aptix.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        await seed(one)
        winner, loser = one.begin(ORG, USER), two.begin(ORG, USER)
        assert await loser.load_session("s1") is not None
        await winner.load_session("s1")
        await winner.set_session_mode("s1", entry("general", "review"))
        await winner.commit()
        await loser.append_transcript("s1", "t1", [user_says("lost")])

        with pytest.raises(StoreConflictError):
            await loser.commit()

        session, _, transcript = await snapshot(two)
        assert session is not None
        assert session.mode == "review"
        assert transcript == []


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime
    from aptix_pipeline.adapters.sqlite_store import SQLiteStore
    from aptix_pipeline.contracts import ChatMessage, ChatRole, Session, Turn

    async def main() -> None:
        with SQLiteStore(sys.argv[1]) as store:
            seen = await store.begin("acme", "ana").load_session("from-parent")
            print("parent:", seen.mode if seen else "missing")
            tx = store.begin("acme", "ana")
            await tx.create_session(Session(
                id="from-child", org="acme", user="ana", mode="review",
                created_at=datetime(2026, 1, 1, tzinfo=UTC)))
            await tx.open_turn(Turn(id="t1", session_id="from-child"))
            await tx.append_transcript(
                "from-child", "t1", [ChatMessage(role=ChatRole.USER, content="from the child")])
            await tx.commit()

    asyncio.run(main())
    """
)


async def test_sqlite_two_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with SQLiteStore(path) as store:
        await seed(store, make_session("from-parent", mode="debug"))

        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            str(path),
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(child.communicate(), timeout=60)

        assert child.returncode == 0, err.decode()
        assert out.decode().strip() == "parent: debug"
        tx = store.begin(ORG, USER)
        session = await tx.load_session("from-child")
        assert session is not None
        assert session.mode == "review"
        assert session.created_at == datetime(2026, 1, 1, tzinfo=UTC)
        assert await tx.load_turn("from-child", "t1") == Turn(id="t1", session_id="from-child")
        assert await tx.load_transcript("from-child") == [user_says("from the child")]


async def test_sqlite_concurrent_transactions_creating_their_own_sessions_all_commit(
    tmp_path: Path,
) -> None:
    with SQLiteStore(tmp_path / "aptix.db") as store:

        async def turn(index: int) -> None:
            tx = store.begin(ORG, USER)
            await tx.create_session(make_session(f"s{index}"))
            await tx.open_turn(make_turn("t1", f"s{index}"))
            await asyncio.sleep(0)
            await tx.append_transcript(f"s{index}", "t1", [user_says(f"hello {index}")])
            await tx.commit()

        await asyncio.gather(*(turn(i) for i in range(10)))

        for index in range(10):
            session, (t1, _), transcript = await snapshot(store, f"s{index}")
            assert session is not None
            assert t1 is not None
            assert transcript == [user_says(f"hello {index}")]


async def test_sqlite_commits_do_not_block_the_event_loop(tmp_path: Path) -> None:
    ticks = 0
    running = True

    async def heartbeat() -> None:
        nonlocal ticks
        while running:
            ticks += 1
            await asyncio.sleep(0)

    with SQLiteStore(tmp_path / "aptix.db") as store:
        beating = asyncio.create_task(heartbeat())
        await asyncio.sleep(0)
        ticks_during_commits = 0
        for index in range(50):
            tx = store.begin(ORG, USER)
            await tx.create_session(make_session(f"s{index}"))
            await tx.open_turn(make_turn("t1", f"s{index}"))
            await tx.append_transcript(f"s{index}", "t1", [user_says("x" * 1000)] * 20)
            before = ticks
            await tx.commit()
            ticks_during_commits += ticks - before
        running = False
        await beating

    assert ticks_during_commits > 0
