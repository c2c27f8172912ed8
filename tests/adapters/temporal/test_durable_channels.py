"""What goes around a durable turn: spans and recordings once, streaming, one turn per key,
large payloads by reference, Temporal's own errors, and Temporal away (docs/DURABLE.md)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from durable_kit import CountingLLM, durable_client, normalised, pipeline_on
from engine_kit import CALLER, SUPPORT_CATALOG, call, calls, follow_on, ok, text
from span_kit import Recorded
from temporal_kit import durable_worker, free_port

from aptix_pipeline import (
    STEP_FUNCTIONS,
    PipelineStep,
    Recorder,
    RecordingOptions,
    StreamResult,
    TurnRecording,
    TurnScope,
    replay,
)
from aptix_pipeline.adapters.temporal import (
    DirectoryBlobs,
    DurablePipeline,
    DurableProgress,
    connect,
)

TWO_ROUNDS = [
    text("first"),
    calls(call("s1", "lookup", {"id": "T-1"})),
    calls(call("s2", "lookup", {"id": "T-2"})),
    text("both are open"),
]


async def lookup(arguments: dict[str, Any], invocation: Any) -> str:
    return json.dumps({"status": "open", "id": arguments.get("id")})


@pytest.mark.decision("D532")
async def test_spans_are_exported_once_when_every_workflow_task_replays(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    durable_spans, local_spans = Recorded(), Recorded()
    host = pipeline_on(
        replies=TWO_ROUNDS,
        config=SUPPORT_CATALOG,
        tools={"lookup": lookup},
        telemetry=durable_spans.telemetry(),
    )
    local = pipeline_on(
        replies=TWO_ROUNDS,
        config=SUPPORT_CATALOG,
        tools={"lookup": lookup},
        telemetry=local_spans.telemetry(),
    )
    durable = DurablePipeline(client, task_queue=task_queue)
    async with durable_worker(client, host, task_queue, max_cached_workflows=0):
        first = await durable.run({"Instruction": "hi"}, CALLER)
        await durable.run(follow_on(ok(first.result), "status?"), CALLER)
    local_first = await local.run({"Instruction": "hi"}, CALLER)
    await local.run(follow_on(ok(local_first.result), "status?"), CALLER)
    names = sorted(span.name for span in durable_spans.spans)
    assert names == sorted(span.name for span in local_spans.spans)
    roots = [span for span in durable_spans.spans if span.parent is None]
    assert len(roots) == 2  # one tree per turn, none re-opened by a replay


@pytest.mark.decision("D536")
@pytest.mark.decision("D537")
async def test_a_durable_turn_is_recorded_with_its_workers_and_replays_in_process(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    client = await durable_client(temporal_address)
    folder = tmp_path / "recordings"
    host = pipeline_on(
        replies=TWO_ROUNDS,
        config=SUPPORT_CATALOG,
        tools={"lookup": lookup},
        interceptors=[Recorder(RecordingOptions(directory=folder))],
    )
    durable = DurablePipeline(client, task_queue=task_queue)
    async with durable_worker(client, host, task_queue, identity="worker-a"):
        first = await durable.run({"Instruction": "hi"}, CALLER)
        second, output = await durable.run_with_workers(
            follow_on(ok(first.result), "status?"), CALLER
        )
    assert output is not None
    assert output.workers == ["worker-a"]
    files = sorted(folder.glob("*.json"))
    assert len(files) == 2
    recordings = [TurnRecording.load(path) for path in files]
    recording = next(r for r in recordings if r.trace.turn_id == second.turn_id)
    assert recording.durable is not None
    assert recording.durable["workers"] == ["worker-a"]
    assert recording.durable["workflow_id"].startswith("aptix-turn-")
    assert normalised(recording.trace) == normalised(second.trace)
    # The recording replays on in-process ports, with no Temporal and no model.
    outcome = await replay(recording)
    assert outcome.ok, outcome


@pytest.mark.decision("D539")
async def test_a_durable_stream_gives_progress_per_step_then_the_result(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    host = pipeline_on(replies=[text("hello")])
    async with durable_worker(client, host, task_queue):
        items = [
            item
            async for item in DurablePipeline(client, task_queue=task_queue).stream(
                {"Instruction": "hi"}, CALLER
            )
        ]
    assert isinstance(items[-1], StreamResult)
    assert ok(items[-1].result).primary_output_text == "hello"
    progress = [item for item in items if isinstance(item, DurableProgress)]
    kinds = [item.data["event"] for item in progress]
    assert "StepStarted" in kinds
    assert "ModelCallFinished" in kinds
    assert all(item.name == "progress" for item in progress)
    assert all(isinstance(item.to_json(), dict) for item in progress)


@pytest.mark.decision("D530")
async def test_the_same_keyed_request_started_twice_at_once_is_one_turn(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("once"), text("twice")], delay=0.5)
    durable = DurablePipeline(client, task_queue=task_queue)
    async with durable_worker(client, pipeline_on(replies=llm), task_queue):
        first, second = await asyncio.gather(
            durable.run({"Instruction": "hi"}, CALLER, idempotency_key="order-7"),
            durable.run({"Instruction": "hi"}, CALLER, idempotency_key="order-7"),
        )
        later = await durable.run({"Instruction": "hi"}, CALLER, idempotency_key="order-7")
    assert llm.calls == 1
    assert ok(first.result) == ok(second.result) == ok(later.result)
    assert later.replayed  # answered from the stored answer by a new workflow


@pytest.mark.decision("D539")
async def test_a_temporal_that_cannot_be_reached_is_an_unsuccessful_result() -> None:
    from temporalio.client import Client

    from aptix_pipeline.adapters.temporal import data_converter

    address = f"127.0.0.1:{free_port()}"
    client = await Client.connect(address, data_converter=data_converter(), lazy=True)
    report = await DurablePipeline(client).run({"Instruction": "hi"}, CALLER)
    assert not report.successful
    [error] = report.result.errors
    assert (str(error.code), error.field) == ("port_failed", "Temporal")


def _image_request(megabytes: float) -> dict[str, Any]:
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(int(megabytes * 1024 * 1024))).decode()
    return {
        "Instruction": "describe it",
        "ClipboardImages": [{"Id": "shot", "MimeType": "image/png", "DataBase64": data}],
    }


@pytest.mark.decision("D538")
async def test_a_request_over_two_megabytes_travels_by_reference(
    temporal_address: str, task_queue: str, tmp_path: Path
) -> None:
    blobs = DirectoryBlobs(tmp_path / "blobs")
    client = await connect(temporal_address, blobs=blobs)
    llm = CountingLLM([text("a picture")])
    async with durable_worker(client, pipeline_on(replies=llm), task_queue):
        durable = DurablePipeline(client, task_queue=task_queue)
        handle = await durable.start(_image_request(3), CALLER)
        output = await handle.result()
        history = await handle.fetch_history()
    assert output.report["result"]["Successful"], output.report["result"]
    assert llm.calls == 1
    biggest = max(len(event.SerializeToString()) for event in history.events)
    assert biggest < 256 * 1024 + 4096  # only references in the history
    assert any((tmp_path / "blobs").rglob("*"))


@pytest.mark.decision("D538")
async def test_without_a_blob_store_a_request_over_the_cap_is_a_clean_failure(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("never")])
    async with durable_worker(client, pipeline_on(replies=llm), task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(_image_request(3), CALLER)
    assert not report.successful
    [error] = report.result.errors
    assert (str(error.code), error.field) == ("port_failed", "Temporal")
    assert llm.calls == 0


@pytest.mark.decision("D531")
async def test_a_sandbox_refusal_fails_the_workflow_task_instead_of_the_turn(
    temporal_address: str, task_queue: str
) -> None:
    """A step that reads the environment inside the workflow: Temporal's sandbox refuses,
    the engine re-raises the refusal, and the workflow task fails (Temporal retries it);
    the turn does not complete as ``internal``."""

    async def nosy(scope: TurnScope) -> None:
        import os

        os.environ.get("HOME")
        await STEP_FUNCTIONS[PipelineStep.RESPONSE_BUILDER](scope)

    host = pipeline_on(replies=[text("hi")], steps={PipelineStep.RESPONSE_BUILDER: nosy})
    client = await durable_client(temporal_address)
    durable = DurablePipeline(client, task_queue=task_queue, turn_timeout_seconds=3)
    async with durable_worker(client, host, task_queue):
        report, output = await durable.run_with_workers({"Instruction": "hi"}, CALLER)
    assert output is None
    assert not report.successful
    [error] = report.result.errors
    assert error.field == "Temporal"  # the workflow timed out retrying; it never COMPLETED
    assert "timed out" in error.message.lower()
