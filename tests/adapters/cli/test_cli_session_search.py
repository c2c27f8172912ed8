"""``aptix sessions list`` searches as the ``/sessions`` page does (issue 33 part 4),
run as a user runs it: the installed ``aptix`` on a SQLite file (tests/kits/search_kit.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from search_kit import search_store

APTIX = Path(sys.executable).with_name("aptix")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:{search_store(tmp_path_factory.mktemp('search'))}"


def aptix(store: str, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [str(APTIX), "sessions", "list", "--store", store, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == code, run.stderr
    return run


def rows(store: str, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(aptix(store, *args, "--json").stdout)
    return found


def ids(store: str, *args: str) -> list[str]:
    return [row["id"] for row in rows(store, *args)]


@pytest.mark.decision("D645")
def test_list_is_the_default_callers_and_all_is_everyones(store: str) -> None:
    assert ids(store) == ["s-local-3", "s-local-2", "s-local-1"]
    assert ids(store, "--all") == ["s-bob", "s-acme", "s-local-3", "s-local-2", "s-local-1"]
    assert ids(store, "--all", "--org", "acme") == ["s-bob", "s-acme"]
    assert ids(store, "--org", "acme", "--user", "ana") == ["s-acme"]


@pytest.mark.decision("D645")
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--session", "s-local-"), ["s-local-3", "s-local-2", "s-local-1"]),
        (("--turn", "t2"), ["s-local-2"]),
        (("--mode", "research"), ["s-local-2"]),
        (("--status", "faulted"), ["s-local-3"]),
        (("--status", "completed"), ["s-local-1"]),
        (("--all", "--status", "none"), ["s-bob"]),
        (("--since", "2026-03-01T12:03"), ["s-local-3", "s-local-2"]),
        (("--since", "2026-03-01T12:02", "--until", "2026-03-01T12:04:00+00:00"), ["s-local-2"]),
    ],
)
def test_each_search_flag_narrows_the_list(
    store: str, args: tuple[str, ...], expected: list[str]
) -> None:
    assert ids(store, *args) == expected


@pytest.mark.decision("D645")
def test_a_row_has_status_last_activity_turns_tokens_cost_error_and_preview(store: str) -> None:
    by_id = {row["id"]: row for row in rows(store)}
    table = aptix(store).stdout.splitlines()

    one, failed = by_id["s-local-1"], by_id["s-local-3"]
    assert (one["status"], one["turns"], one["tokens"], one["preview"]) == (
        "completed",
        1,
        10,
        "about s-local-1",
    )
    assert one["cost"] == [{"currency": "USD", "amount": "0.25"}]
    assert one["last_activity"].startswith("2026-03-01T12:01:00")
    assert (failed["status"], failed["turn_status"], failed["outcome"]) == (
        "faulted",
        "completed",
        "faulted",
    )
    assert failed["last_error"]["code"] == "port_failed"
    assert table[0].split()[:4] == ["SESSION", "MODE", "STATUS", "LAST"]
    assert table[0].rstrip().endswith("PREVIEW")
    [line] = [line for line in table if line.startswith("s-local-1 ")]
    assert line.split()[:8] == [
        *("s-local-1", "general", "completed", "2026-03-01", "12:01:00+00:00", "1", "10"),
        "0.25",
    ]
    assert line.endswith("about s-local-1")
    [line] = [line for line in table if line.startswith("s-local-3 ")]
    assert "port_failed: the LLM failed: the model is gone" in line


@pytest.mark.decision("D645")
def test_all_adds_the_owner_columns_and_owners_lists_the_pairs(store: str) -> None:
    header, *lines = aptix(store, "--all").stdout.splitlines()
    owners = json.loads(aptix(store, "--owners", "--json").stdout)

    assert header.split()[:4] == ["SESSION", "ORG", "USER", "MODE"]
    assert lines[0].split()[:3] == ["s-bob", "acme", "bob"]
    assert owners == [
        {"org": "acme", "user": "ana", "sessions": 1},
        {"org": "acme", "user": "bob", "sessions": 1},
        {"org": "local", "user": "local", "sessions": 3},
    ]


@pytest.mark.decision("D645")
def test_limit_and_page_read_a_page_at_a_time(store: str) -> None:
    first = aptix(store, "--limit", "2").stdout.splitlines()
    second = ids(store, "--limit", "2", "--page", "2")

    assert [line.split()[0] for line in first[1:3]] == ["s-local-3", "s-local-2"]
    assert first[-1] == "(more: --page 2)"
    assert second == ["s-local-1"]
    assert "(more" not in aptix(store, "--limit", "2", "--page", "2").stdout
    assert ids(store, "--offset", "1", "--limit", "1") == ["s-local-2"]  # the page's hint
    assert [o["user"] for o in rows(store, "--owners", "--offset", "1")] == ["bob", "local"]


@pytest.mark.decision("D645")
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--since", "yesterday"), "--since: not a date and time"),
        (("--until", "2026-13-01"), "--until: not a date and time"),
        (("--status", "broken"), "--status must be one of"),
        (("--since", "2026-03-02", "--until", "2026-03-01"), "--since must be earlier than"),
        (("--page", "0"), "--page"),
        (("--limit", "1001"), "--limit"),
    ],
)
def test_a_bad_flag_value_exits_2_naming_the_flag(
    store: str, args: tuple[str, ...], says: str
) -> None:
    run = aptix(store, *args, code=2)

    assert says in run.stderr
    assert run.stdout == ""
