"""The store contract kit on the memory store, a SQLite file and a PostgreSQL database.

``aptix_pipeline.StoreContract`` holds the cases every SessionStore passes
(contracts/ports.py); the three ``Test…Store`` classes run it on ours, each case on
a fresh store (PostgreSQL: a fresh database, skipped like every PostgreSQL test where
the server cannot run). Then what our stores' shared transaction adds beyond the
port (adapters/stores/unit_of_work.py), tests taking the ``store`` fixture, once per store;
and at the end what only a real SQLite file can show: durability, WAL, the schema
version, two processes, and that the store keeps off the event loop.
PostgreSQL-only tests are in tests/adapters/stores/test_postgres_store.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from engine_kit import ALL_STORE_KINDS, open_store_of_kind
from pydantic import ValidationError
from store_kit import ORG, USER

from aptix_pipeline import MemoryStore, PostgresStore, SQLiteStore, StoreContract
from aptix_pipeline.adapters.stores import BufferedTransaction, StoreBackend
from aptix_pipeline.adapters.stores.sqlite import SCHEMA_VERSION
from aptix_pipeline.contracts import (
    ChatMessage,
    Session,
    SessionStore,
    SessionTransaction,
    StoreConflictError,
    ToolCall,
    ToolLedger,
    Turn,
    TurnStatus,
)
from aptix_pipeline.testing.store_contract_cases import (
    assistant_says,
    sample_entry,
    sample_session,
    sample_turn,
    seed_store,
    store_snapshot,
    user_says,
)

OTHER_CALLERS = [("globex", USER), (ORG, "bob")]


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """Each contract test on the memory store, a SQLite file and a PostgreSQL database."""
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        yield opened


# --- builders ------------------------------------------------------------------------


READ_FILE = ToolCall(tool_call_id="call_1", name="read_file", arguments_json='{"path": "a.py"}')


def without_version(session: Session | None) -> dict[str, object]:
    assert session is not None
    return session.model_dump(exclude={"version"})


# --- the kit's cases on our three stores ------------------------------------------------


class OurStoreContract(StoreContract):
    """The kit (aptix_pipeline.StoreContract) with the decisions its cases show here."""

    @pytest.mark.decision("D61", "D67")
    def test_created_session_round_trips_every_field(self) -> None:
        super().test_created_session_round_trips_every_field()

    @pytest.mark.decision("D63")
    def test_uncommitted_writes_are_invisible_to_other_transactions(self) -> None:
        super().test_uncommitted_writes_are_invisible_to_other_transactions()

    @pytest.mark.decision("D186")
    def test_a_committed_outcome_reads_back_equal(self) -> None:
        super().test_a_committed_outcome_reads_back_equal()

    @pytest.mark.decision("D183", "D186")
    def test_an_outcome_that_never_expires_reads_back_without_expiry(self) -> None:
        super().test_an_outcome_that_never_expires_reads_back_without_expiry()

    @pytest.mark.decision("D186")
    def test_the_outcome_of_a_turn_creating_its_session_is_kept(self) -> None:
        super().test_the_outcome_of_a_turn_creating_its_session_is_kept()

    @pytest.mark.decision("D186")
    def test_another_caller_reads_no_outcome_and_may_store_its_own_under_the_key(self) -> None:
        super().test_another_caller_reads_no_outcome_and_may_store_its_own_under_the_key()

    @pytest.mark.decision("D186")
    def test_a_transaction_sees_its_own_outcome_before_commit_and_a_rollback_keeps_none(
        self,
    ) -> None:
        super().test_a_transaction_sees_its_own_outcome_before_commit_and_a_rollback_keeps_none()

    @pytest.mark.decision("D186")
    def test_a_second_outcome_under_a_held_key_makes_the_commit_conflict_and_write_nothing(
        self,
    ) -> None:
        super().test_a_second_outcome_under_a_held_key_makes_the_commit_conflict_and_write_nothing()

    @pytest.mark.decision("D183", "D186")
    def test_an_expired_outcome_is_replaced(self) -> None:
        super().test_an_expired_outcome_is_replaced()

    @pytest.mark.decision("D221")
    def test_every_stored_text_field_round_trips_exactly(self) -> None:
        super().test_every_stored_text_field_round_trips_exactly()

    @pytest.mark.decision("D607")
    def test_a_fork_after_turn_two_holds_the_sources_transcript_mode_and_history_then(
        self,
    ) -> None:
        super().test_a_fork_after_turn_two_holds_the_sources_transcript_mode_and_history_then()

    @pytest.mark.decision("D607")
    def test_a_fork_before_any_mode_change_starts_in_the_sources_first_mode(self) -> None:
        super().test_a_fork_before_any_mode_change_starts_in_the_sources_first_mode()

    @pytest.mark.decision("D607")
    def test_a_fork_and_its_source_go_on_apart_and_never_mix(self) -> None:
        super().test_a_fork_and_its_source_go_on_apart_and_never_mix()

    @pytest.mark.decision("D607")
    def test_a_fork_of_a_fork_reads_every_ancestors_prefix(self) -> None:
        super().test_a_fork_of_a_fork_reads_every_ancestors_prefix()

    @pytest.mark.decision("D607")
    def test_forks_of_lists_a_sessions_forks_for_its_caller_only(self) -> None:
        super().test_forks_of_lists_a_sessions_forks_for_its_caller_only()

    @pytest.mark.decision("D608")
    def test_a_turn_still_pending_is_not_forked(self) -> None:
        super().test_a_turn_still_pending_is_not_forked()

    @pytest.mark.decision("D608")
    def test_another_callers_session_is_not_found_to_fork(self) -> None:
        super().test_another_callers_session_is_not_found_to_fork()

    @pytest.mark.decision("D608")
    def test_an_unknown_session_or_turn_is_not_forked(self) -> None:
        super().test_an_unknown_session_or_turn_is_not_forked()

    @pytest.mark.decision("D608")
    def test_a_fork_into_a_taken_session_id_conflicts_and_changes_nothing(self) -> None:
        super().test_a_fork_into_a_taken_session_id_conflicts_and_changes_nothing()

    @pytest.mark.decision("D609")
    def test_a_fork_from_turn_two_of_four_continues_through_the_engine(self) -> None:
        super().test_a_fork_from_turn_two_of_four_continues_through_the_engine()

    @pytest.mark.decision("D521")
    def test_a_ledger_reservation_is_taken_once_and_reads_back_done_with_its_result(self) -> None:
        super().test_a_ledger_reservation_is_taken_once_and_reads_back_done_with_its_result()

    @pytest.mark.decision("D521")
    def test_a_done_ledger_entry_keeps_its_first_result_and_is_not_released(self) -> None:
        super().test_a_done_ledger_entry_keeps_its_first_result_and_is_not_released()

    @pytest.mark.decision("D521")
    def test_a_released_ledger_reservation_can_be_taken_again(self) -> None:
        super().test_a_released_ledger_reservation_can_be_taken_again()

    @pytest.mark.decision("D521")
    def test_a_ledger_call_done_without_a_reservation_is_recorded_done(self) -> None:
        super().test_a_ledger_call_done_without_a_reservation_is_recorded_done()

    @pytest.mark.decision("D521")
    def test_ledger_entries_belong_to_their_org_and_user(self) -> None:
        super().test_ledger_entries_belong_to_their_org_and_user()

    @pytest.mark.decision("D521")
    def test_ledger_writes_are_committed_at_once_whatever_the_turn_does(self) -> None:
        super().test_ledger_writes_are_committed_at_once_whatever_the_turn_does()

    @pytest.mark.decision("D521")
    def test_of_many_racing_ledger_reservations_of_one_key_exactly_one_wins(self) -> None:
        super().test_of_many_racing_ledger_reservations_of_one_key_exactly_one_wins()

    @pytest.mark.decision("D568")
    def test_purging_the_ledger_deletes_the_entries_reserved_before_the_time(self) -> None:
        super().test_purging_the_ledger_deletes_the_entries_reserved_before_the_time()

    @pytest.mark.decision("D579")
    def test_usage_is_reserved_within_a_limit_and_refused_over_it_unstored(self) -> None:
        super().test_usage_is_reserved_within_a_limit_and_refused_over_it_unstored()

    @pytest.mark.decision("D579")
    def test_usage_limit_met_exactly_holds_and_one_more_is_refused(self) -> None:
        super().test_usage_limit_met_exactly_holds_and_one_more_is_refused()

    @pytest.mark.decision("D579")
    def test_usage_settlements_are_stored_whether_the_next_call_is_reserved_or_not(self) -> None:
        super().test_usage_settlements_are_stored_whether_the_next_call_is_reserved_or_not()

    @pytest.mark.decision("D579")
    def test_settling_usage_replaces_the_reservation_and_stores_an_unreserved_call(self) -> None:
        super().test_settling_usage_replaces_the_reservation_and_stores_an_unreserved_call()

    @pytest.mark.decision("D579")
    def test_a_usage_call_round_trips_its_time_and_offset_and_every_figure(self) -> None:
        super().test_a_usage_call_round_trips_its_time_and_offset_and_every_figure()

    @pytest.mark.decision("D579")
    def test_a_per_turn_usage_check_counts_only_its_turn(self) -> None:
        super().test_a_per_turn_usage_check_counts_only_its_turn()

    @pytest.mark.decision("D579")
    def test_a_usage_window_counts_only_the_calls_made_since_its_start(self) -> None:
        super().test_a_usage_window_counts_only_the_calls_made_since_its_start()

    @pytest.mark.decision("D579")
    def test_usage_checks_narrowed_to_a_user_or_a_mode_count_only_theirs(self) -> None:
        super().test_usage_checks_narrowed_to_a_user_or_a_mode_count_only_theirs()

    @pytest.mark.decision("D579")
    def test_a_cost_usage_check_counts_only_its_currency_in_exact_decimals(self) -> None:
        super().test_a_cost_usage_check_counts_only_its_currency_in_exact_decimals()

    @pytest.mark.decision("D579")
    def test_usage_of_another_org_is_never_counted_nor_read(self) -> None:
        super().test_usage_of_another_org_is_never_counted_nor_read()

    @pytest.mark.decision("D579")
    def test_usage_calls_are_read_narrowed_and_oldest_first(self) -> None:
        super().test_usage_calls_are_read_narrowed_and_oldest_first()

    @pytest.mark.decision("D579")
    def test_usage_reservations_are_committed_at_once_whatever_the_turn_does(self) -> None:
        super().test_usage_reservations_are_committed_at_once_whatever_the_turn_does()

    @pytest.mark.decision("D579")
    def test_of_many_racing_usage_reservations_exactly_those_within_the_limit_win(self) -> None:
        super().test_of_many_racing_usage_reservations_exactly_those_within_the_limit_win()


class TestMemoryStore(OurStoreContract):
    """The kit on the memory store."""

    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestSQLiteStore(OurStoreContract):
    """The kit on a SQLite file, a fresh one for each case."""

    @pytest.fixture(autouse=True)
    def _in_a_folder_of_its_own(self, tmp_path: Path) -> None:
        self.path = tmp_path / "aptix.db"

    def make_store(self) -> SQLiteStore:
        return SQLiteStore(self.path)


class TestPostgresStore(OurStoreContract):
    """The kit on a PostgreSQL database of the test server (tests/kits/pg_server.py), fresh for
    each case; skipped, like every PostgreSQL test, where the server cannot run."""

    @pytest.fixture(autouse=True)
    def _on_a_fresh_database(self, postgres_db_url: str) -> None:
        self.url = postgres_db_url

    def make_store(self) -> PostgresStore:
        return PostgresStore(self.url, max_size=4)


# --- what our stores' shared transaction adds (adapters/stores/unit_of_work.py) ---


async def test_loaded_session_cannot_change_the_transactions_state(store: SessionStore) -> None:
    await seed_store(store)
    tx = store.begin(ORG, USER)

    loaded = await tx.load_session("s1")
    assert loaded is not None
    with pytest.raises(ValidationError):  # a session is a frozen value: shared, never copied
        setattr(loaded, "mode", "tampered")  # noqa: B010
    with pytest.raises(ValidationError):
        setattr(loaded, "mode_history", [sample_entry("x", "y")])  # noqa: B010

    again = await tx.load_session("s1")
    assert again is not None
    assert again.mode == "general"
    assert again.mode_history == []


class _ReadsTold:
    """A store's backend, telling the session ids of the turn and transcript reads made."""

    def __init__(self, backend: StoreBackend) -> None:
        self.backend = backend
        self.reads: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.backend, name)

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        self.reads.append(("read_turn", session_id))
        return await self.backend.read_turn(org, user, session_id, turn_id)

    async def read_transcript(self, org: str, user: str, session_id: str) -> list[ChatMessage]:
        self.reads.append(("read_transcript", session_id))
        return await self.backend.read_transcript(org, user, session_id)


