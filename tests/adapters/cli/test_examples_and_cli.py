"""The example requests, the demo and the ``aptix validate`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from repo import ROOT

from aptix_pipeline.validators import parse_request

EXAMPLES = sorted((ROOT / "examples" / "requests").glob("*.json"))
APTIX = Path(sys.executable).parent / "aptix"
EXPECTED_REFUSALS = {
    "10-continuation-with-instruction.json": {"AGN-034/2.2/instruction-forbidden"},
    "11-mode-in-request.json": {"AGN-034/3/server-owned-field"},
    "12-artifact-escaping-root.json": {
        "AGN-034/4.2/relative-path-within-root", "AGN-034/4.2/relative-path-not-absolute",
    },
    "13-session-without-turn.json": {"AGN-034/3/session-turn-pair"},
    "14-result-and-error.json": {"AGN-034/5/exactly-one-outcome"},
}  # fmt: skip


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_request_is_accepted_or_refused_as_named(path: Path) -> None:
    result = parse_request(path.read_bytes())

    if path.name.startswith("0"):
        assert result.successful, result.errors
    else:
        assert set(result.rule_ids) == EXPECTED_REFUSALS[path.name]


def _aptix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(APTIX), *args], capture_output=True, text=True, check=False)


def test_validate_prints_a_successful_result_and_exits_zero() -> None:
    run = _aptix("validate", "--compact", str(EXAMPLES[0]))

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["Successful"] is True


def test_validate_exits_one_when_any_file_is_refused() -> None:
    refused = ROOT / "examples" / "requests" / "11-mode-in-request.json"

    run = _aptix("validate", "--compact", str(EXAMPLES[0]), str(refused))

    assert run.returncode == 1
    results = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [r["Successful"] for r in results] == [True, False]
    assert results[1]["Errors"][0]["Field"] == "Mode"


def test_validate_of_a_missing_file_is_a_usage_error() -> None:
    run = _aptix("validate", "no-such-file.json")

    assert run.returncode == 2


def test_version_is_printed() -> None:
    run = _aptix("--version")

    assert run.returncode == 0
    assert run.stdout.startswith("aptix-pipeline ")


def test_demo_runs_a_three_turn_session_and_checks_every_example() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        check=True,
    )

    assert run.stdout.count('"Successful": true') == 3
    assert "mode:     general → review" in run.stdout
    assert '"Kind": "client_tool_continuation"' in run.stdout
    assert run.stdout.count('"Kind": "final"') == 2
    assert '"ModeDisplayName": "Code Review"' in run.stdout
    assert "tool_call   id=call_checklist name=review_checklist side=server outcome=executed" in (
        run.stdout
    )
    assert "server_tool_round from=llm_answered to=reasoning" in run.stdout
    assert run.stdout.count("→ response_built → done") == 3
    # the live line, from a listener of the event stream, as each turn ran
    live = [line for line in run.stdout.splitlines() if line.startswith("live:")]
    assert len(live) == 3
    assert live[0].split()[1:3] == ["request_handler", "agent_context_resolver"]
    assert "[agent_change_mode: mode_changed]" in live[0]
    assert "server_tool_round" in live[2]
    assert "[review_checklist: executed]" in live[2]
    assert all(line.endswith("complete ✓") for line in live)
    assert f"3 well-formed, 5 refused, {len(EXAMPLES)} requests" in run.stdout
    assert " valid " not in run.stdout


@pytest.mark.decision("D141")
def test_validate_of_a_lone_surrogate_key_prints_the_result_not_a_traceback(
    tmp_path: Path,
) -> None:
    request = tmp_path / "surrogate.json"
    request.write_bytes(b'{"\\ud800": 1, "Instruction": "hi"}')

    run = _aptix("validate", "--compact", str(request))

    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    result = json.loads(run.stdout.splitlines()[0])
    assert result["Errors"][0]["Field"] == "\\ud800"
