"""Budgets checked before each model call, and usage kept per call (issue 31).

Real memory store (a ``UsageLedger``), scripted model, stepping clock: every test
reads back what the store kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from aptix_pipeline import PipelineOptions, embedded_pipeline
from aptix_pipeline.adapters.models import ScriptedLLM
from aptix_pipeline.adapters.stores import MemoryStore
from aptix_pipeline.adapters.system import SequentialIds, SteppingClock
from aptix_pipeline.contracts import (
    Budget,
    BudgetCheck,
    BudgetMetric,
    BudgetScope,
    BudgetWindow,
    Caller,
    ErrorCode,
    LLMReply,
    LLMRequest,
    Price,
    PriceTable,
    ReserveOutcome,
    UnpricedPolicy,
    Usage,
    UsageCall,
    UsageQuery,
)
from aptix_pipeline.engine import Pipeline
from aptix_pipeline.steps import estimate_prompt_tokens

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
ALICE = Caller(org="acme", user="alice")
BOB = Caller(org="acme", user="bob")
ZED = Caller(org="zeta", user="zed")
HELLO = {"Instruction": "Hello there.", "AgentContextId": "assistant"}
TEXT = {"text": "Hi.", "usage": {"input_tokens": 100, "output_tokens": 20}}
EXPAND = {
    "tool_calls": [{"id": "c1", "name": "Math"}],
    "usage": {"input_tokens": 100, "output_tokens": 20},
}


def _budget(**fields: Any) -> Budget:
    data: dict[str, Any] = {
        "id": "b",
        "metric": BudgetMetric.TOKENS,
        "limit": Decimal(1_000_000),
        "window": BudgetWindow.DAY,
    }
    data.update(fields)
    return Budget.model_validate(data)


def _pipeline(
    replies: Sequence[dict[str, Any]],
    *budgets: Budget,
    store: MemoryStore | None = None,
    **options: Any,
) -> tuple[Pipeline, ScriptedLLM, MemoryStore]:
    llm = ScriptedLLM(list(replies))
    store = store or MemoryStore()
    options.setdefault("output_tokens_estimate", 10)
    pipeline = embedded_pipeline(
        llm=llm,
        store=store,
        clock=SteppingClock(NOW),
        ids=SequentialIds(),
        options=PipelineOptions(budgets=budgets, **options),
    )
    return pipeline, llm, store


async def _calls(store: MemoryStore, org: str = "acme") -> list[UsageCall]:
    return await store.usage_calls(UsageQuery(org=org))


@pytest.mark.decision("D600")
async def test_each_model_call_is_kept_with_its_usage_and_cost() -> None:
    prices = PriceTable(
        default=Price(model="*", input_per_million=Decimal("3"), output_per_million=Decimal("15"))
    )
    pipeline, _, store = _pipeline([EXPAND, TEXT], prices=prices)

    result = await pipeline.execute(HELLO, ALICE)

    assert result.successful
    first, second = await _calls(store)
    assert (first.round, second.round) == (1, 2)
    assert all(call.settled and call.reported and call.priced for call in (first, second))
    assert first.cost == Decimal("0.0006")  # 100 * 3 + 20 * 15, per million
    assert first.currency == "USD"
    assert (first.tool_calls, first.server_tool_round, first.charge.server_tool_rounds) == (
        1,
        True,
        1,
    )
    assert (second.tool_calls, second.server_tool_round) == (0, False)
    assert (first.org, first.user, first.mode, first.session_id) == (
        "acme",
        "alice",
        "general",
        "session-1",
    )
    assert first.turn_id == second.turn_id == "turn-1"


@pytest.mark.rule("DESIGN/budget/within", "broken")
@pytest.mark.decision("D603")
async def test_a_turn_that_crosses_its_budget_after_a_tool_round_ends_before_the_next_call() -> (
    None
):
    big = {**EXPAND, "usage": {"input_tokens": 5_000, "output_tokens": 5_000}}
    budget = _budget(id="per-turn", limit=Decimal(8_000), window=BudgetWindow.TURN)
    pipeline, llm, store = _pipeline([big, TEXT], budget)

    report = await pipeline.run(HELLO, ALICE)

    (error,) = report.result.errors
    assert error.code is ErrorCode.BUDGET_EXCEEDED
    assert error.rule_id == "DESIGN/budget/within"
    assert error.budget is not None
    assert (error.budget.budget_id, error.budget.used, error.budget.remaining) == (
        "per-turn",
        Decimal(10_000),
        Decimal(0),
    )
    assert error.budget.retry_after_seconds is None  # a turn's budget never refills
    assert len(llm.requests) == 1  # the second call was not made
    assert await store.read_session("acme", "alice", "session-1") is None  # nothing half-done
    (made,) = await _calls(store)  # but the call that was made is kept: it was spent
    assert made.settled
    assert made.charge.tokens == 10_000
    failed = [check for check in report.checks if check.failed]
    assert [check.failed for check in failed] == [("DESIGN/budget/within",)]


@pytest.mark.decision("D604")
async def test_a_daily_org_budget_holds_across_turns_and_users_not_orgs() -> None:
    budget = _budget(id="daily", limit=Decimal(500))  # each call reserves 300, takes 120
    pipeline, llm, _ = _pipeline([TEXT] * 5, budget)

    first = await pipeline.execute(HELLO, ALICE)
    second = await pipeline.execute(HELLO, ALICE)
    bob = await pipeline.execute(HELLO, BOB)
    other_org = await pipeline.execute(HELLO, ZED)

    assert first.successful
    assert second.successful
    assert not bob.successful  # 240 used: bob's 300 would take the org past 500
    assert bob.errors[0].budget is not None
    assert bob.errors[0].budget.used == Decimal(240)
    seconds_to_midnight = 12 * 3600
    assert bob.errors[0].budget.retry_after_seconds is not None
    assert abs(bob.errors[0].budget.retry_after_seconds - seconds_to_midnight) < 5
    assert other_org.successful  # another org's spending is its own
    assert len(llm.requests) == 3


@pytest.mark.decision("D604")
async def test_a_per_user_budget_counts_each_user_alone() -> None:
    budget = _budget(id="each-user", limit=Decimal(400), per=BudgetScope.USER)
    pipeline, _, _ = _pipeline([TEXT] * 4, budget)

    assert (await pipeline.execute(HELLO, ALICE)).successful
    refused = await pipeline.execute(HELLO, ALICE)
    assert (await pipeline.execute(HELLO, BOB)).successful

    assert refused.errors[0].code is ErrorCode.BUDGET_EXCEEDED
    assert "user alice" in refused.errors[0].message


@pytest.mark.decision("D604")
async def test_a_mode_budget_applies_only_in_its_mode() -> None:
    budget = _budget(id="review-only", limit=Decimal(0), mode="review")
    pipeline, _, _ = _pipeline([TEXT] * 2, budget)

    assert (await pipeline.execute(HELLO, ALICE)).successful
    refused = await pipeline.execute(HELLO, ALICE, initial_mode="review")

    assert refused.errors[0].budget is not None
    assert refused.errors[0].budget.budget_id == "review-only"


@pytest.mark.decision("D603")
@pytest.mark.parametrize(
    ("metric", "limit"),
    [
        (BudgetMetric.MODEL_CALLS, 1),
        (BudgetMetric.TOOL_CALLS, 0),
        (BudgetMetric.SERVER_TOOL_ROUNDS, 0),
    ],
)
async def test_counted_budgets_refuse_the_call_after_the_limit(
    metric: BudgetMetric, limit: int
) -> None:
    budget = _budget(id="count", metric=metric, limit=Decimal(limit), window=BudgetWindow.TURN)
    pipeline, llm, _ = _pipeline([EXPAND, TEXT], budget)

    result = await pipeline.execute(HELLO, ALICE)

    assert result.errors[0].code is ErrorCode.BUDGET_EXCEEDED
    assert result.errors[0].budget is not None
    assert result.errors[0].budget.metric == metric.value
    assert len(llm.requests) == 1


@pytest.mark.rule("DESIGN/budget/within", "holds")
@pytest.mark.decision("D603")
async def test_a_limit_met_exactly_still_allows_the_call() -> None:
    budget = _budget(
        id="count", metric=BudgetMetric.TOOL_CALLS, limit=Decimal(1), window=BudgetWindow.TURN
    )
    pipeline, llm, _ = _pipeline([EXPAND, TEXT], budget)

    assert (await pipeline.execute(HELLO, ALICE)).successful
    assert len(llm.requests) == 2


@pytest.mark.decision("D602")
async def test_a_cost_budget_counts_priced_calls() -> None:
    prices = PriceTable(
        default=Price(model="*", input_per_million=Decimal("1000"), output_per_million=Decimal(0))
    )
    budget = _budget(id="cost", metric=BudgetMetric.COST, limit=Decimal("0.35"))
    pipeline, _, store = _pipeline([TEXT] * 3, budget, prices=prices)

    # the estimate, 290 prompt tokens, reserves 0.29 USD; the call takes 100 tokens, 0.1 USD
    assert (await pipeline.execute(HELLO, ALICE)).successful
    refused = await pipeline.execute(HELLO, ALICE)

    assert refused.errors[0].budget is not None
    assert refused.errors[0].budget.used == Decimal("0.1")
    assert refused.errors[0].budget.currency == "USD"
    assert [call.cost for call in await _calls(store)] == [Decimal("0.1")]


@pytest.mark.rule("DESIGN/budget/unpriced", "broken")
@pytest.mark.decision("D602")
async def test_an_unpriced_model_is_refused_before_its_call_when_prices_say_so() -> None:
    prices = PriceTable(
        prices=(Price(model="other", input_per_million=Decimal(1), output_per_million=Decimal(1)),),
        unknown=UnpricedPolicy.REFUSE,
    )
    pipeline, llm, store = _pipeline([TEXT], prices=prices)

    report = await pipeline.run(HELLO, ALICE)

    (error,) = report.result.errors
    assert (error.code, error.rule_id, error.field) == (
        ErrorCode.BUDGET_EXCEEDED,
        "DESIGN/budget/unpriced",
        "prices",
    )
    assert llm.requests == []
    assert await _calls(store) == []
    assert [c.failed for c in report.checks if c.failed] == [("DESIGN/budget/unpriced",)]


@pytest.mark.decision("D602")
async def test_an_unpriced_call_is_counted_as_unpriced_never_as_free() -> None:
    prices = PriceTable(
        prices=(Price(model="other", input_per_million=Decimal(1), output_per_million=Decimal(1)),)
    )
    pipeline, _, store = _pipeline([TEXT], prices=prices)

    assert (await pipeline.execute(HELLO, ALICE)).successful
    (call,) = await _calls(store)
    assert (call.priced, call.cost, call.currency) == (False, None, None)


@pytest.mark.decision("D602")
async def test_a_model_that_reports_no_usage_is_marked_and_charged_its_estimate() -> None:
    pipeline, llm, store = _pipeline([{"text": "Hi."}])

    assert (await pipeline.execute(HELLO, ALICE)).successful

    (call,) = await _calls(store)
    assert call.reported is False
    assert call.input_tokens == call.output_tokens == 0
    assert call.charge.tokens == estimate_prompt_tokens(llm.requests[0]) + 10
    assert call.charge.tokens > 0  # never counted as zero


@pytest.mark.decision("D606")
async def test_a_failed_model_call_is_released_not_charged() -> None:
    pipeline, _, store = _pipeline([])  # the script is exhausted: the model fails

    result = await pipeline.execute(HELLO, ALICE)

    assert result.errors[0].code is ErrorCode.PORT_FAILED
    (call,) = await _calls(store)
    assert call.failed
    assert call.charge.tokens == 0
    assert call.charge.model_calls == 0


@pytest.mark.decision("D600")
async def test_the_output_cap_is_sent_and_reserved() -> None:
    budget = _budget(id="tiny", limit=Decimal(60))
    pipeline, llm, _ = _pipeline([TEXT], budget, max_output_tokens=5_000)

    refused = await pipeline.execute(HELLO, ALICE)

    assert refused.errors[0].budget is not None
    assert refused.errors[0].budget.requested > 5_000  # its prompt plus the cap
    assert llm.requests == []
    capped, _, _ = _pipeline([TEXT], max_output_tokens=64)
    await capped.execute(HELLO, ALICE)
    assert capped.ports.llm.requests[0].max_output_tokens == 64  # type: ignore[attr-defined]


@pytest.mark.decision("D605")
def test_budgets_without_a_usage_ledger_are_refused_when_the_pipeline_is_built() -> None:
    with pytest.raises(ValueError, match="need a usage ledger"):
        _pipeline([TEXT], _budget(), usage_ledger=False)
    refuse = PriceTable(unknown=UnpricedPolicy.REFUSE)
    with pytest.raises(ValueError, match="need a usage ledger"):
        _pipeline([TEXT], prices=refuse, usage_ledger=False)


@pytest.mark.decision("D605")
async def test_without_the_usage_ledger_no_usage_is_kept() -> None:
    pipeline, _, store = _pipeline([TEXT], usage_ledger=False)

    assert (await pipeline.execute(HELLO, ALICE)).successful
    assert await _calls(store) == []


class _BrokenLedger(MemoryStore):
    async def reserve_usage(
        self, call: UsageCall, checks: Sequence[BudgetCheck], settle: Sequence[UsageCall] = ()
    ) -> ReserveOutcome:
        raise ConnectionError("usage table unreachable")


@pytest.mark.decision("D601")
async def test_a_failing_usage_ledger_fails_the_turn_as_a_port_naming_it() -> None:
    store = _BrokenLedger()
    pipeline, llm, _ = _pipeline([TEXT], _budget(), store=store)

    result = await pipeline.execute(HELLO, ALICE)

    (error,) = result.errors
    assert (error.code, error.field) == (ErrorCode.PORT_FAILED, "UsageLedger")
    assert "ConnectionError" in error.message
    assert llm.requests == []
    assert await store.read_session("acme", "alice", "session-1") is None


class _ExactModel:
    """Reports exactly what the engine reckons: its prompt's estimate plus its cap."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        await asyncio.sleep(0)
        prompt = estimate_prompt_tokens(request)
        output = request.max_output_tokens or 0
        return LLMReply(
            text="Hi.",
            usage=Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output),
        )

    async def stream(self, request: LLMRequest) -> AsyncIterator[Any]:  # pragma: no cover
        raise NotImplementedError
        yield


