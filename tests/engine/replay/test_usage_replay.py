"""The usage ledger in recordings and replays (issue 31, D594), and a streamed turn a
budget refuses (D598).

A turn with a ``UsageLedger`` records each ``reserve_usage`` and ``settle_usage`` like
a store call and says so (``TurnRecording.usage_ledger``); its replay answers them from
the recording, a refused reservation included. A recording made without a ledger
replays without one. A streamed turn a budget refuses ends before any text.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from engine_kit import CALLER, call, calls, text
from replay_kit import recording_pipeline, streamed_report

from aptix_pipeline import PipelineOptions, ReplayOutcome, TurnRecording, replay
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import (
    Budget,
    BudgetMetric,
    BudgetWindow,
    ErrorCode,
    Price,
    PriceTable,
    UnpricedPolicy,
    UsageQuery,
)
from aptix_pipeline.engine import ModelTextDelta, StreamProgress

RECORDINGS = Path(__file__).parent / "recordings"
PRICES = PriceTable(
    prices=(Price(model="scripted", input_per_million=Decimal(2), output_per_million=Decimal(8)),)
)
ROOMY = Budget(
    id="daily-tokens", metric=BudgetMetric.TOKENS, limit=Decimal(1_000_000), window=BudgetWindow.DAY
)
TIGHT = Budget(
    id="turn-tokens", metric=BudgetMetric.TOKENS, limit=Decimal(50), window=BudgetWindow.TURN
)


def options(*budgets: Budget) -> PipelineOptions:
    return PipelineOptions(
        retry_wait_seconds=0, retry_max_wait_seconds=0, prices=PRICES, budgets=budgets
    )


def exactly(recording: TurnRecording, outcome: ReplayOutcome) -> None:
    """No divergence; unredacted, the replayed trace and result are the recorded ones."""
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    if recording.redacted:
        return
    assert outcome.report.trace is not None
    replayed, recorded = outcome.report.trace.to_dict(), recording.trace.to_dict()
    if not any("usage" in entry for entry in recorded["entries"]):
        # recorded before transitions carried their call's usage (D587): the rest is equal
        replayed["entries"] = [
            {key: value for key, value in entry.items() if key != "usage"}
            for entry in replayed["entries"]
        ]
    assert replayed == recorded
    assert outcome.report.result.to_wire() == recording.result


@pytest.mark.decision("D594")
@pytest.mark.rule("DESIGN/budget/within", "holds")
async def test_a_turn_with_budgets_records_its_usage_calls_and_replays_them() -> None:
    store = MemoryStore()
    replies = [calls(call("x1", "Math")), calls(call("a1", "Add", {"a": 1, "b": 2})), text("3")]
    pipeline = recording_pipeline(store, replies, options=options(ROOMY))

    report = await pipeline.run({"Instruction": "add"}, CALLER)

    assert report.successful
    recording = report.recording
    assert recording is not None
    assert recording.usage_ledger
    usage = [c for c in recording.calls if c.port == "UsageLedger"]
    assert [c.call for c in usage] == ["reserve_usage"] * 3 + ["settle_usage"]
    assert all(c.step == "llm_client" for c in usage[:3])
    assert usage[-1].step is None  # the last model call, settled once the machine stopped
    assert [c.answer["Reserved"] for c in usage[:3]] == [True] * 3
    # each reservation carries the previous call's settlement: one round trip a call
    assert [len(c.args["settle"]) for c in usage[:3]] == [0, 1, 1]
    assert usage[0].args["checks"][0]["BudgetId"] == "daily-tokens"
    held = await store.usage_calls(UsageQuery(org="acme"))
    assert [c.settled for c in held] == [True] * 3
    # the options round-trip through the recording, prices and budgets as JSON
    data = json.loads(recording.to_json())
    assert data["usage_ledger"] is True
    assert data["options"]["budgets"][0]["Id"] == "daily-tokens"
    assert recording.pipeline_options() == options(ROOMY)
    for replayed in (recording, TurnRecording.from_dict(data), recording.redact()):
        exactly(replayed, await replay(replayed))


@pytest.mark.decision("D594")
@pytest.mark.rule("DESIGN/budget/within", "broken")
async def test_a_refused_turn_records_and_replays_to_the_same_refusal() -> None:
    store = MemoryStore()
    pipeline = recording_pipeline(store, [text("never")], options=options(TIGHT))

    report = await pipeline.run({"Instruction": "a prompt far over fifty tokens"}, CALLER)

    assert not report.successful
    [error] = report.result.errors
    assert (error.code, error.rule_id) == (ErrorCode.BUDGET_EXCEEDED, "DESIGN/budget/within")
    assert error.budget is not None
    assert error.budget.budget_id == "turn-tokens"
    recording = report.recording
    assert recording is not None
    reserve = next(c for c in recording.calls if c.name == "UsageLedger.reserve_usage")
    assert reserve.answer["Reserved"] is False
    assert not any(c.port == "LLM" for c in recording.calls)
    assert await store.usage_calls(UsageQuery(org="acme")) == []  # nothing reserved
    # The replay is answered by the recorded refusal, whatever its ledger would say now.
    for replayed in (recording, recording.redact()):
        outcome = await replay(replayed)
        exactly(replayed, outcome)
        refused = outcome.report.result.errors[0].budget
        assert refused is not None
        assert refused.budget_id == "turn-tokens"
        if not replayed.redacted:  # redacted, the estimate is of the placeholder prompt
            assert refused == error.budget


@pytest.mark.decision("D594")
@pytest.mark.parametrize(
    "name", ["made-without-a-usage-ledger.json", "streamed-without-a-usage-ledger.json"]
)
async def test_a_recording_made_without_a_usage_ledger_replays_without_one(name: str) -> None:
    recording = TurnRecording.load(RECORDINGS / name)
    assert not recording.usage_ledger
    assert "usage_ledger" not in json.loads((RECORDINGS / name).read_text(encoding="utf-8"))

    outcome = await replay(recording)

    exactly(recording, outcome)
    assert not any(c.port == "UsageLedger" for c in recording.calls)


@pytest.mark.decision("D594")
async def test_a_recording_without_a_ledger_whose_options_keep_usage_replays_without_one() -> None:
    """A host store that is no ``UsageLedger``: usage_ledger stays on in the options."""
    recording = TurnRecording.load(RECORDINGS / "made-without-a-usage-ledger.json")
    data = recording.to_dict()
    data["options"] = {**data["options"], "usage_ledger": True}
    edited = TurnRecording.from_dict(data)

    exactly(edited, await replay(edited))


@pytest.mark.decision("D594")
def test_a_recordings_usage_ledger_flag_must_be_a_boolean() -> None:
    data = TurnRecording.load(RECORDINGS / "made-without-a-usage-ledger.json").to_dict()
    data["usage_ledger"] = "yes"

    with pytest.raises(ValueError, match="usage_ledger"):
        TurnRecording.from_dict(data)


@pytest.mark.decision("D598")
@pytest.mark.rule("DESIGN/budget/within", "broken")
async def test_a_streamed_turn_a_budget_refuses_ends_before_any_text() -> None:
    store = MemoryStore()
    pipeline = recording_pipeline(store, [text("never said")], options=options(TIGHT))
    items: list[object] = []

    stream = pipeline.stream({"Instruction": "a prompt far over fifty tokens"}, CALLER)
    async with stream:
        async for item in stream:
            items.append(item)

    report = stream.report
    assert report is not None
    assert not report.successful
    assert report.result.errors[0].code is ErrorCode.BUDGET_EXCEEDED
    assert report.result.errors[0].budget is not None
    assert not any(
        isinstance(item, StreamProgress) and isinstance(item.event, ModelTextDelta)
        for item in items
    )
    assert not any(isinstance(item, str) for item in items)
    assert report.llm_calls == 0
    assert await store.usage_calls(UsageQuery(org="acme")) == []
    # and the streamed, refused turn replays to the same refusal
    assert report.recording is not None
    exactly(report.recording, await replay(report.recording))


@pytest.mark.decision("D598")
async def test_a_streamed_turn_within_its_budget_streams_and_settles_its_usage() -> None:
    store = MemoryStore()
    pipeline = recording_pipeline(store, [text("Hello there.")], options=options(ROOMY))

    report = await streamed_report(pipeline, {"Instruction": "hi"})

    assert report.successful
    [held] = await store.usage_calls(UsageQuery(org="acme"))
    assert held.settled
    assert held.charge.model_calls == 1
    assert report.recording is not None
    assert [c.call for c in report.recording.calls if c.port == "LLM"] == ["stream"]
    exactly(report.recording, await replay(report.recording))


@pytest.mark.decision("D594")
@pytest.mark.rule("DESIGN/budget/unpriced", "holds")
@pytest.mark.rule("DESIGN/budget/unpriced", "broken")
async def test_a_model_without_a_price_is_refused_when_prices_say_so_and_replays_so() -> None:
    refusing = PriceTable(prices=(), unknown=UnpricedPolicy.REFUSE)
    priced = PRICES.model_copy(update={"unknown": UnpricedPolicy.REFUSE})
    for table, kept in ((refusing, False), (priced, True)):
        opts = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0, prices=table)
        pipeline = recording_pipeline(MemoryStore(), [text("ok")], options=opts)

        report = await pipeline.run({"Instruction": "hi"}, CALLER)

        assert report.successful is kept
        if not kept:
            assert report.result.errors[0].rule_id == "DESIGN/budget/unpriced"
            assert report.result.errors[0].code is ErrorCode.BUDGET_EXCEEDED
            assert report.llm_calls == 0
        assert report.recording is not None
        exactly(report.recording, await replay(report.recording))
