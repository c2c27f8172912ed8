"""A durable turn happens once: one workflow per keyed request (D530), one commit even when
the commit activity runs again (D535), and one recording that says how it ran (D536)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from durable_kit import CountingLLM, durable_client, pipeline_on
from engine_kit import CALLER, ok, text
from temporal_kit import durable_worker
from temporalio.testing import ActivityEnvironment

from aptix_pipeline import MemoryStore, Recorder, RecordingOptions, TurnRecording
from aptix_pipeline.adapters.temporal import DurablePipeline
from aptix_pipeline.adapters.temporal.activities import TurnActivities


@pytest.mark.decision("D530")
async def test_the_same_keyed_request_started_twice_is_one_turn(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("once")], delay=0.5)
    host = pipeline_on(replies=llm)
    durable = DurablePipeline(client, task_queue=task_queue)
    async with durable_worker(client, host, task_queue):
        first, second = await asyncio.gather(
            durable.run_with_workers({"Instruction": "hi"}, CALLER, idempotency_key="k-1"),
            durable.run_with_workers({"Instruction": "hi"}, CALLER, idempotency_key="k-1"),
        )
    assert first[1] is not None
    assert second[1] is not None
    assert first[1].workflow_id == second[1].workflow_id
    assert ok(first[0].result).turn_id == ok(second[0].result).turn_id
    assert llm.calls == 1


class _Capturing(MemoryStore):
    """A memory store that keeps what each ``apply`` was given."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[Any] = []

    async def apply(self, writes: Any) -> None:
        self.applied.append(writes)
        await super().apply(writes)


@pytest.mark.decision("D535")
async def test_a_commit_run_again_after_it_landed_answers_applied_before() -> None:
    store = _Capturing()
    pipeline = pipeline_on(store, [text("hello")])
    ok((await pipeline.run({"Instruction": "hi"}, CALLER)).result)
    (writes,) = store.applied
    activities = TurnActivities(pipeline, identity="w")

    again = await ActivityEnvironment().run(activities.apply, writes)

    assert again.applied == "before"
    assert len(store.applied) == 2  # tried, refused as a conflict, found to have landed


@pytest.mark.decision("D536")
async def test_a_durable_turn_is_recorded_with_its_workflow_and_workers(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    kept: list[TurnRecording] = []
    host = pipeline_on(
        replies=[text("hello")], interceptors=[Recorder(RecordingOptions(sink=kept.append))]
    )
    async with durable_worker(client, host, task_queue, identity="w-1"):
        report, output = await DurablePipeline(client, task_queue=task_queue).run_with_workers(
            {"Instruction": "hi"}, CALLER
        )
    assert ok(report.result).primary_output_text == "hello"
    assert output is not None
    (recording,) = kept
    assert recording.durable is not None
    assert recording.durable["workflow_id"] == output.workflow_id
    assert recording.durable["workers"] == ["w-1"]
