"""The live view's one second (docs/UI.md "The live view"): from another process
committing a turn to the live page showing it, per store.

A ``bench/live_writer.py`` process commits one turn at a time to the store; the
turn browser (``create_ui_app``, standalone, under uvicorn on loopback) watches it
as the page does:

- **SQLite (poll)** — a reader fetches ``/live/feed`` every ``POLL_MS``, as htmx
  does, and the turn counts as shown when a fetched feed lists it;
- **PostgreSQL (notify)** — a reader holds ``/live/events`` open and, on the
  ``stored`` event naming the turn (``LISTEN/NOTIFY``), fetches ``/live/feed``,
  as the page does; the turn counts as shown when that feed lists it.

The latency is the reader's wall clock when the turn shows minus the writer's just
after its commit returned (one machine, one clock). The stores' rounds interleave,
and each waits a random part of a poll interval first, so a commit lands anywhere
in the poll's cycle. PostgreSQL is the one ``APTIX_BENCH_PG_URL`` names, else a
throwaway server (tests/kits/pg_server.py) when its binaries are installed; without
either its row is skipped, with the reason.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from live_kit import LiveEvents, live_events
from pg_server import PostgresServer, find_postgres_bin
from server_thread import WAIT, server_thread

from aptix_pipeline.adapters.stores import SQLiteStore, open_store
from aptix_pipeline.adapters.ui.app import create_ui_app
from aptix_pipeline.adapters.ui.guard import TOKEN_PARAM, UIGuard
from aptix_pipeline.adapters.ui.live import POLL_MS

__all__ = ["ROUNDS", "TARGET_S", "live_rows"]

TARGET_S = 1.0
"""Issue 33: "The live view shows a turn run by another process within 1 s"."""
ROUNDS = 12
WRITER = Path(__file__).resolve().parent / "live_writer.py"


class _Writer:
    """The other process: one committed turn per ``commit``."""

    def __init__(self, url: str) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(WRITER), url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert json.loads(self._read()) == {"ready": True}

    def _read(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the writer process stopped")
        return line

    def commit(self) -> tuple[str, float]:
        """A turn committed: its id, and the writer's wall clock just after."""
        assert self._process.stdin is not None
        self._process.stdin.write("\n")
        self._process.stdin.flush()
        done = json.loads(self._read())
        return done["turn"], done["at"]

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(WAIT)


@contextmanager
def _page(url: str) -> Iterator[tuple[str, str]]:
    """The standalone turn browser on ``url``'s store, served; its base URL and token."""
    store = open_store(url)
    guard = UIGuard.start()

    async def close() -> None:
        closing = getattr(store, "aclose", None)
        if closing is not None:
            await closing()
        else:
            store.close()  # type: ignore[union-attr]

    app = create_ui_app(store, None, guard=guard, close_store=close)
    with server_thread(app) as port:
        yield f"http://127.0.0.1:{port}", guard.token


def _client(base: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=WAIT)
    client.get("/", params={TOKEN_PARAM: token}).raise_for_status()
    return client


class _Poller:
    """Fetches the feed every ``POLL_MS``, as the page does; when each turn first showed."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            feed = self._client.get("/live/feed").text
            now = time.time()
            for part in feed.split("data-turn='")[1:]:
                self.seen.setdefault(part.split("'", 1)[0], now)
            self._stop.wait(POLL_MS / 1000)

    def shown(self, turn: str) -> float:
        deadline = time.monotonic() + WAIT
        while turn not in self.seen:
            assert time.monotonic() < deadline, f"turn {turn} never showed"
            time.sleep(0.005)
        return self.seen[turn]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(WAIT)


def _notified(events: LiveEvents, client: httpx.Client) -> Callable[[str], float]:
    def shown(turn: str) -> float:
        events.wait_for(lambda name, data: name == "stored" and data.get("turn") == turn)
        feed = client.get("/live/feed").text  # what the page does on the notice
        assert f"data-turn='{turn}'" in feed
        return time.time()

    return shown


def _figures(latencies: list[float]) -> dict[str, Any]:
    return {
        "rounds": len(latencies),
        "min_ms": min(latencies) * 1000,
        "median_ms": statistics.median(latencies) * 1000,
        "max_ms": max(latencies) * 1000,
        "target_ms": TARGET_S * 1000,
    }


@contextmanager
def _postgres() -> Iterator[tuple[str | None, str]]:
    """A PostgreSQL database for the bench and where it is, or ``None`` and why not."""
    given = os.environ.get("APTIX_BENCH_PG_URL")
    if given:
        yield given, "APTIX_BENCH_PG_URL"
        return
    found = find_postgres_bin()
    if found is None:
        yield None, "no PostgreSQL: set APTIX_BENCH_PG_URL, or make postgres-server"
        return
    server = PostgresServer(found)
    server.start()
    try:
        yield server.url(server.create_database()), "a throwaway server (tests/kits/pg_server.py)"
    finally:
        server.stop()


def live_rows(rounds: int = ROUNDS) -> dict[str, Any]:
    """Each store's latency figures (``skipped`` with the reason where it could not run)."""
    random.seed(33)
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        sqlite_url = f"sqlite:{Path(folder) / 'live.db'}"
        pg_url, pg_where = stack.enter_context(_postgres())
        watchers: dict[str, tuple[_Writer, Callable[[str], float]]] = {}
        with SQLiteStore(Path(folder) / "live.db"):  # the schema, before the others open it
            pass
        base, token = stack.enter_context(_page(sqlite_url))
        poller = _Poller(_client(base, token))
        stack.callback(poller.close)
        sqlite_writer = _Writer(sqlite_url)
        stack.callback(sqlite_writer.close)
        watchers["sqlite (poll)"] = (sqlite_writer, poller.shown)
        if pg_url is not None:
            base, token = stack.enter_context(_page(pg_url))
            events = stack.enter_context(live_events(_client(base, token), "/live/events"))
            pg_writer = _Writer(pg_url)
            stack.callback(pg_writer.close)
            watchers["postgresql (notify)"] = (pg_writer, _notified(events, _client(base, token)))
        latencies: dict[str, list[float]] = {name: [] for name in watchers}
        for _ in range(rounds):
            for name, (writer, shown) in watchers.items():
                time.sleep(random.uniform(0, POLL_MS / 1000))
                turn, committed = writer.commit()
                latencies[name].append(shown(turn) - committed)
        rows: dict[str, Any] = {name: _figures(found) for name, found in latencies.items()}
    if pg_url is None:
        rows["postgresql (notify)"] = {"skipped": pg_where}
    else:
        rows["postgresql (notify)"]["where"] = pg_where
    return rows
