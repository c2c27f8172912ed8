"""Shared pytest wiring: the ``rule`` marker that links tests to rule ids.

``@pytest.mark.rule("AGN-036/4.2/PRE/session-null", "broken")`` says the test shows
the rule failing; ``"holds"`` says it shows the rule satisfied. The conformance
table (docs/CONFORMANCE.md) is generated from these markers by
``tests/conformance.py``; ``--rule-map FILE`` writes the map at collection time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

OUTCOMES = ("holds", "broken")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rule-map", default=None, help="write the rule id → tests map to this JSON file"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rule(rule_id, outcome): the test shows the rule 'holds' or is 'broken'"
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config) -> None:
    target = config.getoption("--rule-map")
    links: dict[str, dict[str, list[str]]] = {}
    for item in session.items:
        for marker in item.iter_markers("rule"):
            rule_id, outcome = marker.args
            if outcome not in OUTCOMES:
                raise pytest.UsageError(f"{item.nodeid}: rule outcome must be one of {OUTCOMES}")
            links.setdefault(rule_id, {}).setdefault(outcome, []).append(item.nodeid)
    if target:
        Path(target).write_text(json.dumps(links, indent=1, sort_keys=True), encoding="utf-8")


# The engine scenario suite's `store` fixture: every scenario on both stores.
from engine_kit import store  # noqa: E402, F401

# A throwaway PostgreSQL server on loopback (tests/pg_server.py): `postgres_url`, `postgres_db_url`.
from pg_server import postgres_db_url, postgres_server, postgres_url  # noqa: E402, F401
