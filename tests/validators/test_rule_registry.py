"""The rule registry: one full set of rules, whatever part of the package was imported.

Each case imports part of the package in a fresh interpreter, then asks
``all_rules()``; the answer must be every rule the package declares — the set
seen after importing every one of its modules.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aptix_pipeline.contracts import ErrorCode
from aptix_pipeline.validators import SESSION_FOUND, TURN_DEADLINE, all_rules
from aptix_pipeline.validators.rules import rule

_RULE_IDS_AFTER = """
import importlib, json, pkgutil, sys

names = sys.argv[1:]
if names == ["--every-module"]:
    import aptix_pipeline
    names = [m.name for m in pkgutil.walk_packages(aptix_pipeline.__path__, "aptix_pipeline.")]
for name in names:
    importlib.import_module(name)
from aptix_pipeline.validators.rules import all_rules
print(json.dumps({rule_id: r.module for rule_id, r in all_rules().items()}))
"""


def _rules_after(*imports: str) -> dict[str, str]:
    """Rule id → declaring module, from a fresh interpreter that imported ``imports``."""
    done = subprocess.run(
        [sys.executable, "-c", _RULE_IDS_AFTER, *imports],
        check=True,
        capture_output=True,
        text=True,
    )
    rules: dict[str, str] = json.loads(done.stdout)
    return rules


@pytest.fixture(scope="module")
def declared() -> dict[str, str]:
    """Every rule the package declares: the registry after importing all its modules."""
    return _rules_after("--every-module")


@pytest.mark.decision("D253")
@pytest.mark.parametrize(
    "imports",
    [
        pytest.param(("aptix_pipeline.validators.rules",), id="only-the-registry"),
        pytest.param(("aptix_pipeline.contracts", "aptix_pipeline.validators"), id="contracts"),
        pytest.param(("aptix_pipeline.steps",), id="steps"),
        pytest.param(("aptix_pipeline.engine",), id="engine"),
        pytest.param(("aptix_pipeline.steps.session_restorer",), id="one-step"),
        pytest.param(("aptix_pipeline",), id="top-level"),
    ],
)
def test_all_rules_is_the_full_set_whatever_was_imported(
    imports: tuple[str, ...], declared: dict[str, str]
) -> None:
    rules = _rules_after(*imports)

    assert sorted(rules) == sorted(declared)
    assert len(rules) == len(declared)


@pytest.mark.decision("D253")
def test_this_process_sees_the_same_full_set(declared: dict[str, str]) -> None:
    assert {rule_id: r.module for rule_id, r in all_rules().items()} == declared


@pytest.mark.decision("D253")
def test_every_rule_is_declared_in_a_validators_module(declared: dict[str, str]) -> None:
    outside = {i: m for i, m in declared.items() if not m.startswith("aptix_pipeline.validators.")}

    assert outside == {}
    assert all_rules()[SESSION_FOUND.id].module == "aptix_pipeline.validators.turn_work"
    assert all_rules()[TURN_DEADLINE.id].module == "aptix_pipeline.validators.turn_work"


@pytest.mark.decision("D253")
def test_a_rule_declared_outside_the_validators_is_refused() -> None:
    with pytest.raises(ValueError, match="must be declared in"):
        rule(
            "TEST/0/outside",
            "none",
            "a rule a step would declare",
            ErrorCode.PIPELINE_RULE_FAILED,
            module="aptix_pipeline.steps.session_restorer",
        )

    assert "TEST/0/outside" not in all_rules()


@pytest.mark.decision("D253")
def test_a_rule_id_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        rule(
            SESSION_FOUND.id,
            SESSION_FOUND.section,
            SESSION_FOUND.message,
            SESSION_FOUND.code,
            module="aptix_pipeline.validators.turn_work",
        )

    assert all_rules()[SESSION_FOUND.id] is SESSION_FOUND
