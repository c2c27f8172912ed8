"""Each model call's usage and cost, in the turn's totals, on its spans and in its trace.

A turn of three rounds: the first reply reports cached and reasoning tokens, the
second no usage at all, the third cached tokens only. The ``chat`` spans carry each
call's counts (with the GenAI conventions' names), whether it was reported and its
cost; ``invoke_agent`` sums them and counts the calls its sums leave out; each
``llm_client`` transition of the state trace keeps its round's usage and cost, on
both runtimes; the response's ``Usage`` sums the cached and reasoning tokens the
calls reported (issue 31).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, make_pipeline, ok, text
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from span_kit import Recorded, attributes_of

from aptix_pipeline import (
    CallUsage,
    MemoryStore,
    PipelineOptions,
    StateTrace,
    TransitionRecord,
    TurnReport,
)
from aptix_pipeline.contracts import Price, PriceTable
from aptix_pipeline.engine import Runtime

SCRIPT: list[dict[str, Any]] = [
    {
        **calls(call("m1", "Math")),
        "usage": {
            "input_tokens": 100,
            "output_tokens": 20,
            "cached_input_tokens": 60,
            "reasoning_tokens": 8,
        },
    },
    calls(call("a1", "Add", {"a": 2, "b": 3})),  # no usage: unreported
    {**text("5."), "usage": {"input_tokens": 200, "output_tokens": 10, "cached_input_tokens": 150}},
]

PRICES = PriceTable(
    prices=(
        Price(
            model="scripted",
            input_per_million=Decimal("2.50"),
            output_per_million=Decimal("10"),
            cached_input_per_million=Decimal("1.25"),
        ),
    )
)
# (40 x 2.50 + 60 x 1.25 + 20 x 10) / 1e6 and (50 x 2.50 + 150 x 1.25 + 10 x 10) / 1e6
FIRST_COST, THIRD_COST = Decimal("0.000375"), Decimal("0.0004125")


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    found = Recorded()
    yield found
    found.shutdown()


async def three_rounds(
    recorded: Recorded, prices: PriceTable | None, runtime: Runtime = "compiled"
) -> TurnReport:
    options = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0, prices=prices)
    pipeline, _ = make_pipeline(
        MemoryStore(), SCRIPT, options=options, telemetry=recorded.telemetry(), runtime=runtime
    )
    return await pipeline.run({"Instruction": "What is 2 + 3?"}, CALLER)


def usage_of(trace: StateTrace | None) -> list[CallUsage | None]:
    assert trace is not None
    return [e.usage for e in trace.transitions if e.event == "llm_client"]


@pytest.mark.decision("D586")
async def test_each_chat_span_has_its_calls_tokens_cost_and_whether_it_was_reported(
    recorded: Recorded,
) -> None:
    await three_rounds(recorded, PRICES)

    [turn] = recorded.turns()
    chats = [attributes_of(span) for span in turn.named("chat")]
    assert len(chats) == 3
    first, second, third = chats
    assert {k: v for k, v in first.items() if "usage" in k} == {
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 60,
        "gen_ai.usage.reasoning.output_tokens": 8,
        "aptix.usage.reported": True,
        "aptix.usage.priced": True,
        "aptix.usage.cost": "0.000375",
        "aptix.usage.currency": "USD",
    }
    # Unreported: no token count at all (never 0), and no cost.
    assert {k: v for k, v in second.items() if "usage" in k} == {
        "aptix.usage.reported": False,
        "aptix.usage.priced": True,
    }
    assert "gen_ai.usage.reasoning.output_tokens" not in third  # not reported: unknown
    assert third["gen_ai.usage.cache_read.input_tokens"] == 150
    assert third["aptix.usage.cost"] == "0.0004125"


@pytest.mark.decision("D586")
async def test_invoke_agent_sums_the_calls_and_counts_the_unreported_and_unpriced_ones(
    recorded: Recorded,
) -> None:
    await three_rounds(recorded, PRICES)

    [turn] = recorded.turns()
    root = attributes_of(turn.root)
    assert {k: v for k, v in root.items() if k.startswith(("gen_ai.usage", "aptix.usage"))} == {
        "gen_ai.usage.input_tokens": 300,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cache_read.input_tokens": 210,
        "gen_ai.usage.reasoning.output_tokens": 8,
        "aptix.usage.cost": str(FIRST_COST + THIRD_COST),
        "aptix.usage.currency": "USD",
        "aptix.usage.unreported_calls": 1,
        "aptix.usage.unpriced_calls": 0,
    }


@pytest.mark.decision("D586")
async def test_without_a_price_every_call_is_unpriced_and_no_cost_is_given(
    recorded: Recorded,
) -> None:
    report = await three_rounds(recorded, None)

    [turn] = recorded.turns()
    chats = [attributes_of(span) for span in turn.named("chat")]
    assert [c["aptix.usage.priced"] for c in chats] == [False, False, False]
    assert not any("aptix.usage.cost" in c for c in chats)
    root = attributes_of(turn.root)
    assert root["aptix.usage.unpriced_calls"] == 3
    assert "aptix.usage.cost" not in root
    assert [u.priced if u else None for u in usage_of(report.trace)] == [False, False, False]


@pytest.mark.decision("D586")
def test_the_span_attribute_names_are_the_installed_conventions() -> None:
    from aptix_pipeline.engine import telemetry

    assert telemetry.CACHED_INPUT_TOKENS == gen_ai_attributes.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
    assert telemetry.REASONING_TOKENS == gen_ai_attributes.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
    assert telemetry.INPUT_TOKENS == gen_ai_attributes.GEN_AI_USAGE_INPUT_TOKENS
    assert telemetry.OUTPUT_TOKENS == gen_ai_attributes.GEN_AI_USAGE_OUTPUT_TOKENS


@pytest.mark.decision("D587")
@pytest.mark.parametrize("runtime", ["compiled", "statechart"])
async def test_each_llm_client_transition_keeps_its_rounds_usage_and_cost(
    recorded: Recorded, runtime: Runtime
) -> None:
    report = await three_rounds(recorded, PRICES, runtime)

    assert usage_of(report.trace) == [
        CallUsage(True, 100, 20, 60, 8, True, FIRST_COST, "USD"),
        CallUsage(False, priced=True),
        CallUsage(True, 200, 10, 150, None, True, THIRD_COST, "USD"),
    ]
    assert report.trace is not None
    others = [e for e in report.trace.transitions if e.event != "llm_client"]
    assert others
    assert all(e.usage is None for e in others)


@pytest.mark.decision("D587")
async def test_the_usage_in_the_trace_json_says_unreported_and_unpriced_and_reads_back(
    recorded: Recorded,
) -> None:
    priced = (await three_rounds(recorded, PRICES)).trace
    unpriced = (await three_rounds(recorded, None)).trace
    assert priced is not None
    assert unpriced is not None

    def usage_json(trace: StateTrace) -> list[Any]:
        return [
            e["usage"]
            for e in trace.to_dict()["entries"]
            if e["kind"] == "transition" and e["step"] == "llm_client"
        ]

    assert usage_json(priced) == [
        {
            "input_tokens": 100,
            "output_tokens": 20,
            "cached_input_tokens": 60,
            "reasoning_tokens": 8,
            "cost": "0.000375",
            "currency": "USD",
        },
        {"unreported": True},
        {
            "input_tokens": 200,
            "output_tokens": 10,
            "cached_input_tokens": 150,
            "cost": "0.0004125",
            "currency": "USD",
        },
    ]
    assert usage_json(unpriced)[1] == {"unreported": True, "unpriced": True}
    assert usage_json(unpriced)[2] == {
        "input_tokens": 200,
        "output_tokens": 10,
        "cached_input_tokens": 150,
        "unpriced": True,
    }
    for trace in (priced, unpriced):
        assert StateTrace.from_dict(trace.to_dict()) == trace
        assert StateTrace.from_dict(trace.to_dict()).to_json() == trace.to_json()


@pytest.mark.decision("D587")
def test_a_tiny_cost_is_written_as_plain_decimal_text() -> None:
    usage = CallUsage(True, 1, 0, None, None, True, Decimal("2.5") / Decimal(1_000_000), "EUR")
    record = TransitionRecord("llm_client", "reasoning", "llm_answered", usage)

    assert usage.to_dict()["cost"] == "0.0000025"  # not 2.5E-6
    assert CallUsage.from_dict(usage.to_dict()) == usage
    assert record.usage == usage


@pytest.mark.decision("D585")
async def test_the_turns_usage_sums_the_cached_and_reasoning_tokens_reported(
    recorded: Recorded,
) -> None:
    report = await three_rounds(recorded, PRICES)

    usage = ok(report.result).usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (300, 30)
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (210, 8)


@pytest.mark.decision("D585")
async def test_the_turns_cached_and_reasoning_tokens_stay_unknown_when_no_call_reports_them(
    recorded: Recorded,
) -> None:
    script = [{**text("hi"), "usage": {"input_tokens": 5, "output_tokens": 1}}]
    pipeline, _ = make_pipeline(MemoryStore(), script, telemetry=recorded.telemetry())
    usage = ok(await pipeline.execute({"Instruction": "hello"}, CALLER)).usage

    assert usage is not None
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (None, None)
    [turn] = recorded.turns()
    root = attributes_of(turn.root)
    assert "gen_ai.usage.cache_read.input_tokens" not in root
    assert root["aptix.usage.unreported_calls"] == 0
