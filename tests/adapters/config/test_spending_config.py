"""``[prices]``, ``[[budgets]]`` and the usage keys of ``[engine]`` (config/spending.py,
docs/BUDGETS.md, docs/CONFIGURATION.md): each key read exactly, each mistake named."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from aptix_pipeline import (
    Budget,
    BudgetMetric,
    BudgetScope,
    BudgetWindow,
    Caller,
    ScriptedLLM,
    UnpricedPolicy,
)
from aptix_pipeline.adapters.config.service import (
    ConfigError,
    load_service_config,
    parse_service_config,
)
from aptix_pipeline.adapters.embedded import build_pipeline

PRICES = """
[prices]
unknown = "refuse"

[prices.default]
input = 1
output = "4"

[prices.models."gpt-4o*"]
input = 2.50
output = "10.00"
cached_input = 1.25
currency = "EUR"

[prices.models."gpt-4o-mini"]
input = "0.15"
output = 0.6
"""

BUDGETS = """
[[budgets]]
id = "org-day"
metric = "cost"
limit = 12.30
window = "day"

[[budgets]]
id = "ana-tokens"
metric = "tokens"
limit = 50000
window = "rolling"
rolling_seconds = 3600
per = "user_mode"
org = "acme"
user = "ana"
mode = "review"

[[budgets]]
id = "turn-calls"
metric = "model_calls"
limit = "3"
window = "turn"
per = "mode"

