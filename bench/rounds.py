"""Round-robin timing, shared by the benches that compare settings of one workload.

Each round runs every setting ``number`` times back to back, in turn, so noise on a
busy machine hits them alike; a setting's figure is its best round, in µs per run.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

__all__ = ["best_of_rounds", "cpu_rounds_of", "rounds_of"]


async def rounds_of(
    work: Mapping[str, Callable[[], Awaitable[object]]], number: int, rounds: int
) -> dict[str, list[float]]:
    """µs per run of each of ``work``'s settings in every round (for a min and a
    median): ``rounds`` rounds of ``number`` runs each, the settings interleaved."""
    wall, _ = await cpu_rounds_of(work, number, rounds)
    return wall


async def cpu_rounds_of(
    work: Mapping[str, Callable[[], Awaitable[object]]], number: int, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """As ``rounds_of``, with the process's CPU time per run too (all its threads: a
    SQLite store's worker included): wall times, CPU times."""
    wall: dict[str, list[float]] = {name: [] for name in work}
    cpu: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(rounds):
        for name, run in work.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            for _ in range(number):
                await run()
            cpu[name].append((time.process_time() - started_cpu) / number * 1e6)
            wall[name].append((time.perf_counter() - started) / number * 1e6)
    return wall, cpu


async def best_of_rounds(
    work: Mapping[str, Callable[[], Awaitable[object]]], number: int, rounds: int
) -> dict[str, float]:
    """µs per run of each of ``work``'s settings: the best of ``rounds`` rounds of
    ``number`` runs each, the settings interleaved round by round."""
    times = await rounds_of(work, number, rounds)
    return {name: min(runs) for name, runs in times.items()}
