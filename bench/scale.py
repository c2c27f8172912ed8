"""How the engine's cost grows with the work, against its targets (the wall target below).

All on the default runtime with tracing off (``turns.engine_pipeline``):

- **concurrency** — ``count`` Initial turns in flight at once (``asyncio.gather``)
  whose model awaits 50 ms, on the memory store and on a SQLite file
  (``sqlite_store.SQLiteStore``). A turn *alone* is the CPU per turn of
  ``alone`` turns run one after another with the same model (process CPU time,
  ``time.process_time``, which counts the SQLite store's thread too); *hot* the
  same with a model that answers at once (turns back to back, caches warm). The batch
  gives its wall time and its CPU per turn; the wall target is
  ``1.2 x (50 ms + count x CPU alone)``. On each store a second, identical batch
  runs under ``tracemalloc``: the peak of traced memory above the baseline before
  the batch, per turn, and what is still held once the batch is over (the
  committed turns in the store, per turn).
- **transcript** — a follow-on turn's wall time after 1, 10, 100, 300 and 1,000
  prior turns of its session (fixed-reply model), on the memory store and on a
  SQLite file: ``sessions`` sessions grow in lockstep, one turn each at a time, and
  the ``per_checkpoint`` turns that follow each checkpoint below 1,000 are timed;
  ``long_sessions`` of them go on to 1,000 prior turns. There ``rounds`` interleaved
  rounds each open a new session (untimed), time a follow-on after its one turn
  (*after 1*, the baseline), then time one follow-on on each long session; the
  ratio is the median after 1,000 over the median after 1 of those rounds, the
  minima's ratio beside it. Min and median over each checkpoint's samples; the
  slope is µs per loaded transcript message, from the minimum after the first and
  the last checkpoint.
- **replay** — ``groups`` x 3 turns recorded with ``RecordingOptions(directory=...)``
  (an Initial turn that asks for a client tool, its continuation, a follow-on),
  then all replayed in one process with ``engine.replay``: from the
  ``TurnRecording`` objects and from the files; recordings per second, best of
  ``rounds``. Every replay must come out equal. Then ``aptix replay DIR`` as a
  subprocess (its default output, every trace, to a pipe) on that folder and on a
  folder of 3 recordings, ``cli_runs`` interleaved runs of each: the command's
  extra wall time per recording, ``(big - small) / (N - 3)``, as recordings per
  second at the margin (start-up excluded), from the medians and from the minima.
- **cli** — wall time of ``aptix --version`` and of one ``aptix run`` (an Initial
  turn, scripted model, a SQLite file made by a warm-up run) as subprocesses;
  min and median of ``runs``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from turns import CALLER, CLIENT_CALL, FINAL, FixedLLM, bench_ports, engine_pipeline

from aptix_pipeline import Recorder, RecordingOptions, TurnRecording, replay
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import AgentExecuteResponse, LLMReply, LLMRequest, SessionStore
from aptix_pipeline.engine import Pipeline

__all__ = ["cli_costs", "concurrency_rows", "replay_rate", "transcript_costs"]

MODEL_SECONDS = 0.05


class SleepingLLM:
    """A fixed final answer after ``seconds`` of waiting (a remote model, without the CPU)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def complete(self, request: LLMRequest) -> LLMReply:
        if self.seconds:
            await asyncio.sleep(self.seconds)
        return FINAL


async def _initial(pipeline: Pipeline) -> None:
    report = await pipeline.run({"Instruction": "hi"}, CALLER)
    assert report.successful, report.result.errors


async def _batch(pipeline: Pipeline, count: int) -> None:
    await asyncio.gather(*(_initial(pipeline) for _ in range(count)))


async def _concurrency(
    store: SessionStore, count: int, alone: int, memory: bool, hot: int = 300
) -> dict[str, float | None]:
    llm = SleepingLLM(0.0)
    pipeline = engine_pipeline(bench_ports(llm, store))
    for _ in range(3):  # warm up
        await _initial(pipeline)
    gc.collect()
    started = time.process_time()
    for _ in range(hot):  # more turns than `alone`: each is short, and the clock is coarse
        await _initial(pipeline)
    hot_cpu = (time.process_time() - started) / hot
    llm.seconds = MODEL_SECONDS
    gc.collect()
    started = time.process_time()
    for _ in range(alone):
        await _initial(pipeline)
    alone_cpu = (time.process_time() - started) / alone
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    await _batch(pipeline, count)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    target_wall = 1.2 * (MODEL_SECONDS + count * alone_cpu)
    row: dict[str, float | None] = {
        "turns": count,
        "wall_s": wall,
        "target_wall_s": target_wall,
        "wall_ratio": wall / target_wall,
        "cpu_us_per_turn": cpu / count * 1e6,
        "alone_cpu_us_per_turn": alone_cpu * 1e6,
        "cpu_ratio": cpu / count / alone_cpu,
        "hot_cpu_us_per_turn": hot_cpu * 1e6,
        "cpu_ratio_hot": cpu / count / hot_cpu,
        "peak_kb_per_turn": None,
        "held_kb_per_turn": None,
    }
    if memory:
        gc.collect()
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            await _batch(pipeline, count)
            peak = tracemalloc.get_traced_memory()[1]
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        row["peak_kb_per_turn"] = (peak - baseline) / count / 1024
        row["held_kb_per_turn"] = (held - baseline) / count / 1024
    return row


