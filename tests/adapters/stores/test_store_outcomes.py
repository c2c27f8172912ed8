"""Stored outcomes (``StoredOutcome``, docs/CONFORMANCE.md D181) beyond the store contract.

The contract kit (tests/adapters/stores/test_stores.py) holds every store to what the port promises
of outcomes: they read back equal and only for their own org and user, a rollback
keeps none, a key holding an unexpired outcome makes the whole commit a conflict
that writes nothing, an expired one is replaced. Here, on the memory store, a
SQLite file and a PostgreSQL database alike: ``purge_outcomes`` forgets exactly the
expired ones, and a continuation answered once is answered again from the store.
Then what only the SQL stores show: the bounded sweep of expired outcomes at
commit, the SQLite file migrated from schema version 1, the PostgreSQL database
from version 2, and two PostgreSQL transactions storing one key at once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from engine_kit import (
    ALL_STORE_KINDS,
    CALLER,
    call,
    calls,
    continuation,
    make_pipeline,
    ok,
    open_store_of_kind,
    text,
)
from store_kit import ORG, T0, USER, postgres_at_version

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.postgres import OUTCOME_SWEEP as PG_SWEEP
from aptix_pipeline.adapters.stores.postgres import PostgresStore
from aptix_pipeline.adapters.stores.sqlite import OUTCOME_SWEEP, SQLiteStore
from aptix_pipeline.contracts import StoreConflictError
from aptix_pipeline.testing.store_contract_cases import (
    read_outcome,
    sample_outcome,
    sample_session,
    sample_turn,
    save_outcomes,
    seed_store,
    store_snapshot,
    user_says,
)

pytestmark = pytest.mark.decision("D186")

AnyStore = MemoryStore | SQLiteStore | PostgresStore
PLUS_TWO = timezone(timedelta(hours=2))
RESULT = '{"Successful": true, "Result": {"PrimaryOutputText": "done"}}'


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyStore]:
    """Each test on the memory store, a SQLite file and a PostgreSQL database."""
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        yield opened


async def purge(store: AnyStore, now: datetime) -> int:
    """``purge_outcomes``, a coroutine on every store."""
    return await store.purge_outcomes(now)


# --- every store ----------------------------------------------------------------------


@pytest.mark.decision("D183")
async def test_purge_forgets_only_the_outcomes_expired_by_then(store: AnyStore) -> None:
    await seed_store(store)
    short = sample_outcome("key:short", ttl=timedelta(minutes=1))
    due = sample_outcome("key:due", ttl=timedelta(minutes=10))
    long = sample_outcome("key:long", ttl=timedelta(days=1))
    never = sample_outcome("key:never", ttl=None)
    await save_outcomes(store, short, due, long, never)

    assert await purge(store, T0 + timedelta(minutes=10)) == 2

    assert await read_outcome(store, "key:short") is None
    assert await read_outcome(store, "key:due") is None
    assert await read_outcome(store, "key:long") == long
    assert await read_outcome(store, "key:never") == never
    assert await purge(store, T0 + timedelta(minutes=10)) == 0


async def test_a_continuation_answered_once_is_answered_again_from_the_store(
    store: AnyStore,
) -> None:
    pipeline, llm = make_pipeline(
        store, [calls(call("c1", "read_file", {"path": "a.py"})), text("done")]
    )
    pending = ok(await pipeline.execute({"Instruction": "Explain a.py."}, CALLER))
    first = await pipeline.execute(continuation(pending), CALLER)
    again = await pipeline.execute(continuation(pending), CALLER)

    assert ok(first).primary_output_text == "done"
    assert again.to_json() == first.to_json()
    assert llm is not None
    assert len(llm.requests) == 2  # the retry ran no model round


# --- the SQL stores ------------------------------------------------------------------------


@pytest.mark.decision("D183")
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_commit_storing_an_outcome_sweeps_a_bounded_number_of_expired_ones(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    assert OUTCOME_SWEEP == PG_SWEEP
    async with open_store_of_kind(kind, request, tmp_path) as sql:
        await seed_store(sql)
        old = [sample_outcome(f"key:old-{n:03}", ttl=timedelta(minutes=1)) for n in range(150)]
        await save_outcomes(sql, *old, sample_outcome("key:kept", ttl=None))

        await save_outcomes(sql, sample_outcome("key:new", created_at=T0 + timedelta(hours=1)))

        left = [each for each in old if await read_outcome(sql, each.key) is not None]
        assert len(left) == 150 - OUTCOME_SWEEP
        assert await read_outcome(sql, "key:kept") is not None
        assert await read_outcome(sql, "key:new") is not None


V1_SCHEMA = (
    # The schema SQLiteStore wrote at version 1, verbatim: a file from before outcomes.
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY, org TEXT NOT NULL, user TEXT NOT NULL, mode TEXT,
        agent_context_id TEXT, conversation_context_id TEXT, solution_context_text TEXT,
        created_at TEXT, version INTEGER NOT NULL)""",
    "CREATE INDEX sessions_owner ON sessions (org, user)",
    """CREATE TABLE mode_history (
        session_id TEXT NOT NULL REFERENCES sessions (id), seq INTEGER NOT NULL,
        entry TEXT NOT NULL, PRIMARY KEY (session_id, seq))""",
    """CREATE TABLE turns (
        session_id TEXT NOT NULL REFERENCES sessions (id), id TEXT NOT NULL,
        status TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (session_id, id))""",
    "CREATE INDEX turns_status ON turns (session_id, status)",
    """CREATE TABLE transcript (
        session_id TEXT NOT NULL REFERENCES sessions (id), seq INTEGER NOT NULL,
        turn_id TEXT NOT NULL, message TEXT NOT NULL, PRIMARY KEY (session_id, seq))""",
)


