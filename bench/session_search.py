"""The session list at scale (docs/UI.md "Searching sessions"): the first page of a store
of 10,000 sessions, against the 200 ms target of issue 33, beside a store of 100.

A SQLite file (and, where PostgreSQL's server binaries are found, a database on a
throwaway PostgreSQL server started as the tests start it, tests/kits/pg_server.py,
its rows named ``PostgreSQL …``) is filled through the store's own transactions:
100 orgs and users of ``SESSIONS / 100`` sessions each, two turns a session (two
messages a turn, usage on each), a priced usage call on every tenth. Timed, on the
small and the big store, in interleaved rounds: the first page (50 rows) with no
filter, the first page of one status over a time range, and the first page of one
org's sessions, each through ``search_sessions`` as the page calls it; and the whole
``/sessions`` page of the turn browser (``create_ui_app``, the server's time to
answer, through an ASGI call without a network; SQLite only). Figures are ms, the
minimum and median over the rounds; x is the big store over the small one (medians).
PostgreSQL's databases are analyzed after the fill (the statistics
autovacuum would have gathered). Without PostgreSQL its row says why it was skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from aptix_pipeline.adapters.stores.postgres import PostgresStore
from aptix_pipeline.adapters.stores.session_search import SessionFilter, search_sessions
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    Charge,
    ChatMessage,
    ChatRole,
    Session,
    Turn,
    TurnStatus,
    Usage,
    UsageCall,
)

__all__ = ["SESSIONS", "TARGET_MS", "search_rows"]

SESSIONS = 10_000
TARGET_MS = 200.0
"""Issue 33: the first page of 10,000 sessions in at most 200 ms, server time."""
SMALL = 100
OWNERS = 100
ROUNDS = 15
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def _fill(store: SQLiteStore | PostgresStore, sessions: int) -> None:
    per_owner = max(1, sessions // OWNERS)
    n = 0
    for owner in range(min(OWNERS, sessions)):
        org, user = f"org-{owner % 10}", f"user-{owner}"
        tx = store.begin(org, user)
        calls: list[UsageCall] = []
        for _ in range(per_owner):
            n += 1
            sid = f"s{n:06d}"
            await tx.create_session(
                Session(id=sid, org=org, user=user, mode="general", created_at=T0)
            )
            for k in range(2):
                tid = f"{sid}-t{k}"
                status = TurnStatus.COMPLETED if (n + k) % 7 else TurnStatus.AWAITING_CLIENT_TOOLS
                at = T0 + timedelta(seconds=n * 10 + k)
                await tx.open_turn(
                    Turn(
                        id=tid,
                        session_id=sid,
                        mode="general",
                        status=status,
                        created_at=at,
                        usage=Usage(input_tokens=100, output_tokens=20, total_tokens=120),
                    )
                )
                await tx.append_transcript(
                    sid,
                    tid,
                    [
                        ChatMessage(role=ChatRole.USER, content=f"question {n} {k} " * 8),
                        ChatMessage(role=ChatRole.ASSISTANT, content="an answer"),
                    ],
                )
                if n % 10 == 0 and k == 0:
                    calls.append(
                        UsageCall(
                            id=f"{tid}-c",
                            org=org,
                            user=user,
                            session_id=sid,
                            turn_id=tid,
                            mode="general",
                            at=at,
                            settled=True,
                            charge=Charge(tokens=120, model_calls=1),
                            priced=True,
                            cost=Decimal("0.0012"),
                            currency="USD",
                        )
                    )
        await tx.commit()
        if calls:
            await store.settle_usage(calls)


def _page_call(store: SQLiteStore, folder: Path) -> Callable[[], Awaitable[None]]:
    """One GET of the UI's ``/sessions`` page, answered by the app in this process."""
    from aptix_pipeline.adapters.ui import UIGuard, create_ui_app

    guard = UIGuard.start()
    app = create_ui_app(store, None, store_name=str(folder), guard=guard)
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/sessions",
        "raw_path": b"/sessions",
        "root_path": "",
        "query_string": f"token={guard.token}".encode(),
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }

    async def call() -> None:
        status: list[int] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await app(scope, receive, send)
        assert status == [200], status

    return call


