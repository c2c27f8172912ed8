"""``bench/durable.py``: the breakdown ``make bench`` prints is read from a real durable
turn's workflow history: each workflow task, each activity and each local activity
named, in the order they ran (D562)."""

from __future__ import annotations

from types import ModuleType

import pytest
from bench_kit import bench_module
from durable_kit import durable_client, pipeline_on
from engine_kit import CALLER, text
from temporal_kit import durable_worker

from aptix_pipeline.adapters.temporal import DurablePipeline


@pytest.fixture(scope="module")
def bench_durable() -> ModuleType:
    """``bench/durable.py``, loaded from its file (``bench/`` is no package)."""
    return bench_module("durable")


@pytest.mark.decision("D562")
async def test_the_breakdown_names_each_task_and_activity_of_a_durable_turn(
    bench_durable: ModuleType, temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    async with durable_worker(client, pipeline_on(replies=[text("hello")]), task_queue):
        report, output = await DurablePipeline(client, task_queue=task_queue).run_with_workers(
            {"Instruction": "hi"}, CALLER
        )
    assert report.successful
    assert output is not None
    history = await client.get_workflow_handle(output.workflow_id).fetch_history()
    spans = bench_durable.breakdown(history.events)
    reads = "agents.get_agent_context, agents.get_conversation_context, modes.get_mode"
    assert [what for what, _ in spans] == [
        "workflow task 1: scheduled → started",
        f"workflow task 1: started → completed (local: {reads}, modes.list_modes)",
        # the memory store is a usage ledger: the model call is reserved first (D595)
        "activity usage.reserve: scheduled → started",
        "activity usage.reserve: started → completed",
        "workflow task 2: scheduled → started",
        "workflow task 2: started → completed",
        "activity llm.complete: scheduled → started",
        "activity llm.complete: started → completed",
        "workflow task 3: scheduled → started",
        "workflow task 3: started → completed",
        "activity store.apply: scheduled → started",
        "activity store.apply: started → completed",
        "workflow task 4: scheduled → started",
        "workflow task 4: started → completed",
        # and settled once the turn has ended
        "activity usage.settle: scheduled → started",
        "activity usage.settle: started → completed",
        "workflow task 5: scheduled → started",
        # the turn's trace is kept by a local activity on the same task (D678)
        "workflow task 5: started → completed (local: trace.keep)",
        "workflow: started → completed",
    ]
    # The parts are in order and within the whole.
    whole = spans[-1][1]
    assert all(took >= 0 for _, took in spans)
    assert sum(took for _, took in spans[:-1]) <= whole + 0.001
