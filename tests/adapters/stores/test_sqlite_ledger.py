"""The SQLite store's tool ledger as only a real file shows it: recording a call done is
queued on the store's worker and not awaited, yet lands before the turn's commit, and a
queued write that fails is logged (docs/TOOLS.md "The ledger", docs/PERFORMANCE.md)."""

from __future__ import annotations

import json
import logging
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engine_kit import CALLER, call, calls, make_pipeline, ok, text
from ledger_kit import LEDGER_CATALOG, CountingTool, ledger_tools

from aptix_pipeline import SQLiteStore

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.decision("D566")
async def test_a_turn_s_done_write_lands_before_its_commit(tmp_path: Path) -> None:
    path, tool = tmp_path / "aptix.db", CountingTool()
    store = SQLiteStore(path)
    try:
        pipeline, _ = make_pipeline(
            store,
            [calls(call("s1", "send_mail", {"to": "bo@example.com"})), text("Sent.")],
            config=LEDGER_CATALOG,
            tools=ledger_tools("send_mail", tool),
        )
        response = ok(await pipeline.execute({"Instruction": "mail bo"}, CALLER))

        # At once after the commit, through a connection of its own (another process).
        with closing(sqlite3.connect(path)) as raw:
            statuses = raw.execute("SELECT status FROM turns WHERE id = ?", (response.turn_id,))
            committed = statuses.fetchall()
            entries = raw.execute(
                "SELECT org, user, key, result, done_at FROM tool_ledger"
            ).fetchall()
    finally:
        await store.aclose()

    assert tool.runs == 1
    assert committed == [("completed",)]
    [(org, user, key, result, done_at)] = entries
    assert (org, user, key) == ("acme", "ana", tool.invocations[0].idempotency_key)
    assert json.loads(result) == {
        "text": json.dumps({"sent": True, "to": "bo@example.com", "run": 1})
    }
    assert done_at is not None


@pytest.mark.decision("D566")
async def test_a_queued_done_write_is_read_back_by_the_next_call(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "aptix.db")
    try:
        await store.reserve_tool_call("acme", "ana", "tk1-a", T0)

        await store.complete_tool_call("acme", "ana", "tk1-a", '{"text": "x"}', T0)
        entry = await store.reserve_tool_call("acme", "ana", "tk1-a", T0)
    finally:
        await store.aclose()

    assert entry is not None
    assert entry.result == '{"text": "x"}'


@pytest.mark.decision("D566")
async def test_a_queued_done_write_that_fails_is_logged_and_the_call_stays_reserved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "aptix.db"
    store = SQLiteStore(path, busy_timeout_ms=20)
    try:
        await store.reserve_tool_call("acme", "ana", "tk1-a", T0)
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            with caplog.at_level(logging.WARNING):
                await store.complete_tool_call("acme", "ana", "tk1-a", '{"text": "x"}', T0)
                await store.read_outcome("acme", "ana", "any")  # after the queued write
            other.execute("ROLLBACK")
        entry = await store.reserve_tool_call("acme", "ana", "tk1-a", T0)
    finally:
        await store.aclose()

    assert "tool ledger: recording call tk1-a as done failed (OperationalError" in caplog.text
    assert entry is not None
    assert not entry.done


@pytest.mark.decision("D566")
async def test_a_done_write_queued_before_close_lands(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"
    store = SQLiteStore(path)
    await store.reserve_tool_call("acme", "ana", "tk1-a", T0)

    await store.complete_tool_call("acme", "ana", "tk1-a", '{"text": "x"}', T0)
    await store.aclose()

    with closing(sqlite3.connect(path)) as raw:
        rows = raw.execute("SELECT key, result FROM tool_ledger").fetchall()
    assert rows == [("tk1-a", '{"text": "x"}')]