def concurrency_rows(
    count: int = 1000, alone: int = 40, memory_on: tuple[str, ...] = ("memory", "sqlite")
) -> dict[str, dict[str, float | None]]:
    """Store name → the figures of the module docstring's **concurrency**.

    The ``tracemalloc`` batch (slow: tracing every allocation) runs on the stores
    named in ``memory_on``; the others report ``None`` for memory.
    """
    rows = {"memory": asyncio.run(_concurrency(MemoryStore(), count, alone, "memory" in memory_on))}
    with tempfile.TemporaryDirectory() as folder:
        sqlite = SQLiteStore(Path(folder) / "bench.db")
        try:
            rows["sqlite"] = asyncio.run(_concurrency(sqlite, count, alone, "sqlite" in memory_on))
        finally:
            sqlite.close()
    return rows


def _follow_on(response: AgentExecuteResponse) -> dict[str, Any]:
    return {"SessionId": response.session_id, "TurnId": response.turn_id, "Instruction": "again"}


TRANSCRIPT_TARGET = 1.5
"""A follow-on after 1,000 prior turns costs at most this many times one after 1."""


async def _timed_follow_on(pipeline: Pipeline, head: AgentExecuteResponse) -> tuple[Any, float]:
    started = time.perf_counter()
    report = await pipeline.run(_follow_on(head), CALLER)
    elapsed = (time.perf_counter() - started) * 1e6
    assert report.successful, report.result.errors
    assert report.result.result is not None
    return report.result.result, elapsed


async def _opened(pipeline: Pipeline) -> AgentExecuteResponse:
    opening = await pipeline.execute({"Instruction": "hi"}, CALLER)
    assert opening.result is not None, opening.errors
    return opening.result


async def _transcript(
    store: SessionStore,
    checkpoints: tuple[int, ...],
    sessions: int,
    per_checkpoint: int,
    long_sessions: int,
    rounds: int,
) -> dict[str, Any]:
    ports = bench_ports(FixedLLM(), store)
    pipeline = engine_pipeline(ports)
    *lockstep, last = checkpoints
    heads = [await _opened(pipeline) for _ in range(sessions)]
    samples: dict[int, list[float]] = {prior: [] for prior in checkpoints}
    timed = {prior + extra: prior for prior in lockstep for extra in range(per_checkpoint)}
    messages: dict[int, int] = {}

    async def count_messages(prior: int) -> None:
        tx = ports.store.begin(CALLER.org, CALLER.user)
        messages[prior] = len(await tx.load_transcript(heads[0].session_id))
        await tx.rollback()

    for prior in range(1, last):
        if prior in checkpoints:
            await count_messages(prior)
        # Past the lockstep checkpoints only the long sessions grow.
        growing = heads if prior <= max(timed) else heads[:long_sessions]
        for index, head in enumerate(growing):
            heads[index], elapsed = await _timed_follow_on(pipeline, head)
            if prior in timed:
                samples[timed[prior]].append(elapsed)
    await count_messages(last)
    after_1: list[float] = []
    for _ in range(rounds):  # interleaved: the baseline under the same load and store size
        _, elapsed = await _timed_follow_on(pipeline, await _opened(pipeline))
        after_1.append(elapsed)
        for index in range(long_sessions):
            heads[index], elapsed = await _timed_follow_on(pipeline, heads[index])
            samples[last].append(elapsed)
    first = checkpoints[0]
    slope = (min(samples[last]) - min(samples[first])) / (messages[last] - messages[first])
    median_1, median_last = statistics.median(after_1), statistics.median(samples[last])
    return {
        "by_prior_turns": {
            str(prior): {
                "messages": messages[prior],
                "min_us": min(samples[prior]),
                "median_us": statistics.median(samples[prior]),
            }
            for prior in checkpoints
        },
        "us_per_message": slope,
        "after_1_min_us": min(after_1),
        "after_1_median_us": median_1,
        "ratio_median": median_last / median_1,
        "ratio_min": min(samples[last]) / min(after_1),
        "target_ratio": TRANSCRIPT_TARGET,
    }


