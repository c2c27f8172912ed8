"""What every store's ``UsageLedger`` shares: the verdict on a reservation once the
store has counted what each budget already holds (``contracts/usage.py``).

A store counts, inside its own atomic step, what each ``BudgetCheck`` matches; this
module decides from those sums whether the call fits, so the memory, SQLite and
PostgreSQL stores judge alike. ``usage_row`` and ``usage_call_from_row`` are the
SQL stores' one order of a call's columns (their ``usage_calls`` tables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from pydantic import TypeAdapter

from aptix_pipeline.contracts import BudgetCheck, ReserveOutcome, UsageCall, UsageQuery

__all__ = [
    "USAGE_FIELDS",
    "check_reservation",
    "usage_call_from_row",
    "usage_filters",
    "usage_row",
]

USAGE_FIELDS: Final = (
    "id",
    "org",
    "user",
    "session_id",
    "turn_id",
    "mode",
    "model",
    "at",
    "round",
    "step",
    "settled",
    "charge_tokens",
    "charge_cost",
    "charge_model_calls",
    "charge_tool_calls",
    "charge_server_tool_rounds",
    "reported",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "priced",
    "cost",
    "currency",
    "tool_calls",
    "server_tool_round",
    "failed",
)
"""A call's columns in the SQL stores' ``usage_calls`` tables, in ``usage_row``'s order
(the PostgreSQL table names ``user`` ``user_name``)."""


def check_reservation(
    checks: Sequence[BudgetCheck],
    used: Mapping[str, Decimal],
    oldest: Mapping[str, datetime | None],
) -> ReserveOutcome:
    """Whether a call fits every budget: ``used`` (by budget id) plus its ``amount``
    within ``limit``. The first check that does not fit refuses it; ``oldest`` is when
    each budget's earliest counted call was made."""
    for check in checks:
        if used.get(check.budget_id, Decimal(0)) + check.amount > check.limit:
            return ReserveOutcome(
                reserved=False,
                used=dict(used),
                refused_by=check.budget_id,
                oldest=oldest.get(check.budget_id),
            )
    return ReserveOutcome(reserved=True, used=dict(used))


def usage_filters(
    query: UsageQuery, user_column: str, placeholder: str
) -> tuple[list[str], list[object]]:
    """The conditions of ``query`` but its times, as a SQL store writes them: the org,
    then each field it narrows to (``user_column`` names the user's column,
    ``placeholder`` is the driver's parameter mark), with their parameters."""
    where: list[str] = [f"org = {placeholder}"]
    params: list[object] = [query.org]
    for column, value in (
        (user_column, query.user),
        ("mode", query.mode),
        ("model", query.model),
        ("session_id", query.session_id),
        ("turn_id", query.turn_id),
    ):
        if value is not None:
            where.append(f"{column} = {placeholder}")
            params.append(value)
    return where, params


def usage_row(call: UsageCall) -> tuple[Any, ...]:
    """``call``'s values in ``USAGE_FIELDS`` order (costs as ``Decimal``, exact)."""
    charge = call.charge
    return (
        call.id,
        call.org,
        call.user,
        call.session_id,
        call.turn_id,
        call.mode,
        call.model,
        call.at,
        call.round,
        call.step,
        call.settled,
        charge.tokens,
        charge.cost,
        charge.model_calls,
        charge.tool_calls,
        charge.server_tool_rounds,
        call.reported,
        call.input_tokens,
        call.output_tokens,
        call.cached_input_tokens,
        call.reasoning_tokens,
        call.priced,
        call.cost,
        call.currency,
        call.tool_calls,
        call.server_tool_round,
        call.failed,
    )


def usage_call_from_row(row: Sequence[Any]) -> UsageCall:
    """A call from its columns in ``USAGE_FIELDS`` order: a cost kept as text or as a
    number becomes the ``Decimal`` it was, a flag kept as 0/1 a ``bool``, a time kept as
    ISO text a ``datetime`` (pydantic's conversions)."""
    values = dict(zip(USAGE_FIELDS, row, strict=True))
    charge = {
        "tokens": values.pop("charge_tokens"),
        "cost": values.pop("charge_cost"),
        "model_calls": values.pop("charge_model_calls"),
        "tool_calls": values.pop("charge_tool_calls"),
        "server_tool_rounds": values.pop("charge_server_tool_rounds"),
    }
    return _USAGE_CALL.validate_python({**values, "charge": charge})


_USAGE_CALL: TypeAdapter[UsageCall] = TypeAdapter(UsageCall)
