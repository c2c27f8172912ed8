"""``aptix usage`` and a budget's refusal in ``aptix run``, run as a user runs them: the
installed ``aptix`` in a process of its own (docs/BUDGETS.md, docs/CLI.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_kit import APTIX, write_json

from aptix_pipeline import SQLiteStore, UsageLedger

BUDGETS = """
[prices.default]
input = "2.50"
output = "10"

[[budgets]]
id = "daily-calls"
metric = "model_calls"
limit = 5
window = "day"

[[budgets]]
id = "monthly-cost"
metric = "cost"
limit = "20.00"
window = "month"
per = "user"
"""
REPLY = {"text": "Done.", "usage": {"input_tokens": 1000, "output_tokens": 100}}


def _config(folder: Path, store: str, more: str = BUDGETS) -> Path:
    write_json(folder / "replies.json", [REPLY] * 4)
    path = folder / "aptix.toml"
    path.write_text(
        f'[store]\nurl = "{store}"\n[model]\nkind = "scripted"\nscript = "replies.json"\n{more}',
        encoding="utf-8",
    )
    return path


def aptix(folder: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(APTIX), *map(str, args)], capture_output=True, text=True, check=False, cwd=folder
    )


@pytest.mark.decision("D590")
def test_usage_reports_the_local_org_and_the_configured_budgets(tmp_path: Path) -> None:
    config = _config(tmp_path, "memory")

    shown = aptix(tmp_path, "usage", "--config", config, "--json", "--window", "day")
    table = aptix(tmp_path, "usage", "--config", config, "--by", "user,mode")

    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["Query"]["Org"] == "local"  # aptix run's caller (D390)
    assert report["Total"]["Calls"] == 0
    assert [(b["BudgetId"], b.get("Used"), b["Limit"]) for b in report["Budgets"]] == [
        ("daily-calls", "0", "5"),
    ]  # a per-user budget with no calls and no --user names no one
    assert table.returncode == 0, table.stderr
    assert "usage of org local" in table.stdout
    assert "USER" in table.stdout
    assert "MODE" in table.stdout
    assert "daily-calls" in table.stdout


@pytest.mark.decision("D590")
def test_usage_for_a_named_user_shows_their_per_user_budget(tmp_path: Path) -> None:
    config = _config(tmp_path, "memory")

    shown = aptix(tmp_path, "usage", "--config", config, "--org", "acme", "--user", "ana", "--json")

    report = json.loads(shown.stdout)
    assert report["Query"] == {"Org": "acme", "User": "ana"}
    assert [(b["BudgetId"], b.get("User"), b["Remaining"]) for b in report["Budgets"]] == [
        ("daily-calls", None, "5"),
        ("monthly-cost", "ana", "20.00"),
    ]


@pytest.mark.decision("D590")
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--window", "week"), "--window: 'week' is none of"),
        (("--window", "day", "--since", "2026-11-01"), "give --since or --window, not both"),
        (("--since", "yesterday"), "--since: 'yesterday' is not an ISO 8601"),
        (("--by", "team"), "--by: unknown field 'team'"),
        (("--by", "user", "--by", "user"), "--by: a field is given twice"),
    ],
)
def test_a_bad_usage_option_is_exit_2_naming_it(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    config = _config(tmp_path, "memory")

    refused = aptix(tmp_path, "usage", "--config", config, *args)

    assert refused.returncode == 2
    assert refused.stderr.startswith("aptix usage: ")
    assert says in refused.stderr


@pytest.mark.decision("D590")
def test_aptix_run_says_a_budget_refused_the_turn_and_exits_1(tmp_path: Path) -> None:
    no_calls = '[[budgets]]\nid = "frozen"\nmetric = "model_calls"\nlimit = 0\nwindow = "month"\n'
    config = _config(tmp_path, "memory", no_calls)
    request = write_json(tmp_path / "request.json", {"Instruction": "go"})

    run = aptix(tmp_path, "run", request, "--config", config, "--compact")

    assert run.returncode == 1
    result = json.loads(run.stdout)
    assert result["Errors"][0]["Code"] == "budget_exceeded"
    assert result["Errors"][0]["Budget"]["BudgetId"] == "frozen"
    (line,) = [line for line in run.stderr.splitlines() if "budget" in line]
    assert line.startswith("aptix run: budget exceeded, the model was not called: ")
    assert "budget 'frozen'" in line
    assert line.endswith(f"try again in {result['Errors'][0]['Budget']['RetryAfterSeconds']} s")


@pytest.mark.decision("D590")
def test_usage_reads_what_aptix_run_spent_on_a_store_that_keeps_it(tmp_path: Path) -> None:
    if not issubclass(SQLiteStore, UsageLedger):
        pytest.skip("the SQLite store keeps no usage yet (issue 31, another part)")
    config = _config(tmp_path, "sqlite:aptix.db")
    request = write_json(tmp_path / "request.json", {"Instruction": "go"})
    for _ in range(2):
        assert aptix(tmp_path, "run", request, "--config", config).returncode == 0

    shown = aptix(tmp_path, "usage", "--config", config, "--by", "user", "--json")
    table = aptix(tmp_path, "usage", "--config", config)

    report = json.loads(shown.stdout)
    assert report["Total"]["Calls"] == 2
    assert report["Total"]["Cost"] == {"USD": "0.0070"}
    assert report["Budgets"][0]["Remaining"] == "3"
    assert "0.0070 USD" in table.stdout