@pytest.mark.decision("D483")
async def test_a_session_the_transaction_creates_has_its_turns_read_from_nowhere(
    store: SessionStore,
) -> None:
    """An Initial turn's store reads: none (each was a round trip to the store's thread)."""
    await seed_store(store, turns=[sample_turn()])
    backend = _ReadsTold(cast(StoreBackend, store))
    tx = BufferedTransaction(cast(StoreBackend, backend), ORG, USER)
    await tx.create_session(sample_session("s2"))
    await tx.open_turn(sample_turn("t1", "s2"))  # t1 is also a turn of s1: another session
    unknown = await tx.load_turn("s2", "t9")
    await tx.append_transcript("s2", "t1", [user_says("hi")])
    transcript = await tx.load_transcript("s2")
    await tx.complete_turn(sample_turn("t1", "s2", status=TurnStatus.COMPLETED))
    await tx.commit()

    assert backend.reads == []
    assert unknown is None
    assert transcript == [user_says("hi")]
    stored = await store.begin(ORG, USER).load_turn("s2", "t1")
    assert stored is not None
    assert stored.status is TurnStatus.COMPLETED


@pytest.mark.decision("D483")
async def test_creating_a_session_whose_id_is_taken_conflicts_at_commit_and_writes_nothing(
    store: SessionStore,
) -> None:
    """Its turns are not read, so a turn id taken too is found by the commit, not before."""
    await seed_store(store, turns=[sample_turn()])
    before = await store_snapshot(store)
    tx = store.begin(ORG, USER)
    await tx.create_session(sample_session("s1"))
    await tx.open_turn(sample_turn("t1"))
    await tx.append_transcript("s1", "t1", [user_says("again")])

    with pytest.raises(StoreConflictError):
        await tx.commit()

    assert await store_snapshot(store) == before


