"""docs/CONFORMANCE.md is current: every rule has a row, every row has tests.

The rule table is generated from the rule registry and the ``rule`` markers, the
resolution and decision tables from docs/decisions.toml and the ``decision``
markers (tests/kits/conformance.py). Every decision has a test unless it is listed as
not testable; a test a decision's text names exists and carries its marker.
"""

from __future__ import annotations

import re

import pytest
from conformance import (
    DOC,
    UNTESTABLE,
    DecisionLinks,
    Links,
    collect_maps,
    decision_problems,
    load_decisions,
    problems,
    render_decisions,
    render_table,
    splice,
    splice_decisions,
)
from repo import ROOT

from aptix_pipeline.validators import all_rules


@pytest.fixture(scope="module")
def maps() -> tuple[Links, DecisionLinks]:
    return collect_maps()


@pytest.fixture(scope="module")
def links(maps: tuple[Links, DecisionLinks]) -> Links:
    return maps[0]


@pytest.fixture(scope="module")
def decision_links(maps: tuple[Links, DecisionLinks]) -> DecisionLinks:
    return maps[1]


def test_every_rule_has_a_holding_and_a_breaking_test(
    links: dict[str, dict[str, list[str]]],
) -> None:
    assert problems(links) == []


def test_conformance_table_is_current(links: dict[str, dict[str, list[str]]]) -> None:
    document = DOC.read_text(encoding="utf-8")

    assert splice(document, render_table(links)) == document, "run `make conformance`"


def test_every_rule_id_in_the_code_has_a_row() -> None:
    document = DOC.read_text(encoding="utf-8")

    missing = [rule_id for rule_id in all_rules() if f"| `{rule_id}` |" not in document]

    assert missing == []


def test_decision_tables_are_current(decision_links: DecisionLinks) -> None:
    document = DOC.read_text(encoding="utf-8")

    assert splice_decisions(document, render_decisions(decision_links)) == document, (
        "run `make conformance`"
    )


def test_every_decision_has_a_test_and_every_marker_a_decision(
    decision_links: DecisionLinks,
) -> None:
    assert decision_problems(decision_links) == []


def test_decisions_not_testable_are_few_and_say_why() -> None:
    assert len(UNTESTABLE) <= 5
    assert all(reason.strip() for reason in UNTESTABLE.values())


@pytest.mark.parametrize(
    "marks",
    [("D9999",), ("R99", "D1")],
    ids=["unknown-decision", "unknown-resolution"],
)
def test_a_marker_naming_an_unknown_decision_is_a_problem(marks: tuple[str, ...]) -> None:
    links = {decision_id: ["tests/test_x.py::test_y"] for decision_id in marks}

    found = decision_problems(links)

    assert [p for p in found if "unknown" in p] == [f"marker names an unknown decision: {marks[0]}"]


def test_tests_named_in_the_resolution_table_exist(links: dict[str, dict[str, list[str]]]) -> None:
    document = DOC.read_text(encoding="utf-8")
    section = document.split("## Resolutions and decisions", 1)[1].split("<!-- rules:begin", 1)[0]
    named = set(re.findall(r"`(test_[a-z_]+\.py::test_[a-z0-9_]+)`", section))
    collected = {
        node.split("[")[0].removeprefix("tests/")
        for outcomes in links.values()
        for nodes in outcomes.values()
        for node in nodes
    }
    existing = collected | _all_test_functions()

    assert named, "the resolution table names its tests"
    assert sorted(named - existing) == []


def test_tests_a_decision_names_carry_its_marker(decision_links: DecisionLinks) -> None:
    decisions = load_decisions()
    texts = {r.id: f"{r.validators} {r.engine}" for r in decisions.resolutions}
    texts |= {d.id: f"{d.decision} {d.reason}" for d in decisions.decisions}
    functions = _all_test_functions()
    unmarked = []
    for decision_id, text in texts.items():
        marked = {node.removeprefix("tests/") for node in decision_links.get(decision_id, [])}
        for file, function in re.findall(
            r"`(?:tests/)?(test_[a-z0-9_]+\.py)?(?:::)?(test_[a-z0-9_]+)?(?:\[[^\]`]*\])?`", text
        ):
            if function:  # a test, with or without its file: one of that name is marked
                found = {f for f in functions if f.endswith(f"::{function}")}
                wanted = {f for f in found if not file or f.startswith(f"{file}::")}
                ok = any(node.split("[")[0] in wanted for node in marked)
            else:  # a whole file: some test of it is marked
                ok = any(node.startswith(f"{file}::") for node in marked)
            if (file or function) and not ok:
                unmarked.append(f"{decision_id}: {file}::{function}")

    assert unmarked == []


def _all_test_functions() -> set[str]:
    found = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for name in re.findall(
            r"^(?:async )?def (test_[a-z0-9_]+)\(", path.read_text(), flags=re.M
        ):
            found.add(f"{path.name}::{name}")
    return found
