"""docs/CONFORMANCE.md is current: every rule has a row, every row has tests.

The rule table is generated from the rule registry and the ``rule`` markers
(tests/conformance.py); the hand-written resolution table must name tests that
exist.
"""

from __future__ import annotations

import re

import pytest
from conformance import DOC, collect_links, problems, render_table, splice

from aptix_pipeline.validators import all_rules


@pytest.fixture(scope="module")
def links() -> dict[str, dict[str, list[str]]]:
    return collect_links()


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


def test_tests_named_in_the_resolution_table_exist(links: dict[str, dict[str, list[str]]]) -> None:
    document = DOC.read_text(encoding="utf-8")
    section = document.split("## Resolutions and decisions", 1)[1].split("<!-- rules:begin", 1)[0]
    named = set(re.findall(r"`(test_[a-z_]+\.py::test_[a-z0-9_]+)`", section))
    collected = {
        node.split("[")[0].removeprefix("tests/")
        for outcomes in links.values() for nodes in outcomes.values() for node in nodes
    }  # fmt: skip
    existing = collected | _all_test_functions()

    assert named, "the resolution table names its tests"
    assert sorted(named - existing) == []


def _all_test_functions() -> set[str]:
    from conformance import ROOT

    found = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        for name in re.findall(
            r"^(?:async )?def (test_[a-z0-9_]+)\(", path.read_text(), flags=re.M
        ):
            found.add(f"{path.name}::{name}")
    return found
