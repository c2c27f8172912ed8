"""Eval expectations: each key passes on a turn that meets it and fails, named, on one
that does not; a malformed table is refused naming the key (docs/EVALS.md, D622)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from aptix_pipeline.engine.replay import Expectations, ToolCallSeen, TurnFacts

TURN = TurnFacts(
    kind="client_tool_continuation",
    text="Switching to review mode, then reading the file.",
    tool_calls=(
        ToolCallSeen("agent_change_mode", {"mode": "review", "reason": "asked"}),
        ToolCallSeen("read_file", {"path": "src/app.py", "lines": [1, 2, 3]}),
    ),
    tokens=450,
    cost=Decimal("0.00141"),
    currency="USD",
    latency_ms=12.5,
    model_calls=1,
)

CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("kind", {"kind": "client_tool_continuation"}, {"kind": "final"}, "kind final"),
    ("calls by name", {"calls": ["read_file"]}, {"calls": ["run_tests"]}, "not called"),
    (
        "calls equals",
        {
            "calls": [
                {"tool": "read_file", "arguments": [{"path": "$.path", "equals": "src/app.py"}]}
            ]
        },
        {"calls": [{"tool": "read_file", "arguments": [{"path": "$.path", "equals": "app.py"}]}]},
        "called, but not so",
    ),
    (
        "calls contains",
        {"calls": [{"tool": "read_file", "arguments": {"path": "lines", "contains": 2}}]},
        {"calls": [{"tool": "read_file", "arguments": {"path": "lines", "contains": 9}}]},
        "called, but not so",
    ),
    (
        "calls matches",
        {"calls": [{"tool": "read_file", "arguments": [{"path": "$.path", "matches": r"\.py$"}]}]},
        {"calls": [{"tool": "read_file", "arguments": [{"path": "$.path", "matches": r"\.rs$"}]}]},
        "called, but not so",
    ),
    ("no_calls", {"no_calls": ["run_tests"]}, {"no_calls": ["read_file"]}, "no_calls read_file"),
    (
        "no_calls with arguments",
        {"no_calls": [{"tool": "read_file", "arguments": [{"path": "$.path", "equals": "x"}]}]},
        {"no_calls": [{"tool": "read_file", "arguments": [{"path": "$.path", "contains": "src"}]}]},
        "called",
    ),
    ("text_contains", {"text_contains": "review"}, {"text_contains": ["sorry"]}, "not in the text"),
    ("text_not_contains", {"text_not_contains": "sorry"}, {"text_not_contains": "file"}, "in the"),
    ("text_matches", {"text_matches": r"^Switching"}, {"text_matches": r"^Done"}, "no match"),
    ("max_tokens", {"max_tokens": 450}, {"max_tokens": 449}, "450 tokens"),
    ("max_cost", {"max_cost": "0.002"}, {"max_cost": Decimal("0.001")}, "cost 0.00141 USD"),
    ("max_latency_ms", {"max_latency_ms": 20}, {"max_latency_ms": 10}, "12.5 ms"),
]


@pytest.mark.decision("D622")
@pytest.mark.parametrize(("key", "met", "unmet", "named"), CASES, ids=[c[0] for c in CASES])
def test_each_expectation_passes_when_met_and_fails_named_when_not(
    key: str, met: dict[str, Any], unmet: dict[str, Any], named: str
) -> None:
    passing = Expectations.parse(met, "expectations.toml [case]")
    failing = Expectations.parse(unmet, "expectations.toml [case]")

    assert passing.check(TURN, diverged=False) == []
    failures = failing.check(TURN, diverged=False)
    assert len(failures) == 1
    assert named in failures[0]
    assert failures[0].startswith(key.split()[0])


@pytest.mark.decision("D622")
def test_without_expectations_a_divergence_fails_and_with_them_it_is_allowed() -> None:
    nothing = Expectations()
    some = Expectations.parse({"kind": "client_tool_continuation"}, "e [c]")
    strict = Expectations.parse(
        {"kind": "client_tool_continuation", "allow_divergence": False}, "e [c]"
    )

    assert nothing.check(TURN, diverged=False) == []
    assert nothing.check(TURN, diverged=True) == [
        "same as recorded: the turn diverged from its recording"
    ]
    assert some.check(TURN, diverged=True) == []
    assert strict.check(TURN, diverged=True) == [
        "same as recorded: the turn diverged from its recording"
    ]


@pytest.mark.decision("D622")
def test_unknown_tokens_and_cost_fail_a_limit_rather_than_pass_it() -> None:
    unmeasured = TurnFacts(kind="final", text="", tokens=None, cost=None, latency_ms=None)
    limits = Expectations.parse({"max_tokens": 10, "max_cost": "1", "max_latency_ms": 5}, "e [c]")

    assert limits.check(unmeasured, diverged=False) == [
        "max_tokens 10: the model reported no usage",
        "max_cost 1: the calls are unpriced",
        "max_latency_ms 5: not timed",
    ]


@pytest.mark.decision("D622")
@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"kinds": "final"}, "expectations.toml [01-initial]: unknown key 'kinds'"),
        ({"kind": "done"}, "expectations.toml [01-initial].kind: one of final, "),
        ({"calls": [{"tool": "x", "args": []}]}, "[01-initial].calls[0]: unknown key 'args'"),
        (
            {"calls": [{"tool": "x", "arguments": [{"path": "$.a", "like": 1}]}]},
            "[01-initial].calls[0].arguments[0]: unknown key 'like'",
        ),
        (
            {"calls": [{"tool": "x", "arguments": [{"path": "$.a"}]}]},
            "give equals, contains or matches",
        ),
        ({"text_matches": "("}, "[01-initial].text_matches: not a regular expression"),
        ({"max_tokens": -1}, "[01-initial].max_tokens: a whole number"),
        ({"max_cost": "cheap"}, "[01-initial].max_cost: an amount"),
        ({"allow_divergence": "yes"}, "[01-initial].allow_divergence: true or false"),
        (
            {"calls": [{"tool": "x", "arguments": [{"path": "$..a", "equals": 1}]}]},
            "not a JSON path",
        ),
    ],
)
def test_a_malformed_table_is_refused_naming_the_file_case_and_key(
    table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=r"01-initial") as raised:
        Expectations.parse(table, "expectations.toml [01-initial]")

    assert message in str(raised.value)


@pytest.mark.decision("D622")
def test_facts_of_a_result_name_its_kind_text_and_every_tool_call() -> None:
    result = {
        "Successful": True,
        "Result": {"Kind": "final", "PrimaryOutputText": "2 + 3 = 5"},
    }
    answers: list[dict[str, Any]] = [
        {"ToolCalls": [{"ToolCallId": "a", "Name": "Add", "ArgumentsJson": '{"a": 2, "b": 3}'}]},
        {"Text": "2 + 3 = 5", "ToolCalls": []},
    ]

    facts = TurnFacts.of(result, answers)
    refused = TurnFacts.of({"Successful": False, "Result": None}, [])

    assert (facts.kind, facts.text, facts.model_calls) == ("final", "2 + 3 = 5", 2)
    assert facts.tool_calls == (ToolCallSeen("Add", {"a": 2, "b": 3}),)
    assert (refused.kind, refused.text) == ("error", "")