@pytest.mark.decision("D600")
async def test_concurrent_turns_with_exact_estimates_never_overspend() -> None:
    store = MemoryStore()
    model = _ExactModel()
    limit = Decimal(2_000)
    pipeline = embedded_pipeline(
        llm=model,
        store=store,
        options=PipelineOptions(budgets=(_budget(id="org", limit=limit),), max_output_tokens=50),
    )

    results = await asyncio.gather(*(pipeline.execute(HELLO, ALICE) for _ in range(50)))

    spent = sum(call.charge.tokens for call in await _calls(store))
    made = sum(result.successful for result in results)
    assert 0 < made < 50
    assert spent <= limit
    assert model.calls == made
    one = spent // made
    assert limit - spent < one  # the refused turns found no room for one more


@pytest.mark.decision("D600")
async def test_a_tool_call_budget_reads_the_calls_of_the_reply() -> None:
    calls = {"tool_calls": [{"id": f"c{n}", "name": "Math"} for n in range(3)]}
    pipeline, _, store = _pipeline([calls, TEXT])

    await pipeline.execute(HELLO, ALICE)

    first = (await _calls(store))[0]
    assert first.tool_calls == 3
    assert first.charge.tool_calls == 3


@pytest.mark.decision("D601")
async def test_the_budget_check_is_a_rule_check_in_the_trace() -> None:
    budgeted, _, _ = _pipeline([EXPAND, TEXT], _budget())
    plain, _, _ = _pipeline([EXPAND, TEXT])

    report = await budgeted.run(HELLO, ALICE)
    unbudgeted = await plain.run(HELLO, ALICE)

    budget_checks = [c for c in report.checks if "DESIGN/budget/within" in c.rule_ids]
    assert [(c.step, c.phase, c.outcome) for c in budget_checks] == [
        ("llm_client", "PRE", "passed"),
        ("llm_client", "PRE", "passed"),
    ]  # one per model call
    assert not [c for c in unbudgeted.checks if "DESIGN/budget/within" in c.rule_ids]