@contextlib.asynccontextmanager
async def _postgres_stores() -> AsyncIterator[dict[str, tuple[PostgresStore, str]] | str]:
    """A small and a big database on a throwaway PostgreSQL server, each a store and
    its URL; or why there is none."""
    from pg_server import PostgresServer, find_postgres_bin

    bin_dir = find_postgres_bin()
    if bin_dir is None:
        yield "no PostgreSQL server binaries (initdb, postgres); `make postgres-server`"
        return
    server = PostgresServer(bin_dir)
    stores: dict[str, tuple[PostgresStore, str]] = {}
    try:
        server.start()
        for size in ("small", "big"):
            url = server.url(server.create_database())
            stores[size] = (PostgresStore(url, max_size=2), url)
        yield stores
    finally:
        for store, _ in stores.values():
            await store.aclose()
        server.stop()


async def _time(calls: dict[tuple[str, str], Callable[[], Awaitable[Any]]]) -> dict[Any, Any]:
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in range(ROUNDS):
        for key, call in calls.items():
            started = time.perf_counter()
            await call()
            samples[key].append((time.perf_counter() - started) * 1000)
    return samples


def _figures(samples: dict[tuple[str, str], list[float]], names: list[str]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name in names:
        small, big = samples[(name, "small")], samples[(name, "big")]
        rows[name] = {
            "small_min_ms": min(small),
            "small_median_ms": statistics.median(small),
            "big_min_ms": min(big),
            "big_median_ms": statistics.median(big),
            "ratio_median": statistics.median(big) / statistics.median(small),
            "target_ms": TARGET_MS,
        }
    return rows


def _queries() -> dict[str, SessionFilter]:
    since = T0 + timedelta(seconds=SESSIONS * 5)
    return {
        "first page": SessionFilter(),
        "status + time range": SessionFilter(status="awaiting_client_tools", since=since),
        "one org": SessionFilter(org="org-3"),
    }


async def _rows() -> dict[str, Any]:
    queries = _queries()
    with tempfile.TemporaryDirectory() as folder:
        stores = {
            "small": SQLiteStore(Path(folder) / "small.db"),
            "big": SQLiteStore(Path(folder) / "big.db"),
        }
        try:
            await _fill(stores["small"], SMALL)
            await _fill(stores["big"], SESSIONS)
            calls: dict[tuple[str, str], Callable[[], Awaitable[Any]]] = {}
            for size, store in stores.items():
                for name, where in queries.items():
                    calls[(name, size)] = partial(search_sessions, store, where)
                calls[("/sessions page", size)] = _page_call(store, Path(folder))
            samples = await _time(calls)
        finally:
            for store in stores.values():
                await store.aclose()
    rows = _figures(samples, [*queries, "/sessions page"])
    async with _postgres_stores() as postgres:
        if isinstance(postgres, str):
            rows["PostgreSQL"] = {"skipped": postgres}
            return rows
        await _fill(postgres["small"][0], SMALL)
        await _fill(postgres["big"][0], SESSIONS)
        for _, url in postgres.values():  # the statistics autovacuum would have gathered
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute("ANALYZE")
        pg_calls: dict[tuple[str, str], Callable[[], Awaitable[Any]]] = {
            (f"PostgreSQL {name}", size): partial(search_sessions, store, where)
            for size, (store, _) in postgres.items()
            for name, where in queries.items()
        }
        rows |= _figures(await _time(pg_calls), [f"PostgreSQL {name}" for name in queries])
    return rows


def search_rows() -> dict[str, Any]:
    """The figures of the module docstring."""
    return asyncio.run(_rows())
