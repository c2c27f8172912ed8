"""A turn on a forked session runs durably as in process (issue 32, D613): the worker's
store reads the fork's shared transcript through its activities, on a real Temporal dev
server."""

from __future__ import annotations

import pytest
from durable_kit import durable_client, pipeline_on
from engine_kit import CALLER, ok, text
from temporal_kit import durable_worker

from aptix_pipeline import MemoryStore, ScriptedLLM
from aptix_pipeline.adapters.temporal import DurablePipeline


@pytest.mark.decision("D613")
async def test_a_durable_turn_on_a_fork_sees_the_source_up_to_the_fork_turn_only(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    store = MemoryStore()
    llm = ScriptedLLM([text("Paris."), text("Rome."), text("Lisbon.")])
    host = pipeline_on(store, llm)
    first = ok((await host.run({"Instruction": "Capital of France?"}, CALLER)).result)
    follow = {"SessionId": first.session_id, "TurnId": first.turn_id}
    ok((await host.run({**follow, "Instruction": "And of Italy?"}, CALLER)).result)
    forked = await host.fork(first.session_id, first.turn_id, CALLER)
    assert forked.successful, forked.errors
    fork = forked.result
    assert fork is not None

    async with durable_worker(client, host, task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"SessionId": fork.id, "TurnId": first.turn_id, "Instruction": "And of Portugal?"},
            CALLER,
        )

    answered = ok(report.result)
    assert (answered.session_id, answered.primary_output_text) == (fork.id, "Lisbon.")
    asked = [str(message.content) for message in llm.requests[-1].messages]
    assert [said for said in asked if said in ("Capital of France?", "Paris.")] == [
        "Capital of France?",
        "Paris.",
    ]
    assert not [said for said in asked if said in ("And of Italy?", "Rome.")]
    source = await store.begin(CALLER.org, CALLER.user).load_transcript(first.session_id)
    assert "And of Portugal?" not in str([message.content for message in source])
