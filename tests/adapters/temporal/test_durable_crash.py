"""Crash and resume (docs/DURABLE.md "Crash and resume"): worker processes killed with
kill -9 during a model call, during a long server tool and between rounds; another
worker finishes the turn. The real OpenAI-compatible adapter on the fake model server
(which counts the calls), a real SQLite file or PostgreSQL, the Temporal dev server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crash_loop import run_crash_loop, show
from durable_crash_kit import (
    ActivityRun,
    Workers,
    activity_runs,
    crash_request,
    effect_records,
    keyed_effects,
    marks,
    model_calls,
    respond,
    stored_counts,
    wait_until,
)
from durable_kit import durable_client, pipeline_on
from durable_worker_process import crash_options, crash_pipeline
from engine_kit import CALLER, SUPPORT_CATALOG, call, calls, ok, text
from repo import ROOT
from temporal_kit import durable_worker
from temporalio.api.enums.v1 import EventType

from aptix_pipeline import TurnReport
from aptix_pipeline.adapters.stores import open_store
from aptix_pipeline.adapters.temporal import DurablePipeline, DurableSettings, replaying
from aptix_pipeline.testing import FakeOpenAIServer, fake_openai_server

STORES = ("sqlite", "postgres")
TRANSCRIPT_OF_ONE_TOOL_ROUND = 4
"""user, assistant (the tool call), tool, assistant (the answer)."""


@dataclass
class Rig:
    """What one crash test runs on."""

    model: FakeOpenAIServer
    workers: Workers
    durable: DurablePipeline
    store_url: str
    effects: str
    task_queue: str


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'sessions.db'}"
    url: str = request.getfixturevalue("postgres_db_url")
    return url


@contextlib.asynccontextmanager
async def _rig_on(
    store_url: str, tmp_path: Path, temporal_address: str, task_queue: str
) -> AsyncIterator[Rig]:
    effects = store_url if store_url.startswith("postgresql") else str(tmp_path / "effects.jsonl")
    client = await durable_client(temporal_address)
    with fake_openai_server(respond=respond) as model:
        workers = Workers(
            tmp_path,
            address=temporal_address,
            task_queue=task_queue,
            store_url=store_url,
            model_url=model.base_url,
            effects=effects,
        )
        try:
            yield Rig(
                model,
                workers,
                DurablePipeline(client, task_queue=task_queue),
                store_url,
                effects,
                task_queue,
            )
        finally:
            workers.stop()


@pytest.fixture
async def rig(
    store_url: str, tmp_path: Path, temporal_address: str, task_queue: str
) -> AsyncIterator[Rig]:
    async with _rig_on(store_url, tmp_path, temporal_address, task_queue) as made:
        yield made


def _records(rig: Rig, kind: str, call_id: str) -> list[dict[str, Any]]:
    return [
        r for r in effect_records(rig.effects) if r["kind"] == kind and r["tool_call_id"] == call_id
    ]


async def _history(rig: Rig, workflow_id: str) -> Any:
    return await rig.durable.client.get_workflow_handle(workflow_id).fetch_history()


def _workers_keep_usage(rig: Rig) -> bool:
    """Whether the workers' store is a ``UsageLedger``: their turns' histories then hold
    its activities, and the replayer's pipeline (on a memory store, which is one) keeps
    usage exactly then (D595)."""
    from aptix_pipeline.adapters.stores import PostgresStore, SQLiteStore
    from aptix_pipeline.contracts import UsageLedger

    kind = SQLiteStore if rig.store_url.startswith("sqlite:") else PostgresStore
    return issubclass(kind, UsageLedger)


async def _replays_on_todays_code(rig: Rig, histories: list[Any]) -> None:
    """Temporal's replayer runs the histories on today's workflow code: it raises on
    any command the code would give that the history does not hold."""
    pipeline = crash_pipeline(
        open_store("memory"),
        rig.model.base_url,
        options=dataclasses.replace(crash_options(), usage_ledger=_workers_keep_usage(rig)),
    )
    failures = []
    with replaying(pipeline) as checker:
        for history in histories:
            result = await checker.replay_workflow(history, raise_on_replay_failure=False)
            if result.replay_failure is not None:
                failures.append((history.workflow_id, repr(result.replay_failure)))
    assert failures == []


async def _one_turn_resumed(rig: Rig, label: str, report_and_output: Any) -> list[ActivityRun]:
    """The checks every crash test makes once the turn has answered."""
    report, output = report_and_output
    assert ok(report.result).primary_output_text == f"done {label}"
    assert output is not None
    assert "b" in output.workers
    # Exactly one workflow ran the turn, and it answered once.
    history = await _history(rig, output.workflow_id)
    assert history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    runs = activity_runs(history)
    # Committed exactly once: one turn row, the transcript not doubled.
    assert report.session_id is not None
    assert stored_counts(rig.store_url, report.session_id) == (1, TRANSCRIPT_OF_ONE_TOOL_ROUND)
    assert [r.kind for r in runs if r.kind == "aptix.store.apply"] == ["aptix.store.apply"]
    await _replays_on_todays_code(rig, [history])
    return runs


@pytest.mark.decision("D540", "D543", "D537", "D546")
async def test_a_worker_killed_during_a_model_call_leaves_the_turn_to_another(
    rig: Rig,
) -> None:
    a = rig.workers.start("a")
    await a.wait_ready()
    turn = asyncio.ensure_future(
        rig.durable.run_with_workers(crash_request("m1", slow_round=1, slow_delay=2.0), CALLER)
    )
    await wait_until(lambda: model_calls(rig.model)[("m1", 1)] == 1, what="the second model call")
    a.kill()
    rig.workers.start("b")
    done = await asyncio.wait_for(turn, 90)
    runs = await _one_turn_resumed(rig, "m1", done)
    # The first call had completed: not made again. The killed one was made again.
    assert model_calls(rig.model) == {("m1", 0): 1, ("m1", 1): 2}
    models = [r for r in runs if r.kind == "aptix.llm.complete"]
    # The killed attempt was one of the call's attempts (D546); both workers are named.
    assert [(r.attempt, r.completed) for r in models] == [(1, True), (2, True)]
    assert done[1] is not None
    assert done[1].workers == ["a", "b"]
    assert len(_records(rig, "effect", "m1-r0")) == 1


@pytest.mark.decision("D540", "D573")
async def test_a_worker_killed_during_an_idempotent_tool_leaves_the_call_to_another(
    rig: Rig,
) -> None:
    """``keyed_note`` is ``idempotent = "by_key"``: the ledger lets the next worker run
    the reserved call again, with the same key, and the tool makes one effect."""
    a = rig.workers.start("a")
    await a.wait_ready()
    turn = asyncio.ensure_future(
        rig.durable.run_with_workers(crash_request("t1", tool_seconds=3.0, tools="k"), CALLER)
    )
    await wait_until(lambda: bool(_records(rig, "start", "t1-k0")), what="the tool to start")
    a.kill()
    rig.workers.start("b")
    done = await asyncio.wait_for(turn, 90)
    runs = await _one_turn_resumed(rig, "t1", done)
    assert model_calls(rig.model) == {("t1", 0): 1, ("t1", 1): 1}
    # The tool was cut short before its effect: run again on b with the same key.
    starts = _records(rig, "start", "t1-k0")
    assert [r["worker"] for r in starts] == ["a", "b"]
    assert starts[0]["key"] == starts[1]["key"] is not None
    assert [(r["worker"], r["key"]) for r in keyed_effects(rig.effects)] == [
        ("b", starts[0]["key"])
    ]
    tools = [r for r in runs if r.kind == "aptix.tool.call"]
    assert [(r.attempt, r.completed) for r in tools] == [(2, True)]
    report = done[0]
    assert [(c.tool_call_id, c.outcome, c.rule_id) for c in report.tool_calls] == [
        ("t1-k0", "executed", None)
    ]


@pytest.mark.decision("D540", "D574")
async def test_a_worker_killed_during_a_tool_not_idempotent_leaves_the_call_failed_by_policy(
    rig: Rig,
) -> None:
    """``slow_note`` is not idempotent: the next worker finds its call reserved and not
    done, does not run it again, and the turn goes on with the call failed as possibly
    executed; the model is told."""
    a = rig.workers.start("a")
    await a.wait_ready()
    turn = asyncio.ensure_future(
        rig.durable.run_with_workers(crash_request("p1", tool_seconds=3.0), CALLER)
    )
    await wait_until(lambda: bool(_records(rig, "start", "p1-r0")), what="the tool to start")
    a.kill()
    rig.workers.start("b")
    done = await asyncio.wait_for(turn, 90)
    runs = await _one_turn_resumed(rig, "p1", done)
    assert model_calls(rig.model) == {("p1", 0): 1, ("p1", 1): 1}
    # Started once (on a), never run again, no effect: a died before it.
    assert [r["worker"] for r in _records(rig, "start", "p1-r0")] == ["a"]
    assert _records(rig, "effect", "p1-r0") == []
    tools = [r for r in runs if r.kind == "aptix.tool.call"]
    assert [(r.attempt, r.completed) for r in tools] == [(2, True)]
    report = done[0]
    assert [(c.tool_call_id, c.outcome, c.rule_id) for c in report.tool_calls] == [
        ("p1-r0", "failed", "DESIGN/ledger/possibly-executed")
    ]
    told = json.dumps(rig.model.completions()[-1].body)
    assert "ToolPossiblyExecutedError: tool_possibly_executed" in told
    assert "p1-r0" in told


@pytest.mark.decision("D540", "D545")
async def test_a_worker_killed_between_rounds_leaves_the_turn_to_another(rig: Rig) -> None:
    """The worker dies in the workflow task that follows the tool's answer: no call is in
    flight; the next worker replays the history and goes on with the second round."""
    a = rig.workers.start("a", "--pause-between-rounds", "1.5")
    await a.wait_ready()
    turn = asyncio.ensure_future(rig.durable.run_with_workers(crash_request("b1"), CALLER))
    await wait_until(
        lambda: any(m["kind"] == "between" for m in marks(rig.workers.marks)),
        what="the turn to be between its rounds",
    )
    a.kill()
    rig.workers.start("b")
    done = await asyncio.wait_for(turn, 90)
    runs = await _one_turn_resumed(rig, "b1", done)
    assert model_calls(rig.model) == {("b1", 0): 1, ("b1", 1): 1}
    assert len(_records(rig, "start", "b1-r0")) == 1
    assert len(_records(rig, "effect", "b1-r0")) == 1
    assert all(r.attempt == 1 for r in runs)


@pytest.mark.decision("D547")
async def test_the_commit_heartbeats_so_a_worker_dead_mid_commit_is_noticed_at_once(
    rig: Rig,
) -> None:
    rig.workers.start("a")
    report, output = await asyncio.wait_for(
        rig.durable.run_with_workers(crash_request("c1", rounds=0), CALLER), 90
    )
    assert ok(report.result).primary_output_text == "done c1"
    assert output is not None
    history = await _history(rig, output.workflow_id)
    commits = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "aptix.store.apply"
    ]
    assert [c.heartbeat_timeout.ToTimedelta().total_seconds() for c in commits] == [1.0]


@pytest.mark.decision("D543")
async def test_the_replayer_fails_a_history_that_todays_code_would_not_repeat(
    rig: Rig,
) -> None:
    """The determinism check is a real one: a pipeline with no turn deadline gives no
    deadline timer, so the history of a turn run with one does not replay on it."""
    rig.workers.start("a")
    report, output = await asyncio.wait_for(
        rig.durable.run_with_workers(crash_request("r1", rounds=0), CALLER), 90
    )
    assert ok(report.result).primary_output_text == "done r1"
    assert output is not None
    history = await _history(rig, output.workflow_id)
    await _replays_on_todays_code(rig, [history])
    changed = crash_pipeline(
        open_store("memory"),
        rig.model.base_url,
        options=dataclasses.replace(
            crash_options(), turn_deadline_seconds=None, usage_ledger=_workers_keep_usage(rig)
        ),
    )
    with replaying(changed) as checker:
        result = await checker.replay_workflow(history, raise_on_replay_failure=False)
    assert "Nondeterminism" in repr(result.replay_failure)


REPLAYED_AT_MOST = 30
"""Histories of the loop replayed by Temporal's replayer: those a kill touched, up to this."""


