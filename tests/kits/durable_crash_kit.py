"""The crash tests' side of durable turns: worker processes to kill, a model that answers
each turn's own calls, and the counts that say what ran twice.

- ``crash_request(label, ...)``: a turn whose instruction tells the fake model server
  (``respond``) what to answer: ``rounds`` tool rounds, each calling the ``tools``
  (``"s"``: ``slow_note``, call id ``<label>-r<n>``; ``"k"``: ``keyed_note``, call id
  ``<label>-k<n>``; in that order, ``tool_seconds`` each), then the text
  ``done <label>``; replies wait ``model_delay`` seconds, the reply of round
  ``slow_round`` ``slow_delay``.
- ``respond(body)``: the fake server's answer to one chat-completions body, from the
  turn's instruction and the round (the assistant messages the body already holds),
  so a call sent again gets the same answer, whichever worker sends it.
- ``model_calls(server)``: the requests the fake server received, per (label, round).
- ``WorkerProcess`` / ``Workers``: ``durable_worker_process.py`` runs; ``kill()`` is
  SIGKILL.
- ``activity_runs(history)``: per activity of a turn, in the order the workflow
  scheduled them, its type, the attempt that ended it and whether it completed.
- ``effect_records(target)``: what the tools recorded (``start``/``effect``/``keyed``);
  ``keyed_effects(target)``: the effects ``keyed_note`` made (one row per key).
- ``stored_counts(store_url, session_id)``: the turn rows and transcript messages of
  a session, read with SQL from the store's own tables.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_worker_process import EFFECTS_TABLE, KEYED_SUFFIX, KEYED_TABLE

__all__ = [
    "ActivityRun",
    "WorkerProcess",
    "Workers",
    "activity_runs",
    "crash_request",
    "effect_records",
    "keyed_effects",
    "ledger_done_keys",
    "marks",
    "model_calls",
    "respond",
    "stored_counts",
    "wait_until",
]

WORKER_SCRIPT = Path(__file__).with_name("durable_worker_process.py")
READY_TIMEOUT_S = 60.0
_SPEC = re.compile(
    r"crash turn=(\S+) rounds=(\d+) tool=(\S+) delay=(\S+) slow=(-?\d+):(\S+)(?: tools=([sk]+))?"
)
TOOL_OF = {"s": ("slow_note", "r"), "k": ("keyed_note", "k")}
"""A ``tools`` letter: the tool it calls and the letter of its call ids."""


def crash_request(
    label: str,
    *,
    rounds: int = 1,
    tool_seconds: float = 0.1,
    model_delay: float = 0.0,
    slow_round: int = -1,
    slow_delay: float = 0.0,
    tools: str = "s",
) -> dict[str, Any]:
    """An Initial turn request that ``respond`` plays as the module docstring says."""
    spec = (
        f"crash turn={label} rounds={rounds} tool={tool_seconds:g} "
        f"delay={model_delay:g} slow={slow_round}:{slow_delay:g} tools={tools}"
    )
    return {"Instruction": spec}


def _texts(body: Any) -> Iterator[str]:
    for message in body.get("messages", []) if isinstance(body, dict) else []:
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]


def turn_and_round(body: Any) -> tuple[str, int] | None:
    """The (label, round) a chat-completions body asks for, if it is a crash turn's."""
    for content in _texts(body):
        found = _SPEC.search(content)
        if found:
            messages = body.get("messages", [])
            return found.group(1), sum(1 for m in messages if m.get("role") == "assistant")
    return None


