"""An eval report's forms: JSON with the baseline's side, JUnit XML a CI reads, one HTML
page that needs nothing else (docs/EVALS.md, D625)."""

from __future__ import annotations

import asyncio
import copy
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest
from eval_kit import TURNS, candidate_config, case_folder

from aptix_pipeline.adapters.evals import (
    Candidate,
    EvalReport,
    load_cases,
    report_html,
    report_json,
    report_junit,
    report_table,
    run_evals,
)


def _report(tmp_path: Path) -> EvalReport:
    cases = load_cases(case_folder(tmp_path, "03-continuation", "04-follow-on"))
    changed = copy.deepcopy(TURNS)
    changed["turns"][1][1]["text"] = "Looks <fine> & done."
    candidate = Candidate.load(candidate_config(tmp_path, changed, name="changed.toml"))
    baseline = Candidate.load(candidate_config(tmp_path, TURNS, name="baseline.toml"))
    return asyncio.run(run_evals(cases, candidate, baseline=baseline))


@pytest.mark.decision("D625")
def test_every_form_names_the_regressing_case_and_its_divergence(tmp_path: Path) -> None:
    report = _report(tmp_path)

    data = report_json(report)
    suite = ElementTree.fromstring(report_junit(report))
    page = report_html(report)
    table = report_table(report)

    follow_on = data["cases"][1]
    assert (data["candidate"], data["baseline"]) == ("changed.toml", "baseline.toml")
    assert follow_on["regressed"] is True
    assert follow_on["baseline"]["passed"] is True
    assert follow_on["candidate"]["divergence"]["where"] == "answer.Text"
    assert follow_on["candidate"]["divergence"]["actual"] == '"Looks <fine> & done."'
    assert follow_on["candidate"]["turn"]["cost"] == "0.0037525"
    assert data["cases"][0]["candidate"] == {
        "passed": True,
        "failures": [],
        "divergence": None,
        "turn": data["cases"][0]["candidate"]["turn"],
    }
    failure = suite.find("testcase[@name='04-follow-on']/failure")
    assert failure is not None
    assert failure.get("type") == "regression"
    assert "baseline: pass" in (failure.text or "")
    assert suite.find("testcase[@name='03-continuation']/failure") is None
    assert "Looks &lt;fine&gt; &amp; done." in page
    assert "04-follow-on  FAIL (regressed)  pass" in re.sub(" {2,}", "  ", table)


@pytest.mark.decision("D625")
def test_the_html_page_stands_alone(tmp_path: Path) -> None:
    page = report_html(_report(tmp_path))

    assert page.startswith("<!doctype html>")
    assert "<script" not in page
    assert not re.search(r"""(src|href)=["']?https?:""", page)
    assert "<style>" in page
