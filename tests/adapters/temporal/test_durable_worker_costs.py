"""What a durable turn costs its worker, as behaviour: the reads it records in its
history, and the work the worker does not repeat from one workflow run to the next
(docs/PERFORMANCE.md "Durable turns")."""

from __future__ import annotations

from typing import Any

import pytest
from durable_kit import durable_client, local_activities, normalised, pipeline_on
from engine_kit import CALLER, ok, text
from temporal_kit import durable_worker

from aptix_pipeline.adapters.temporal import DurablePipeline, data_converter
from aptix_pipeline.contracts import ModeSpec


@pytest.mark.decision("D560")
async def test_a_durable_turn_reads_each_catalog_entry_once(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    host = pipeline_on(replies=[text("hello")])
    async with durable_worker(client, host, task_queue):
        report, output = await DurablePipeline(client, task_queue=task_queue).run_with_workers(
            {"Instruction": "hi"}, CALLER
        )
    assert output is not None
    history = await client.get_workflow_handle(output.workflow_id).fetch_history()
    reads = local_activities(history.events)
    # The session creator, the prompt and the response builder all ask for the mode:
    # one read answers them all, and the turn is the same as in process.
    assert reads.count("aptix.modes.get_mode") == 1
    assert sorted(reads) == sorted(set(reads))
    local = await pipeline_on(replies=[text("hello")]).run({"Instruction": "hi"}, CALLER)
    assert ok(report.result).primary_output_text == "hello"
    assert normalised(report.trace) == normalised(local.trace)


@pytest.mark.decision("D561")
def test_a_payload_type_is_adapted_once_for_every_workflow_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import TypeAdapter

    converter_class = data_converter().payload_converter_class
    payload = converter_class().to_payloads([[]])[0]  # JSON, not the null encoding
    converter_class().from_payload(payload, list[ModeSpec])  # a first run adapts the type
    built: list[Any] = []
    original = TypeAdapter.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(args)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TypeAdapter, "__init__", counted)
    # Each workflow run makes its own converter (temporalio's sandbox): a later run's
    # converter decodes the same type with the adapter already built.
    assert converter_class().from_payload(payload, list[ModeSpec]) == []
    assert built == []


@pytest.mark.decision("D561")
async def test_the_sandbox_runs_its_snippets_compiled(
    temporal_address: str, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from temporalio.worker.workflow_sandbox import _runner

    given: list[type] = []

    def seen(code: Any, *namespaces: Any) -> None:
        given.append(type(code))
        exec(code, *namespaces)

    monkeypatch.setattr(_runner, "exec", seen, raising=False)
    client = await durable_client(temporal_address)
    async with durable_worker(client, pipeline_on(replies=[text("a"), text("b")]), task_queue):
        durable = DurablePipeline(client, task_queue=task_queue)
        first = await durable.run({"Instruction": "hi"}, CALLER)
        second = await durable.run({"Instruction": "hi"}, CALLER)
    assert ok(first.result).primary_output_text == "a"
    assert ok(second.result).primary_output_text == "b"
    assert given, "the sandbox ran no snippet"
    assert set(given) == {type(compile("", "<string>", "exec"))}