def respond(body: Any) -> dict[str, Any]:
    """The fake server's answer to ``body`` (see the module docstring)."""
    spec = None
    for content in _texts(body):
        spec = _SPEC.search(content) or spec
        if spec:
            break
    if spec is None:
        return {"status": 400, "error": "not a crash turn"}
    label, rounds, tool = spec.group(1), int(spec.group(2)), float(spec.group(3))
    delay, slow_round, slow_delay = float(spec.group(4)), int(spec.group(5)), float(spec.group(6))
    found = turn_and_round(body)
    assert found is not None
    round_ = found[1]
    entry: dict[str, Any]
    if round_ < rounds:
        entry = {
            "tool_calls": [
                {
                    "id": f"{label}-{TOOL_OF[letter][1]}{round_}",
                    "name": TOOL_OF[letter][0],
                    "arguments": {"seconds": tool},
                }
                for letter in spec.group(7) or "s"
            ]
        }
    else:
        entry = {"text": f"done {label}"}
    wait = slow_delay if round_ == slow_round else delay
    if wait:
        entry["delay"] = wait
    return entry


def model_calls(server: Any) -> collections.Counter[tuple[str, int]]:
    """The chat-completions requests ``server`` received, per (label, round)."""
    counted: collections.Counter[tuple[str, int]] = collections.Counter()
    for request in server.completions():
        found = turn_and_round(request.body)
        if found is not None:
            counted[found] += 1
    return counted


async def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Poll ``condition`` every 20 ms until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what or condition}")
        await asyncio.sleep(0.02)


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def marks(path: Path) -> list[dict[str, Any]]:
    """The marks the workers wrote (``ready``, ``between``)."""
    return _lines(path)


def effect_records(target: str) -> list[dict[str, Any]]:
    """What ``slow_note`` recorded at ``target`` (a JSON-lines file or PostgreSQL)."""
    if not target.startswith(("postgresql://", "postgres://")):
        return _lines(Path(target))
    import psycopg

    with psycopg.connect(target) as connection:
        exists = connection.execute("SELECT to_regclass(%s)", (EFFECTS_TABLE,)).fetchone()
        if exists is None or exists[0] is None:
            return []
        rows = connection.execute(
            "SELECT kind, tool_call_id, turn_id, worker, attempt, name, key, took "
            f"FROM {EFFECTS_TABLE} ORDER BY seq"
        ).fetchall()
    keys = ("kind", "tool_call_id", "turn_id", "worker", "attempt", "name", "key", "took")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def keyed_effects(target: str) -> list[dict[str, Any]]:
    """The effects ``keyed_note`` made at ``target``: its table's rows (one per key)."""
    keys = ("key", "tool_call_id", "turn_id", "worker", "attempt")
    query = f"SELECT key, tool_call_id, turn_id, worker, attempt FROM {KEYED_TABLE}"
    if target.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(target) as connection:
            exists = connection.execute("SELECT to_regclass(%s)", (KEYED_TABLE,)).fetchone()
            if exists is None or exists[0] is None:
                return []
            rows = connection.execute(query).fetchall()
    else:
        import sqlite3

        path = Path(target + KEYED_SUFFIX)
        if not path.exists():
            return []
        with contextlib.closing(sqlite3.connect(path)) as connection:
            rows = connection.execute(query).fetchall()
    return [dict(zip(keys, row, strict=True)) for row in rows]


def stored_counts(store_url: str, session_id: str) -> tuple[int, int]:
    """(turn rows, transcript messages) of ``session_id`` in the store at ``store_url``."""
    if store_url.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(store_url) as connection:
            turns = connection.execute(
                "SELECT count(*) FROM aptix_turns WHERE session_id = %s", (session_id,)
            ).fetchone()
            messages = connection.execute(
                "SELECT count(*) FROM aptix_transcript WHERE session_id = %s", (session_id,)
            ).fetchone()
    else:
        import sqlite3

        path = store_url.removeprefix("sqlite:").partition("?")[0]
        with sqlite3.connect(path) as connection:
            turns = connection.execute(
                "SELECT count(*) FROM turns WHERE session_id = ?", (session_id,)
            ).fetchone()
            messages = connection.execute(
                "SELECT count(*) FROM transcript WHERE session_id = ?", (session_id,)
            ).fetchone()
    assert turns is not None
    assert messages is not None
    return int(turns[0]), int(messages[0])


