"""The PostgreSQL store against a real server (tests/kits/pg_server.py), beyond the store contract.

The contract every store keeps runs on PostgreSQL in tests/adapters/stores/test_stores.py. Here:
the versioned migrations, the pool's lifecycle, redaction of the password, whole
turns through the Pipeline (the three paths, a failed turn, conflicts between
workers), and several worker processes sharing one database.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import textwrap
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from engine_kit import (
    CALLER,
    NOTHING_STORED,
    calls,
    change_mode,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    stored,
    text,
)

from aptix_pipeline.adapters.embedded import embedded_pipeline, open_store
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.postgres import PostgresStore, PostgresStoreError, redact_url
from aptix_pipeline.adapters.stores.postgres_migrations import (
    MIGRATIONS,
    SCHEMA_VERSION,
    VERSION_TABLE,
    SchemaVersionError,
    migrate,
)
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.contracts import (
    LLM,
    ChatMessage,
    ChatRole,
    ErrorCode,
    LLMReply,
    LLMRequest,
    Session,
    StoreConflictError,
    Turn,
    TurnStatus,
)
from aptix_pipeline.engine import Pipeline

APTIX_TABLES = {
    "aptix_sessions",
    "aptix_mode_history",
    "aptix_turns",
    "aptix_transcript",
    "aptix_outcomes",
    "aptix_tool_ledger",
    "aptix_usage_calls",
    "aptix_turn_traces",
}


@pytest.fixture
async def pg(postgres_db_url: str) -> AsyncIterator[PostgresStore]:
    """A PostgresStore on a fresh database, closed afterwards."""
    async with PostgresStore(postgres_db_url) as store:
        yield store


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {name for (name,) in rows}


def password_of(url: str) -> str:
    password = urlsplit(url).password
    assert password
    return password


# --- migrations ------------------------------------------------------------------------


@pytest.mark.decision("D60")
def test_migrations_are_numbered_one_by_one_from_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert MIGRATIONS[-1].version == SCHEMA_VERSION


@pytest.mark.decision("D60", "D66")
async def test_a_fresh_database_gets_the_schema_on_first_use(postgres_db_url: str) -> None:
    assert tables(postgres_db_url) == set()

    async with PostgresStore(postgres_db_url) as store:
        assert await store.schema_version() == SCHEMA_VERSION

    assert tables(postgres_db_url) == {*APTIX_TABLES, VERSION_TABLE}
    with psycopg.connect(postgres_db_url) as connection:
        versions = connection.execute(f"SELECT version, name FROM {VERSION_TABLE}").fetchall()
    assert versions == [(m.version, m.name) for m in MIGRATIONS]


@pytest.mark.decision("D60")
async def test_opening_a_current_database_applies_nothing(postgres_db_url: str) -> None:
    async with PostgresStore(postgres_db_url):
        pass
    async with await psycopg.AsyncConnection.connect(postgres_db_url, autocommit=True) as conn:
        assert await migrate(conn) == []


@pytest.mark.decision("D60")
async def test_a_database_from_a_newer_schema_is_refused_untouched(postgres_db_url: str) -> None:
    with psycopg.connect(postgres_db_url) as connection:
        connection.execute(f"CREATE TABLE {VERSION_TABLE} (version integer, name text)")
        connection.execute(f"INSERT INTO {VERSION_TABLE} VALUES ({SCHEMA_VERSION + 1}, 'future')")

    store = PostgresStore(postgres_db_url)
    with pytest.raises(
        SchemaVersionError, match=rf"schema version {SCHEMA_VERSION + 1}.*knows up to"
    ):
        await store.read_session("acme", "ana", "s1")
    await store.aclose()

    assert tables(postgres_db_url) == {VERSION_TABLE}


@pytest.mark.decision("D60")
async def test_without_migrating_an_unmigrated_database_is_refused(postgres_db_url: str) -> None:
    store = PostgresStore(postgres_db_url, migrate=False)
    with pytest.raises(SchemaVersionError, match="told not to migrate"):
        await store.open()
    await store.aclose()

    assert tables(postgres_db_url) == set()


@pytest.mark.decision("D60")
async def test_many_workers_starting_at_once_migrate_exactly_once(postgres_db_url: str) -> None:
    connections = [
        await psycopg.AsyncConnection.connect(postgres_db_url, autocommit=True) for _ in range(8)
    ]
    try:
        applied = await asyncio.gather(*(migrate(connection) for connection in connections))
    finally:
        for connection in connections:
            await connection.close()

    assert sorted(applied) == [[]] * 7 + [[m.version for m in MIGRATIONS]]
    with psycopg.connect(postgres_db_url) as raw:
        (count,) = raw.execute(f"SELECT count(*) FROM {VERSION_TABLE}").fetchone() or (0,)
    assert count == len(MIGRATIONS)


@pytest.mark.decision("D60")
async def test_stores_opened_concurrently_on_a_fresh_database_all_work(
    postgres_db_url: str,
) -> None:
    stores = [PostgresStore(postgres_db_url, max_size=2) for _ in range(6)]
    try:
        found = await asyncio.gather(*(s.read_session("acme", "ana", "s1") for s in stores))
    finally:
        for store in stores:
            await store.aclose()

    assert found == [None] * 6


# --- construction, lifecycle, redaction -----------------------------------------------------


@pytest.mark.decision("D64")
def test_the_store_is_built_without_an_event_loop(postgres_db_url: str) -> None:
    store = PostgresStore(postgres_db_url)

    assert store.url == redact_url(postgres_db_url)
    store.close()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_open_store_gives_a_postgres_store_for_both_schemes(
    postgres_db_url: str, scheme: str
) -> None:
    url = postgres_db_url.replace("postgresql://", f"{scheme}://", 1)

    store = open_store(url)

    assert isinstance(store, PostgresStore)
    store.close()


@pytest.mark.decision("D65")
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://ana:s3cr%40t@db:5432/aptix", "postgresql://ana:***@db:5432/aptix"),
        ("postgres://ana@db/aptix", "postgres://ana@db/aptix"),
        (
            "host=db user=ana password=s3cr@t dbname=aptix",
            "host=db user=ana password=*** dbname=aptix",
        ),
        ("host=db password = 'a b\\' c' dbname=x", "host=db password = *** dbname=x"),
    ],
)
def test_redact_url_masks_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.decision("D65")
def test_a_malformed_url_is_refused_without_echoing_the_password() -> None:
    with pytest.raises(ValueError, match="not a valid PostgreSQL URL") as caught:
        PostgresStore("postgresql://ana:hunter2@db/aptix?nonsense_option=1")

    assert "hunter2" not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.decision("D65")
def test_an_unknown_store_url_is_refused_without_echoing_credentials() -> None:
    with pytest.raises(ValueError, match=r"unknown store scheme 'mysql:'") as caught:
        open_store("mysql://ana:hunter2@db/aptix")

    assert "hunter2" not in str(caught.value)


@pytest.mark.decision("D64")
@pytest.mark.parametrize(
    ("options", "field"),
    [({"min_size": -1}, "min_size"), ({"max_size": 0}, "max_size"), ({"timeout": 0}, "timeout")],
)
def test_bad_pool_settings_are_refused_naming_the_setting(
    options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        PostgresStore("postgresql://ana@127.0.0.1/aptix", **options)


@pytest.mark.decision("D64")
async def test_a_wrong_password_is_a_clear_error_without_the_password(
    postgres_db_url: str,
) -> None:
    wrong = postgres_db_url.replace(password_of(postgres_db_url), "not-the-password-42")
    store = PostgresStore(wrong, timeout=5)

    with pytest.raises(PostgresStoreError, match="cannot connect") as caught:
        await store.open()

    assert "password authentication failed" in str(caught.value)
    assert "not-the-password-42" not in str(caught.value)
    assert "not-the-password-42" not in repr(store)
    assert "***" in repr(store)
    await store.aclose()


@pytest.mark.decision("D65")
async def test_a_turn_on_an_unreachable_store_fails_cleanly_without_the_password(
    postgres_db_url: str,
) -> None:
    wrong = postgres_db_url.replace(password_of(postgres_db_url), "not-the-password-42")
    store = PostgresStore(wrong, timeout=5)
    pipeline, _ = make_pipeline(store, [text("never asked")])

    result = await pipeline.execute({"Instruction": "hi"}, CALLER)

    assert not result.successful
    assert [error.code for error in result.errors] == [ErrorCode.PORT_FAILED]
    assert "not-the-password-42" not in result.to_json()
    await store.aclose()


@pytest.mark.decision("D64")
async def test_a_closed_store_refuses_further_use(postgres_db_url: str) -> None:
    store = PostgresStore(postgres_db_url)
    await store.open()
    tx = store.begin("acme", "ana")
    await tx.create_session(Session(id="s1", org="acme", user="ana", mode="general"))
    await store.aclose()

    with pytest.raises(PostgresStoreError, match="closed"):
        await store.read_session("acme", "ana", "s1")
    with pytest.raises(PostgresStoreError, match="closed"):
        await tx.commit()


@pytest.mark.decision("D61")
async def test_data_survives_closing_and_reopening(postgres_db_url: str) -> None:
    async with PostgresStore(postgres_db_url) as first:
        pipeline, _ = make_pipeline(first, [calls(change_mode("c1", "review")), text("done")])
        ok(await pipeline.execute({"Instruction": "review please"}, CALLER))
        before = await stored(first)

    async with PostgresStore(postgres_db_url) as again:
        assert await stored(again) == before
    assert before[0] is not None
    assert before[0].mode == "review"


@pytest.mark.decision("D64")
def test_execute_sync_works_turn_after_turn_each_in_its_own_loop(postgres_db_url: str) -> None:
    store = PostgresStore(postgres_db_url)
    llm = ScriptedLLM([text("first"), text("second")])
    pipeline = embedded_pipeline(llm=llm, store=store)

    first = ok(pipeline.execute_sync({"Instruction": "one"}, CALLER))  # loop 1, then closed
    second = ok(pipeline.execute_sync(follow_on(first), CALLER))  # loop 2 reopens the pool
    store.close()

    assert second.session_id == first.session_id
    assert second.primary_output_text == "second"


# --- whole turns through the Pipeline -------------------------------------------------------


@pytest.mark.decision("D67")
async def test_initial_continuation_and_follow_on_with_a_mode_change(pg: PostgresStore) -> None:
    pipeline, _ = make_pipeline(
        pg,
        [
            calls(change_mode("m1", "review"), text="switching"),
            calls({"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}),
            text("a.py looks fine"),
            calls(change_mode("m2", "general")),
            text("back to general"),
        ],
    )

    first = ok(await pipeline.execute({"Instruction": "review a.py"}, CALLER))
    session, turns, _ = await stored(pg)
    assert first.tool_calls is not None
    assert [call.name for call in first.tool_calls] == ["read_file"]
    assert session is not None
    assert session.mode == "review"
    assert turns[0] is not None
    assert turns[0].status is TurnStatus.AWAITING_CLIENT_TOOLS

    second = ok(await pipeline.execute(continuation(first), CALLER))
    assert second.primary_output_text == "a.py looks fine"

    third = ok(await pipeline.execute(follow_on(second, "thanks"), CALLER))
    session, turns, transcript = await stored(pg)

    assert third.primary_output_text == "back to general"
    assert third.turn_id != first.turn_id
    assert session is not None
    assert session.mode == "general"
    assert [(e.previous_mode, e.new_mode, e.turn_id) for e in session.mode_history] == [
        ("general", "review", first.turn_id),
        ("review", "general", third.turn_id),
    ]
    assert [turn.status for turn in turns if turn] == [TurnStatus.COMPLETED] * 2
    assert [m.content for m in transcript if m.role is ChatRole.USER] == ["review a.py", "thanks"]


@pytest.mark.decision("D26", "D67", "D601")
async def test_a_failed_turn_stores_nothing_not_even_its_mode_change(
    pg: PostgresStore, postgres_db_url: str
) -> None:
    pipeline, _ = make_pipeline(pg, [calls(change_mode("m1", "review"))])  # then no reply

    result = await pipeline.execute({"Instruction": "review"}, CALLER)

    assert not result.successful
    assert await stored(pg) == NOTHING_STORED
    with psycopg.connect(postgres_db_url) as connection:
        for table in sorted(APTIX_TABLES - {"aptix_usage_calls", "aptix_turn_traces"}):
            assert connection.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
        # the failed turn's trace is kept, on its own, after the rollback (D655)
        kept = connection.execute("SELECT outcome FROM aptix_turn_traces").fetchall()
        assert kept == [("faulted",)]
        # the model calls it made are kept: the first was spent, the second failed
        usage = connection.execute(
            "SELECT settled, failed, charge_model_calls FROM aptix_usage_calls ORDER BY seq"
        ).fetchall()
    assert usage == [(True, False, 1), (True, True, 0)]


class Rendezvous:
    """Lets ``parties`` turns through only once all of them have arrived (bounded wait)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self._all_here = asyncio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.parties:
            self._all_here.set()
        await asyncio.wait_for(self._all_here.wait(), timeout=10)