async def test_a_sqlite_file_at_schema_version_1_is_migrated_to_the_current_one_keeping_its_data(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v1.db"
    session, turn, message = sample_session(), sample_turn(), user_says("hi")
    with closing(sqlite3.connect(path)) as raw, raw:
        for statement in V1_SCHEMA:
            raw.execute(statement)
        raw.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
            (
                session.id,
                ORG,
                USER,
                session.mode,
                session.agent_context_id,
                session.conversation_context_id,
                session.solution_context_text,
                T0.isoformat(),
            ),
        )
        raw.execute(
            "INSERT INTO turns VALUES (?, ?, ?, ?)",
            (turn.session_id, turn.id, turn.status.value, turn.model_dump_json()),
        )
        raw.execute(
            "INSERT INTO transcript VALUES ('s1', 1, 't1', ?)", (message.model_dump_json(),)
        )
        raw.execute("PRAGMA user_version = 1")

    with SQLiteStore(path) as store:
        assert (
            store.schema_version == 6
        )  # 2: outcomes; 3: tool ledger; 4: usage; 5: forks; 6: traces
        loaded, (loaded_turn, _), transcript = await store_snapshot(store)
        await save_outcomes(store, sample_outcome())
        assert await read_outcome(store, "key:k1") == sample_outcome()

    assert loaded is not None
    assert loaded.model_dump(exclude={"version"}) == session.model_dump(exclude={"version"})
    assert loaded_turn == turn
    assert transcript == [message]
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 6
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        indexes = {name for (name,) in raw.execute("SELECT name FROM sqlite_master")}
        assert {"outcomes", "outcomes_expiry", "tool_ledger", "usage_calls"} <= indexes
        assert {"usage_calls_time", "usage_calls_turn"} <= indexes


async def test_a_sqlite_outcome_keeps_its_times_offset_exactly(tmp_path: Path) -> None:
    kept = sample_outcome(created_at=datetime(2026, 3, 4, 5, 6, 7, 891_234, tzinfo=PLUS_TWO))
    with SQLiteStore(tmp_path / "aptix.db") as store:
        await seed_store(store)
        await save_outcomes(store, kept)
    with SQLiteStore(tmp_path / "aptix.db") as reopened:
        loaded = await read_outcome(reopened, kept.key)

    assert loaded == kept
    assert loaded is not None
    assert loaded.created_at.utcoffset() == timedelta(hours=2)
    assert loaded.expires_at is not None
    assert loaded.expires_at.utcoffset() == timedelta(hours=2)