@pytest.mark.decision("D540", "D542", "D543", "D575", "D576")
async def test_fifty_kills_of_three_workers_lose_no_turn_and_repeat_no_completed_call(
    postgres_db_url: str, tmp_path: Path, temporal_address: str, task_queue: str
) -> None:
    """The kill -9 loop (tests/kits/crash_loop.py) on PostgreSQL, the multi-machine store."""
    async with _rig_on(postgres_db_url, tmp_path, temporal_address, task_queue) as loop_rig:
        figures, histories = await run_crash_loop(
            loop_rig.durable,
            loop_rig.workers,
            loop_rig.model,
            store_url=loop_rig.store_url,
            effects=loop_rig.effects,
        )
        await _replays_on_todays_code(loop_rig, histories[:REPLAYED_AT_MOST])
    figures["histories_replayed"] = min(len(histories), REPLAYED_AT_MOST)
    saved = tmp_path / "crash-loop.json"
    saved.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    latest = ROOT / "build" / "crash-loop.json"  # the last run's, for the closing note
    latest.parent.mkdir(exist_ok=True)
    latest.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    print(f"crash loop figures ({saved}; python tests/kits/crash_loop.py {latest}):")
    print(show(figures))
    assert figures["kills"] >= 50
    assert figures["problems"] == []
    assert figures["turns_answered"] == figures["turns_started"] > 0
    assert figures.get("turns_lost", 0) == 0
    assert figures.get("commits_twice", 0) == 0
    assert figures.get("completed_model_calls_repeated", 0) == 0
    assert figures.get("completed_tool_calls_rerun", 0) == 0
    assert figures.get("tool_effects_missing", 0) == 0
    # The tool ledger (docs/TOOLS.md): an idempotent tool's effect is never doubled, and
    # every interrupted call of it ran again, once; a tool not idempotent is never run
    # blindly twice, and every interrupted call of it follows the policy.
    assert figures.get("tool_effects_doubled", 0) == 0
    assert figures.get("idempotent_effects_doubled", 0) == 0
    assert figures.get("idempotent_effects_missing", 0) == 0
    assert figures.get("idempotent_rerun", 0) == figures.get("idempotent_interrupted", 0)
    assert figures.get("tool_runs_repeated", 0) == 0
    assert figures.get("policy_followed", 0) == figures.get("non_idempotent_interrupted", 0)
    assert figures.get("policy_without_a_kill", 0) == 0


