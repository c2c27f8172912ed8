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

from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds
from aptix_pipeline.contracts import (
    Budget,
    BudgetCheck,
    BudgetMetric,
    BudgetScope,
    BudgetWindow,
    Caller,
    LLMReply,
    LLMRequest,
    Price,
    PriceTable,
    ReserveOutcome,
    ToolCall,
    ToolInvocation,
    Usage,
    UsageCall,
)
from aptix_pipeline.engine import Pipeline, Telemetry
from aptix_pipeline.steps import PipelineOptions, Ports

__all__ = ["TARGET", "budget_rows"]

TARGET = 1.05
"""At most 5 % more per turn with budgets checked and settled."""
CALLER = Caller(org="bench", user="bench")
CATALOG: dict[str, Any] = {
    "modes": [{"name": "general", "display_name": "General", "server_tools": ["send"]}],
    "server_tools": [{"name": "send", "description": "Send.", "executes_on": "server"}],
    "agents": [{"id": "a", "name": "A", "default": True}],
    "conversations": [{"id": "c", "name": "C", "default": True}],
}
_USAGE = Usage(input_tokens=120, output_tokens=30, total_tokens=150)
_CALL = LLMReply(
    tool_calls=[ToolCall(tool_call_id="x1", name="send", arguments_json='{"to": "bo"}')],
    usage=_USAGE,
)
_FINAL = LLMReply(text="Sent.", usage=_USAGE)
_RESULT = json.dumps({"sent": True, "id": "m-1"})
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


class _TwoReplies:
    """A model that calls ``send`` and then answers, turn after turn."""

    async def complete(self, request: LLMRequest) -> LLMReply:
        return _FINAL if len(request.messages) > 2 else _CALL


async def _send(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    return _RESULT


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


def _pipeline(setting: str, store: MemoryStore) -> Pipeline:
    catalog = ConfigCatalog(CATALOG, source="bench")
    ports = Ports(
        store=store,
        llm=_TwoReplies(),
        modes=catalog,
        agents=catalog,
        clock=SystemClock(),
        ids=RandomIds(),
        tools={"send": _send},
    )
    options = PipelineOptions(
        usage_ledger=setting != "usage off",
        prices=PRICES if setting == "budgets on" else None,
        budgets=BUDGETS if setting == "budgets on" else (),
    )
    return Pipeline(ports, options, telemetry=Telemetry.off())


def _turn(pipeline: Pipeline) -> Callable[[], Awaitable[object]]:
    return lambda: pipeline.run({"Instruction": "send"}, CALLER)


async def _measure(number: int, rounds: int) -> dict[str, Any]:
    work: dict[str, Callable[[], Awaitable[object]]] = {}
    stores: dict[str, _CountingStore] = {}
    for setting in SETTINGS:
        store = stores[setting] = _CountingStore()
        pipeline = _pipeline(setting, store)
        report = await pipeline.run({"Instruction": "send"}, CALLER)
        assert report.successful, report.result.rule_ids
        work[setting] = _turn(pipeline)
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
