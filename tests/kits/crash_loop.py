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
- every tool round calls ``slow_note`` (not idempotent) then ``keyed_note``
  (``idempotent = "by_key"``); both run through the tool ledger (docs/TOOLS.md);
- ``tool_runs_repeated``: ``slow_note`` calls run more than once (must be 0: the
  ledger never runs it blindly twice); ``completed_tool_calls_rerun``: tool runs
  beyond their activity's attempts (must be 0);
- ``tool_effects_doubled``: ``slow_note`` calls with two effects (must be 0);
  ``tool_effects_missing``: ``slow_note`` calls with no effect that no kill
  interrupted and the policy did not fail (must be 0);
- ``non_idempotent_interrupted``: ``slow_note`` calls whose worker was killed after
  the ledger reserved them (a ``start`` record of an attempt before the one that
  ended the activity); ``policy_followed``: those whose record names rule
  ``DESIGN/ledger/possibly-executed``, with one ``start`` and at most one effect;
  ``non_idempotent_answered_from_ledger``: calls killed after the ledger recorded
  them done, which the next attempt answered from the ledger with the one effect;
  ``policy_applied``: calls with that rule in all (a kill after the reservation,
  before the ``start`` record, gives one too); ``policy_without_a_kill``: of those,
  calls whose activity ran only once (must be 0);
- ``idempotent_interrupted``: ``keyed_note`` calls whose worker was killed after the
  reservation (as above); ``idempotent_rerun``: those run again by a later attempt
  and answered (record ``executed``) with exactly one effect;
  ``idempotent_answered_from_ledger``: calls killed after *done*, answered from the
  ledger with one effect;
  ``idempotent_effect_runs_deduplicated``: runs whose keyed insert found the key's
  row already there (a worker killed after the effect, before the ledger's *done*);
- ``idempotent_effects_doubled``: ``keyed_note`` calls with more than one effect
  row, counted per idempotency key (one key's rows are unique, so a call's second
  row would be a second key: must be 0); ``idempotent_effects_missing``: calls with
  none (must be 0);
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
    keyed_effects,
    ledger_done_keys,
    model_calls,
    stored_counts,
)

__all__ = ["run_crash_loop", "show"]

CALLER = {"org": "acme", "user": "ana"}
POSSIBLY_EXECUTED = "DESIGN/ledger/possibly-executed"
TOOLS = "sk"
"""Each tool round: ``slow_note`` then ``keyed_note`` (``crash_request``'s ``tools``)."""


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
                    tools=TOOLS,
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
    starts: dict[str, list[int]] = collections.defaultdict(list)
    for record in records:
        if record["kind"] == "start":
            starts[record["tool_call_id"]].append(record["attempt"])
    done = collections.Counter(r["tool_call_id"] for r in records if r["kind"] == "effect")
    keyed_rows = collections.Counter(row["tool_call_id"] for row in keyed_effects(effects))
    done_keys = ledger_done_keys(store_url)
    key_of = {r["tool_call_id"]: r["key"] for r in records if r["kind"] == "start"}
    deduplicated = sum(1 for r in records if r["kind"] == "keyed" and not r["took"])
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
        if turn_rows > 1 or messages != 2 + (1 + len(TOOLS)) * rounds or len(commits) != 1:
            figures["commits_twice"] += 1
            problems.append(f"{label}: {turn_rows} rows, {messages} messages, {len(commits)}")
        figures["commit_attempts_beyond_first"] += sum(r.attempt - 1 for r in commits)
        models = [r for r in runs if r.kind == "aptix.llm.complete"]
        tools = [r for r in runs if r.kind == "aptix.tool.call"]
        if len(models) != rounds + 1 or len(tools) != len(TOOLS) * rounds:
            problems.append(f"{label}: {len(models)} model calls, {len(tools)} tools")
        for number, run in enumerate(models):
            sent = calls[(label, number)]
            figures["model_calls"] += sent
            figures["model_calls_repeated_in_flight"] += min(sent, run.attempt) - 1
            figures["completed_model_calls_repeated"] += max(0, sent - run.attempt)
        fates = {c.tool_call_id: c for c in report.tool_calls}
        for number in range(rounds):
            slow_run, keyed_run = tools[2 * number : 2 * number + 2]
            slow, keyed = f"{label}-r{number}", f"{label}-k{number}"
            figures["tool_runs"] += len(starts[slow]) + len(starts[keyed])
            figures["tool_runs_repeated"] += max(0, len(starts[slow]) - 1)
            figures["completed_tool_calls_rerun"] += sum(
                max(0, len(starts[call]) - run.attempt)
                for call, run in ((slow, slow_run), (keyed, keyed_run))
            )
            figures["tool_effects_doubled"] += done[slow] > 1
            ruled = slow in fates and fates[slow].rule_id == POSSIBLY_EXECUTED
            figures["policy_applied"] += ruled
            figures["policy_without_a_kill"] += ruled and slow_run.attempt == 1
            killed_after_start = any(a < slow_run.attempt for a in starts[slow])
            if killed_after_start and _from_ledger(
                slow, slow_run, fates, starts, done_keys, key_of
            ):
                # Killed after the ledger recorded it done: answered from the ledger.
                figures["non_idempotent_answered_from_ledger"] += done[slow] == 1
            elif killed_after_start:
                figures["non_idempotent_interrupted"] += 1
                if ruled and len(starts[slow]) == 1 and done[slow] <= 1:
                    figures["policy_followed"] += 1
                else:
                    problems.append(f"{slow}: interrupted, {fates.get(slow)}, {done[slow]}")
            elif done[slow] == 0 and not ruled:
                figures["tool_effects_missing"] += 1
                problems.append(f"{slow}: no effect, {fates.get(slow)}")
            figures["idempotent_effects_doubled"] += keyed_rows[keyed] > 1
            figures["idempotent_effects_missing"] += keyed_rows[keyed] == 0
            killed_after_start = any(a < keyed_run.attempt for a in starts[keyed])
            if killed_after_start and _from_ledger(
                keyed, keyed_run, fates, starts, done_keys, key_of
            ):
                figures["idempotent_answered_from_ledger"] += keyed_rows[keyed] == 1
            elif killed_after_start:
                figures["idempotent_interrupted"] += 1
                completed = keyed in fates and fates[keyed].outcome == "executed"
                if completed and keyed_run.attempt in starts[keyed] and keyed_rows[keyed] == 1:
                    figures["idempotent_rerun"] += 1
                else:
                    rows = keyed_rows[keyed]
                    problems.append(f"{keyed}: interrupted, {fates.get(keyed)}, {rows}")
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
        if seconds > 30 or any(keyed_rows[f"{label}-k{n}"] == 0 for n in range(rounds)):
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
    figures["idempotent_effect_runs_deduplicated"] = deduplicated
    figures["turns_touched_by_a_kill"] = len(histories)
    figures["restart_to_serving_seconds_max"] = round(
        max(ready_after(starting, workers), default=0), 1
    )
    figures["problems"] = problems[:20]
    figures["slow_turns"] = problems_seen[:20]
    return dict(figures), histories


def _from_ledger(
    call: str,
    run: Any,
    fates: dict[str, Any],
    starts: dict[str, list[int]],
    done_keys: set[str],
    key_of: dict[str, str],
) -> bool:
    """Whether ``call``'s last attempt was answered from the ledger: its key is done,
    the tool ran once, on an earlier attempt, and the call's record is ``executed``."""
    return (
        key_of.get(call) in done_keys
        and run.attempt not in starts[call]
        and len(starts[call]) == 1
        and call in fates
        and fates[call].outcome == "executed"
    )


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