class GatedLLM:
    """A scripted model whose first answer waits at a rendezvous: by then every racing
    turn has read the session, so their commits really race."""

    def __init__(self, replies: list[dict[str, Any]], rendezvous: Rendezvous) -> None:
        self._script = ScriptedLLM(replies)
        self._rendezvous: Rendezvous | None = rendezvous

    async def complete(self, request: LLMRequest) -> LLMReply:
        if self._rendezvous is not None:
            rendezvous, self._rendezvous = self._rendezvous, None
            await rendezvous.arrive()
        return await self._script.complete(request)


def worker(store: PostgresStore, prefix: str, llm: LLM) -> Pipeline:
    """A pipeline as one worker of many would run it: its own ids (``prefix``)."""
    return embedded_pipeline(llm=llm, store=store, ids=SequentialIds(prefix))


@pytest.mark.decision("D62")
async def test_two_workers_racing_follow_ons_on_one_session_one_wins(
    postgres_db_url: str,
) -> None:
    async with PostgresStore(postgres_db_url) as one, PostgresStore(postgres_db_url) as two:
        start, _ = make_pipeline(one, [text("hello")])
        first = ok(await start.execute({"Instruction": "hi"}, CALLER))
        meet = Rendezvous(2)
        a = worker(one, "a-", GatedLLM([calls(change_mode("ma", "review")), text("a")], meet))
        b = worker(two, "b-", GatedLLM([text("b")], meet))

        results = await asyncio.gather(
            a.execute(follow_on(first, "from a"), CALLER),
            b.execute(follow_on(first, "from b"), CALLER),
        )

        assert sorted(r.successful for r in results) == [False, True]
        (loser,) = [r for r in results if not r.successful]
        assert [e.code for e in loser.errors] == [ErrorCode.CONFLICT]
        session, _, transcript = await stored(two)
        said = [m.content for m in transcript if m.role is ChatRole.USER]
        assert session is not None
        assert session.version == 2  # created, then exactly one more commit
        if results[0].successful:
            assert said == ["hi", "from a"]
            assert [e.new_mode for e in session.mode_history] == ["review"]
        else:
            assert said == ["hi", "from b"]
            assert session.mode_history == []