[[budgets]]
id = "month-eur"
metric = "cost"
limit = "100"
window = "month"
currency = "EUR"
per = "user"
"""


def _config(folder: Path, text: str) -> Path:
    path = folder / "aptix.toml"
    path.write_text('[store]\nurl = "memory"\n' + text, encoding="utf-8")
    return path


@pytest.mark.decision("D588")
def test_prices_are_read_exactly_floats_from_their_text(tmp_path: Path) -> None:
    prices = load_service_config(_config(tmp_path, PRICES), env={}).options.prices

    assert prices is not None
    assert prices.unknown is UnpricedPolicy.REFUSE
    assert prices.default is not None
    assert (prices.default.input_per_million, prices.default.output_per_million) == (
        Decimal(1),
        Decimal(4),
    )
    gpt4o = prices.price("gpt-4o-2024-08-06")
    assert gpt4o is not None
    assert gpt4o.model == "gpt-4o*"
    # 2.50 and 1.25 as written, not 2.5 nor a binary approximation
    assert str(gpt4o.input_per_million) == "2.50"
    assert str(gpt4o.output_per_million) == "10.00"
    assert str(gpt4o.cached_input_per_million) == "1.25"
    assert gpt4o.currency == "EUR"
    mini = prices.price("gpt-4o-mini")
    assert mini is not None
    assert (str(mini.input_per_million), str(mini.output_per_million)) == ("0.15", "0.6")
    assert mini.currency == "USD"


@pytest.mark.decision("D588")
def test_budgets_are_read_with_every_key(tmp_path: Path) -> None:
    budgets = load_service_config(_config(tmp_path, BUDGETS), env={}).options.budgets

    assert budgets == (
        Budget(
            id="org-day",
            metric=BudgetMetric.COST,
            limit=Decimal("12.30"),
            window=BudgetWindow.DAY,
            currency="USD",
        ),
        Budget(
            id="ana-tokens",
            metric=BudgetMetric.TOKENS,
            limit=Decimal(50000),
            window=BudgetWindow.ROLLING,
            rolling_seconds=3600,
            per=BudgetScope.USER_MODE,
            org="acme",
            user="ana",
            mode="review",
        ),
        Budget(
            id="turn-calls",
            metric=BudgetMetric.MODEL_CALLS,
            limit=Decimal(3),
            window=BudgetWindow.TURN,
            per=BudgetScope.MODE,
        ),
        Budget(
            id="month-eur",
            metric=BudgetMetric.COST,
            limit=Decimal(100),
            window=BudgetWindow.MONTH,
            currency="EUR",
            per=BudgetScope.USER,
        ),
    )
    assert str(budgets[0].limit) == "12.30"


@pytest.mark.decision("D588")
def test_the_engine_keys_of_usage_reach_the_options(tmp_path: Path) -> None:
    text = "[engine]\nusage_ledger = false\nmax_output_tokens = 800\noutput_tokens_estimate = 0\n"

    options = load_service_config(_config(tmp_path, text), env={}).options
    defaults = load_service_config(_config(tmp_path, ""), env={}).options

    assert (options.usage_ledger, options.max_output_tokens, options.output_tokens_estimate) == (
        False,
        800,
        0,
    )
    assert (defaults.usage_ledger, defaults.max_output_tokens) == (True, None)
    assert defaults.output_tokens_estimate == 4096
    assert (defaults.prices, defaults.budgets) == (None, ())


_BUDGET = {"id": "b", "metric": "tokens", "limit": "10", "window": "day"}


@pytest.mark.decision("D588")
@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"prices": {"unknown": "free"}}, r"\[prices\]\.unknown: "),
        ({"prices": {"cheap": True}}, r"\[prices\]\.cheap: "),
        ({"prices": "cheap"}, r"\[prices\] must be a table"),
        ({"prices": {"default": {"input": "1"}}}, r"\[prices\.default\]\.output: "),
        ({"prices": {"default": {"input": "x", "output": 1}}}, r"\[prices\.default\]\.input: "),
        (
            {"prices": {"models": {"m": {"input": 1, "output": "-2"}}}},
            r'\[prices\.models\."m"\]\.output: .*0 or more',
        ),
        (
            {"prices": {"models": {"m": {"input": 1, "output": 2, "cached_input": "NaN"}}}},
            r'\[prices\.models\."m"\]\.cached_input: ',
        ),
        (
            {"prices": {"models": {"m": {"input": 1, "output": 2, "currency": "euro"}}}},
            r'\[prices\.models\."m"\]\.currency: .*ISO 4217',
        ),
        (
            {"prices": {"models": {"m": {"input": 2.5, "output": 2}}}},
            r'\[prices\.models\."m"\]\.input: 2\.5 is a binary float.*"2\.5"',
        ),
        (
            {"prices": {"models": {"m": {"input": True, "output": 2}}}},
            r'\[prices\.models\."m"\]\.input: give an amount',
        ),
        ({"budgets": {"id": "b"}}, r"budgets must be an array of tables"),
        ({"budgets": [_BUDGET, {**_BUDGET, "window": "week"}]}, r"budgets\[1\]\.window: "),
        ({"budgets": [{**_BUDGET, "metric": "money"}]}, r"budgets\[0\]\.metric: "),
        ({"budgets": [{**_BUDGET, "per": "team"}]}, r"budgets\[0\]\.per: "),
        ({"budgets": [{**_BUDGET, "limit": "lots"}]}, r"budgets\[0\]\.limit: 'lots' is not"),
        ({"budgets": [{**_BUDGET, "limit": 10.5}]}, r"budgets\[0\]\.limit: 10\.5 is a binary"),
        ({"budgets": [{**_BUDGET, "limit": "10.5"}]}, r"budgets\[0\]\.limit: a tokens limit is"),
        ({"budgets": [{**_BUDGET, "id": "a b"}]}, r"budgets\[0\]\.id: "),
        ({"budgets": [{**_BUDGET, "window": "rolling"}]}, r"budgets\[0\]\.rolling_seconds: a"),
        ({"budgets": [{**_BUDGET, "rolling_seconds": 60}]}, r"budgets\[0\]\.rolling_seconds: o"),
        (
            {"budgets": [{**_BUDGET, "rolling_seconds": 0, "window": "rolling"}]},
            r"budgets\[0\]\.rolling_s",
        ),
        ({"budgets": [{**_BUDGET, "currency": "USD"}]}, r"budgets\[0\]\.currency: only a cost"),
        (
            {"budgets": [{**_BUDGET, "metric": "cost", "currency": "usd"}]},
            r"budgets\[0\]\.currency: .*ISO 4217",
        ),
        ({"budgets": [{**_BUDGET, "team": "x"}]}, r"budgets\[0\]\.team: "),
        ({"budgets": [{**_BUDGET, "org": ""}]}, r"budgets\[0\]\.org: "),
        ({"budgets": ["b"]}, r"budgets\[0\] must be a table"),
        ({"budgets": [_BUDGET, _BUDGET]}, r"budgets\[1\]\.id: 'b' is also budgets\[0\]'s"),
        ({"engine": {"max_output_tokens": 0}}, r"\[engine\]\.max_output_tokens: "),
        ({"engine": {"output_tokens_estimate": -1}}, r"\[engine\]\.output_tokens_estimate: "),
        ({"engine": {"usage_ledger": "yes"}}, r"\[engine\]\.usage_ledger: "),
    ],
)
def test_each_bad_value_is_a_config_error_naming_its_key(
    data: dict[str, object], where: str
) -> None:
    with pytest.raises(ConfigError, match=r"^configuration: " + where):
        parse_service_config({"store": {"url": "memory"}, **data}, env={})


@pytest.mark.decision("D588")
def test_a_toml_float_given_as_python_data_is_refused_but_strings_are_exact() -> None:
    exact = parse_service_config(
        {"prices": {"default": {"input": "0.1", "output": Decimal("0.3")}}}, env={}
    ).options.prices

    assert exact is not None
    assert exact.default is not None
    assert exact.default.input_per_million * 3 == exact.default.output_per_million
    with pytest.raises(ConfigError, match="binary float"):
        parse_service_config({"prices": {"default": {"input": 0.1, "output": 1}}}, env={})


@pytest.mark.decision("D588")
def test_the_other_tables_keep_their_floats(tmp_path: Path) -> None:
    text = "[server]\nread_timeout_seconds = 2.5\n[engine]\nretry_wait_seconds = 0.1\n" + PRICES

    config = load_service_config(_config(tmp_path, text), env={})

    assert config.server.read_timeout_seconds == 2.5
    assert config.options.retry_wait_seconds == 0.1


@pytest.mark.decision("D588")
async def test_a_configured_pipeline_checks_the_configured_budgets(tmp_path: Path) -> None:
    text = '[[budgets]]\nid = "one-call"\nmetric = "model_calls"\nlimit = 1\nwindow = "day"\n'
    config = load_service_config(_config(tmp_path, text), env={})
    pipeline = build_pipeline(config, llm=ScriptedLLM([{"text": "a"}, {"text": "b"}]))
    caller = Caller(org="acme", user="ana")

    first = await pipeline.execute({"Instruction": "one"}, caller)
    second = await pipeline.execute({"Instruction": "two"}, caller)

    assert first.successful
    assert not second.successful
    assert second.errors[0].code == "budget_exceeded"
    assert second.errors[0].budget is not None
    assert second.errors[0].budget.budget_id == "one-call"


@pytest.mark.decision("D588")
def test_budgets_on_a_store_that_keeps_no_usage_are_a_config_error(tmp_path: Path) -> None:
    text = (
        "[engine]\nusage_ledger = false\n"
        '[[budgets]]\nid = "d"\nmetric = "model_calls"\nlimit = 1\nwindow = "day"\n'
    )
    config = load_service_config(_config(tmp_path, text), env={})

    with pytest.raises(ConfigError, match=r"aptix\.toml: budgets need a usage ledger"):
        build_pipeline(config, llm=ScriptedLLM([{"text": "a"}]))