async def test_a_postgres_database_at_version_2_is_migrated_to_the_current_one_keeping_its_data(
    postgres_db_url: str,
) -> None:
    with psycopg.connect(postgres_db_url, autocommit=True) as raw:
        postgres_at_version(raw, 2)
        raw.execute(
            "INSERT INTO aptix_sessions (id, org, user_name, mode, created_at, version) "
            "VALUES ('s1', %s, %s, 'general', %s, 1)",
            (ORG, USER, T0),
        )

    async with PostgresStore(postgres_db_url) as store:
        assert (
            await store.schema_version() == 8
        )  # 3: outcomes; 4: ledger; 5: usage; 6: forks; 7: traces; 8: turn columns
        tx = store.begin(ORG, USER)
        loaded = await tx.load_session("s1")
        await tx.rollback()
        await save_outcomes(store, sample_outcome())
        assert await read_outcome(store, "key:k1") == sample_outcome()

    assert loaded is not None
    assert loaded.mode == "general"
    assert loaded.created_at == T0


async def _commit_initial_turn(store: PostgresStore, session_id: str, key: str) -> str:
    """An Initial turn storing its answer under ``key``; ``"won"`` or ``"conflict"``."""
    tx = store.begin(ORG, USER)
    await tx.create_session(sample_session(session_id))
    await tx.open_turn(sample_turn("t1", session_id))
    await tx.save_outcome(sample_outcome(key, session_id=session_id, digest=session_id))
    try:
        await tx.commit()
    except StoreConflictError:
        return "conflict"
    return "won"


async def test_postgres_of_many_transactions_storing_one_key_at_once_exactly_one_commits(
    postgres_db_url: str,
) -> None:
    async with PostgresStore(postgres_db_url, max_size=8) as store:
        ids = [f"s{n}" for n in range(8)]
        ends = await asyncio.gather(*(_commit_initial_turn(store, s, "key:race") for s in ids))

        assert sorted(ends) == ["conflict"] * 7 + ["won"]
        winner = ids[ends.index("won")]
        stored = await read_outcome(store, "key:race")
        assert stored is not None
        assert stored.session_id == winner
        tx = store.begin(ORG, USER)
        sessions = [await tx.load_session(s) for s in ids]
        await tx.rollback()
        assert [s.id for s in sessions if s is not None] == [winner]  # losers wrote nothing


@pytest.mark.parametrize("other_ends", ["commit", "rollback"])
async def test_postgres_a_commit_waiting_on_an_uncommitted_insert_of_its_key(
    postgres_db_url: str, other_ends: str
) -> None:
    """Behind another worker's uncommitted answer for its key, a commit waits: it conflicts
    when that answer commits, and stores its own when it is rolled back."""
    async with PostgresStore(postgres_db_url, max_size=2) as store:
        await seed_store(store, sample_session("s0"))
        async with await psycopg.AsyncConnection.connect(postgres_db_url) as other:
            await other.execute(
                "INSERT INTO aptix_outcomes (org, user_name, key, request_digest, session_id, "
                "turn_id, result_json, created_at, expires_at) "
                "VALUES (%s, %s, 'key:race', 'd0', 's0', 't0', '{}', %s, NULL)",
                (ORG, USER, T0),
            )
            commit = asyncio.ensure_future(_commit_initial_turn(store, "s1", "key:race"))
            await asyncio.sleep(0.3)
            assert not commit.done()  # it waits for the other transaction
            if other_ends == "commit":
                await other.commit()
                assert await commit == "conflict"
            else:
                await other.rollback()
                assert await commit == "won"

        stored = await read_outcome(store, "key:race")
        assert stored is not None
        assert stored.session_id == ("s0" if other_ends == "commit" else "s1")
        tx = store.begin(ORG, USER)
        session = await tx.load_session("s1")
        await tx.rollback()
        assert (session is None) == (other_ends == "commit")