@pytest.mark.decision("D62")
async def test_two_continuations_of_one_turn_commit_once_and_both_get_its_answer(
    postgres_db_url: str,
) -> None:
    async with PostgresStore(postgres_db_url) as one, PostgresStore(postgres_db_url) as two:
        start, _ = make_pipeline(
            one, [calls({"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}})]
        )
        first = ok(await start.execute({"Instruction": "read it"}, CALLER))
        meet = Rendezvous(2)
        a = worker(one, "a-", GatedLLM([text("answer a")], meet))
        b = worker(two, "b-", GatedLLM([text("answer b")], meet))

        results = await asyncio.gather(
            a.execute(continuation(first), CALLER), b.execute(continuation(first), CALLER)
        )

        # The loser's commit conflicts; it then finds the winner's stored answer (D181).
        assert all(r.successful for r in results)
        assert results[0].to_json() == results[1].to_json()
        _, turns, transcript = await stored(one)
        winner = results[0]
        assert winner.result is not None
        answers = [m.content for m in transcript if m.role is ChatRole.ASSISTANT and m.content]
        assert answers == [winner.result.primary_output_text]
        assert [t.status for t in turns if t] == [TurnStatus.COMPLETED]
        tool_results = [m for m in transcript if m.role is ChatRole.TOOL]
        assert len(tool_results) == 1  # the loser's tool result was not stored


@pytest.mark.decision("D62")
async def test_a_conflicting_store_commit_writes_nothing_of_the_loser(
    postgres_db_url: str,
) -> None:
    async with PostgresStore(postgres_db_url) as one, PostgresStore(postgres_db_url) as two:
        seed = one.begin("acme", "ana")
        await seed.create_session(Session(id="s1", org="acme", user="ana", mode="general"))
        await seed.commit()
        winner, loser = one.begin("acme", "ana"), two.begin("acme", "ana")
        await winner.load_session("s1")
        await loser.load_session("s1")
        await loser.open_turn(Turn(id="t-lost", session_id="s1"))
        await loser.append_transcript(
            "s1", "t-lost", [ChatMessage(role=ChatRole.USER, content="x")]
        )
        await winner.set_solution_context("s1", "won")
        await winner.commit()

        with pytest.raises(StoreConflictError, match="changed since it was read"):
            await loser.commit()

        assert await two.read_turn("acme", "ana", "s1", "t-lost") is None
        assert await two.read_transcript("acme", "ana", "s1") == []
        session = await two.read_session("acme", "ana", "s1")
        assert session is not None
        assert session.solution_context_text == "won"


# --- several worker processes on one database ------------------------------------------------

WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from aptix_pipeline.adapters.embedded import embedded_pipeline
    from aptix_pipeline.adapters.stores.postgres import PostgresStore
    from aptix_pipeline.adapters.models.scripted import ScriptedLLM
    from aptix_pipeline.contracts import Caller

    class SlowLLM(ScriptedLLM):
        # A little think time keeps the workers' turns overlapping, so they conflict.
        async def complete(self, request):
            await asyncio.sleep(0.02)
            return await super().complete(request)

    def change(call_id, mode, tag):
        call = {"id": call_id, "name": "agent_change_mode"}
        return {"tool_calls": [{**call, "arguments": {"mode": mode, "reason": tag}}]}

    async def turn(store, tag, session_id, turn_id):
        llm = SlowLLM([change("m1", "review", tag), change("m2", "general", tag), {"text": tag}])
        pipeline = embedded_pipeline(llm=llm, store=store)
        request = {"SessionId": session_id, "TurnId": turn_id, "Instruction": tag}
        result = await pipeline.execute(request, Caller(org="acme", user="ana"))
        return {"tag": tag, "session": session_id, "ok": result.successful,
                "turn": result.result.turn_id if result.result else None,
                "codes": [error.code.value for error in result.errors]}

    async def main():
        url, worker, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        sessions = json.loads(sys.argv[4])
        async with PostgresStore(url, max_size=4) as store:
            for n in range(0, turns, 2):  # two turns at a time, on two sessions
                batch = [turn(store, f"w{worker}-{k}", *sessions[(worker + k) % len(sessions)])
                         for k in (n, n + 1)]
                for outcome in await asyncio.gather(*batch):
                    print(json.dumps(outcome), flush=True)

    asyncio.run(main())
    """
)
WORKERS, TURNS_EACH, SESSIONS = 4, 8, 3


async def run_workers(url: str, sessions: list[list[str]]) -> list[dict[str, Any]]:
    """Start the worker processes at once; their outcomes, one per turn."""
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WORKER,
            url,
            str(worker),
            str(TURNS_EACH),
            json.dumps(sessions),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for worker in range(WORKERS)
    ]
    try:
        outputs = await asyncio.wait_for(
            asyncio.gather(*(process.communicate() for process in processes)), timeout=180
        )
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err.decode()
    return [json.loads(line) for out, _ in outputs for line in out.decode().splitlines()]


@pytest.mark.decision("D67")
async def test_worker_processes_on_one_database_lose_no_mode_change_and_repeat_no_turn(
    postgres_db_url: str,
) -> None:
    async with PostgresStore(postgres_db_url) as store:
        sessions = []
        for index in range(SESSIONS):
            start = embedded_pipeline(llm=ScriptedLLM([text("ready")]), store=store)
            first = ok(await start.execute({"Instruction": f"session {index}"}, CALLER))
            sessions.append([first.session_id, first.turn_id])

        outcomes = await run_workers(postgres_db_url, sessions)

        assert len(outcomes) == WORKERS * TURNS_EACH
        assert all(o["ok"] or o["codes"] == [ErrorCode.CONFLICT.value] for o in outcomes)
        won = [o for o in outcomes if o["ok"]]
        assert won, "no turn committed"
        assert len(won) < len(outcomes), "the workers never raced (no conflict)"
        for session_id, _ in sessions:
            session = await store.read_session(CALLER.org, CALLER.user, session_id)
            assert session is not None
            won_here = [o for o in won if o["session"] == session_id]
            history = session.mode_history
            # Each committed turn went general → review → general: both entries, once each.
            assert Counter(e.turn_id for e in history) == {o["turn"]: 2 for o in won_here}
            assert {e.reason for e in history} == {o["tag"] for o in won_here}
            assert all(b.previous_mode == a.new_mode for a, b in itertools.pairwise(history))
            assert session.mode == "general"
            assert session.version == 1 + len(won_here)  # one version step per commit

    with psycopg.connect(postgres_db_url) as raw:
        turn_rows = raw.execute("SELECT id, status FROM aptix_turns").fetchall()
        per_turn: dict[str, int] = dict(
            raw.execute(
                "SELECT turn_id, count(*) FROM aptix_transcript GROUP BY turn_id"
            ).fetchall()
        )
        said = raw.execute(
            'SELECT message FROM aptix_transcript WHERE message LIKE \'%"Role":"user"%\''
        ).fetchall()
    committed = {turn_id for _, turn_id in sessions} | {o["turn"] for o in won}
    assert sorted(turn_id for turn_id, _ in turn_rows) == sorted(committed)
    assert {status for _, status in turn_rows} == {TurnStatus.COMPLETED.value}
    assert set(per_turn) == committed
    assert len({per_turn[o["turn"]] for o in won}) == 1  # every worker turn stored alike, once
    instructions = Counter(ChatMessage.model_validate_json(m).content for (m,) in said)
    assert all(instructions[o["tag"]] == 1 for o in won)
    assert not any(instructions[o["tag"]] for o in outcomes if not o["ok"])
    print(f"{len(won)} of {len(outcomes)} turns committed, {len(outcomes) - len(won)} conflicted")
