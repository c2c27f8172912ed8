"""Shared pytest wiring: the ``rule`` and ``decision`` markers that link tests to ids.

``@pytest.mark.rule("AGN-036/4.2/PRE/session-null", "broken")`` says the test shows
the rule failing; ``"holds"`` says it shows the rule satisfied.
``@pytest.mark.decision("D26")`` (one or more ids) says the test checks that decision
or DESIGN.md resolution of docs/decisions.toml. The conformance tables
(docs/CONFORMANCE.md) are generated from these markers by ``tests/kits/conformance.py``;
``--rule-map FILE`` and ``--decision-map FILE`` write the maps at collection time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

# Tests import the store contract kit's cases directly too: pytest rewrites their asserts
# whichever module imports them first (testing/store_contract.py asks the same).
pytest.register_assert_rewrite("aptix_pipeline.testing.store_contract_cases")

# The turn browser's Chromium tests share the ``browser`` and ``tab`` fixtures.
pytest_plugins = ["browser_kit"]

OUTCOMES = ("holds", "broken")
DECISION_ID = re.compile(r"[DR][1-9][0-9]*")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rule-map", default=None, help="write the rule id → tests map to this JSON file"
    )
    parser.addoption(
        "--decision-map",
        default=None,
        help="write the decision id → tests map to this JSON file",
    )
    parser.addoption(
        "--e2e",
        action="store_true",
        default=False,
        help="run only the tests marked e2e (a real llama-server and model: `make e2e`); "
        "without it they are deselected",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rule(rule_id, outcome): the test shows the rule 'holds' or is 'broken'"
    )
    config.addinivalue_line(
        "markers",
        "decision(*ids): the test checks these decisions (D26) or resolutions (R10) "
        "of docs/decisions.toml",
    )
    config.addinivalue_line(
        "markers",
        "e2e: needs the real model server that `make e2e` builds (kits/local_model.py); "
        "selected by --e2e alone, deselected otherwise (D510)",
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config) -> None:
    target = config.getoption("--rule-map")
    links: dict[str, dict[str, list[str]]] = {}
    for item in _by_file_name(session.items):
        for marker in item.iter_markers("rule"):
            rule_id, outcome = marker.args
            if outcome not in OUTCOMES:
                raise pytest.UsageError(f"{item.nodeid}: rule outcome must be one of {OUTCOMES}")
            links.setdefault(rule_id, {}).setdefault(outcome, []).append(_linked(item.nodeid))
    if target:
        Path(target).write_text(json.dumps(links, indent=1, sort_keys=True), encoding="utf-8")
    _map_decisions(session, config)
    _select_e2e(session.items, config)


def _select_e2e(items: list[pytest.Item], config: pytest.Config) -> None:
    """``--e2e`` keeps only the tests marked ``e2e``; without it they are deselected (D510).

    After the maps above, so docs/CONFORMANCE.md links the e2e tests too."""
    wanted = bool(config.getoption("--e2e"))
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if (item.get_closest_marker("e2e") is not None) == wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _by_file_name(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items in the order docs/CONFORMANCE.md lists them: by test file name, then
    as collected (the order of one folder of test files, whatever folders hold them)."""
    return sorted(items, key=lambda item: _linked(item.nodeid).partition("::")[0])


def _linked(node_id: str) -> str:
    """A test as docs/CONFORMANCE.md names it: its file's name (unique in tests/, which
    ``tests/project/test_layout.py`` holds) and its function, without the folders."""
    path, _, rest = node_id.partition("::")
    return f"{path.rpartition('/')[2]}::{rest}"


def _map_decisions(session: pytest.Session, config: pytest.Config) -> None:
    """Check every ``decision`` marker's ids; write decision id → test node ids if asked."""
    links: dict[str, list[str]] = {}
    for item in _by_file_name(session.items):
        for marker in item.iter_markers("decision"):
            if not marker.args or not all(
                isinstance(i, str) and DECISION_ID.fullmatch(i) for i in marker.args
            ):
                raise pytest.UsageError(
                    f"{item.nodeid}: decision ids look like 'D26' or 'R10', not {marker.args!r}"
                )
            for decision_id in marker.args:
                nodes = links.setdefault(decision_id, [])
                if (
                    _linked(item.nodeid) not in nodes
                ):  # a module's and a function's marker may repeat one
                    nodes.append(_linked(item.nodeid))
    target = config.getoption("--decision-map")
    if target:
        Path(target).write_text(json.dumps(links, indent=1, sort_keys=True), encoding="utf-8")


# The engine scenario suite's `store` fixture: every scenario on both stores.
from engine_kit import store  # noqa: E402, F401

# A throwaway PostgreSQL server on loopback (kits/pg_server.py): `postgres_url`, `postgres_db_url`.
from pg_server import postgres_db_url, postgres_server, postgres_url  # noqa: E402, F401

# A throwaway Temporal dev server on loopback (kits/temporal_kit.py): `temporal_address`.
from temporal_kit import task_queue, temporal_address, temporal_server  # noqa: E402, F401


@pytest.fixture(autouse=True)
def _own_data_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's default store (``adapters/config/data_dir.py``) in a folder of its own, so no
    test writes into the user's data folder; subprocesses inherit it."""
    monkeypatch.setenv("APTIX_DATA_DIR", str(tmp_path_factory.mktemp("aptix-data")))