# --- misuse --------------------------------------------------------------------------

Use = Callable[[SessionTransaction], Awaitable[object]]

USES: dict[str, Use] = {
    "load_session": lambda tx: tx.load_session("s1"),
    "create_session": lambda tx: tx.create_session(sample_session("s2")),
    "load_turn": lambda tx: tx.load_turn("s1", "t1"),
    "open_turn": lambda tx: tx.open_turn(sample_turn("t2")),
    "complete_turn": lambda tx: tx.complete_turn(sample_turn()),
    "load_transcript": lambda tx: tx.load_transcript("s1"),
    "append_transcript": lambda tx: tx.append_transcript("s1", "t1", [user_says("late")]),
    "set_session_mode": lambda tx: tx.set_session_mode("s1", sample_entry("general", "review")),
    "commit": lambda tx: tx.commit(),
}


@pytest.mark.parametrize("use", USES.values(), ids=USES.keys())
@pytest.mark.parametrize("close", ["commit", "rollback"])
async def test_a_transaction_used_after_it_ended_raises(
    store: SessionStore, use: Use, close: str
) -> None:
    await seed_store(store, turns=[sample_turn()])
    before = await store_snapshot(store)
    tx = store.begin(ORG, USER)
    await tx.load_session("s1")
    await (tx.commit() if close == "commit" else tx.rollback())

    with pytest.raises(RuntimeError):
        await use(tx)

    assert await store_snapshot(store) == before


