"""Running a case folder on a candidate (and a baseline), a bounded number at a time.

``await run_evals(cases, candidate, baseline=..., jobs=4)`` evaluates each case
(``engine/replay/evaluation.py``) on each candidate, at most ``jobs`` at once, each
within ``timeout`` seconds, and checks its expectations. Nothing a case does stops
the run: a model that cannot be reached, raises or hangs, a recording that cannot be
evaluated, is that case's failure, named (docs/CONFORMANCE.md D623). A case
*regresses* when the candidate fails it where the baseline passes it, or, without a
baseline, when the candidate fails it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aptix_pipeline.contracts import PriceTable
from aptix_pipeline.engine.replay import Divergence, Evaluation, TurnFacts, evaluate, usage_of

from .candidate import Candidate
from .cases import EvalCase
from .scratch import RecordedStore

__all__ = ["CaseResult", "EvalReport", "SideResult", "run_evals"]

DEFAULT_JOBS = 4
DEFAULT_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class SideResult:
    """One candidate on one case: pass or fail, each failed expectation, the first
    divergence, and what its turn did (``None`` when the case could not run)."""

    passed: bool
    failures: tuple[str, ...]
    divergence: Divergence | None
    facts: TurnFacts | None


@dataclass(frozen=True, slots=True)
class CaseResult:
    """A case: what its recording did (priced by the candidate's prices), the candidate's
    result, and the baseline's when there is one."""

    case: EvalCase
    recorded: TurnFacts
    candidate: SideResult
    baseline: SideResult | None = None

    @property
    def regressed(self) -> bool:
        """The candidate fails where the baseline passes (without one: it fails)."""
        if self.candidate.passed:
            return False
        return self.baseline is None or self.baseline.passed


@dataclass(frozen=True, slots=True)
class EvalReport:
    """Every case's result, in case order, and the candidates' names."""

    candidate: str
    baseline: str | None
    results: tuple[CaseResult, ...]

    @property
    def regressions(self) -> list[CaseResult]:
        """The cases that regress."""
        return [result for result in self.results if result.regressed]


def recorded_facts(case: EvalCase, prices: PriceTable | None) -> TurnFacts:
    """What the recorded turn did: its result, its model's answers, their tokens and cost
    by ``prices``, and their time when the recording timed its calls."""
    calls = [c for c in case.recording.calls if c.port == "LLM" and c.answer is not None]
    answers = [c.answer for c in calls]
    tokens, cost, currency = usage_of(answers, prices)
    times = [c.elapsed_ms for c in calls]
    latency = sum(t for t in times if t is not None) if all(t is not None for t in times) else None
    return TurnFacts.of(
        case.recording.result,
        answers,
        tokens=tokens,
        cost=cost,
        currency=currency,
        latency_ms=latency,
    )


def _first_line(error: BaseException) -> str:
    line = (str(error).splitlines() or [""])[0][:200]
    return f"{type(error).__name__}: {line}".rstrip(": ")


def _judged(case: EvalCase, evaluation: Evaluation, prices: PriceTable | None) -> SideResult:
    calls = evaluation.model_calls
    answers = [call.answer for call in calls if call.answer is not None]
    tokens, cost, currency = usage_of(answers, prices)
    latency = sum(call.elapsed_ms for call in calls)
    facts = TurnFacts.of(
        evaluation.result,
        answers,
        tokens=tokens,
        cost=cost,
        currency=currency,
        latency_ms=latency,
    )
    failures = case.expectations.check(facts, evaluation.divergence is not None)
    failed_calls = [call.error for call in calls if call.error is not None]
    if failed_calls and facts.kind == "error":
        failures.insert(0, f"the model failed: {failed_calls[-1]}")
    return SideResult(not failures, tuple(failures), evaluation.divergence, facts)


async def _side(case: EvalCase, candidate: Candidate, timeout: float) -> SideResult:
    try:
        async with asyncio.timeout(timeout):
            evaluation = await evaluate(
                case.recording, live=candidate.live(), scratch=RecordedStore(case.recording)
            )
    except TimeoutError:
        return SideResult(False, (f"timed out after {timeout:g} s",), None, None)
    except Exception as error:
        return SideResult(False, (f"could not run: {_first_line(error)}",), None, None)
    return _judged(case, evaluation, candidate.prices)


async def run_evals(
    cases: Sequence[EvalCase],
    candidate: Candidate,
    *,
    baseline: Candidate | None = None,
    jobs: int = DEFAULT_JOBS,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    progress: Callable[[int, int], Any] | None = None,
) -> EvalReport:
    """Evaluate every case on ``candidate`` (and ``baseline``); see the module docstring.

    ``progress(done, total)`` is told after each case and candidate ends.
    """
    if jobs < 1:
        raise ValueError(f"jobs: 1 or more, not {jobs}")
    gate = asyncio.Semaphore(jobs)
    sides = [candidate] if baseline is None else [candidate, baseline]
    total, done = len(cases) * len(sides), 0

    async def one(case: EvalCase, side: Candidate) -> SideResult:
        nonlocal done
        async with gate:
            result = await _side(case, side, timeout)
        done += 1
        if progress is not None:
            progress(done, total)
        return result

    runs = [[asyncio.create_task(one(case, side)) for side in sides] for case in cases]
    results = []
    for case, tasks in zip(cases, runs, strict=True):
        ran = [await task for task in tasks]
        results.append(
            CaseResult(
                case,
                recorded_facts(case, candidate.prices),
                ran[0],
                ran[1] if baseline is not None else None,
            )
        )
    return EvalReport(candidate.name, baseline.name if baseline else None, tuple(results))


def money(amount: Decimal | None, currency: str | None) -> str | None:
    """An exact amount as text (``0.0125 USD``), ``None`` for none."""
    if amount is None:
        return None
    return (
        f"{format(amount.normalize(), 'f')} {currency}".rstrip()
        if currency
        else format(amount, "f")
    )