@pytest.mark.rule("DESIGN/budget/unpriced", "holds")
@pytest.mark.decision("D602")
async def test_a_priced_model_is_called_when_unpriced_calls_are_refused() -> None:
    prices = PriceTable(
        prices=(Price(model="*", input_per_million=Decimal(1), output_per_million=Decimal(1)),),
        unknown=UnpricedPolicy.REFUSE,
    )
    pipeline, llm, store = _pipeline([TEXT], prices=prices)

    report = await pipeline.run(HELLO, ALICE)

    assert report.result.successful
    assert len(llm.requests) == 1
    assert [call.priced for call in await _calls(store)] == [True]
    assert [c.outcome for c in report.checks if "DESIGN/budget/unpriced" in c.rule_ids] == [
        "passed"
    ]


class _Unreported:
    """Reports no usage: each call is charged its estimate."""

    def __init__(self, replies: list[LLMReply]) -> None:
        self.replies = replies
        self.requests: list[LLMRequest] = []

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.requests.append(request)
        return self.replies[len(self.requests) - 1]


@pytest.mark.decision("D600")
async def test_each_round_is_reckoned_as_the_whole_request_would_be() -> None:
    from aptix_pipeline.contracts import ToolCall

    expand = LLMReply(tool_calls=[ToolCall(tool_call_id="c1", name="Math", arguments_json="{}")])
    add = LLMReply(
        tool_calls=[ToolCall(tool_call_id="c2", name="Add", arguments_json='{"a": 1, "b": 2}')]
    )
    model = _Unreported([expand, add, LLMReply(text="3")])
    store = MemoryStore()
    pipeline = embedded_pipeline(
        llm=model, store=store, options=PipelineOptions(output_tokens_estimate=0)
    )

    assert (await pipeline.execute(HELLO, ALICE)).successful

    charged = [call.charge.tokens for call in await _calls(store)]
    assert charged == [estimate_prompt_tokens(request) for request in model.requests]
    assert charged[0] < charged[1] < charged[2]  # the messages and the expanded tools grow
