"""A durable-turn worker as a process of its own, for the crash tests: kill it with -9.

Run as a script (the crash tests start it with ``subprocess``)::

    python tests/kits/durable_worker_process.py --address 127.0.0.1:7233 \\
        --task-queue Q --store sqlite:/tmp/t.db --model-url http://127.0.0.1:PORT/v1 \\
        --identity w1 --effects /tmp/effects.jsonl --marks /tmp/marks.jsonl

it builds the crash tests' ``Pipeline`` (``crash_pipeline``): the real
``OpenAICompatibleLLM`` on the fake model server at ``--model-url`` (one try per
activity: Temporal's retry policy is the only retry layer), the store at ``--store``
(``sqlite:PATH`` or a ``postgresql://`` URL: the multi-machine case) and two server
tools, ``slow_note`` (not idempotent) and ``keyed_note`` (``idempotent = "by_key"``),
then serves a ``DurableWorker`` until it is killed. The store is a ``ToolLedger``, so
each call runs through the tool ledger on the worker (docs/TOOLS.md, D565).

- ``slow_note`` takes ``{"seconds": S}``: it records a ``start``, sleeps ``S`` seconds
  (heartbeating: it is an activity), then records its **effect**, keyed by the
  invocation's ``tool_call_id``, and answers. The records go to ``--effects``: a
  JSON-lines file (appended with one ``write`` each, so a record written before a
  kill -9 is there) or a ``postgresql://`` URL (a row each in ``crash_effects``).
  Not idempotent: the ledger runs it at most once per key.
- ``keyed_note`` takes the same and honours ``ToolInvocation.idempotency_key``: it
  records a ``start``, sleeps, then makes its effect **keyed**: a row in a table whose
  primary key is the idempotency key, ``INSERT ... ON CONFLICT DO NOTHING``
  (``crash_keyed_effects`` in PostgreSQL; with a JSON-lines ``--effects``, the same
  table in the SQLite file ``<effects>.keyed.db``), so a second run with the same key
  makes no second effect. It then records ``keyed`` (``took``: whether its insert made
  the row) in the log and answers. Its rows are the effects it produced.
- ``--pause-between-rounds S``: after each server tool's answer reaches the turn (the
  engine's ``ToolExecuted`` event, heard in the workflow), the worker records a
  ``between`` mark and holds its workflow task for ``S`` seconds, so a test can kill
  it between two rounds, with no call in flight.
- ``--standby FILE``: start, import and connect, then wait until ``FILE`` exists
  before serving: a restart that takes no start-up time (the kill loop's).
- ``--marks``: a JSON-lines file where the worker writes ``ready`` once it serves,
  and the ``between`` marks.

``--heartbeat-seconds`` and ``--sticky-seconds`` are small by default so that a dead
worker's turn moves on to another within a second or two. A worker killed mid-call
uses one of the call's attempts, so the tool and the commit get eight (``crash_options``
gives the model as many).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from aptix_pipeline import ConfigCatalog, Pipeline, PipelineOptions, Ports, TurnEvent
from aptix_pipeline.adapters.models import OpenAICompatibleLLM
from aptix_pipeline.adapters.stores import open_store
from aptix_pipeline.adapters.system import RandomIds, SystemClock
from aptix_pipeline.contracts import SessionStore, ToolInvocation

__all__ = [
    "CRASH_CATALOG",
    "EFFECTS_TABLE",
    "KEYED_SUFFIX",
    "KEYED_TABLE",
    "EffectSink",
    "crash_options",
    "crash_pipeline",
    "main",
]

CRASH_CATALOG = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["slow_note", "keyed_note"]

[[server_tools]]
name = "slow_note"
description = "Notes something down, slowly."

[[server_tools]]
name = "keyed_note"
description = "Notes something down, slowly, once per idempotency key."
idempotent = "by_key"

[[agents]]
id = "crash"
name = "Crash"

[[conversations]]
id = "crash"
"""

EFFECTS_TABLE = "crash_effects"
KEYED_TABLE = "crash_keyed_effects"
KEYED_SUFFIX = ".keyed.db"
"""With a JSON-lines ``--effects`` PATH, ``keyed_note``'s table is in ``PATH + KEYED_SUFFIX``."""
_KEYED_COLUMNS = "key text PRIMARY KEY, tool_call_id text, turn_id text, worker text, attempt int"
_TABLES_LOCK = 0x61707478  # the advisory lock under which a worker makes the tables


