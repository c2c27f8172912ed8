"""Validator cost per call, as ratios to a baseline measured in the same run.

The baseline is pydantic's own model copy of the same context — the cheapest
thing the engine already does per step. ``make bench`` prints µs per call and the
ratio. Then whole turns per path (``bench/turns.py``): the engine against the
same steps in a plain loop and against python-statemachine alone. Last, the
telemetry's cost per turn (``bench/tracing.py``): tracing off, the API's no-op
tracer, and the SDK with an in-memory exporter, as ratios to tracing off. Then
recording and replay (``bench/recording.py``), as ratios to a plain turn.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from builders import PATHS, context_after, context_before, request_data
from recording import recording_row
from tracing import tracing_rows
from turns import engine_rows

from aptix_pipeline.contracts import ContextType, PipelineStep
from aptix_pipeline.validators import (
    parse_request,
    validate_core,
    validate_post_step,
    validate_pre_step,
)


def _per_call_us(stmt: object, number: int = 2000) -> float:
    timer = timeit.Timer(stmt)  # type: ignore[arg-type]
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def main() -> int:
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
        ("validate_pre_step(llm_client) incl. manifest",
         _per_call_us(lambda: validate_pre_step(ctx, PipelineStep.LLM_CLIENT))),
        (f"PRE+POST of all {len(path)} steps, continuation path",
         _per_call_us(whole_path, number=200)),
        ("parse_request (continuation JSON)",
         _per_call_us(lambda: parse_request(request_data(kind)))),
    ]  # fmt: skip
    print(f"{'what':<52}{'µs/call':>10}{'x baseline':>12}")
    for label, micros in rows:
        print(f"{label:<52}{micros:>10.1f}{micros / baseline:>12.2f}")
    print()
    print("whole turn, memory store, fixed-reply model (µs per turn)")
    header = ("path", "engine", "plain", "raw psm", "engine/plain", "(engine-plain)/psm")
    print(
        f"{header[0]:<44}{header[1]:>9}{header[2]:>9}{header[3]:>9}{header[4]:>14}{header[5]:>20}"
    )
    for path_name, engine, plain, raw, turns in engine_rows():
        label = f"{path_name} ({turns} transitions)"
        print(f"{label:<44}{engine:>9.0f}{plain:>9.0f}{raw:>9.0f}{engine / plain:>14.2f}"
              f"{(engine - plain) / raw:>20.2f}")  # fmt: skip
    print()
    print("telemetry cost per turn, memory store (µs per turn; x = ratio to tracing off)")
    settings = ("off", "no-op", "sdk", "sdk+content")
    print(f"{'workload':<34}" + "".join(f"{name:>13}" for name in settings)
          + "".join(f"{'x ' + name:>15}" for name in settings[1:]))  # fmt: skip
    for workload, costs in tracing_rows():
        cells = "".join(f"{costs[name]:>13.0f}" for name in settings)
        ratios = "".join(f"{costs[name] / costs['off']:>15.2f}" for name in settings[1:])
        print(f"{workload:<34}{cells}{ratios}")
    print()
    print("recording and replay, Initial turn with a mode change (µs per turn; x = ratio to plain)")
    costs = recording_row()
    for name, micros in costs.items():
        print(f"{name:<34}{micros:>13.0f}{micros / costs['plain']:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
