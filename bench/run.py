"""``make bench``: the benchmarks' tables, as ratios within one run (bench/README.md).

Sections, in order (``--only`` picks some, comma-separated):

- ``validators`` — validator cost per call, as ratios to pydantic's deep copy of
  the same context (the cheapest thing the engine already does per step);
- ``turns`` — whole turns per path: engine, statechart runtime, plain loop, Apache
  Burr, LangGraph and raw python-statemachine, side by side (``bench/turns.py``,
  ``bench/peers.py``);
- ``tracing`` — the telemetry's cost per turn, compact spans, and the span builder
  against the bare SDK making the same spans (``bench/tracing.py``);
- ``recording`` — recording and replay per turn (``bench/recording.py``);
- ``http`` — one ``aptix serve`` worker on SQLite under 50 concurrent clients:
  turns/s, p50, p99 and the server's CPU per turn (``bench/http_load.py``);
- ``refused`` — a refused 1 MB nested body against a real ``aptix serve`` with
  redacted recording, alone and as the load beside ordinary turns
  (``bench/refused_http.py``);
- ``images`` — the cost per turn of one 50 KB image, as a ratio to the same turn
  without it (``bench/images.py``);
- ``streaming`` — a streamed turn's CPU beside the same turn not streamed, the
  time to the first text delta, and a real server's CPU per SSE turn beside a JSON
  turn (``bench/streaming.py``, ``bench/streaming_http.py``);
- ``files`` — a server tool making a 10 KB file, beside the same tool without
  (``bench/tool_files.py``);
- ``ledger`` — an in-process turn with one server tool, the tool ledger on against
  off, on the memory store and a SQLite file (``bench/ledger.py``; target ≤ 5 %);
- ``budgets`` — an in-process turn with two model calls, the usage ledger off, on,
  and on with three budgets and a price table, on the memory store
  (``bench/budgets.py``; target ≤ 5 %), and the ledger's store calls per model call;
- ``forks`` — forking after turn 2 of a session of 4 turns and of 400 (target: the
  same cost, O(1) in prior turns), and reading a fork's 800 messages beside the same
  transcript never forked, on the memory store and a SQLite file (``bench/forks.py``);
- ``sessions`` — the turn browser's session list: the first page of a SQLite store of
  10,000 sessions (no filter, a status and time range, one org) and the whole
  ``/sessions`` page, and the same searches on PostgreSQL where its server binaries
  are found, beside a store of 100, against the 200 ms target
  (``bench/session_search.py``);
- ``live`` — the live view: from another process committing a turn to the page
  showing it, SQLite (the page's poll) and PostgreSQL (``LISTEN/NOTIFY``), against
  the 1 s target (``bench/live.py``);
- ``retrieval`` — a turn's cost with an SQLite FTS5 retrieval over 200 documents
  beside the same turn without, and the time to index them (``bench/retrieval.py``);
- ``concurrency``, ``transcript``, ``replay``, ``cli`` — how the cost grows with the
  work, beside their targets (``bench/scale.py``);
- ``evals`` — an eval case beside a replay of the same recording, and ``run_evals``
  per case (``bench/evals.py``);
- ``durable`` — a durable turn on a local Temporal dev server beside the same turn in
  process: added latency, the worker's CPU, where the time goes (from the workflow
  history), throughput with one and two workers and the server's CPU
  (``bench/durable.py``).

``--json FILE`` also writes every figure to FILE, one top-level key per section.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kits"))

from budgets import TARGET as BUDGETS_TARGET
from budgets import budget_rows
from builders import PATHS, context_after, context_before, request_data
from durable import durable_figures, print_durable_figures
from evals import eval_figures, print_eval_figures
from forks import TARGET as FORKS_TARGET
from forks import fork_rows
from http_load import http_figures, print_http_figures
from images import IMAGE_BYTES, image_rows
from ledger import TARGET as LEDGER_TARGET
from ledger import ledger_rows
from live import live_rows
from peers import MISSING, PEERS, peer_versions
from recording import recording_row
from refused_http import print_figures, refused_figures
from retrieval import DOCUMENTS, retrieval_row
from scale import cli_costs, concurrency_rows, replay_rate, transcript_costs
from session_search import SESSIONS, search_rows
from streaming import first_delta_row, streaming_cpu_row
from streaming_http import first_delta_over_http, server_cpu_per_turn
from tool_files import file_rows
from traces import TARGET as TRACES_TARGET
from traces import trace_rows
from tracing import tracing_rows
from turns import BEFORE_RESPONSE, RUNTIME_NOTE, turn_rows

from aptix_pipeline.contracts import ContextType, PipelineStep
from aptix_pipeline.validators import (
    parse_request,
    validate_core,
    validate_post_step,
    validate_pre_step,
)

SECTIONS = (
    "validators",
    "turns",
    "tracing",
    "recording",
    "http",
    "refused",
    "images",
    "streaming",
    "files",
    "ledger",
    "traces",
    "budgets",
    "forks",
    "sessions",
    "live",
    "retrieval",
    "concurrency",
    "transcript",
    "replay",
    "evals",
    "cli",
    "durable",
)


def _per_call_us(stmt: object, number: int = 2000) -> float:
    timer = timeit.Timer(stmt)  # type: ignore[arg-type]
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def _mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def validators() -> dict[str, float]:
    """Print a table: what, µs per call, ratio to the baseline."""
    kind = ContextType.CLIENT_TOOL_CALL_CONTINUATION
    ctx = context_before(PipelineStep.LLM_CLIENT, kind)
    baseline = _per_call_us(lambda: ctx.model_copy(deep=True))
    path = PATHS[kind]
    pairs = [(context_before(s, kind), context_after(s, kind), s) for s in path]

    def whole_path() -> None:
        for before, after, step in pairs:
            validate_pre_step(before, step)
            validate_post_step(after, step, before=before)

    rows = [
        ("baseline: deep copy of the context", baseline),
        ("validate_core", _per_call_us(lambda: validate_core(ctx))),
        (
            "validate_pre_step(llm_client) incl. manifest",
            _per_call_us(lambda: validate_pre_step(ctx, PipelineStep.LLM_CLIENT)),
        ),
        (
            f"PRE+POST of all {len(path)} steps, continuation path",
            _per_call_us(whole_path, number=200),
        ),
        (
            "parse_request (continuation JSON)",
            _per_call_us(lambda: parse_request(request_data(kind))),
        ),
    ]
    print("validators (µs per call; x = ratio to the baseline)")
    print(f"{'what':<52}{'µs/call':>10}{'x baseline':>12}")
    for label, micros in rows:
        print(f"{label:<52}{micros:>10.1f}{micros / baseline:>12.2f}")
    return dict(rows)


TURN_TARGETS = (
    ("engine/plain", "plain", 1.2),
    ("engine/burr", "burr", 0.5),
    ("engine/langgraph", "langgraph", 0.15),
)
"""Each whole-turn target: the other side, and the most the engine may cost beside it."""


def _quotient(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _cell(value: float | None) -> str:
    return f"{value:.0f}" if value is not None else "-"


def turns() -> dict[str, Any]:
    """The side-by-side table of whole turns per path."""
    rows = turn_rows()
    print("whole turn, memory store, fixed-reply model, tracing off (µs per turn, min of rounds)")
    print(f"  plain, burr and langgraph keep the context for §4.10's check as {BEFORE_RESPONSE}")
    for note in RUNTIME_NOTE:
        print(f"  note: {note}")
    for name, why in MISSING.items():
        print(f"  skipped {name}: {why}")
    names = ("engine", "statechart", "plain", "plain bare", "burr", "langgraph", "raw psm")
    ratios = (
        ("engine/plain", "engine", "plain"),
        ("eng/bare", "engine", "plain bare"),
        ("engine/burr", "engine", "burr"),
        ("engine/lg", "engine", "langgraph"),
        ("sc/plain", "statechart", "plain"),
    )
    print(
        f"{'path':<30}"
        + "".join(f"{n:>11}" for n in names)
        + "".join(f"{r[0]:>13}" for r in ratios)
    )
    for table in ("best", "median"):
        if table == "median":
            print("  median of rounds:")
        for row in rows:
            costs = getattr(row, table)
            cells = "".join(f"{_cell(costs.get(n)):>11}" for n in names)
            shown = "".join(f"{_ratio(costs.get(a), costs.get(b)):>13}" for _, a, b in ratios)
            print(f"{row.path:<30}{cells}{shown}")
    print("  targets, judged on the median of the rounds (the minimum beside it):")
    for label, other, target in TURN_TARGETS:
        for row in rows:
            median = _quotient(row.median.get("engine"), row.median.get(other))
            best = _quotient(row.best.get("engine"), row.best.get(other))
            if median is None or best is None:
                print(f"    {label:<18}{row.path:<30}-  ({other} not run)")
                continue
            verdict = _mark(median <= target)
            print(
                f"    {label:<18}{row.path:<30}median {median:.2f} (min {best:.2f})"
                f"  ≤ {target}  {verdict}"
            )
    result: dict[str, Any] = {}
    for row in rows:
        entry: dict[str, Any] = {"transitions": row.transitions}
        for name in names:
            key = name.replace(" ", "_")
            entry[f"{key}_us"] = row.best.get(name)
            entry[f"{key}_median_us"] = row.median.get(name)
        result[row.path] = entry
    return result


def tracing() -> dict[str, Any]:
    """Telemetry cost per turn, and the span builder's cost against the bare SDK's."""
    print(
        "telemetry cost per turn, memory store (CPU µs per turn, median of rounds; "
        "x = ratio to tracing off)"
    )
    settings = ("off", "no-op", "sdk", "sdk+content", "compact")
    print(
        f"{'workload':<31}"
        + "".join(f"{name:>12}" for name in settings)
        + "".join(f"{'x ' + name:>14}" for name in settings[1:])
    )
    result = {}
    rows = tracing_rows()
    for workload, figures in rows:
        off = figures["off_median"]
        cells = "".join(f"{figures[name + '_median']:>12.0f}" for name in settings)
        ratios = "".join(f"{figures[name + '_median'] / off:>14.2f}" for name in settings[1:])
        print(f"{workload:<31}{cells}{ratios}")
        result[workload] = figures
    print("  min of rounds:")
    for workload, figures in rows:
        off = figures["off"]
        cells = "".join(f"{figures[name]:>12.0f}" for name in settings)
        ratios = "".join(f"{figures[name] / off:>14.2f}" for name in settings[1:])
        print(f"{'  ' + workload:<31}{cells}{ratios}")
    print("span builder (sdk - off) against the bare SDK making the same spans (CPU µs per turn)")
    print(
        f"{'workload':<31}{'builder':>9}{'bare':>7}{'ratio':>7}{'min':>6}"
        f"{'in turn':>9}{'ratio':>7}{'min':>6}"
    )
    for workload, figures in rows:
        ratio = figures["builder/bare_median"]
        print(
            f"{workload:<31}{figures['builder_median']:>9.0f}{figures['bare_median']:>7.0f}"
            f"{ratio:>7.2f}{figures['builder/bare']:>6.2f}"
            f"{figures['bare_in_turn_median']:>9.0f}{figures['builder/bare_in_turn_median']:>7.2f}"
            f"{figures['builder/bare_in_turn']:>6.2f}  (target ≤ 1.3 x bare: {_mark(ratio <= 1.3)})"
        )
    for workload, figures in rows:
        ratio = figures["compact_median"] / figures["off_median"]
        minimum = figures["compact"] / figures["off"]
        print(
            f"compact ÷ off, {workload}: {ratio:.2f} (min {minimum:.2f})"
            f"  (target ≤ 1.25: {_mark(ratio <= 1.25)})"
        )
    return result


def recording() -> dict[str, float]:
    """Recording and replay per turn."""
    print("recording and replay, Initial turn with a mode change (µs per turn; x = ratio to plain)")
    costs = recording_row()
    for name, micros in costs.items():
        print(f"{name:<34}{micros:>13.0f}{micros / costs['plain']:>15.2f}")
    return costs


def http() -> dict[str, Any]:
    """One ``aptix serve`` worker under 50 concurrent clients."""
    figures = http_figures()
    print_http_figures(figures)
    return figures


def refused() -> dict[str, Any]:
    """A refused 1 MB nested body with redacted recording, and the load it makes."""
    figures = refused_figures()
    print_figures(figures)
    return figures


def images() -> dict[str, float]:
    """One image's cost per turn, beside the same turn without it."""
    print(
        f"one {IMAGE_BYTES // 1024} KB PNG pasted vs the instruction alone, Initial turn "
        "(µs per turn; x = ratio to the text turn on the same store)"
    )
    costs = image_rows()
    for name, micros in costs.items():
        base = costs[name.split(":")[0] + ": text"]
        print(f"{name:<34}{micros:>13.0f}{micros / base:>15.2f}")
    return costs