@pytest.mark.decision("D568")
async def test_purging_the_ledger_walks_every_batch(store: SessionStore) -> None:
    assert isinstance(store, ToolLedger)
    old, new = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 9, tzinfo=UTC)
    keys = [f"tk1-{n:05d}" for n in range(2_500)]  # past two batches of 1,000
    for n, key in enumerate(keys):
        await store.reserve_tool_call(ORG, USER, key, old if n % 2 else new)

    purged = await store.purge_tool_calls(datetime(2026, 1, 8, tzinfo=UTC))

    assert purged == 1_250
    held = [await store.reserve_tool_call(ORG, USER, key, new) for key in keys[-4:]]
    assert [entry is not None for entry in held] == [True, False, True, False]


async def test_memory_store_finds_a_pending_turn_among_many_other_turns() -> None:
    store = MemoryStore()
    for n in range(200):
        await seed_store(
            store,
            sample_session(f"s{n}"),
            turns=[
                sample_turn(f"t{n}.{k}", f"s{n}", status=TurnStatus.COMPLETED) for k in range(50)
            ],
        )
    await seed_store(
        store,
        sample_session("target"),
        turns=[
            sample_turn("first", "target", status=TurnStatus.AWAITING_CLIENT_TOOLS),
            sample_turn("second", "target", status=TurnStatus.AWAITING_CLIENT_TOOLS),
        ],
    )

    tx = store.begin(ORG, USER)
    found = await tx.find_pending_turn("target")
    others = [await tx.find_pending_turn(f"s{n}") for n in range(200)]

    assert found is not None
    assert found.id == "first"  # several pending turns (set by hand): the first written
    assert others == [None] * 200


