"""What usage and budgets cost a turn: the usage ledger and three budgets, on and off.

The same Initial turn (the model calls one server tool, then answers: two model
calls, each reporting its usage), tracing off, on the memory store, with
``PipelineOptions.usage_ledger`` off (the baseline), on without budgets (each call
reserved and settled, no check), and on with three budgets (an org's tokens per
day, a user's cost per month at a price table, the model calls of a turn).
Settings run interleaved, round by round; a figure is µs per turn, the minimum and
the median over the rounds. Each setting runs on a store of its own that starts
empty, so the day's calls a budget counts grow as they would in one day of use.
Target (issue 31): budget checks and settlement cost at most 5 % of a turn.

``store_calls_per_model_call`` counts the usage ledger's calls (``reserve_usage``
and ``settle_usage``) per model call: the settlement of a call travels with the
next reservation, and the last with the turn's end.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any

from rounds import rounds_of
from send_turn import CALLER, send_pipeline, send_turn

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import (
    Budget,
    BudgetCheck,
    BudgetMetric,
    BudgetScope,
    BudgetWindow,
    Price,
    PriceTable,
    ReserveOutcome,
    Usage,
    UsageCall,
)
from aptix_pipeline.steps import PipelineOptions

__all__ = ["TARGET", "budget_rows"]

TARGET = 1.05
"""At most 5 % more per turn with budgets checked and settled."""
_USAGE = Usage(input_tokens=120, output_tokens=30, total_tokens=150)
PRICES = PriceTable(
    default=Price(model="*", input_per_million=Decimal("2.5"), output_per_million=Decimal(10))
)
BUDGETS = (
    Budget(
        id="org-day",
        metric=BudgetMetric.TOKENS,
        limit=Decimal(10**12),
        window=BudgetWindow.DAY,
    ),
    Budget(
        id="user-month",
        metric=BudgetMetric.COST,
        limit=Decimal(10**6),
        window=BudgetWindow.MONTH,
        per=BudgetScope.USER,
    ),
    Budget(
        id="turn-calls",
        metric=BudgetMetric.MODEL_CALLS,
        limit=Decimal(16),
        window=BudgetWindow.TURN,
    ),
)
SETTINGS = ("usage off", "usage on", "budgets on")


class _CountingStore(MemoryStore):
    """The memory store, counting its usage ledger's calls."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger_calls = 0

    async def reserve_usage(
        self, call: UsageCall, checks: Sequence[BudgetCheck], settle: Sequence[UsageCall] = ()
    ) -> ReserveOutcome:
        self.ledger_calls += 1
        return await super().reserve_usage(call, checks, settle)

    async def settle_usage(self, calls: Sequence[UsageCall]) -> None:
        self.ledger_calls += 1
        await super().settle_usage(calls)


def _options(setting: str) -> PipelineOptions:
    return PipelineOptions(
        usage_ledger=setting != "usage off",
        prices=PRICES if setting == "budgets on" else None,
        budgets=BUDGETS if setting == "budgets on" else (),
    )


async def _measure(number: int, rounds: int) -> dict[str, Any]:
    work: dict[str, Callable[[], Awaitable[object]]] = {}
    stores: dict[str, _CountingStore] = {}
    for setting in SETTINGS:
        store = stores[setting] = _CountingStore()
        pipeline = send_pipeline(store, _options(setting), usage=_USAGE)
        report = await pipeline.run({"Instruction": "send"}, CALLER)
        assert report.successful, report.result.rule_ids
        work[setting] = send_turn(pipeline)
    times = await rounds_of(work, number, rounds)
    turns = 1 + number * rounds
    base = times["usage off"]
    figures: dict[str, Any] = {
        "turns_per_setting": turns,
        "store_calls_per_model_call": stores["budgets on"].ledger_calls / (2 * turns),
    }
    for setting in SETTINGS:
        row = times[setting]
        figures[setting] = {
            "min_us": min(row),
            "median_us": statistics.median(row),
            "ratio_min": min(row) / min(base),
            "ratio_median": statistics.median(row) / statistics.median(base),
        }
    return figures


def budget_rows(number: int = 40, rounds: int = 9) -> dict[str, Any]:
    """µs per turn per setting (see the module docstring)."""
    return asyncio.run(_measure(number, rounds))


if __name__ == "__main__":
    print(json.dumps(budget_rows(), indent=2))
