"""``aptix eval``: the done-when of issue 32 — the example recordings against a scripted
candidate that answers one case otherwise report exactly that case, in the table, the
JSON, the JUnit XML and the HTML page (docs/EVALS.md, D620, D625)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import pytest
from cli_kit import APTIX
from eval_kit import CANDIDATE, RECORDINGS, TURNS, candidate_config, case_folder
from repo import ROOT

DIFFERENT = "05-streamed-initial"
"""The case the example candidate answers otherwise: it was recorded on another script."""


def _eval(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(APTIX), "eval", *args], capture_output=True, text=True, check=False, cwd=cwd
    )


class _FailedRows(HTMLParser):
    """The case names of the report table's rows whose candidate cell fails."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self._row: str | None = None
        self._cell: list[str] | None = None
        self._classes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and (found.get("id") or "").startswith("row-"):
            self._row = (found["id"] or "")[4:]
            self.rows[self._row] = []
        elif tag == "td" and self._row is not None:
            self.rows[self._row].append(found.get("class") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None


@pytest.mark.decision("D620", "D625")
def test_the_example_recordings_report_exactly_the_case_the_candidate_answers_otherwise(
    tmp_path: Path,
) -> None:
    junit, page = tmp_path / "eval.xml", tmp_path / "eval.html"

    table = _eval("examples/recordings", "--config", "examples/evals/candidate.toml")
    as_json = _eval(
        "examples/recordings",
        "--config",
        "examples/evals/candidate.toml",
        "--json",
        "--junit",
        str(junit),
        "--html",
        str(page),
    )

    assert (table.returncode, as_json.returncode) == (1, 1), table.stderr + as_json.stderr
    assert table.stderr == ""  # no progress bar: stderr is not a terminal
    failing = [line.split()[0] for line in table.stdout.splitlines() if " FAIL" in line]
    assert failing == [DIFFERENT]
    assert table.stdout.splitlines()[-1] == "5 cases: 4 pass, 1 fail, 1 regress"

    report = json.loads(as_json.stdout)
    assert report["format"] == "aptix.eval-report/1"
    assert report["summary"] == {"cases": 5, "passed": 4, "failed": 1, "regressed": 1}
    assert [case["name"] for case in report["cases"] if case["regressed"]] == [DIFFERENT]
    (different,) = [case for case in report["cases"] if case["name"] == DIFFERENT]
    divergence = different["candidate"]["divergence"]
    assert (divergence["kind"], divergence["port_call"]) == ("answer", "LLM.stream")
    assert different["candidate"]["turn"]["kind"] == "client_tool_continuation"
    assert different["recorded"]["kind"] == "final"

    suite = ElementTree.parse(junit).getroot()
    assert (suite.tag, suite.get("tests"), suite.get("failures")) == ("testsuite", "5", "1")
    failed = [
        case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None
    ]
    assert failed == [DIFFERENT]
    failure = suite.find(f"testcase[@name='{DIFFERENT}']/failure")
    assert failure is not None
    assert failure.get("message", "").startswith("regressed: same as recorded")
    assert "LLM.stream" in (failure.text or "")

    rows = _FailedRows()
    rows.feed(page.read_text(encoding="utf-8"))
    assert len(rows.rows) == 5
    assert [name for name, classes in rows.rows.items() if "fail" in classes] == [DIFFERENT]


@pytest.mark.decision("D623")
def test_the_exit_code_is_0_when_no_case_regresses_and_2_for_a_usage_error(
    tmp_path: Path,
) -> None:
    cases = case_folder(tmp_path, "01-initial", "03-continuation")
    bad = case_folder(tmp_path / "bad", "01-initial")
    (bad / "expectations.toml").write_text('[01-initial]\nmust = "x"\n', encoding="utf-8")

    passing = _eval(str(cases), "--config", str(CANDIDATE), "--quiet")
    unknown_key = _eval(str(bad), "--config", str(CANDIDATE))
    engine_only = tmp_path / "engine-only.toml"
    engine_only.write_text("[engine]\nllm_attempts = 2\n", encoding="utf-8")
    no_model = _eval(str(cases), "--config", str(engine_only))

    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert passing.stdout.splitlines()[-1] == "2 cases: 2 pass, 0 fail, 0 regress"
    assert unknown_key.returncode == 2
    assert "expectations.toml [01-initial]: unknown key 'must'" in unknown_key.stderr
    assert no_model.returncode == 2
    assert "engine-only.toml: a candidate needs a [model] table" in no_model.stderr


@pytest.mark.decision("D623")
def test_a_baseline_adds_a_column_and_a_case_regresses_only_where_it_passes(
    tmp_path: Path,
) -> None:
    cases = case_folder(tmp_path, "04-follow-on", DIFFERENT)
    changed = json.loads(json.dumps(TURNS))
    changed["turns"][1][1]["text"] = "Looks fine to me."
    candidate = candidate_config(tmp_path, changed, name="changed.toml")

    run = _eval(str(cases), "--config", str(candidate), "--baseline", str(CANDIDATE))

    assert run.returncode == 1
    lines = run.stdout.splitlines()
    assert lines[0].split()[:3] == ["case", "changed.toml", "candidate.toml"]
    assert lines[1].split()[:4] == ["04-follow-on", "FAIL", "(regressed)", "pass"]
    assert lines[-1] == "2 cases: 0 pass, 2 fail, 1 regress (candidate.toml: 1 pass)"


@pytest.mark.decision("D625")
def test_the_progress_bar_is_drawn_on_a_terminal_and_not_with_quiet(tmp_path: Path) -> None:
    cases = case_folder(tmp_path, "01-initial")

    def stderr_of(*extra: str) -> str:
        leader, follower = pty.openpty()
        try:
            subprocess.run(
                [str(APTIX), "eval", str(cases), "--config", str(CANDIDATE), *extra],
                stdout=subprocess.DEVNULL,
                stderr=follower,
                check=False,
            )
            os.close(follower)
            chunks = []
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode()
        finally:
            os.close(leader)

    assert "aptix eval [" in stderr_of()
    assert "1/1" in stderr_of()
    assert stderr_of("--quiet") == ""


@pytest.mark.decision("D624")
def test_capture_makes_a_case_folder_that_aptix_eval_runs(tmp_path: Path) -> None:
    out = tmp_path / "cases"

    captured = _eval(
        "capture", str(RECORDINGS), "--out", str(out), "--until", "2026-01-01T00:00:00.006Z"
    )
    run = _eval(str(out), "--config", str(CANDIDATE), "--json")
    again = _eval("capture", str(RECORDINGS), "--out", str(out), "--session", "session-1")

    assert captured.returncode == 0, captured.stderr
    assert captured.stdout.startswith("3 cases in ")
    assert sorted(p.name for p in out.iterdir()) == [
        "01-initial.json",
        "02-faulted-unknown-tool-call-id.json",
        "05-streamed-initial.json",
        "expectations.toml",
    ]
    report = json.loads(run.stdout)
    assert [case["name"] for case in report["cases"] if case["regressed"]] == [DIFFERENT]
    assert again.returncode == 2
    assert "holds cases already" in again.stderr
