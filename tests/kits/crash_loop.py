"""The kill -9 loop of durable turns (issue 29): three worker processes, a stream of turns,
a killer that SIGKILLs a random worker every 1-2 s and starts another in its place (a
process waiting on standby, then a new standby); then the counts.

``run_crash_loop(...)`` runs it and returns its ``figures`` (a dict, written as JSON by
the test). Run as a script, it prints the figures of a run::

    python tests/kits/crash_loop.py build/crash-loop.json

The figures, per answered turn, from the fake model server's requests, the tool's
records, the store's rows and the turn's Temporal history:

- ``turns_lost``: turns the client got an answer for that are not in the store, plus
  started turns that never answered (or answered unsuccessfully);
- ``commits_twice``: turns with more than one turn row, a transcript longer than the
  turn wrote, or more than one commit activity;
- ``model_calls_repeated_in_flight``: model requests sent again because the worker
  sending the first was killed before its activity completed (allowed: the attempt
  had no answer in the history);
- ``completed_model_calls_repeated``: requests of a round beyond its activity's
  attempts, i.e. a call made again after its activity had completed (must be 0);
- ``tool_runs_repeated``, ``completed_tool_calls_rerun``: the same for ``slow_note``;
- ``tool_effects_doubled``: tool calls with two effects (a worker killed after the
  effect, before its activity's answer reached Temporal: at-least-once until the tool
  ledger, issue 29 part 4, which makes it 0 for an idempotent tool);
- ``workflow_tasks_killed``: workflow tasks whose worker died holding them (the turn
  waited the workflow task timeout); ``sticky_tasks_moved_on``: tasks that waited on a
  dead worker's sticky queue for the sticky timeout, then went to another worker.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from durable_crash_kit import (
    WorkerProcess,
    Workers,
    activity_runs,
    crash_request,
    effect_records,
    model_calls,
    stored_counts,
)

__all__ = ["run_crash_loop", "show"]

CALLER = {"org": "acme", "user": "ana"}


async def run_crash_loop(
    durable: Any,
    workers: Workers,
    model: Any,
    *,
    store_url: str,
    effects: str,
    kills: int = 50,
    in_flight: int = 4,
    seed: int = 29,
    drain_seconds: float = 180.0,
) -> tuple[dict[str, Any], list[Any]]:
    """Run the loop (see the module docstring); the figures and the turns' histories."""
    from temporalio.api.enums.v1 import EventType, TimeoutType

    chance = random.Random(seed)
    started = time.monotonic()
    slots: list[WorkerProcess] = [workers.start(f"w{i}.0") for i in range(3)]
    for worker in slots:
        await worker.wait_ready()
    # The restarted worker: a process started on standby (imported, connected), told to
    # serve when its slot's worker is killed, so the loop does not wait for Python's
    # start-up on a busy machine.
    spares = [workers.start("s0", standby=True)]
    killed: list[dict[str, Any]] = []
    turns: dict[str, asyncio.Task[Any]] = {}
    rounds_of: dict[str, int] = {}
    stop = asyncio.Event()
    starting: dict[str, float] = {}

    async def killer() -> None:
        while len(killed) < kills:
            await asyncio.sleep(chance.uniform(1.0, 2.0))
            alive = [i for i, w in enumerate(slots) if w.ready()]
            while len(alive) < 2:  # one worker always serves: the turns go on
                await asyncio.sleep(0.05)
                alive = [i for i, w in enumerate(slots) if w.ready()]
            slot = chance.choice(alive)
            victim = slots[slot]
            victim.kill()
            killed.append({"worker": victim.identity, "at": time.monotonic() - started})
            spare = spares.pop(0)
            spare.go()
            starting[spare.identity] = time.monotonic()
            slots[slot] = spare
            spares.append(workers.start(f"s{len(killed) + 1}", standby=True))
        stop.set()

    async def client() -> None:
        number = 0
        running: set[asyncio.Task[Any]] = set()
        while not stop.is_set():
            while len(running) < in_flight and not stop.is_set():
                number += 1
                label = f"k{number}"
                rounds = chance.choice((1, 2))
                rounds_of[label] = rounds
                request = crash_request(
                    label,
                    rounds=rounds,
                    tool_seconds=round(chance.uniform(0.2, 1.0), 2),
                    model_delay=round(chance.uniform(0.1, 0.5), 2),
                )
                task = asyncio.ensure_future(durable.run_with_workers(request, CALLER))
                turns[label] = task
                running.add(task)
            _, running = await asyncio.wait(
                running, timeout=0.2, return_when=asyncio.FIRST_COMPLETED
            )

    await asyncio.gather(killer(), client())
    loop_seconds = time.monotonic() - started
    if turns:
        await asyncio.wait(turns.values(), timeout=drain_seconds)

    calls = model_calls(model)
    records = effect_records(effects)
    starts = collections.Counter(r["tool_call_id"] for r in records if r["kind"] == "start")
    done = collections.Counter(r["tool_call_id"] for r in records if r["kind"] == "effect")
    figures: dict[str, Any] = collections.defaultdict(int)
    figures.update(kills=len(killed), turns_started=len(turns), loop_seconds=round(loop_seconds))
    histories = []
    problems: list[str] = []
    problems_seen: list[str] = []
    for label, task in turns.items():
        rounds = rounds_of[label]
        if not task.done() or task.exception() is not None:
            figures["turns_lost"] += 1
            problems.append(f"{label}: no answer")
            continue
        report, output = task.result()
        if not report.successful or output is None or report.session_id is None:
            figures["turns_lost"] += 1
            problems.append(f"{label}: {report.result.errors}")
            continue
        figures["turns_answered"] += 1
        figures["rounds"] += rounds + 1
        if len(output.workers) > 1:
            figures["turns_on_several_workers"] += 1
        turn_rows, messages = stored_counts(store_url, report.session_id)
        if turn_rows == 0:
            figures["turns_lost"] += 1
            problems.append(f"{label}: answered but not stored")
        history = await durable.client.get_workflow_handle(output.workflow_id).fetch_history()
        runs = activity_runs(history)
        commits = [r for r in runs if r.kind == "aptix.store.apply"]
        if turn_rows > 1 or messages != 2 + 2 * rounds or len(commits) != 1:
            figures["commits_twice"] += 1
            problems.append(f"{label}: {turn_rows} rows, {messages} messages, {len(commits)}")
        figures["commit_attempts_beyond_first"] += sum(r.attempt - 1 for r in commits)
        models = [r for r in runs if r.kind == "aptix.llm.complete"]
        tools = [r for r in runs if r.kind == "aptix.tool.call"]
        if len(models) != rounds + 1 or len(tools) != rounds:
            problems.append(f"{label}: {len(models)} model calls, {len(tools)} tools")
        for number, run in enumerate(models):
            sent = calls[(label, number)]
            figures["model_calls"] += sent
            figures["model_calls_repeated_in_flight"] += min(sent, run.attempt) - 1
            figures["completed_model_calls_repeated"] += max(0, sent - run.attempt)
        for number, run in enumerate(tools):
            call_id = f"{label}-r{number}"
            figures["tool_runs"] += starts[call_id]
            figures["tool_runs_repeated"] += max(0, min(starts[call_id], run.attempt) - 1)
            figures["completed_tool_calls_rerun"] += max(0, starts[call_id] - run.attempt)
            figures["tool_effects_doubled"] += done[call_id] > 1
            figures["tool_effects_missing"] += done[call_id] == 0
        timed_out = [
            event.workflow_task_timed_out_event_attributes.timeout_type
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
        ]
        # A task on a dead worker's sticky queue moves on after the sticky timeout; one a
        # worker had started when it died, after the workflow task timeout.
        figures["sticky_tasks_moved_on"] += timed_out.count(
            TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
        )
        figures["workflow_tasks_killed"] += timed_out.count(TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE)
        seconds = (
            history.events[-1].event_time.ToNanoseconds()
            - history.events[0].event_time.ToNanoseconds()
        ) / 1e9
        if seconds > 30 or any(done[f"{label}-r{n}"] == 0 for n in range(rounds)):
            keep = workers.directory / f"history-{label}.json"
            keep.write_text(history.to_json(), encoding="utf-8")
            problems_seen.append(f"{label}: {seconds:.0f} s, history in {keep}")
        figures["turn_seconds_max"] = max(
            figures["turn_seconds_max"],
            round(
                (
                    history.events[-1].event_time.ToNanoseconds()
                    - history.events[0].event_time.ToNanoseconds()
                )
                / 1e9,
                1,
            ),
        )
        if timed_out or any(r.attempt > 1 for r in runs):
            histories.append(history)
    figures["turns_touched_by_a_kill"] = len(histories)
    figures["restart_to_serving_seconds_max"] = round(
        max(ready_after(starting, workers), default=0), 1
    )
    figures["problems"] = problems[:20]
    figures["slow_turns"] = problems_seen[:20]
    return dict(figures), histories


def ready_after(starting: dict[str, float], workers: Workers) -> list[float]:
    """Seconds from each restart to the worker's ``ready`` mark."""
    from durable_crash_kit import marks

    ready = {m["worker"]: m["at"] for m in marks(workers.marks) if m["kind"] == "ready"}
    wall = time.time() - time.monotonic()
    return [ready[name] - (at + wall) for name, at in starting.items() if name in ready]


def show(figures: dict[str, Any]) -> str:
    """The figures as lines for a note."""
    return "\n".join(f"{name:34} {value}" for name, value in figures.items())


if __name__ == "__main__":
    print(
        show(
            json.loads(
                Path(sys.argv[1] if len(sys.argv) > 1 else "build/crash-loop.json").read_text()
            )
        )
    )