def streaming() -> dict[str, Any]:
    """A streamed turn's CPU and the time to its first delta."""
    print(
        "streamed vs not streamed, Initial turn, the reply in 16-character chunks, "
        "default progress (CPU µs per turn)"
    )
    rows = streaming_cpu_row()
    print(f"{'reply, model':<28}{'not min':>10}{'stream min':>12}{'x min':>8}{'x median':>10}")
    for model, row in rows.items():
        print(
            f"{model:<28}{row['not streamed min']:>10.0f}{row['streamed min']:>12.0f}"
            f"{row['ratio min']:>8.2f}{row['ratio median']:>10.2f}"
            f"  {_mark(row['ratio median'] <= 1.2)}"
        )
    print("  target: streamed ≤ 1.2 x not streamed (median)")
    first = first_delta_row()
    print(
        "time to first delta less the model's first-token time, in process (ms): "
        f"min {first['min ms']:.2f}, median {first['median ms']:.2f}, p95 {first['p95 ms']:.2f}"
        f"  {_mark(first['median ms'] <= 0.5)}  (target ≤ 0.5 ms, median)"
    )
    over_http = first_delta_over_http()
    print("over HTTP, one aptix serve worker on loopback, a lean client (ms):")
    for name, figures in over_http.items():
        print(
            f"  {name:<14} min {figures['min ms']:.2f}, median {figures['median ms']:.2f}, "
            f"p95 {figures['p95 ms']:.2f}"
        )
    delta = over_http["first delta"]["median ms"]
    print(f"  first delta: {_mark(delta <= 5)}  (target ≤ 5 ms)")
    cpu = server_cpu_per_turn()
    print(
        "server CPU per turn, SSE vs JSON, from /proc (ms): "
        f"SSE min {cpu['sse min ms']:.2f} median {cpu['sse median ms']:.2f}, "
        f"JSON min {cpu['json min ms']:.2f} median {cpu['json median ms']:.2f}; "
        f"x min {cpu['ratio min']:.2f}, x median {cpu['ratio median']:.2f}"
        f"  {_mark(cpu['ratio median'] <= 1.3)}  (target ≤ 1.3 x, median)"
    )
    return {
        "cpu": rows,
        "first_delta_in_process": first,
        "first_delta_over_http": over_http,
        "server_cpu_sse_vs_json": cpu,
    }


