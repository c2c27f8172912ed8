"""Kept turn traces in the SQL stores beyond the engine's tests (D655, D657): a file
or database written before traces is migrated and keeps them; two SQLite stores on
one file (two processes) read each other's traces, newest first; traces kept while the
worker is busy share one transaction, and one that cannot be written loses no other (D646).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from store_kit import ORG, USER, postgres_at_version

from aptix_pipeline import PostgresStore, SQLiteStore
from aptix_pipeline.adapters.stores.postgres_migrations import MIGRATIONS
from aptix_pipeline.adapters.stores.sqlite import _MIGRATIONS, SCHEMA_VERSION
from aptix_pipeline.contracts import KeptTrace

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _trace(name: str, at: datetime = T0, session: str | None = "s1") -> KeptTrace:
    return KeptTrace(
        name,
        ORG,
        USER,
        session,
        None,
        at,
        "faulted",
        '{"format": "aptix.state-trace/1"}',
        "port_failed",
        "the model is gone",
        "llm_client",
        at + timedelta(days=1),
        '[{"step": "request_handler", "to": "validated"}]',
    )


def _statements(store: SQLiteStore, statements: list[str]) -> None:
    store._worker.call_sync(lambda: store._db().set_trace_callback(statements.append))


def _hold(store: SQLiteStore, gate: threading.Event) -> None:
    """Keep ``store``'s worker busy until ``gate`` is set (a turn's commit, say)."""

    def wait() -> None:
        gate.wait(10)

    store._worker.submit(wait)


@pytest.mark.decision("D657")
async def test_a_sqlite_file_of_schema_version_5_is_migrated_and_keeps_traces(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v5.db"
    with closing(sqlite3.connect(path)) as raw, raw:
        for step in _MIGRATIONS[:5]:
            for statement in step:
                raw.execute(statement)
        raw.execute("PRAGMA user_version = 5")

    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 6
        await store.keep_trace(_trace("k1"))
        assert await store.read_trace(ORG, USER, "k1") == _trace("k1")
        assert await store.read_trace(ORG, "someone else", "k1") is None


@pytest.mark.decision("D657")
async def test_a_postgres_database_at_version_6_is_migrated_and_keeps_traces(
    postgres_db_url: str,
) -> None:
    with psycopg.connect(postgres_db_url, autocommit=True) as raw:
        postgres_at_version(raw, 6)

    async with PostgresStore(postgres_db_url) as store:
        assert await store.schema_version() == MIGRATIONS[-1].version
        await store.keep_trace(_trace("k1"))
        await store.keep_trace(_trace("k2", T0 + timedelta(seconds=1), session=None))
        assert await store.read_trace(ORG, USER, "k1") == _trace("k1")
        listed = await store.list_traces(ORG, USER)
        of_session = await store.list_traces(ORG, USER, "s1")

    assert [t.id for t in listed] == ["k2", "k1"]
    assert [t.id for t in of_session] == ["k1"]


@pytest.mark.decision("D655")
async def test_two_sqlite_stores_on_one_file_read_each_others_traces(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as other:
        await one.keep_trace(_trace("from-one"))
        await one.list_traces(ORG, USER)  # landed before the other's is queued
        await other.keep_trace(_trace("from-other", T0 + timedelta(seconds=1)))
        await other.list_traces(ORG, USER)  # the queued write has landed
        seen_by_one = await one.list_traces(ORG, USER)
        seen_by_other = await other.list_traces(ORG, USER)

    assert [t.id for t in seen_by_one] == ["from-other", "from-one"]
    assert seen_by_other == seen_by_one


@pytest.mark.decision("D647")
async def test_sqlite_sweeps_expired_traces_only_once_one_may_have_expired(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "sweep.db")
    statements: list[str] = []
    try:
        await store.keep_trace(_trace("first"))  # the first sweeps: it knows of no end yet
        _statements(store, statements)
        for n in range(3):  # each ends a day after it is kept: none has ended
            await store.keep_trace(_trace(f"early-{n}", T0 + timedelta(hours=n)))
        await store.list_traces(ORG, USER)  # after the queued writes
        swept_early = [s for s in statements if s.startswith("DELETE FROM turn_traces")]
        await store.keep_trace(_trace("late", T0 + timedelta(days=1, hours=1)))
        kept = [t.id for t in await store.list_traces(ORG, USER)]
        swept_late = [s for s in statements if s.startswith("DELETE FROM turn_traces")]
        store._worker.call_sync(lambda: store._db().set_trace_callback(None))
    finally:
        await store.aclose()

    assert swept_early == []
    assert len(swept_late) == 1
    assert kept == ["late", "early-2"]  # the others had ended by the late one's time


@pytest.mark.decision("D646")
async def test_sqlite_writes_the_traces_kept_while_its_worker_is_busy_in_one_transaction(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "batch.db")
    statements: list[str] = []
    gate = threading.Event()
    try:
        _statements(store, statements)
        _hold(store, gate)
        for n in range(5):
            await store.keep_trace(_trace(f"busy-{n}", T0 + timedelta(seconds=n)))
        gate.set()
        busy = await store.list_traces(ORG, USER)
        begun_busy = statements.count("BEGIN IMMEDIATE")
        for n in range(3):  # an idle worker writes each as it comes
            await store.keep_trace(_trace(f"idle-{n}", T0 + timedelta(minutes=1, seconds=n)))
            await store.list_traces(ORG, USER)
        begun_idle = statements.count("BEGIN IMMEDIATE") - begun_busy
    finally:
        gate.set()
        await store.aclose()

    assert [t.id for t in busy] == [f"busy-{n}" for n in reversed(range(5))]
    assert begun_busy == 1
    assert begun_idle == 3


@pytest.mark.decision("D646")
async def test_one_trace_sqlite_cannot_write_loses_no_other_of_its_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "bad.db")
    gate = threading.Event()
    try:
        await store.keep_trace(_trace("taken"))
        await store.list_traces(ORG, USER)
        _hold(store, gate)
        await store.keep_trace(_trace("before", T0 + timedelta(seconds=1)))
        await store.keep_trace(_trace("taken", T0 + timedelta(seconds=2)))  # its id is kept
        await store.keep_trace(_trace("after", T0 + timedelta(seconds=3)))
        gate.set()
        kept = await store.list_traces(ORG, USER)
    finally:
        gate.set()
        await store.aclose()

    assert [(t.id, t.at) for t in kept] == [
        ("after", T0 + timedelta(seconds=3)),
        ("before", T0 + timedelta(seconds=1)),
        ("taken", T0),
    ]
    failures = [r.getMessage() for r in caplog.records if "trace log" in r.getMessage()]
    assert len(failures) == 1
    assert "IntegrityError" in failures[0]
