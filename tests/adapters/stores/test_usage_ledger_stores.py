"""The usage ledger's budgets hold across processes, and cost PostgreSQL one round trip.

The store contract kit (tests/adapters/stores/test_stores.py) checks what each store's
``UsageLedger`` answers; here what only real processes and a real server show: two OS
processes firing 25 concurrent reservations each against one org's token budget (one
PostgreSQL database, or one SQLite file) reserve exactly as many calls as the limit
holds and never more, the memory store does the same with 50 tasks, and a PostgreSQL
``reserve_usage`` (settlement included) or ``settle_usage`` is one statement: one
message the client waits on, beside the pool's check of the connection it takes.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg import pq

from aptix_pipeline import MemoryStore, PostgresStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    BudgetCheck,
    BudgetMetric,
    Charge,
    UsageCall,
    UsageLedger,
    UsageQuery,
)

LIMIT, AMOUNT, EACH = 235, 10, 25
"""A token budget of 235, calls of 10 tokens: 23 of the 50 fit, and never a 24th."""
FITTING = LIMIT // AMOUNT

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime
    from decimal import Decimal
    from aptix_pipeline.contracts import BudgetCheck, BudgetMetric, Charge, UsageCall, UsageQuery

    def open_store(kind, where):
        if kind == "postgres":
            from aptix_pipeline import PostgresStore
            return PostgresStore(where, max_size=8)
        from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
        return SQLiteStore(where)

    async def main():
        kind, where, name, each, limit, amount = sys.argv[1:7]
        store = open_store(kind, where)
        check = BudgetCheck(budget_id="org-tokens", metric=BudgetMetric.TOKENS,
                            limit=Decimal(limit), amount=Decimal(amount), org="acme")
        # A first read opens the store (PostgreSQL: migrates, opens the pool).
        await store.usage_calls(UsageQuery(org="acme"))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        calls = [UsageCall(id=f"{name}-{n}", org="acme", user=f"user-{n % 3}",
                           session_id=f"s-{name}-{n}", turn_id=f"t-{name}-{n}", mode="general",
                           at=datetime.now(UTC), charge=Charge(tokens=int(amount), model_calls=1))
                 for n in range(int(each))]
        outcomes = await asyncio.gather(*(store.reserve_usage(call, [check]) for call in calls))
        print(sum(outcome.reserved for outcome in outcomes), flush=True)
        await store.aclose()

    asyncio.run(main())
    """
)


SLOW_INSERTS = """
CREATE FUNCTION slow_usage_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.02); RETURN NEW; END $$;
CREATE TRIGGER slow_usage BEFORE INSERT ON aptix_usage_calls
FOR EACH ROW EXECUTE FUNCTION slow_usage_insert();
"""
"""20 ms between a reservation's count and its row: without the org's lock, reservations
counted meanwhile would not see it, and more would fit than the limit holds."""


def _check() -> BudgetCheck:
    return BudgetCheck(
        budget_id="org-tokens",
        metric=BudgetMetric.TOKENS,
        limit=Decimal(LIMIT),
        amount=Decimal(AMOUNT),
        org="acme",
    )


def _call(call_id: str, tokens: int = AMOUNT) -> UsageCall:
    return UsageCall(
        id=call_id,
        org="acme",
        user="ana",
        session_id="s1",
        turn_id="t1",
        mode="general",
        at=datetime.now(UTC),
        charge=Charge(tokens=tokens, model_calls=1),
    )


async def _two_processes(kind: str, where: str) -> list[int]:
    """Start two processes on one store; once both are ready, let them race; what each won."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            kind,
            where,
            name,
            str(EACH),
            str(LIMIT),
            str(AMOUNT),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for name in ("p1", "p2")
    ]
    try:
        for child in children:
            assert child.stdout is not None
            ready = await asyncio.wait_for(child.stdout.readline(), timeout=60)
            assert ready == b"ready\n", (await child.communicate())[1].decode()
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
        outputs = await asyncio.wait_for(
            asyncio.gather(*(child.communicate() for child in children)), timeout=120
        )
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
                await child.wait()
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err.decode()
    return [int(out.decode().strip()) for out, _ in outputs]


async def _assert_within_the_limit(ledger: UsageLedger, won: list[int]) -> None:
    stored = await ledger.usage_calls(UsageQuery(org="acme"))
    assert sum(won) == FITTING
    assert len(stored) == FITTING
    assert sum(call.charge.tokens for call in stored) <= LIMIT


@pytest.mark.decision("D578", "D580")
async def test_two_processes_racing_on_one_postgres_org_reserve_exactly_what_the_limit_holds(
    postgres_db_url: str,
) -> None:
    async with PostgresStore(postgres_db_url) as store:
        await store.usage_calls(UsageQuery(org="acme"))  # migrated before the race
        async with await psycopg.AsyncConnection.connect(postgres_db_url, autocommit=True) as db:
            await db.execute(SLOW_INSERTS)

        won = await _two_processes("postgres", postgres_db_url)

        assert all(won), f"a process won nothing, so they did not race: {won}"
        await _assert_within_the_limit(store, won)


@pytest.mark.decision("D577", "D580")
async def test_two_processes_racing_on_one_sqlite_file_reserve_exactly_what_the_limit_holds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "usage.db"
    SQLiteStore(path).close()  # created and migrated before the race

    won = await _two_processes("sqlite", str(path))

    with SQLiteStore(path) as store:
        await _assert_within_the_limit(store, won)


@pytest.mark.decision("D580")
async def test_fifty_tasks_racing_on_the_memory_store_reserve_exactly_what_the_limit_holds() -> (
    None
):
    store = MemoryStore()

    outcomes = await asyncio.gather(
        *(store.reserve_usage(_call(f"c{n}"), [_check()]) for n in range(2 * EACH))
    )

    await _assert_within_the_limit(store, [sum(outcome.reserved for outcome in outcomes)])


def _messages_waited_on(trace: Path) -> list[str]:
    """The frontend messages of a libpq trace the client then waits for an answer to:
    ``Sync`` (the end of an extended-protocol statement) and ``Query`` (a simple one)."""
    sent = [line.split("\t") for line in trace.read_text().splitlines() if line.startswith("F")]
    return [
        fields[2].split(" ")[0] for fields in sent if fields[2].split(" ")[0] in {"Sync", "Query"}
    ]


@pytest.mark.decision("D578")
async def test_a_postgres_reservation_with_its_settlement_is_one_round_trip(
    postgres_db_url: str, tmp_path: Path
) -> None:
    async with PostgresStore(postgres_db_url, min_size=1, max_size=1) as store:
        await store.reserve_usage(_call("c1", tokens=50), [_check()])
        (connection,) = list(store._connections)  # the pool's one connection
        trace = tmp_path / "libpq.trace"
        with trace.open("w") as sink:
            connection.pgconn.trace(sink.fileno())
            connection.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            settled = replace(_call("c1", tokens=20), settled=True)
            outcome = await store.reserve_usage(_call("c2"), [_check(), _check()], [settled])
            reserving = _messages_waited_on(trace)
            await store.settle_usage([_call("c2", tokens=12)])
            connection.pgconn.untrace()
        settling = _messages_waited_on(trace)[len(reserving) :]

        assert outcome.reserved
        assert outcome.used == {"org-tokens": 20}
        # The pool checks the connection it hands out with an empty simple query.
        assert reserving == ["Query", "Sync"]
        assert settling == ["Query", "Sync"]