@pytest.mark.decision("D541")
async def test_a_long_call_heartbeats_four_times_per_heartbeat_timeout(
    temporal_address: str, task_queue: str
) -> None:
    """Temporal hears a running tool's heartbeat every quarter of the timeout, not only
    every 0.8 of it (the SDK's throttle), so a busy worker is not taken for dead."""
    client = await durable_client(temporal_address)

    async def lookup(arguments: dict[str, Any], invocation: Any) -> str:
        await asyncio.sleep(3.0)
        return '{"status": "open"}'

    host = pipeline_on(
        replies=[calls(call("c1", "lookup", {"id": "T-1"})), text("open")],
        config=SUPPORT_CATALOG,
        tools={"lookup": lookup},
    )
    durable = DurablePipeline(client, task_queue=task_queue)
    settings = DurableSettings(heartbeat_seconds=2.0)
    heard: set[Any] = set()
    async with durable_worker(client, host, task_queue, settings=settings):
        handle = await durable.start({"Instruction": "status?"}, CALLER)
        result = asyncio.ensure_future(handle.result())
        while not result.done():
            described = await handle.describe()
            for pending in described.raw_description.pending_activities:
                if pending.HasField("last_heartbeat_time"):
                    heard.add(pending.last_heartbeat_time.ToNanoseconds())
            await asyncio.sleep(0.05)
        output = result.result()
    assert ok(TurnReport.from_dict(output.report).result).primary_output_text == "open"
    assert len(heard) >= 4  # every 0.5 s over 3 s; the SDK's own throttle gives 2
