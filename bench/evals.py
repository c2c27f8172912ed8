"""An eval case's cost, as a ratio to a plain replay of the same recording, from one run.

The example recordings (``examples/recordings/``) against the example candidate
(``examples/evals/candidate.toml``: the scripted model of the demo session, the
built-in catalog, a price):

- **replay** — ``replay()`` of ``04-follow-on`` (two model calls, a server tool
  round), every port answered from the recording (the baseline);
- **evaluate, as recorded** — ``evaluate()`` of the same recording with the
  candidate's model, catalog and tools live and a scratch store; it answers as
  recorded, so the turn runs the recorded path, every call checked;
- **evaluate, diverging** — ``evaluate()`` of ``05-streamed-initial``, which the
  candidate answers otherwise at its first model call: the rest of the turn runs on
  the scratch store and the clock and id fall-backs;
- **run_evals, 5 cases** — the whole folder through ``run_evals`` with expectations
  checked and costs priced, ``jobs=4``, per case.

Interleaved round by round; min and median of the rounds, µs per case.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rounds import rounds_of

from aptix_pipeline import Candidate, RecordedStore, TurnRecording, evaluate, load_cases, replay
from aptix_pipeline import run_evals as run_cases

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "examples" / "recordings"
CANDIDATE = ROOT / "examples" / "evals" / "candidate.toml"

__all__ = ["eval_figures", "print_eval_figures"]


async def _measure(number: int, rounds: int) -> dict[str, Any]:
    candidate = Candidate.load(CANDIDATE)
    same = TurnRecording.load(RECORDINGS / "04-follow-on.json")
    other = TurnRecording.load(RECORDINGS / "05-streamed-initial.json")
    cases = load_cases(RECORDINGS)

    async def evaluated(recording: TurnRecording) -> None:
        done = await evaluate(recording, live=candidate.live(), scratch=RecordedStore(recording))
        assert (done.divergence is None) == (recording is same), done.divergence

    async def suite() -> None:
        report = await run_cases(cases, candidate, jobs=4)
        assert [r.case.name for r in report.regressions] == ["05-streamed-initial"]

    work: dict[str, Callable[[], Awaitable[object]]] = {
        "replay": lambda: replay(same),
        "evaluate, as recorded": lambda: evaluated(same),
        "evaluate, diverging": lambda: evaluated(other),
        "run_evals, 5 cases": suite,
    }
    runs = await rounds_of(work, number, rounds)
    runs["run_evals, 5 cases"] = [value / len(cases) for value in runs["run_evals, 5 cases"]]
    candidate.close()
    figures: dict[str, Any] = {}
    base_min, base_median = min(runs["replay"]), statistics.median(runs["replay"])
    for name, values in runs.items():
        low, middle = min(values), statistics.median(values)
        figures[name] = {
            "min_us": low,
            "median_us": middle,
            "ratio_min": low / base_min,
            "ratio_median": middle / base_median,
        }
    return figures


def eval_figures(number: int = 20, rounds: int = 5) -> dict[str, Any]:
    """µs per case of each setting and its ratio to the replay (module docstring)."""
    return asyncio.run(_measure(number, rounds))


def print_eval_figures(figures: dict[str, Any]) -> None:
    """The section's table."""
    print("evals: one case, as a ratio to a replay of the same recording (µs per case)")
    print(f"  {'':<26}{'min':>9}{'median':>9}{'ratio min':>11}{'ratio median':>14}")
    for name, row in figures.items():
        print(
            f"  {name:<26}{row['min_us']:>9.0f}{row['median_us']:>9.0f}"
            f"{row['ratio_min']:>11.2f}{row['ratio_median']:>14.2f}"
        )
