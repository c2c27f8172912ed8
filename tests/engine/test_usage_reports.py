"""Usage reports (engine/usage_reports.py, docs/BUDGETS.md "Reports"): grouping, exact
sums that say what they leave out, and the budgets' standing, read through the
``UsageLedger`` port of a real memory store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from aptix_pipeline import (
    Budget,
    BudgetMetric,
    BudgetScope,
    BudgetWindow,
    Caller,
    MemoryStore,
    Pipeline,
    PipelineOptions,
    Price,
    PriceTable,
    ScriptedLLM,
    UnpricedPolicy,
    UsageCall,
    UsageGroupBy,
    UsageQuery,
    embedded_pipeline,
    usage_report,
)
from aptix_pipeline.contracts import Charge
from aptix_pipeline.engine import report_moment, report_window

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
_count = 0


def _call(
    *,
    user: str = "ana",
    mode: str = "general",
    model: str | None = "gpt-x",
    org: str = "acme",
    at: datetime = NOW - timedelta(hours=1),
    cost: str | None = "0.1",
    currency: str | None = "USD",
    reported: bool = True,
    settled: bool = True,
    failed: bool = False,
    tokens: tuple[int, int, int, int] = (100, 10, 20, 5),
    tool_calls: int = 0,
    round_: bool = False,
    session: str = "s1",
) -> UsageCall:
    global _count
    _count += 1
    inp, out, cached, reasoning = tokens if reported else (0, 0, 0, 0)
    amount = Decimal(cost) if cost is not None else None
    return UsageCall(
        id=f"c{_count}",
        org=org,
        user=user,
        session_id=session,
        turn_id=f"t{_count}",
        mode=mode,
        model=model,
        at=at,
        settled=settled,
        failed=failed,
        reported=reported,
        input_tokens=inp,
        output_tokens=out,
        cached_input_tokens=cached,
        reasoning_tokens=reasoning,
        priced=amount is not None,
        cost=amount,
        currency=currency if amount is not None else None,
        tool_calls=tool_calls,
        server_tool_round=round_,
        charge=Charge(
            tokens=inp + out if reported else 500,
            cost=amount or Decimal(0),
            model_calls=0 if failed else 1,
            tool_calls=tool_calls,
            server_tool_rounds=int(round_),
        ),
    )


async def _store(*calls: UsageCall) -> MemoryStore:
    store = MemoryStore()
    await store.settle_usage(calls)  # a call with no reservation is stored as given
    return store


@pytest.mark.decision("D589")
async def test_costs_sum_exactly_per_currency_beside_the_calls_they_leave_out() -> None:
    store = await _store(
        _call(cost="0.1"),
        _call(cost="0.2", tool_calls=2, round_=True),
        _call(cost="0.7", currency="EUR"),
        _call(cost=None),  # no price for its model
        _call(cost=None, reported=False),  # no usage reported: tokens unknown
        _call(cost=None, failed=True, reported=False),
        _call(cost=None, settled=False, reported=False),  # reserved, in flight
        _call(org="other", cost="9"),
    )

    report = await usage_report(store, UsageQuery(org="acme"), now=NOW)

    total = report.total
    assert total.cost == {"EUR": Decimal("0.7"), "USD": Decimal("0.3")}  # 0.1 + 0.2, exactly
    assert str(total.cost["USD"]) == "0.3"
    assert (total.calls, total.unpriced_calls, total.unreported_calls) == (7, 2, 1)
    assert (total.failed_calls, total.reserved_calls) == (1, 1)
    assert (total.tool_calls, total.server_tool_rounds) == (2, 1)
    # only the four calls that reported usage count tokens
    assert (total.input_tokens, total.output_tokens) == (400, 40)
    assert (total.cached_input_tokens, total.reasoning_tokens) == (80, 20)
    assert report.groups == ()


@pytest.mark.decision("D589")
async def test_calls_are_grouped_by_any_fields_in_key_order() -> None:
    store = await _store(
        _call(user="bob", mode="review", model=None, session="s2"),
        _call(user="ana", mode="general", at=NOW - timedelta(days=1), cost="0.25"),
        _call(user="ana", mode="review"),
        _call(user="ana", mode="general", cost="0.5"),
    )

    by_user_mode = await usage_report(store, UsageQuery(org="acme"), by=["user", "mode"], now=NOW)
    by_day = await usage_report(store, UsageQuery(org="acme"), by=[UsageGroupBy.DAY], now=NOW)
    by_model = await usage_report(store, UsageQuery(org="acme"), by=["model", "session"], now=NOW)

    assert [(g.key, g.totals.calls, g.totals.cost) for g in by_user_mode.groups] == [
        ({"user": "ana", "mode": "general"}, 2, {"USD": Decimal("0.75")}),
        ({"user": "ana", "mode": "review"}, 1, {"USD": Decimal("0.1")}),
        ({"user": "bob", "mode": "review"}, 1, {"USD": Decimal("0.1")}),
    ]
    assert [(g.key["day"], g.totals.calls) for g in by_day.groups] == [
        ("2026-11-27", 1),
        ("2026-11-28", 3),
    ]
    assert [g.key for g in by_model.groups] == [
        {"model": "gpt-x", "session": "s1"},
        {"model": None, "session": "s2"},  # a call with no model comes last
    ]
    assert by_user_mode.total.cost == {"USD": Decimal("0.95")}


@pytest.mark.decision("D589")
async def test_the_query_narrows_the_calls_read() -> None:
    store = await _store(
        _call(user="ana", at=NOW - timedelta(days=3)),
        _call(user="ana", model="gpt-y"),
        _call(user="bob"),
    )
    since = NOW - timedelta(days=1)

    report = await usage_report(store, UsageQuery(org="acme", user="ana", since=since), now=NOW)
    model = await usage_report(store, UsageQuery(org="acme", model="gpt-y"), now=NOW)

    assert report.total.calls == 1
    assert model.total.calls == 1


@pytest.mark.decision("D589")
@pytest.mark.parametrize("by", [["team"], ["user", "user"]])
async def test_an_unknown_or_repeated_grouping_is_refused(by: list[str]) -> None:
    with pytest.raises(ValueError, match="by: "):
        await usage_report(MemoryStore(), UsageQuery(org="acme"), by=by, now=NOW)


def _budget(budget_id: str, **values: object) -> Budget:
    data: dict[str, object] = {
        "id": budget_id,
        "metric": BudgetMetric.COST,
        "limit": Decimal("1.00"),
        "window": BudgetWindow.DAY,
        **values,
    }
    return Budget.model_validate(data)


@pytest.mark.decision("D589")
async def test_budgets_stand_with_what_they_counted_in_their_window() -> None:
    store = await _store(
        _call(user="ana", cost="0.30"),
        _call(user="bob", cost="0.25", mode="review"),
        _call(user="ana", cost="0.40", at=NOW - timedelta(days=2)),  # before today
        _call(user="ana", cost=None, settled=False, reported=False),  # in flight: its estimate
        _call(org="other", cost="0.99"),
    )
    budgets = [
        _budget("org-day"),
        _budget("user-month", window=BudgetWindow.MONTH, per=BudgetScope.USER),
        _budget("review-tokens", metric=BudgetMetric.TOKENS, limit=Decimal(1000), mode="review"),
        _budget("calls-turn", metric=BudgetMetric.MODEL_CALLS, limit=Decimal(3), window="turn"),
        _budget("elsewhere", org="other"),
    ]

    report = await usage_report(store, UsageQuery(org="acme"), budgets=budgets, now=NOW)

    standing = [(s.budget_id, s.user, s.mode, s.used, s.remaining) for s in report.budgets]
    assert standing == [
        ("org-day", None, None, Decimal("0.55"), Decimal("0.45")),
        ("user-month", "ana", None, Decimal("0.70"), Decimal("0.30")),
        ("user-month", "bob", None, Decimal("0.25"), Decimal("0.75")),
        ("review-tokens", None, "review", Decimal(110), Decimal(890)),
        ("calls-turn", None, None, None, None),  # afresh each turn
    ]
    day = report.budgets[0]
    assert (day.window, day.currency) == ("per day (UTC)", "USD")
    assert day.since == datetime(2026, 11, 28, tzinfo=UTC)
    assert day.window_ends_at == datetime(2026, 11, 29, tzinfo=UTC)


@pytest.mark.decision("D589")
async def test_a_per_user_budget_stands_for_the_user_the_query_names() -> None:
    store = await _store(_call(user="bob", cost="0.25"))
    budgets = [
        _budget("per-user", per=BudgetScope.USER),
        _budget("bob-only", user="bob"),
        _budget("rolling", window=BudgetWindow.ROLLING, rolling_seconds=600),
    ]

    ana = await usage_report(store, UsageQuery(org="acme", user="ana"), budgets=budgets, now=NOW)
    bob = await usage_report(store, UsageQuery(org="acme", user="bob"), budgets=budgets, now=NOW)

    assert [(s.budget_id, s.user, s.used) for s in ana.budgets] == [
        ("per-user", "ana", Decimal(0)),
        ("rolling", None, Decimal(0)),  # the call an hour ago is out of its 10 minutes
    ]
    assert [(s.budget_id, s.user, s.used) for s in bob.budgets] == [
        ("per-user", "bob", Decimal("0.25")),
        ("bob-only", "bob", Decimal("0.25")),
        ("rolling", None, Decimal(0)),
    ]


@pytest.mark.decision("D589")
@pytest.mark.rule("DESIGN/budget/within", "holds")
@pytest.mark.rule("DESIGN/budget/within", "broken")
async def test_what_remains_is_what_the_next_reservation_is_refused_by() -> None:
    store = MemoryStore()
    budget = Budget(
        id="three-calls",
        metric=BudgetMetric.MODEL_CALLS,
        limit=Decimal(3),
        window=BudgetWindow.MONTH,
        per=BudgetScope.USER,
    )
    replies = [{"text": "ok", "usage": {"input_tokens": 7, "output_tokens": 3}}] * 4
    pipeline = embedded_pipeline(
        llm=ScriptedLLM(replies), store=store, options=PipelineOptions(budgets=(budget,))
    )
    ana = Caller(org="acme", user="ana")
    for _ in range(3):
        assert (await pipeline.execute({"Instruction": "go"}, ana)).successful

    report = await usage_report(store, UsageQuery(org="acme"), budgets=[budget])
    refused = await pipeline.execute({"Instruction": "go"}, ana)

    (standing,) = report.budgets
    assert (standing.user, standing.used, standing.remaining) == ("ana", Decimal(3), Decimal(0))
    assert report.total.calls == 3
    assert (report.total.input_tokens, report.total.output_tokens) == (21, 9)
    assert report.total.unpriced_calls == 3  # no prices: never counted as free
    assert refused.errors[0].budget is not None
    assert refused.errors[0].budget.remaining == standing.remaining


@pytest.mark.decision("D589")
@pytest.mark.rule("DESIGN/budget/unpriced", "holds")
@pytest.mark.rule("DESIGN/budget/unpriced", "broken")
async def test_a_model_without_a_price_is_refused_and_reported_nowhere() -> None:
    store = MemoryStore()
    reply = {"text": "ok", "usage": {"input_tokens": 5, "output_tokens": 5}}
    ana = Caller(org="acme", user="ana")

    def pipeline_pricing(model: str) -> Pipeline:
        price = Price(model=model, input_per_million=Decimal(1), output_per_million=Decimal(2))
        prices = PriceTable(prices=(price,), unknown=UnpricedPolicy.REFUSE)
        llm = ScriptedLLM([reply])
        return embedded_pipeline(llm=llm, store=store, options=PipelineOptions(prices=prices))

    # the built-in catalog's agent names its model "scripted"
    priced = await pipeline_pricing("scripted").execute({"Instruction": "go"}, ana)
    unpriced = await pipeline_pricing("gpt-x").execute({"Instruction": "go"}, ana)

    assert priced.successful
    (error,) = unpriced.errors
    assert (error.code, error.rule_id) == ("budget_exceeded", "DESIGN/budget/unpriced")
    report = await usage_report(store, UsageQuery(org="acme"))
    assert report.total.calls == 1  # the refused call was never made, nor kept
    assert report.total.cost == {"USD": Decimal("0.000015")}


@pytest.mark.decision("D590")
@pytest.mark.parametrize(
    ("window", "since"),
    [
        ("day", datetime(2026, 11, 28, tzinfo=UTC)),
        ("month", datetime(2026, 11, 1, tzinfo=UTC)),
        ("all", None),
        ("90s", NOW - timedelta(seconds=90)),
        ("30m", NOW - timedelta(minutes=30)),
        ("24h", NOW - timedelta(hours=24)),
        ("7d", NOW - timedelta(days=7)),
    ],
)
def test_a_report_window_begins_where_it_says(window: str, since: datetime | None) -> None:
    assert report_window(window, NOW) == since


@pytest.mark.decision("D590")
def test_report_moments_are_iso_dates_in_utc_unless_they_say() -> None:
    assert report_moment("2026-11-01", "since") == datetime(2026, 11, 1, tzinfo=UTC)
    offset = report_moment("2026-11-01T12:00:00+02:00", "until")
    assert offset == datetime(2026, 11, 1, 10, tzinfo=UTC)
    with pytest.raises(ValueError, match=r"^since: 'yesterday' is not an ISO 8601"):
        report_moment("yesterday", "since")
    with pytest.raises(ValueError, match=r"^window: 'week' is none of"):
        report_window("week", NOW)
