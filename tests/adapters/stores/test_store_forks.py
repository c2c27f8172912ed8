"""Forks in the SQL stores beyond the contract kit (docs/FORKS.md, D612): a file or a
database written before forks is migrated and its sessions fork; a session with forks
cannot be deleted from under them; a fork's transcript read through the cache grows
with the fork alone.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from store_kit import ORG, USER, postgres_at_version

from aptix_pipeline import PostgresStore, SQLiteStore
from aptix_pipeline.adapters.stores.postgres_migrations import MIGRATIONS
from aptix_pipeline.adapters.stores.sqlite import _MIGRATIONS, SCHEMA_VERSION
from aptix_pipeline.contracts import SessionForks, SessionStore, TurnStatus
from aptix_pipeline.testing.store_contract_cases import (
    assistant_says,
    sample_session,
    sample_turn,
    store_snapshot,
    user_says,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def _two_turns(store: SessionStore) -> None:
    tx = store.begin(ORG, USER)
    await tx.create_session(sample_session())
    await tx.commit()
    for n in (1, 2):
        tx = store.begin(ORG, USER)
        await tx.open_turn(sample_turn(f"t{n}", status=TurnStatus.COMPLETED))
        await tx.append_transcript("s1", f"t{n}", [user_says(f"q{n}"), assistant_says(f"a{n}")])
        await tx.commit()


@pytest.mark.decision("D612")
async def test_a_sqlite_file_of_schema_version_4_is_migrated_and_its_sessions_fork(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v4.db"
    with closing(sqlite3.connect(path)) as raw, raw:
        for step in _MIGRATIONS[:4]:
            for statement in step:
                raw.execute(statement)
        raw.execute("PRAGMA user_version = 4")
        raw.execute(
            "INSERT INTO sessions VALUES ('s1', ?, ?, 'general', NULL, NULL, NULL, ?, 1)",
            (ORG, USER, T0.isoformat()),
        )
        for n in (1, 2):
            turn = sample_turn(f"t{n}", status=TurnStatus.COMPLETED)
            raw.execute(
                "INSERT INTO turns VALUES ('s1', ?, 'completed', ?)",
                (turn.id, turn.model_dump_json()),
            )
            for seq, message in ((2 * n - 1, user_says(f"q{n}")), (2 * n, assistant_says(f"a{n}"))):
                raw.execute(
                    "INSERT INTO transcript VALUES ('s1', ?, ?, ?)",
                    (seq, turn.id, message.model_dump_json()),
                )

    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 6
        fork = await store.fork_session(ORG, USER, "s1", "t1", "f1", T0)
        source, _, source_transcript = await store_snapshot(store, "s1", [])
        _, _, fork_transcript = await store_snapshot(store, "f1", [])

    assert source is not None
    assert source.forked_from is None
    assert fork.forked_from is not None
    assert fork.forked_from.messages == 2
    assert [m.content for m in fork_transcript] == ["q1", "a1"]
    assert [m.content for m in source_transcript] == ["q1", "a1", "q2", "a2"]


@pytest.mark.decision("D612")
async def test_a_postgres_database_at_version_5_is_migrated_and_its_sessions_fork(
    postgres_db_url: str,
) -> None:
    with psycopg.connect(postgres_db_url, autocommit=True) as raw:
        postgres_at_version(raw, 5)

    async with PostgresStore(postgres_db_url) as store:
        await _two_turns(store)  # written by today's code on the migrated schema
        assert await store.schema_version() == MIGRATIONS[-1].version
        fork = await store.fork_session(ORG, USER, "s1", "t2", "f1", T0)
        _, _, fork_transcript = await store_snapshot(store, "f1", [])

    assert fork.forked_from is not None
    assert fork.forked_from.messages == 4
    assert [m.content for m in fork_transcript] == ["q1", "a1", "q2", "a2"]


@pytest.mark.decision("D612")
async def test_a_sqlite_session_with_forks_cannot_be_deleted_from_under_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "aptix.db"
    with SQLiteStore(path) as store:
        await _two_turns(store)
        await store.fork_session(ORG, USER, "s1", "t1", "f1", T0)

    with closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA foreign_keys = ON")
        raw.execute("DELETE FROM transcript WHERE session_id = 's1'")  # a host's own purge
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            raw.execute("DELETE FROM sessions WHERE id = 's1'")


@pytest.mark.decision("D612")
async def test_a_postgres_session_with_forks_cannot_be_deleted_from_under_them(
    postgres_db_url: str,
) -> None:
    async with PostgresStore(postgres_db_url) as store:
        await _two_turns(store)
        await store.fork_session(ORG, USER, "s1", "t1", "f1", T0)

    with psycopg.connect(postgres_db_url, autocommit=True) as raw:
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            raw.execute("DELETE FROM aptix_sessions WHERE id = 's1'")
        (kept,) = raw.execute("SELECT count(*) FROM aptix_transcript").fetchone() or (0,)
    assert kept == 4


@pytest.mark.decision("D612")
async def test_a_forks_cached_transcript_grows_with_its_own_turns_only(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "aptix.db") as store:
        await _two_turns(store)
        forks: SessionForks = store
        await forks.fork_session(ORG, USER, "s1", "t1", "f1", T0)
        first = (await store_snapshot(store, "f1", []))[2]  # decoded and kept
        tx = store.begin(ORG, USER)
        await tx.open_turn(sample_turn("t3", status=TurnStatus.COMPLETED))
        await tx.append_transcript("s1", "t3", [user_says("q3")])  # the source grows
        await tx.commit()
        tx = store.begin(ORG, USER)
        await tx.open_turn(sample_turn("f-t1", "f1", status=TurnStatus.COMPLETED))
        await tx.append_transcript("f1", "f-t1", [user_says("fq1")])
        await tx.commit()
        again = (await store_snapshot(store, "f1", []))[2]

    assert [m.content for m in first] == ["q1", "a1"]
    assert [m.content for m in again] == ["q1", "a1", "fq1"]
