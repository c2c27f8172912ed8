"""Round-robin timing, shared by the benches that compare settings of one workload.

Each round runs every setting ``number`` times back to back, in turn, so noise on a
busy machine hits them alike; a setting's figure is its best round, in µs per run.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

__all__ = ["best_of_rounds"]


async def best_of_rounds(
    work: Mapping[str, Callable[[], Awaitable[object]]], number: int, rounds: int
) -> dict[str, float]:
    """µs per run of each of ``work``'s settings: the best of ``rounds`` rounds of
    ``number`` runs each, the settings interleaved round by round."""
    best = dict.fromkeys(work, float("inf"))
    for _ in range(rounds):
        for name, run in work.items():
            started = time.perf_counter()
            for _ in range(number):
                await run()
            best[name] = min(best[name], (time.perf_counter() - started) / number * 1e6)
    return best