def crash_options() -> PipelineOptions:
    """The options of every crash-test pipeline (the workers' and the replayer's).

    ``llm_attempts`` is Temporal's ``maximum_attempts`` of a model call, and a worker
    killed mid-call uses one attempt: the kill loop can kill one call's worker more than
    once, so it gets room; and the engine's own server-tool timeout (a workflow timer)
    is long enough that a tool whose turn waits out several killed workflow tasks is
    not cut short."""
    return PipelineOptions(
        llm_attempts=8,
        retry_wait_seconds=0.05,
        retry_max_wait_seconds=0.2,
        turn_deadline_seconds=240.0,
        server_tool_timeout_seconds=200.0,
    )


class EffectSink:
    """Where ``slow_note`` records what it did: a JSON-lines file or a PostgreSQL table."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._pg = target.startswith(("postgresql://", "postgres://"))
        self._connection: Any = None
        self._connecting = asyncio.Lock()

    async def record(self, kind: str, invocation: ToolInvocation, worker: str, **more: Any) -> None:
        """One record: ``kind`` (``start``, ``effect`` or ``keyed``) of the call, on
        ``worker``; ``more`` (``took``) goes to the JSON line only."""
        attempt = _attempt()
        row = {
            "kind": kind,
            "tool_call_id": invocation.tool_call_id,
            "turn_id": invocation.turn_id,
            "worker": worker,
            "attempt": attempt,
            "name": invocation.name,
            "key": invocation.idempotency_key,
            "at": time.time(),
            **more,
        }
        if not self._pg:
            append_line(self.target, row)
            return
        connection = await self._pg_connection()
        await connection.execute(
            f"INSERT INTO {EFFECTS_TABLE} (kind, tool_call_id, turn_id, worker, attempt, name, "
            "key, took, at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                kind,
                invocation.tool_call_id,
                invocation.turn_id,
                worker,
                attempt,
                invocation.name,
                invocation.idempotency_key,
                more.get("took"),
                row["at"],
            ),
        )

    async def keyed_effect(self, invocation: ToolInvocation, worker: str) -> bool:
        """``keyed_note``'s effect: a row keyed by the call's idempotency key, made once
        (``ON CONFLICT DO NOTHING``); whether this run made it."""
        key = invocation.idempotency_key
        if key is None:
            raise ValueError("keyed_note: the invocation has no idempotency_key")
        values = (key, invocation.tool_call_id, invocation.turn_id, worker, _attempt())
        if self._pg:
            connection = await self._pg_connection()
            cursor = await connection.execute(
                f"INSERT INTO {KEYED_TABLE} (key, tool_call_id, turn_id, worker, attempt) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (key) DO NOTHING",
                values,
            )
            return bool(cursor.rowcount == 1)
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.target + KEYED_SUFFIX, timeout=30)) as db:
            with db:
                db.execute(f"CREATE TABLE IF NOT EXISTS {KEYED_TABLE} ({_KEYED_COLUMNS})")
                cursor = db.execute(
                    f"INSERT INTO {KEYED_TABLE} (key, tool_call_id, turn_id, worker, attempt) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                    values,
                )
            return cursor.rowcount == 1

    async def _pg_connection(self) -> Any:
        """The worker's one connection, its tables made first.

        Two sessions running ``CREATE TABLE IF NOT EXISTS`` for a table neither sees
        can both try to make it, and one fails on a unique index of the catalog; the
        workers' first tool calls start together, and a tool that raises is an answer
        (the call's error), so that failure would read as a call that made no effect.
        Hence one creator at a time (an advisory lock) and one connection per worker
        (``_connecting``), even when its two tools start at once."""
        import psycopg

        async with self._connecting:
            if self._connection is None:
                connection = await psycopg.AsyncConnection.connect(self.target, autocommit=True)
                async with connection.transaction():
                    await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_TABLES_LOCK,))
                    await connection.execute(
                        f"CREATE TABLE IF NOT EXISTS {EFFECTS_TABLE} (seq bigserial PRIMARY KEY, "
                        "kind text, tool_call_id text, turn_id text, worker text, attempt int, "
                        "name text, key text, took boolean, at float8)"
                    )
                    await connection.execute(
                        f"CREATE TABLE IF NOT EXISTS {KEYED_TABLE} ({_KEYED_COLUMNS})"
                    )
                self._connection = connection
        return self._connection


def _attempt() -> int:
    from temporalio import activity

    return activity.info().attempt if activity.in_activity() else 0


def append_line(path: str, row: dict[str, Any]) -> None:
    """``row`` as one JSON line at the end of ``path``, in one ``write`` (kill -9 safe)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def crash_pipeline(
    store: SessionStore,
    model_url: str,
    *,
    sink: EffectSink | None = None,
    worker: str = "",
    marks: str | None = None,
    pause_between_rounds: float = 0.0,
    options: PipelineOptions | None = None,
) -> Pipeline:
    """The crash tests' pipeline (see the module docstring); with no ``sink`` its tool
    only answers (the replayer's pipeline, whose tools never run)."""

    async def slow_note(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        if sink is not None:
            await sink.record("start", invocation, worker)
        await asyncio.sleep(float(arguments.get("seconds", 0)))
        if sink is not None:
            await sink.record("effect", invocation, worker)
        return json.dumps({"noted": invocation.tool_call_id})

    async def keyed_note(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        if sink is not None:
            await sink.record("start", invocation, worker)
        await asyncio.sleep(float(arguments.get("seconds", 0)))
        if sink is not None:
            took = await sink.keyed_effect(invocation, worker)
            await sink.record("keyed", invocation, worker, took=took)
        return json.dumps({"noted": invocation.tool_call_id})

    listeners: list[Callable[[TurnEvent], None]] = []
    if pause_between_rounds > 0 and marks is not None:
        from aptix_pipeline.engine import ToolExecuted

        def hold(event: TurnEvent) -> None:
            if isinstance(event, ToolExecuted):
                append_line(marks, {"kind": "between", "tool_call_id": event.tool_call_id})
                time.sleep(pause_between_rounds)  # the workflow task, held on purpose

        listeners.append(hold)
    catalog = ConfigCatalog.from_toml(CRASH_CATALOG)
    llm = OpenAICompatibleLLM(
        model="fake-model", base_url=model_url, api_key="test", max_attempts=1
    )
    ports = Ports(
        store=store,
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=SystemClock(),
        ids=RandomIds(),
        tools={"slow_note": slow_note, "keyed_note": keyed_note},
    )
    return Pipeline(ports, options or crash_options(), listeners=listeners)


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


async def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--marks", required=True)
    parser.add_argument("--heartbeat-seconds", type=float, default=1.0)
    parser.add_argument("--sticky-seconds", type=float, default=0.5)
    parser.add_argument("--pause-between-rounds", type=float, default=0.0)
    parser.add_argument("--standby", default=None)
    args = parser.parse_args(argv)
    _die_with_parent()

    from aptix_pipeline.adapters.temporal import DurableSettings, DurableWorker, connect

    store: Any = open_store(args.store)
    if hasattr(store, "open"):
        await store.open()
    pipeline = crash_pipeline(
        store,
        args.model_url,
        sink=EffectSink(args.effects),
        worker=args.identity,
        marks=args.marks,
        pause_between_rounds=args.pause_between_rounds,
    )
    client = await connect(args.address)
    if args.standby:  # imported and connected: serve as soon as told to
        if args.effects.startswith("postgresql"):
            import psycopg  # noqa: F401 - imported now, not on the first effect
        while not os.path.exists(args.standby):
            await asyncio.sleep(0.02)
    async with DurableWorker(
        client,
        pipeline,
        task_queue=args.task_queue,
        identity=args.identity,
        settings=DurableSettings(
            heartbeat_seconds=args.heartbeat_seconds, tool_attempts=8, commit_attempts=8
        ),
        sticky_timeout_seconds=args.sticky_seconds,
    ):
        append_line(
            args.marks,
            {"kind": "ready", "worker": args.identity, "pid": os.getpid(), "at": time.time()},
        )
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
