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


def _aptix_with_input(text: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(APTIX), *args], input=text, capture_output=True, text=True)


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


def test_demo_runs_a_three_turn_session_and_checks_every_example(tmp_path: Path) -> None:
    demo = ROOT / "examples" / "demo.py"
    run = subprocess.run(
        [sys.executable, str(demo), "--verbose", "--out", str(tmp_path)],
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


@pytest.mark.decision("D389")
def test_validate_says_in_a_line_each_what_a_request_is_and_counts_them() -> None:
    refused = ROOT / "examples" / "requests" / "11-mode-in-request.json"

    run = _aptix("validate", str(EXAMPLES[0]), str(refused))

    assert run.returncode == 1
    lines = run.stdout.splitlines()
    assert lines[0] == f"✓ {EXAMPLES[0]}: valid, Initial"
    assert lines[1] == f"✗ {refused}: refused"
    assert lines[2].startswith("    AGN-034/3/server-owned-field [Mode]: ")
    assert lines[-1] == "1 valid, 1 refused, 2 requests"


@pytest.mark.decision("D389")
def test_validate_takes_a_folder_of_requests_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.json").write_text('{"Instruction": "two"}', encoding="utf-8")
    (tmp_path / "1.json").write_text('{"Instruction": "one"}', encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a request", encoding="utf-8")

    run = _aptix("validate", str(tmp_path))

    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        f"✓ {tmp_path / '1.json'}: valid, Initial",
        f"✓ {tmp_path / 'b' / '2.json'}: valid, Initial",
        "2 valid, 0 refused, 2 requests",
    ]


@pytest.mark.decision("D389")
def test_validate_reads_a_request_from_standard_input() -> None:
    valid = subprocess.run(
        [str(APTIX), "validate", "-"], input='{"Instruction": "hi"}', capture_output=True, text=True
    )
    refused = subprocess.run(
        [str(APTIX), "validate", "--json", "-"],
        input='{"Mode": "x"}',
        capture_output=True,
        text=True,
    )

    assert (valid.returncode, valid.stdout.splitlines()[0]) == (0, "✓ (stdin): valid, Initial")
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["Successful"] is False


@pytest.mark.decision("D389")
def test_validate_of_a_folder_without_requests_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    run = _aptix("validate", str(tmp_path))

    assert run.returncode == 2
    assert run.stderr.strip() == f"aptix validate: {tmp_path}: a folder with no .json file in it"
    assert run.stdout == ""


@pytest.mark.decision("D396")
def test_the_demo_says_in_one_screen_what_it_did_and_keeps_the_rest_in_its_log(
    tmp_path: Path,
) -> None:
    demo = ROOT / "examples" / "demo.py"
    run = subprocess.run(
        [sys.executable, str(demo), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    lines = run.stdout.splitlines()
    log = (tmp_path / "demo.log").read_text(encoding="utf-8")

    assert len(lines) <= 24, run.stdout  # one terminal screen
    assert sum(line.startswith("Turn ") and " ✓ " in line for line in lines) == 3
    assert "Replay: the 3 recorded turns replay with no divergence" in lines
    assert any(line.startswith("A server tool made a file: FileRef report.md") for line in lines)
    assert "trace:" not in run.stdout
    assert run.stderr == ""
    assert log.count('"Successful": true') == 3  # the whole story is in the log
    assert "trace:" in log
    assert (tmp_path / "last-turn.mmd").read_text(encoding="utf-8").startswith("stateDiagram-v2")
