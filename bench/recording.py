"""Cost per turn of recording and of replay, as ratios to a plain turn, from one run.

The same Initial turn (the model changes mode, then answers: two model calls,
a server tool run, twenty-odd port calls) on the memory store with tracing off:

- **plain** — no recording (the baseline);
- **record** — ``RecordingOptions()``: every port call tapped, the recording
  built and returned on the report, nothing written;
- **record+redact** — the same, redacted;
- **record+file** — the same, written to a file in a temporary folder;
- **replay** — ``replay()`` of that turn's recording: ports answer from it and
  every call, the trace and the result are compared.

Measured round-robin so machine noise hits them alike (best of the rounds).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable

from rounds import best_of_rounds
from tracing import CALLER, FINAL, MODE, bench_pipeline

from aptix_pipeline import RecordingOptions, replay
from aptix_pipeline.engine import Pipeline, Telemetry

__all__ = ["recording_row"]


def _pipeline(recording: RecordingOptions | None) -> Pipeline:
    return bench_pipeline(Telemetry.off(), [MODE, FINAL], recording)


async def _measure(folder: str, number: int, rounds: int) -> dict[str, float]:
    pipelines = {
        "plain": _pipeline(None),
        "record": _pipeline(RecordingOptions()),
        "record+redact": _pipeline(RecordingOptions(redact=True)),
        "record+file": _pipeline(RecordingOptions(directory=folder)),
    }
    sample = (await pipelines["record"].run({"Instruction": "hi"}, CALLER)).recording
    assert sample is not None

    def turn(pipeline: Pipeline) -> Callable[[], Awaitable[object]]:
        return lambda: pipeline.run({"Instruction": "hi"}, CALLER)

    work = {name: turn(pipeline) for name, pipeline in pipelines.items()}
    work["replay"] = lambda: replay(sample)
    best = await best_of_rounds(work, number, rounds)
    outcome = await replay(sample)
    assert outcome.ok, outcome.describe()
    return best


def recording_row(number: int = 40, rounds: int = 5) -> dict[str, float]:
    """µs per turn for each setting (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_measure(folder, number, rounds))
