"""The budget arithmetic of steps/budget.py: estimates, which budgets apply, refusals."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from aptix_pipeline.contracts import (
    Budget,
    BudgetMetric,
    BudgetScope,
    BudgetWindow,
    Charge,
    ChatMessage,
    ChatRole,
    ImagePart,
    LLMRequest,
    Price,
    PriceTable,
    ToolDefinition,
    UsageCall,
)
from aptix_pipeline.steps import IMAGE_TOKENS, budget_checks, call_estimate, estimate_prompt_tokens
from aptix_pipeline.steps.budget import refusal

NOW = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)


def _request(*messages: ChatMessage, tools: list[ToolDefinition] | None = None) -> LLMRequest:
    return LLMRequest(model="m-1", mode="general", messages=list(messages), tools=tools or [])


@pytest.mark.decision("D600")
def test_the_prompt_is_reckoned_at_four_characters_a_token_with_framing_and_images() -> None:
    text = ChatMessage(role=ChatRole.USER, content="x" * 40)
    assert estimate_prompt_tokens(_request(text)) == 10 + 4
    assert estimate_prompt_tokens(_request(text, text)) == 2 * (10 + 4)
    image = ChatMessage.of_parts(ChatRole.USER, [ImagePart(mime_type="image/png", data=b"\x89")])
    assert estimate_prompt_tokens(_request(image)) == (
        IMAGE_TOKENS + 4 + -(-len(image.content) // 4)  # its reference is text too
    )
    tool = ToolDefinition(name="t", description="d" * 7, executes_on="server")
    assert estimate_prompt_tokens(_request(text, tools=[tool])) > 14


@pytest.mark.decision("D600")
def test_a_call_is_reserved_at_its_prompt_plus_its_cap_or_the_estimate() -> None:
    request = _request(ChatMessage(role=ChatRole.USER, content="x" * 40))
    prices = PriceTable(
        prices=(
            Price(
                model="m-*",
                input_per_million=Decimal("2"),
                output_per_million=Decimal("10"),
                currency="EUR",
            ),
        )
    )
    charge, currency = call_estimate(request, prices, 100)
    assert charge == Charge(tokens=114, cost=Decimal("0.001028"), model_calls=1)
    assert currency == "EUR"
    capped, _ = call_estimate(request.replace(max_output_tokens=6), prices, 100)
    assert capped.tokens == 20
    unpriced, none = call_estimate(request.replace(model="other"), prices, 100)
    assert (unpriced.cost, none) == (Decimal(0), None)


@pytest.mark.decision("D602")
def test_a_price_takes_cached_input_at_its_own_rate_exactly() -> None:
    from aptix_pipeline.contracts import Usage

    price = Price(
        model="m",
        input_per_million=Decimal("0.15"),
        output_per_million=Decimal("0.60"),
        cached_input_per_million=Decimal("0.075"),
    )
    usage = Usage(input_tokens=1000, output_tokens=10, cached_input_tokens=400)
    assert price.cost(usage) == Decimal("0.000126")  # 600*.15 + 400*.075 + 10*.6, per million
    table = PriceTable(prices=(price,), default=None)
    assert table.cost("unknown", usage) is None


def _budget(**fields: object) -> Budget:
    data: dict[str, object] = {
        "id": "b",
        "metric": BudgetMetric.TOKENS,
        "limit": Decimal(100),
        "window": BudgetWindow.DAY,
    }
    data.update(fields)
    return Budget.model_validate(data)


def _checks(*budgets: Budget, mode: str = "general", user: str = "u1", currency: str | None = None):  # type: ignore[no-untyped-def]
    return budget_checks(
        budgets,
        org="o1",
        user=user,
        mode=mode,
        turn_id="t1",
        now=NOW,
        charge=Charge(tokens=10, cost=Decimal("0.5"), model_calls=1),
        currency=currency,
    )


@pytest.mark.decision("D604")
def test_each_budget_counts_its_scope_and_its_window() -> None:
    org_day, user_month, mode_roll, per_turn = _checks(
        _budget(id="org-day"),
        _budget(id="user-month", window=BudgetWindow.MONTH, per=BudgetScope.USER),
        _budget(
            id="mode-roll", window=BudgetWindow.ROLLING, rolling_seconds=60, per=BudgetScope.MODE
        ),
        _budget(id="turn", window=BudgetWindow.TURN, per=BudgetScope.USER_MODE),
    )
    assert (org_day.user, org_day.mode, org_day.since) == (
        None,
        None,
        datetime(2026, 3, 14, tzinfo=UTC),
    )
    assert (user_month.user, user_month.since) == ("u1", datetime(2026, 3, 1, tzinfo=UTC))
    assert (mode_roll.mode, mode_roll.since) == ("general", NOW - timedelta(seconds=60))
    assert (per_turn.turn_id, per_turn.since, per_turn.user, per_turn.mode) == (
        "t1",
        None,
        "u1",
        "general",
    )
    assert org_day.amount == Decimal(10)


@pytest.mark.decision("D604")
def test_a_budget_applies_only_where_its_org_user_and_mode_say() -> None:
    assert _checks(_budget(org="o2")) == []
    assert _checks(_budget(user="u2")) == []
    assert _checks(_budget(mode="review")) == []
    (only_u1,) = _checks(_budget(user="u1"))
    assert only_u1.user == "u1"  # a named user's budget counts that user's calls alone


@pytest.mark.decision("D604")
def test_a_cost_budget_takes_only_calls_priced_in_its_currency() -> None:
    cost = _budget(metric=BudgetMetric.COST, limit=Decimal(5), currency="EUR")
    assert _checks(cost, currency="EUR")[0].amount == Decimal("0.5")
    assert _checks(cost, currency="USD")[0].amount == Decimal(0)
    assert _checks(cost, currency=None)[0].amount == Decimal(0)


@pytest.mark.decision("D604")
@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"window": BudgetWindow.ROLLING}, "rolling_seconds"),
        ({"rolling_seconds": 5}, "rolling_seconds"),
        ({"currency": "EUR"}, "only a cost budget"),
        ({"limit": Decimal("1.5")}, "whole number"),
        ({"id": "no spaces"}, "budget id"),
        ({"limit": Decimal(-1)}, "greater than or equal"),
        ({"metric": BudgetMetric.COST, "currency": "euro"}, "ISO 4217"),
    ],
)
def test_a_malformed_budget_is_refused_naming_what_is_wrong(
    fields: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        _budget(**fields)


def _refused(budget: Budget, used: Decimal, oldest: datetime | None = None):  # type: ignore[no-untyped-def]
    (check,) = _checks(budget)
    return refusal(budget, check, used, oldest, NOW)


@pytest.mark.decision("D601")
def test_a_refusal_names_the_budget_its_window_and_what_remains() -> None:
    error = _refused(_budget(id="daily"), Decimal(95))
    assert error.code == "budget_exceeded"
    assert error.rule_id == "DESIGN/budget/within"
    assert error.field == "budgets.daily"
    assert error.budget is not None
    assert (error.budget.used, error.budget.remaining, error.budget.requested) == (
        Decimal(95),
        Decimal(5),
        Decimal(10),
    )
    assert error.budget.window == "per day (UTC)"
    assert error.budget.window_ends_at == datetime(2026, 3, 15, tzinfo=UTC)
    midnight = datetime(2026, 3, 15, tzinfo=UTC) - NOW
    assert error.budget.retry_after_seconds == int(midnight.total_seconds())
    assert "'daily'" in error.message
    assert "5 tokens of 100 remain" in error.message


@pytest.mark.decision("D601")
def test_retry_after_follows_the_window() -> None:
    over = _refused(_budget(), Decimal(500))
    assert over.budget is not None
    assert over.budget.remaining == 0
    month = _refused(_budget(window=BudgetWindow.MONTH), Decimal(95))
    assert month.budget is not None
    assert month.budget.window_ends_at == datetime(2026, 4, 1, tzinfo=UTC)
    rolling = _refused(
        _budget(window=BudgetWindow.ROLLING, rolling_seconds=600),
        Decimal(95),
        oldest=NOW - timedelta(seconds=100),
    )
    assert rolling.budget is not None
    assert rolling.budget.retry_after_seconds == 500
    turn = _refused(_budget(window=BudgetWindow.TURN), Decimal(95))
    assert turn.budget is not None
    assert turn.budget.retry_after_seconds is None
    assert turn.budget.window_ends_at is None


@pytest.mark.decision("D601")
def test_december_s_window_ends_in_january() -> None:
    budget = _budget(window=BudgetWindow.MONTH)
    assert budget.window_end(datetime(2026, 12, 31, 23, tzinfo=UTC)) == datetime(
        2027, 1, 1, tzinfo=UTC
    )


@pytest.mark.decision("D604")
def test_a_check_counts_the_charges_of_the_calls_it_matches() -> None:
    (check,) = _checks(_budget(per=BudgetScope.USER))
    mine = UsageCall(
        id="c",
        org="o1",
        user="u1",
        session_id="s",
        turn_id="t",
        mode="general",
        at=NOW,
        charge=Charge(tokens=7),
    )
    assert check.counted(mine) == Decimal(7)
    assert check.counted(replace(mine, user="u2")) == Decimal(0)
    assert check.counted(replace(mine, org="o2")) == Decimal(0)
    assert check.counted(replace(mine, at=NOW - timedelta(days=1))) == Decimal(0)