def retrieval() -> dict[str, float]:
    """A turn with a retrieval beside the same turn without."""
    print(
        f"retrieval per turn, SQLite FTS5 over {DOCUMENTS} documents, limit 5, memory store, "
        "tracing off (µs per turn; x = ratio to no retriever)"
    )
    costs = retrieval_row()
    for name in ("plain", "retrieval", "retrieval, no scope"):
        print(f"{name:<34}{costs[name]:>13.0f}{costs[name] / costs['plain']:>15.2f}")
    print(
        f"  build_index of the {DOCUMENTS} documents: {costs['index ms']:.0f} ms; "
        f"again, nothing changed: {costs['reindex unchanged ms']:.1f} ms"
    )
    return costs


def _kb(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def files() -> dict[str, float]:
    """A server tool's 10 KB file per turn, as a ratio to the same tool without."""
    print("a server tool making a 10 KB file, Initial turn (µs per turn; x = ratio to no file)")
    costs = file_rows()
    for name, micros in costs.items():
        print(f"{name:<34}{micros:>13.0f}{micros / costs['no file']:>15.2f}")
    return costs


def ledger() -> dict[str, Any]:
    """The tool ledger's cost per turn with one server tool, beside its ≤ 5 % target."""
    print(
        "a turn with one server tool, tool ledger on vs off, tracing off "
        "(µs per turn, min / median of interleaved rounds; x = on / off)"
    )
    figures = ledger_rows()
    for store, row in figures.items():
        ok = row["ratio_median"] <= LEDGER_TARGET
        print(
            f"{store:<10} off {row['off_min_us']:>7.0f} / {row['off_median_us']:<7.0f}"
            f" on {row['on_min_us']:>7.0f} / {row['on_median_us']:<7.0f}"
            f" x {row['ratio_min']:.3f} / {row['ratio_median']:.3f}"
            f"   target ≤ {LEDGER_TARGET:.2f}  {_mark(ok)}"
        )
    return figures


def traces() -> dict[str, Any]:
    """Keeping every turn's trace (on by default): its cost per turn, beside its target."""
    print(
        "a turn with one server tool, traces kept vs not, tracing off "
        "(µs per turn, min / median of interleaved rounds; x = kept / not)"
    )
    figures = trace_rows()
    for store, row in figures.items():
        ok = row["cpu_ratio_median"] <= TRACES_TARGET
        for kind, key in (("wall", ""), ("CPU", "cpu_")):
            print(
                f"{store:<19}{kind:<5} off {row[f'{key}off_min_us']:>7.0f} / "
                f"{row[f'{key}off_median_us']:<7.0f} on {row[f'{key}on_min_us']:>7.0f} / "
                f"{row[f'{key}on_median_us']:<7.0f} x {row[f'{key}ratio_min']:.3f} / "
                f"{row[f'{key}ratio_median']:.3f}"
                + (f"   target ≤ {TRACES_TARGET:.2f} (CPU median)  {_mark(ok)}" if key else "")
            )
    return figures


def budgets() -> dict[str, Any]:
    """Usage and budgets' cost per turn, beside their ≤ 5 % target."""
    print(
        "a turn with two model calls, usage ledger off / on / on with three budgets, "
        "memory store, tracing off (µs per turn, min / median of interleaved rounds; "
        "x = to usage off)"
    )
    figures = budget_rows()
    for setting in ("usage off", "usage on", "budgets on"):
        row = figures[setting]
        ok = row["ratio_median"] <= BUDGETS_TARGET
        print(
            f"{setting:<11} {row['min_us']:>7.0f} / {row['median_us']:<7.0f}"
            f" x {row['ratio_min']:.3f} / {row['ratio_median']:.3f}"
            + (f"   target ≤ {BUDGETS_TARGET:.2f}  {_mark(ok)}" if setting != "usage off" else "")
        )
    print(
        "usage ledger calls per model call (reserve + settle): "
        f"{figures['store_calls_per_model_call']:.2f}"
    )
    return figures


def forks() -> dict[str, Any]:
    """A fork's cost by prior turns, and a fork's transcript read, per store."""
    print(
        "fork after turn 2 of a session of 4 / 400 turns; read 800 messages unforked, as a "
        "fork, as a fork of a fork of a fork (SQLite: transcript cache off) (µs per call, "
        "min / median of interleaved rounds; x = to the first row)"
    )
    figures = fork_rows()
    for store, rows in figures.items():
        for prior, row in rows["fork"].items():
            ok = row["ratio_median"] <= FORKS_TARGET
            print(
                f"{store:<8} fork after {prior:>3} prior turns {row['min_us']:>7.0f} / "
                f"{row['median_us']:<7.0f} x {row['ratio_min']:.2f} / {row['ratio_median']:.2f}"
                + (f"   target ≤ {FORKS_TARGET:.2f}  {_mark(ok)}" if prior != "4" else "")
            )
        for name, row in rows["read 800 messages"].items():
            print(
                f"{store:<8} read {name:<25} {row['min_us']:>7.0f} / {row['median_us']:<7.0f}"
                f" x {row['ratio_min']:.2f} / {row['ratio_median']:.2f}"
            )
    return figures


def sessions() -> dict[str, Any]:
    """The session list's first page on 10,000 sessions, beside 100, against its target."""
    print(
        f"first page (50 rows) of the session list, SQLite and PostgreSQL, 100 vs {SESSIONS:,} "
        "sessions "
        "(ms, min / median of interleaved rounds; x = big over small, medians)"
    )
    figures = search_rows()
    for name, row in figures.items():
        if "skipped" in row:
            print(f"{name:<20} skipped: {row['skipped']}")
            continue
        ok = row["big_median_ms"] <= row["target_ms"]
        print(
            f"{name:<30} 100: {row['small_min_ms']:>6.1f} / {row['small_median_ms']:<6.1f} "
            f"{SESSIONS:,}: {row['big_min_ms']:>6.1f} / {row['big_median_ms']:<6.1f} "
            f"x {row['ratio_median']:>5.1f}   target ≤ {row['target_ms']:.0f} ms  {_mark(ok)}"
        )
    return figures


def live() -> dict[str, Any]:
    """From another process's commit to the live view showing the turn, per store."""
    print(
        "live view: another process commits a turn -> the page shows it "
        "(ms, min / median / max of interleaved rounds)"
    )
    figures = live_rows()
    for name, row in figures.items():
        if "skipped" in row:
            print(f"{name:<22} skipped: {row['skipped']}")
            continue
        ok = row["median_ms"] <= row["target_ms"] and row["max_ms"] <= row["target_ms"]
        print(
            f"{name:<22} {row['min_ms']:>6.0f} / {row['median_ms']:<6.0f} / {row['max_ms']:<6.0f}"
            f" ({row['rounds']} rounds)   target ≤ {row['target_ms']:.0f} ms  {_mark(ok)}"
        )
    return figures


def concurrency() -> dict[str, Any]:
    """1,000 concurrent turns with a 50 ms model, per store."""
    rows = concurrency_rows()
    count = int(rows["memory"]["turns"] or 0)
    print(f"{count:,} concurrent Initial turns, model awaits 50 ms, tracing off")
    print(
        f"{'store':<10}{'wall s':>9}{'target s':>10}{'wall/tgt':>10}{'CPU µs/turn':>13}"
        f"{'alone µs':>10}{'CPU ratio':>11}{'hot µs':>9}{'x hot':>7}"
        f"{'peak KB/turn':>14}{'held KB/turn':>14}"
    )
    for store, row in rows.items():
        print(
            f"{store:<10}{row['wall_s']:>9.2f}{row['target_wall_s']:>10.2f}"
            f"{row['wall_ratio']:>10.2f}{row['cpu_us_per_turn']:>13.0f}"
            f"{row['alone_cpu_us_per_turn']:>10.0f}{row['cpu_ratio']:>11.2f}"
            f"{row['hot_cpu_us_per_turn']:>9.0f}{row['cpu_ratio_hot']:>7.2f}"
            f"{_kb(row['peak_kb_per_turn']):>14}{_kb(row['held_kb_per_turn']):>14}"
        )
    print(
        "  targets: CPU per turn ≤ 1.1 x a hot turn's (x hot: turns back to back, caches"
        " warm);\n  wall ≤ 1.2 x (50 ms + turns x CPU alone), i.e. wall/tgt ≤ 1;"
        " peak ≤ 40 KB per turn in flight"
    )
    for store, row in rows.items():
        peak = row["peak_kb_per_turn"]
        memory = "" if peak is None else f", memory {_mark(peak <= 40)}"
        cpu, wall = row["cpu_ratio_hot"] or 0.0, row["wall_ratio"] or 0.0
        print(f"  {store}: CPU {_mark(cpu <= 1.1)}, wall {_mark(wall <= 1)}{memory}")
    return rows


def transcript() -> dict[str, Any]:
    """A follow-on's cost by the number of prior turns, per store."""
    costs = transcript_costs()
    for store, figures in costs["stores"].items():
        print(f"follow-on turn after N prior turns of its session, {store} store (µs per turn)")
        print(f"{'prior turns':<14}{'messages':>10}{'min µs':>10}{'median µs':>11}")
        for prior, row in figures["by_prior_turns"].items():
            print(
                f"{prior:<14}{row['messages']:>10}{row['min_us']:>10.0f}{row['median_us']:>11.0f}"
            )
        print(
            f"{'1 (beside)':<14}{'':>10}{figures['after_1_min_us']:>10.0f}"
            f"{figures['after_1_median_us']:>11.0f}"
        )
        slope, ratio, target = (
            figures["us_per_message"],
            figures["ratio_median"],
            figures["target_ratio"],
        )
        print(f"  µs per prior transcript message: {slope:.1f} (target ≤ 3: {_mark(slope <= 3)})")
        print(
            f"  after 1,000 ÷ after 1 (interleaved): median {ratio:.2f}, min"
            f" {figures['ratio_min']:.2f} (target ≤ {target}: {_mark(ratio <= target)})"
        )
    return costs


def replay() -> dict[str, float]:
    """Replay throughput in process."""
    rates = replay_rate()
    print(
        f"replay in process, {rates['recordings']:.0f} recordings (Initial asking for a client"
        " tool, its continuation, a follow-on)"
    )
    for key, label in (
        ("objects_per_s", "from TurnRecording objects"),
        ("files_per_s", "from files"),
    ):
        print(
            f"  {label:<30}{rates[key]:>8.0f} recordings/s"
            f"  (target ≥ 1000: {_mark(rates[key] >= 1000)})"
        )
    margin = rates["dir_margin_per_s"]
    print(
        f"  {'aptix replay DIR, at the margin':<30}{margin:>8.0f} recordings/s"
        f"  (best {rates['dir_margin_best_per_s']:.0f}; target ≥ 500: {_mark(margin >= 500)})"
    )
    return rates


def evals() -> dict[str, Any]:
    """An eval case's cost against a replay of the same recording (bench/evals.py)."""
    figures = eval_figures()
    print_eval_figures(figures)
    return figures


def cli() -> dict[str, Any]:
    """Start-up cost of the command line."""
    costs = cli_costs()
    print("command line, wall ms per process (min / median of 5)")
    targets = {"version": ("aptix --version", 100.0), "run": ("aptix run (one turn)", 300.0)}
    for key, (label, target) in targets.items():
        row = costs[key]
        print(
            f"  {label:<24}{row['min_ms']:>8.0f}{row['median_ms']:>8.0f}"
            f"  (target ≤ {target:.0f}: {_mark(row['median_ms'] <= target)})"
        )
    return costs


def durable() -> dict[str, Any]:
    """Durable turns on a local Temporal dev server, beside the same turn in process."""
    figures = durable_figures()
    print_durable_figures(figures)
    return figures


RUNNERS: dict[str, Callable[[], Any]] = {
    "validators": validators,
    "turns": turns,
    "tracing": tracing,
    "recording": recording,
    "http": http,
    "refused": refused,
    "images": images,
    "streaming": streaming,
    "files": files,
    "ledger": ledger,
    "traces": traces,
    "budgets": budgets,
    "forks": forks,
    "sessions": sessions,
    "live": live,
    "retrieval": retrieval,
    "concurrency": concurrency,
    "transcript": transcript,
    "replay": replay,
    "evals": evals,
    "cli": cli,
    "durable": durable,
}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections, print their tables, write ``--json`` when asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    parser.add_argument(
        "--only", metavar="SECTIONS", help=f"comma-separated, of: {','.join(SECTIONS)}"
    )
    args = parser.parse_args(argv)
    chosen = list(SECTIONS)
    if args.only:
        chosen = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in chosen if name not in RUNNERS]
        if unknown:
            parser.error(f"unknown sections {unknown}; choose from {','.join(SECTIONS)}")
    figures: dict[str, Any] = {}
    started = time.perf_counter()
    for name in chosen:
        section_started = time.perf_counter()
        figures[name] = RUNNERS[name]()
        print(f"  ({name}: {time.perf_counter() - section_started:.0f} s)")
        print()
    versions = peer_versions()
    figures["meta"] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "peers": {PEERS[name]: version or None for name, version in versions.items()},
        "notes": list(RUNTIME_NOTE) + [f"skipped {k}: {v}" for k, v in MISSING.items()],
        "seconds": time.perf_counter() - started,
    }
    print(f"total {figures['meta']['seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
