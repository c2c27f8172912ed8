"""PostgreSQL's turn notices (adapters/stores/turn_notices.py): ``NOTIFY aptix_turns`` from
each turn's commit, heard by ``PostgresStore.turn_notices`` on a real server
(tests/kits/pg_server.py), a turn committed by another process included."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cli_kit import aptix_run, stdout_json
from server_thread import WAIT

from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores import (
    MemoryStore,
    PostgresStore,
    SQLiteStore,
    TurnNotice,
    TurnNotifier,
    parse_notice,
)
from aptix_pipeline.adapters.stores.turn_notices import notice_payload
from aptix_pipeline.contracts import Caller
from aptix_pipeline.engine import Telemetry

ANA = Caller(org="acme", user="ana")


@pytest.mark.decision("D691")
async def test_a_turn_committed_by_another_process_is_announced(
    postgres_db_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(postgres_db_url)
    try:
        async with store.turn_notices() as notices:
            run = await asyncio.to_thread(
                aptix_run,
                tmp_path,
                {"Instruction": "Anyone listening?"},
                [{"text": "yes"}],
                "--store",
                postgres_db_url,
                "--org",
                "acme",
                "--user",
                "ana",
            )
            assert run.returncode == 0, run.stderr
            notice = await asyncio.wait_for(anext(notices), WAIT)
    finally:
        await store.aclose()

    result = stdout_json(run)["Result"]
    assert notice == TurnNotice("acme", "ana", result["SessionId"], result["TurnId"], "completed")


@pytest.mark.decision("D691")
async def test_a_turn_that_does_not_commit_announces_nothing(postgres_db_url: str) -> None:
    store = PostgresStore(postgres_db_url)
    pipeline = embedded_pipeline(
        llm=ScriptedLLM([{"text": "kept"}]), store=store, telemetry=Telemetry.off()
    )
    try:
        async with store.turn_notices() as notices:
            refused = await pipeline.execute({"Instruction": "x", "TurnId": "t-1"}, ANA)
            kept = await pipeline.execute({"Instruction": "Store this one"}, ANA)
            notice = await asyncio.wait_for(anext(notices), WAIT)
    finally:
        await store.aclose()

    assert not refused.successful
    assert kept.result is not None
    assert notice.turn_id == kept.result.turn_id  # the first heard is the committed one


@pytest.mark.decision("D691")
def test_only_postgresql_announces_turns_and_a_payload_holds_ids_only(tmp_path: Path) -> None:
    payload = notice_payload("acme", "ana", "s-1", "t-1", "completed")

    assert isinstance(PostgresStore("postgresql://localhost/x"), TurnNotifier)
    assert not isinstance(MemoryStore(), TurnNotifier)
    with SQLiteStore(tmp_path / "a.db") as sqlite:
        assert not isinstance(sqlite, TurnNotifier)
    assert parse_notice(payload) == TurnNotice("acme", "ana", "s-1", "t-1", "completed")
    assert parse_notice("not json") == TurnNotice("", "", "", "", "")
    assert notice_payload("acme", "a" * 9000, "s", "t", "open") == "{}"  # too long to send