def ledger_done_keys(store_url: str) -> set[str]:
    """The idempotency keys the store's tool ledger holds as done (with a result)."""
    if store_url.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(store_url) as connection:
            rows = connection.execute(
                "SELECT key FROM aptix_tool_ledger WHERE result IS NOT NULL"
            ).fetchall()
    else:
        import sqlite3

        path = store_url.removeprefix("sqlite:").partition("?")[0]
        with contextlib.closing(sqlite3.connect(path)) as connection:
            rows = connection.execute(
                "SELECT key FROM tool_ledger WHERE result IS NOT NULL"
            ).fetchall()
    return {str(row[0]) for row in rows}


@dataclass(frozen=True)
class ActivityRun:
    """One activity of a turn's history: its type, the attempt that ended it, and whether
    it completed (its answer is in the history: no worker runs it again)."""

    kind: str
    attempt: int
    completed: bool


def activity_runs(history: Any) -> list[ActivityRun]:
    """The (non-local) activities of ``history`` in the order they were scheduled."""
    from temporalio.api.enums.v1 import EventType

    scheduled: dict[int, str] = {}
    attempts: dict[int, int] = {}
    completed: set[int] = set()
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            attempts[started.scheduled_event_id] = started.attempt
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed.add(event.activity_task_completed_event_attributes.scheduled_event_id)
    return [
        ActivityRun(name, attempts.get(event_id, 0), event_id in completed)
        for event_id, name in sorted(scheduled.items())
    ]


class WorkerProcess:
    """One ``durable_worker_process.py`` run (see that module's docstring)."""

    def __init__(
        self,
        identity: str,
        argv: list[str],
        log: Path,
        marks_path: Path,
        standby: Path | None = None,
    ) -> None:
        self.identity = identity
        self._standby = standby
        self.log = log
        self._marks = marks_path
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def ready(self) -> bool:
        """Whether the worker serves (it wrote its ``ready`` mark); fails if it died."""
        if self.process.poll() is not None:
            raise AssertionError(
                f"worker {self.identity} exited {self.process.returncode}: "
                + self.log.read_text(errors="replace")[-4000:]
            )
        return any(
            m.get("kind") == "ready" and m.get("pid") == self.pid for m in marks(self._marks)
        )

    async def wait_ready(self) -> None:
        """Wait until the worker serves."""
        await wait_until(self.ready, READY_TIMEOUT_S, f"worker {self.identity} to serve")

    def go(self) -> None:
        """Tell a worker started on standby to serve."""
        assert self._standby is not None
        self._standby.touch()

    def kill(self) -> None:
        """kill -9, and reap it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


class Workers:
    """Worker processes of one test; ``stop()`` kills those still running."""

    def __init__(
        self,
        directory: Path,
        *,
        address: str,
        task_queue: str,
        store_url: str,
        model_url: str,
        effects: str,
    ) -> None:
        self.directory = directory
        self.marks = directory / "marks.jsonl"
        self._common = [
            sys.executable,
            str(WORKER_SCRIPT),
            "--address",
            address,
            "--task-queue",
            task_queue,
            "--store",
            store_url,
            "--model-url",
            model_url,
            "--effects",
            effects,
            "--marks",
            str(self.marks),
        ]
        self.running: list[WorkerProcess] = []

    def start(self, identity: str, *more: str, standby: bool = False) -> WorkerProcess:
        """Start a worker named ``identity`` (``more``: extra arguments); on ``standby``
        it serves once told to (``WorkerProcess.go``)."""
        log = self.directory / f"worker-{identity}.log"
        go = self.directory / f"go-{identity}" if standby else None
        waiting = ["--standby", str(go)] if go is not None else []
        worker = WorkerProcess(
            identity,
            [*self._common, "--identity", identity, *waiting, *more],
            log,
            self.marks,
            go,
        )
        self.running.append(worker)
        return worker

    def stop(self) -> None:
        """Kill every worker still running."""
        for worker in self.running:
            worker.kill()
        self.running.clear()
