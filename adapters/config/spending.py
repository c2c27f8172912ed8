"""``[prices]`` and ``[[budgets]]`` of the service configuration (docs/BUDGETS.md, issue 31).

- ``[prices]`` — ``unknown = "count" | "refuse"`` (``UnpricedPolicy``), ``[prices.default]``
  and ``[prices.models."NAME"]`` (a model's name, or a prefix ending in ``*``), each
  with ``input``, ``output`` and ``cached_input`` per million tokens and ``currency``
  (default ``USD``). The ``PriceTable`` of ``PipelineOptions.prices``.
- ``[[budgets]]`` — ``id``, ``metric``, ``limit``, ``window`` (``turn``, ``day``,
  ``month``, ``rolling`` with ``rolling_seconds``), ``per`` (``org``, ``user``,
  ``mode``, ``user_mode``), ``org``, ``user``, ``mode`` and ``currency``: the
  ``Budget``s of ``PipelineOptions.budgets``.

Amounts are exact. A price or a limit is a string (``"2.50"``) or an integer; a TOML
float (``2.50``) is read exactly too, from its text, when the file is loaded with
``load_service_config`` (it reads these two tables with ``parse_float=Decimal``). A
Python ``float`` handed to ``parse_service_config`` is refused: its binary value is
not the price that was written. Every mistake names its key (``[prices].unknown``,
``[prices.models."gpt-4o"].input``, ``budgets[2].window``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aptix_pipeline.contracts import AptixPipelineError, Budget, Price, PriceTable, UnpricedPolicy

__all__ = [
    "EXACT_TABLES",
    "SpendingError",
    "budgets_of",
    "exact_amount",
    "inexact",
    "prices_of",
]

_CURRENCY = re.compile(r"[A-Z]{3}")

EXACT_TABLES: Final = ("prices", "budgets")
"""The tables whose TOML floats are read as exact ``Decimal``s."""


class SpendingError(AptixPipelineError, ValueError):
    """A ``[prices]`` or ``[[budgets]]`` mistake: the key path, then what is wrong."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_Amount = Any  # checked by exact_amount, which names what it wants


class _Price(_Entry):
    input: _Amount
    output: _Amount
    cached_input: _Amount = None
    currency: str = "USD"


class _Prices(_Entry):
    unknown: Literal["count", "refuse"] = "count"
    default: dict[str, Any] | None = None
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)


class _Budget(_Entry):
    id: str = Field(min_length=1)
    metric: Literal["tokens", "cost", "model_calls", "tool_calls", "server_tool_rounds"]
    limit: _Amount
    window: Literal["turn", "day", "month", "rolling"]
    rolling_seconds: int | None = Field(default=None, gt=0)
    per: Literal["org", "user", "mode", "user_mode"] = "org"
    org: str | None = Field(default=None, min_length=1)
    user: str | None = Field(default=None, min_length=1)
    mode: str | None = Field(default=None, min_length=1)
    currency: str | None = None


def _path(where: str, loc: tuple[int | str, ...]) -> str:
    for part in loc:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    return where


def _checked(model: type[_Entry], data: object, where: str) -> Any:
    if not isinstance(data, dict):
        raise SpendingError(f"{where} must be a table")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        raise SpendingError(f"{_path(where, tuple(first['loc'])[:1])}: {first['msg']}") from None


def exact_amount(value: object, where: str) -> Decimal:
    """``value`` as an exact, finite, non-negative ``Decimal`` (module docstring)."""
    if isinstance(value, bool) or not isinstance(value, str | int | Decimal | float):
        raise SpendingError(f'{where}: give an amount, such as "2.50", not {value!r}')
    if isinstance(value, float):
        raise SpendingError(
            f"{where}: {value!r} is a binary float, not an exact amount: write it as a "
            f'string ("{value}"), or load the file with load_service_config'
        )
    try:
        amount = Decimal(value.strip() if isinstance(value, str) else value)
    except InvalidOperation:
        raise SpendingError(f"{where}: {value!r} is not a number") from None
    if not amount.is_finite() or amount < 0:
        raise SpendingError(f"{where}: {value!r} must be a finite amount of 0 or more")
    return amount


def _price(model: str, data: object, where: str) -> Price:
    entry: _Price = _checked(_Price, data, where)
    cached = entry.cached_input
    try:
        return Price(
            model=model,
            input_per_million=exact_amount(entry.input, f"{where}.input"),
            output_per_million=exact_amount(entry.output, f"{where}.output"),
            cached_input_per_million=(
                None if cached is None else exact_amount(cached, f"{where}.cached_input")
            ),
            currency=entry.currency,
        )
    except ValidationError as error:
        first = error.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise SpendingError(f"{where}.currency: {message}") from None


def prices_of(data: object) -> PriceTable:
    """``[prices]``'s ``PriceTable``; ``SpendingError`` naming the key otherwise."""
    table: _Prices = _checked(_Prices, data, "[prices]")
    default = None if table.default is None else _price("*", table.default, "[prices.default]")
    prices = []
    for name, entry in table.models.items():
        if not name.strip():
            raise SpendingError("[prices.models]: a model's name is empty")
        prices.append(_price(name, entry, f'[prices.models."{name}"]'))
    return PriceTable(prices=tuple(prices), default=default, unknown=UnpricedPolicy(table.unknown))


def budgets_of(data: object) -> tuple[Budget, ...]:
    """``[[budgets]]``'s ``Budget``s, each id once; ``SpendingError`` naming the key
    (``budgets[2].window``) otherwise."""
    if not isinstance(data, list):
        raise SpendingError("budgets must be an array of tables: [[budgets]]")
    budgets: list[Budget] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(data):
        where = f"budgets[{index}]"
        entry: _Budget = _checked(_Budget, item, where)
        values: dict[str, Any] = entry.model_dump()
        values["limit"] = limit = exact_amount(entry.limit, f"{where}.limit")
        rolling = entry.window == "rolling"
        if rolling != (entry.rolling_seconds is not None):
            raise SpendingError(
                f"{where}.rolling_seconds: "
                + ("a rolling window needs it" if rolling else "only a rolling window has it")
            )
        if entry.currency is not None and not _CURRENCY.fullmatch(entry.currency):
            raise SpendingError(
                f"{where}.currency: {entry.currency!r} is not a three-letter ISO 4217 code"
            )
        if entry.metric != "cost":
            if entry.currency is not None:
                raise SpendingError(f"{where}.currency: only a cost budget has a currency")
            if limit != limit.to_integral_value():
                raise SpendingError(f"{where}.limit: a {entry.metric} limit is a whole number")
        try:
            budget = Budget.model_validate(values)
        except ValidationError as error:
            first = error.errors()[0]
            message = str(first["msg"]).removeprefix("Value error, ")
            raise SpendingError(f"{_path(where, tuple(first['loc']))}: {message}") from None
        if budget.id in seen:
            raise SpendingError(f"{where}.id: {budget.id!r} is also budgets[{seen[budget.id]}]'s")
        seen[budget.id] = index
        budgets.append(budget)
    return tuple(budgets)


def inexact(data: object) -> Any:
    """``data`` (TOML read with ``parse_float=Decimal``) with its ``Decimal``s as the
    ``float``s ``tomllib`` gives by default: for every table but ``EXACT_TABLES``."""
    if isinstance(data, Decimal):
        return float(data)
    if isinstance(data, dict):
        return {key: inexact(value) for key, value in data.items()}
    if isinstance(data, list):
        return [inexact(value) for value in data]
    return data
