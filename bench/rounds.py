"""Round-robin timing, shared by the benches that compare settings of one workload.

Each round runs every setting ``number`` times back to back, in turn, so noise on a
busy machine hits them alike; a setting's figure is its best round, in µs per run.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

__all__ = ["best_of_rounds", "rounds_of"]


async def rounds_of(
    work: Mapping[str, Callable[[], Awaitable[object]]], number: int, rounds: int
) -> dict[str, list[float]]:
    """µs per run of each of ``work``'s settings in every round (for a min and a
    median): ``rounds`` rounds of ``number`` runs each, the settings interleaved."""
    times: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(rounds):
        for name, run in work.items():
            started = time.perf_counter()
            for _ in range(number):
                await run()
            times[name].append((time.perf_counter() - started) / number * 1e6)
    return times


async def best_of_rounds(
    work: Mapping[str, Callable[[], Awaitable[object]]], number: int, rounds: int
) -> dict[str, float]:
    """µs per run of each of ``work``'s settings: the best of ``rounds`` rounds of
    ``number`` runs each, the settings interleaved round by round."""
    times = await rounds_of(work, number, rounds)
    return {name: min(runs) for name, runs in times.items()}
