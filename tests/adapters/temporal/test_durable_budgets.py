"""Budgets and usage in durable turns (issue 31, D595), on a real Temporal dev server:
the reservation and the settlement are activities on the worker's usage ledger, the
budgets are the worker's pipeline options."""

from __future__ import annotations

from decimal import Decimal

import pytest
from durable_kit import CountingLLM, durable_client, local_activities, pipeline_on
from engine_kit import CALLER, ok, text
from temporal_kit import durable_worker

from aptix_pipeline import MemoryStore, PipelineOptions
from aptix_pipeline.adapters.temporal import DurablePipeline
from aptix_pipeline.contracts import (
    Budget,
    BudgetMetric,
    BudgetWindow,
    ErrorCode,
    UsageQuery,
)


def _options(limit: int) -> PipelineOptions:
    budget = Budget(
        id="turn-tokens",
        metric=BudgetMetric.TOKENS,
        limit=Decimal(limit),
        window=BudgetWindow.TURN,
    )
    return PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0, budgets=(budget,))


@pytest.mark.decision("D595")
async def test_a_durable_turn_a_budget_refuses_answers_budget_exceeded_and_stores_nothing(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    llm = CountingLLM([text("never")])
    store = MemoryStore()
    host = pipeline_on(store, llm, options=_options(10))
    async with durable_worker(client, host, task_queue):
        report = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "a prompt over ten tokens"}, CALLER
        )

    assert not report.successful
    [error] = report.result.errors
    assert (error.code, error.rule_id) == (ErrorCode.BUDGET_EXCEEDED, "DESIGN/budget/within")
    assert error.budget is not None
    assert (error.budget.budget_id, error.budget.limit) == ("turn-tokens", Decimal(10))
    assert error.budget.remaining == Decimal(10)
    assert llm.calls == 0
    assert report.session_id is None  # nothing half-done is stored
    assert await store.usage_calls(UsageQuery(org="acme")) == []
    owners = await store.list_owners()
    assert list(owners) == []


@pytest.mark.decision("D595")
async def test_a_durable_turns_usage_lands_in_the_workers_ledger_through_activities(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    store = MemoryStore()
    host = pipeline_on(store, [text("hello")], options=_options(1_000_000))
    async with durable_worker(client, host, task_queue):
        report, output = await DurablePipeline(client, task_queue=task_queue).run_with_workers(
            {"Instruction": "hi"}, CALLER
        )

    assert ok(report.result).primary_output_text == "hello"
    [held] = await store.usage_calls(UsageQuery(org="acme"))
    assert held.settled
    assert held.charge.model_calls == 1
    assert (held.user, held.turn_id) == ("ana", report.turn_id)
    assert output is not None
    history = await client.get_workflow_handle(output.workflow_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    # activities, never local ones: they write, and must outlive a crash
    assert scheduled.count("aptix.usage.reserve") == 1
    assert scheduled.count("aptix.usage.settle") == 1
    assert not any(name.startswith("aptix.usage") for name in local_activities(history.events))
