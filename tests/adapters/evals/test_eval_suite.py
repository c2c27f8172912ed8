"""``run_evals``: cases a bounded number at a time, a failing model a failed case, a
baseline side by side (docs/EVALS.md, D623)."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
from pathlib import Path

import pytest
from eval_kit import TURNS, candidate_config, candidate_with, case_folder

from aptix_pipeline.adapters.evals import Candidate, load_cases, run_evals
from aptix_pipeline.adapters.models import TurnScript
from aptix_pipeline.contracts import LLMReply, LLMRequest


class CountingModel:
    """Answers the demo session's script, a little later, counting the calls at once."""

    running = 0
    most = 0

    def __init__(self) -> None:
        self._script = TurnScript(json.dumps(TURNS))

    async def complete(self, request: LLMRequest) -> LLMReply:
        cls = type(self)
        cls.running += 1
        cls.most = max(cls.most, cls.running)
        try:
            await asyncio.sleep(0.05)
            return await self._script.complete(request)
        finally:
            cls.running -= 1


class HangingModel:
    """Never answers."""

    async def complete(self, request: LLMRequest) -> LLMReply:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.mark.decision("D623")
@pytest.mark.parametrize("jobs", [1, 2])
def test_jobs_bounds_how_many_cases_run_at_once(tmp_path: Path, jobs: int) -> None:
    cases = load_cases(case_folder(tmp_path, "01-initial", "03-continuation", "04-follow-on"))
    CountingModel.running = CountingModel.most = 0

    report = asyncio.run(run_evals(cases, candidate_with(CountingModel), jobs=jobs))

    assert [result.candidate.passed for result in report.results] == [True, True, True]
    assert CountingModel.most == jobs


@pytest.mark.decision("D623")
def test_a_model_that_raises_is_a_failed_case_naming_it(tmp_path: Path) -> None:
    cases = load_cases(case_folder(tmp_path, "03-continuation", "02-faulted-unknown-tool-call-id"))
    exhausted = copy.deepcopy(TURNS)
    exhausted["turns"][0] = exhausted["turns"][0][:1]  # the continuation's reply is missing
    candidate = Candidate.load(candidate_config(tmp_path, exhausted))

    report = asyncio.run(run_evals(cases, candidate))

    faulted, continuation = report.results
    assert faulted.candidate.passed  # no model call: nothing to fail
    assert not continuation.candidate.passed
    assert continuation.candidate.failures[0].startswith("the model failed: ScriptError: turn 1")
    assert continuation.candidate.facts is not None
    assert continuation.candidate.facts.kind == "error"
    assert [result.case.name for result in report.regressions] == ["03-continuation"]


@pytest.mark.decision("D623")
def test_a_model_that_hangs_is_a_failed_case_after_the_timeout(tmp_path: Path) -> None:
    cases = load_cases(case_folder(tmp_path, "01-initial", "02-faulted-unknown-tool-call-id"))

    report = asyncio.run(run_evals(cases, candidate_with(HangingModel), timeout=0.2))

    initial, faulted = report.results
    assert initial.candidate.failures == ("timed out after 0.2 s",)
    assert initial.candidate.facts is None
    assert faulted.candidate.passed


@pytest.mark.decision("D623")
def test_a_model_that_cannot_be_reached_is_a_failed_case(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "unreachable.toml"
    config.write_text(
        candidate_config(tmp_path, TURNS)
        .read_text(encoding="utf-8")
        .replace(
            '[model]\nkind = "scripted"\n',
            f'[model]\nkind = "openai"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
            'model = "scripted"\nmax_attempts = 1\ntimeout_seconds = 2\n# ',
        ),
        encoding="utf-8",
    )
    cases = load_cases(case_folder(tmp_path, "01-initial"))

    report = asyncio.run(run_evals(cases, Candidate.load(config)))

    (result,) = report.results
    assert not result.candidate.passed
    assert result.candidate.failures[0].startswith("the model failed: ")
    assert result.regressed


@pytest.mark.decision("D623")
def test_a_case_regresses_only_where_the_baseline_passes(tmp_path: Path) -> None:
    cases = load_cases(
        case_folder(tmp_path, "03-continuation", "04-follow-on", "05-streamed-initial")
    )
    changed = copy.deepcopy(TURNS)
    changed["turns"][1][1]["text"] = "Looks fine to me."
    candidate = Candidate.load(candidate_config(tmp_path, changed, name="candidate.toml"))
    baseline = Candidate.load(candidate_config(tmp_path, TURNS, name="baseline.toml"))

    report = asyncio.run(run_evals(cases, candidate, baseline=baseline, jobs=2))

    verdicts = {
        result.case.name: (result.candidate.passed, result.baseline and result.baseline.passed)
        for result in report.results
    }
    assert verdicts == {
        "03-continuation": (True, True),
        "04-follow-on": (False, True),
        "05-streamed-initial": (False, False),
    }
    assert [result.case.name for result in report.regressions] == ["04-follow-on"]
    assert (report.candidate, report.baseline) == ("candidate.toml", "baseline.toml")


@pytest.mark.decision("D623")
def test_cost_is_priced_by_the_candidates_prices_and_unpriced_without(tmp_path: Path) -> None:
    cases = load_cases(case_folder(tmp_path, "04-follow-on"))
    priced = Candidate.load(candidate_config(tmp_path, TURNS, name="priced.toml"))
    unpriced = Candidate.load(candidate_config(tmp_path, TURNS, name="unpriced.toml", prices=""))

    (with_prices,) = asyncio.run(run_evals(cases, priced)).results
    (without,) = asyncio.run(run_evals(cases, unpriced)).results

    facts = with_prices.candidate.facts
    assert facts is not None
    # 1245 input tokens at 2.50 and 64 output tokens at 10.00 per million
    assert (facts.tokens, str(facts.cost), facts.currency) == (1309, "0.0037525", "USD")
    assert with_prices.recorded.cost == facts.cost
    assert without.candidate.facts is not None
    assert (without.candidate.facts.tokens, without.candidate.facts.cost) == (1309, None)