# --- SQLite only -----------------------------------------------------------------------


async def test_sqlite_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"
    turn = sample_turn(
        status=TurnStatus.AWAITING_CLIENT_TOOLS, pending=[READ_FILE], expanded=["Math"]
    )
    with SQLiteStore(path) as first:
        await seed_store(first, turns=[turn], messages=[user_says("hi"), assistant_says("hello")])
        tx = first.begin(ORG, USER)
        await tx.set_session_mode("s1", sample_entry("general", "review"))
        await tx.commit()

    with SQLiteStore(path) as reopened:
        session, (t1, _), transcript = await store_snapshot(reopened)

    assert session is not None
    assert without_version(session) == without_version(
        sample_session(mode="review", history=[sample_entry("general", "review")])
    )
    assert t1 == turn
    assert transcript == [user_says("hi"), assistant_says("hello")]


@pytest.mark.decision("D577")
def test_sqlite_file_is_in_wal_mode_at_schema_version_6(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"

    with SQLiteStore(path) as store:
        assert store.schema_version == 6 == SCHEMA_VERSION
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert raw.execute("PRAGMA user_version").fetchone()[0] == 6
            kinds = {row[1]: row[2] for row in raw.execute("PRAGMA table_info(usage_calls)")}
            assert (kinds["cost"], kinds["charge_cost"]) == ("TEXT", "TEXT")  # exact, never REAL


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
    await seed_store(store)
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
        await seed_store(one)
        winner, loser = one.begin(ORG, USER), two.begin(ORG, USER)
        assert await loser.load_session("s1") is not None
        await winner.load_session("s1")
        await winner.set_session_mode("s1", sample_entry("general", "review"))
        await winner.commit()
        await loser.append_transcript("s1", "t1", [user_says("lost")])

        with pytest.raises(StoreConflictError):
            await loser.commit()

        session, _, transcript = await store_snapshot(two)
        assert session is not None
        assert session.mode == "review"
        assert transcript == []


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime
    from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
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
        await seed_store(store, sample_session("from-parent", mode="debug"))

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
            await tx.create_session(sample_session(f"s{index}"))
            await tx.open_turn(sample_turn("t1", f"s{index}"))
            await asyncio.sleep(0)
            await tx.append_transcript(f"s{index}", "t1", [user_says(f"hello {index}")])
            await tx.commit()

        await asyncio.gather(*(turn(i) for i in range(10)))

        for index in range(10):
            session, (t1, _), transcript = await store_snapshot(store, f"s{index}")
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
            await tx.create_session(sample_session(f"s{index}"))
            await tx.open_turn(sample_turn("t1", f"s{index}"))
            await tx.append_transcript(f"s{index}", "t1", [user_says("x" * 1000)] * 20)
            before = ticks
            await tx.commit()
            ticks_during_commits += ticks - before
        running = False
        await beating

    assert ticks_during_commits > 0