def transcript_costs(
    checkpoints: tuple[int, ...] = (1, 10, 100, 300, 1000),
    sessions: int = 6,
    per_checkpoint: int = 3,
    long_sessions: int = 2,
    rounds: int = 15,
) -> dict[str, Any]:
    """The figures of the module docstring's **transcript**.

    The memory store's figures at the top level (the keys this section always had),
    and each store's under ``stores``.
    """
    shape = (checkpoints, sessions, per_checkpoint, long_sessions, rounds)
    stores = {"memory": asyncio.run(_transcript(MemoryStore(), *shape))}
    with tempfile.TemporaryDirectory() as folder:
        sqlite = SQLiteStore(Path(folder) / "bench.db")
        try:
            stores["sqlite"] = asyncio.run(_transcript(sqlite, *shape))
        finally:
            sqlite.close()
    return {**stores["memory"], "stores": stores}


async def _record(folder: str, groups: int) -> list[TurnRecording]:
    llm = FixedLLM()
    pipeline = engine_pipeline(
        bench_ports(llm), interceptors=[Recorder(RecordingOptions(directory=folder))]
    )
    recordings: list[TurnRecording] = []

    async def turn(request: dict[str, Any], reply: LLMReply) -> AgentExecuteResponse:
        llm.reply = reply
        report = await pipeline.run(request, CALLER)
        assert report.successful, report.result.errors
        assert report.result.result is not None
        assert report.recording is not None
        recordings.append(report.recording)
        return report.result.result

    for _ in range(groups):
        asked = await turn({"Instruction": "read a.py"}, CLIENT_CALL)
        results = [{"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": "{}"}]
        continued = await turn(
            {"SessionId": asked.session_id, "TurnId": asked.turn_id, "ToolResults": results}, FINAL
        )
        await turn(_follow_on(continued), FINAL)
    return recordings


async def _replay_all(recordings: list[TurnRecording] | list[Path], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for recording in recordings:
            outcome = await replay(recording)
            assert outcome.ok, outcome.describe()
        best = min(best, time.perf_counter() - started)
    return len(recordings) / best


def _replay_dir_margin(folder: str, few: str, count: int, runs: int) -> dict[str, float]:
    """``aptix replay DIR`` of ``count`` recordings against one of 3 (``few``), interleaved
    subprocesses: the extra wall time per recording, as recordings per second."""
    aptix = str(Path(sys.executable).parent / "aptix")
    big: list[float] = []
    small: list[float] = []
    for _ in range(runs):
        for target, samples in ((folder, big), (few, small)):
            started = time.perf_counter()
            done = subprocess.run([aptix, "replay", target], capture_output=True, check=False)
            samples.append(time.perf_counter() - started)
            assert done.returncode == 0, done.stderr
    extra = count - 3
    return {
        "dir_recordings": count,
        "dir_margin_per_s": extra / (statistics.median(big) - statistics.median(small)),
        "dir_margin_best_per_s": extra / (min(big) - min(small)),
    }


def replay_rate(groups: int = 50, rounds: int = 2, cli_runs: int = 5) -> dict[str, float]:
    """Recordings per second, replayed from objects and from files, and ``aptix replay DIR``
    at the margin (see the docstring)."""
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as few:

        async def measure() -> dict[str, float]:
            recordings = await _record(folder, groups)
            await _record(few, 1)
            files = sorted(Path(folder).rglob("*.json"))
            assert len(files) == len(recordings), (len(files), len(recordings))
            return {
                "recordings": len(recordings),
                "objects_per_s": await _replay_all(recordings, rounds),
                "files_per_s": await _replay_all(files, rounds),
            }

        rates = asyncio.run(measure())
        return {
            **rates,
            **_replay_dir_margin(folder, few, len(list(Path(folder).rglob("*.json"))), cli_runs),
        }


def _timed(command: list[str], cwd: str, runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
        samples.append((time.perf_counter() - started) * 1000)
        assert done.returncode == 0, done.stderr
    return {"min_ms": min(samples), "median_ms": statistics.median(samples)}


def cli_costs(runs: int = 5) -> dict[str, dict[str, float]]:
    """``aptix --version`` and one ``aptix run``: min and median wall ms of ``runs``."""
    aptix = Path(sys.executable).parent / "aptix"
    with tempfile.TemporaryDirectory() as folder:
        request, script = Path(folder) / "request.json", Path(folder) / "script.json"
        request.write_text(json.dumps({"Instruction": "hi"}), encoding="utf-8")
        script.write_text(json.dumps([{"text": "done"}]), encoding="utf-8")
        run = [
            str(aptix),
            "run",
            str(request),
            "--llm-script",
            str(script),
            "--store",
            f"sqlite:{Path(folder) / 'aptix.db'}",
            "--compact",
        ]
        _timed(run, folder, 1)  # makes the database, warms the file cache
        return {
            "version": _timed([str(aptix), "--version"], folder, runs),
            "run": _timed(run, folder, runs),
        }
