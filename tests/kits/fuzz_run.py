"""``make fuzz``: at least 100,000 mutated requests through ``Pipeline.execute`` (D240-D242).

Usage: ``python tests/kits/fuzz_run.py [--requests N] [--workers W] [--seed S] [--huge CHARS]``
and ``--only INDEX`` to run one request again and print it.

Request ``i`` of seed ``S`` is made by ``random.Random(f"{S}:{i}")`` alone
(tests/kits/fuzz_kit.py ``make_case``): its store (memory or a SQLite file), its kind
(Initial, FollowOn, Continuation) and its mutations, so a run is deterministic and
``--only i`` replays any request it reports. ``W`` processes (default 2) share the
requests; each keeps one recording, redacting world per store kind
(``FuzzWorld``). The counts printed at the end: requests, successful, refused,
unhandled exceptions, unserializable results, changes stored by refused input and
unserializable recordings, per kind, then every failure class with its first
request. The exit status is 1 when any of the failure counts is above 0 (or the
harness itself failed to make a request: ``harness errors``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from fuzz_kit import KINDS, STORE_KINDS, Case, FuzzWorld, Outcome, Tally, make_case

CHUNK = 1_000
"""Requests per task handed to a worker (progress is reported per task)."""


class _Worker:
    """One process's worlds and event loop, kept across its tasks."""

    def __init__(self, huge: int) -> None:
        logger = logging.getLogger("aptix_pipeline")
        logger.propagate = False  # the counts are the output, not the engine's warnings
        logger.addHandler(logging.NullHandler())
        self.huge = huge
        self.loop = asyncio.new_event_loop()
        self.directory = Path(tempfile.mkdtemp(prefix="aptix-fuzz-"))
        self.worlds = {kind: FuzzWorld(kind, self.directory) for kind in STORE_KINDS}
        for world in self.worlds.values():
            self.loop.run_until_complete(world.start())

    def case(self, seed: int, index: int) -> tuple[FuzzWorld, Case]:
        rng = random.Random(f"{seed}:{index}")
        world = self.worlds[rng.choice(STORE_KINDS)]
        _, base = world.ready
        return world, make_case(rng.choice(KINDS), base, rng, huge=self.huge)

    def run(self, seed: int, index: int) -> tuple[Case, Outcome]:
        world, case = self.case(seed, index)
        return case, self.loop.run_until_complete(world.check(case))


_WORKER: _Worker | None = None


def _start_worker(huge: int) -> None:
    global _WORKER
    _WORKER = _Worker(huge)


def _run_chunk(task: tuple[int, int, int]) -> Tally:
    seed, start, stop = task
    assert _WORKER is not None
    tally = Tally()
    for index in range(start, stop):
        try:
            case, outcome = _WORKER.run(seed, index)
        except Exception as error:  # the harness's own bug: counted, shown, never fatal
            tally.other["harness errors"] = tally.other.get("harness errors", 0) + 1
            print(f"harness error at --only {index}: {error!r}", file=sys.stderr)
            continue
        tally.add(case, outcome, label=f"--seed {seed} --only {index}:")
    return tally


def _tasks(seed: int, requests: int) -> Iterator[tuple[int, int, int]]:
    for start in range(0, requests, CHUNK):
        yield seed, start, min(start + CHUNK, requests)


def main(argv: list[str] | None = None) -> int:
    """Run the fuzz; 1 when an invariant broke (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--huge", type=int, default=100_000, help="largest string, characters")
    parser.add_argument("--only", type=int, default=None, help="run this one request, verbosely")
    args = parser.parse_args(argv)

    if args.only is not None:
        worker = _Worker(args.huge)
        case, outcome = worker.run(args.seed, args.only)
        print(case.describe(limit=4_000))
        print(outcome)
        return 1 if outcome.broken else 0

    started = time.perf_counter()
    tally = Tally()
    context = multiprocessing.get_context("spawn")
    with context.Pool(args.workers, initializer=_start_worker, initargs=(args.huge,)) as pool:
        for part in pool.imap_unordered(_run_chunk, _tasks(args.seed, args.requests)):
            tally.merge(part)
            done = tally.total("requests")
            rate = done / (time.perf_counter() - started)
            print(f"{done:>9,} requests, {tally.bad} failed, {rate:,.0f}/s", file=sys.stderr)
    elapsed = time.perf_counter() - started
    print(f"make fuzz: seed {args.seed}, {args.workers} workers, {elapsed:.0f} s")
    print(tally.report())
    return 1 if tally.bad or tally.other.get("harness errors") else 0


if __name__ == "__main__":
    sys.exit(main())
