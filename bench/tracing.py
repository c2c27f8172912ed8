"""Cost per turn of the engine's telemetry, as ratios to tracing off, from one run.

Four settings of the same pipeline, measured round-robin so machine noise hits
them alike (best of the rounds):

- **off** — ``Telemetry.off()``: no span is started; the state trace is kept.
- **no-op** — ``Telemetry()`` with no SDK configured: the OpenTelemetry API's
  no-op tracer (what an embedding host gets by default).
- **sdk** — the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter`` (spans built, ended and exported; no I/O).
- **sdk+content** — the same with content capture on.

Two workloads: an Initial turn with a final answer, and an Initial turn whose
model changes mode (an ``execute_tool`` span) before answering (two ``chat`` spans).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aptix_pipeline import PipelineOptions, Ports, Recorder, RecordingOptions
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds
from aptix_pipeline.contracts import Caller, LLMReply, LLMRequest, ToolCall, Usage
from aptix_pipeline.engine import Pipeline, Telemetry

__all__ = ["CALLER", "FINAL", "MODE", "ReplayingLLM", "bench_pipeline", "tracing_rows"]

CALLER = Caller(org="acme", user="ana")
FINAL = LLMReply(text="done", usage=Usage(input_tokens=10, output_tokens=2), model="m")
MODE = LLMReply(
    tool_calls=[
        ToolCall(
            tool_call_id="m1",
            name="agent_change_mode",
            arguments_json='{"mode": "review", "reason": "asked"}',
        )
    ],
    model="m",
)


class ReplayingLLM:
    """Plays the same replies in a loop (the benchmark's model)."""

    def __init__(self, replies: Sequence[LLMReply]) -> None:
        self.replies, self.calls = list(replies), 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        reply = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        return reply


def bench_pipeline(
    telemetry: Telemetry, replies: Sequence[LLMReply], recording: RecordingOptions | None = None
) -> Pipeline:
    """The benchmarks' pipeline: memory store, built-in catalog, ``replies`` in a loop."""
    catalog = ConfigCatalog.default()
    ports = Ports(
        store=MemoryStore(),
        llm=ReplayingLLM(replies),
        modes=catalog,
        agents=catalog,
        clock=SystemClock(),
        ids=RandomIds(),
        tools=catalog.tools,  # the built-in catalog's demo tools
    )
    interceptors = [Recorder(recording)] if recording is not None else []
    return Pipeline(ports, PipelineOptions(), telemetry=telemetry, interceptors=interceptors)


def _sdk(capture: bool) -> tuple[Telemetry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(tracer_provider=provider, capture_content=capture), exporter


async def _measure(replies: Sequence[LLMReply], number: int, rounds: int) -> dict[str, float]:
    sdk, exporter = _sdk(False)
    sdk_content, exporter_content = _sdk(True)
    settings = {
        "off": Telemetry.off(),
        "no-op": Telemetry(capture_content=False),
        "sdk": sdk,
        "sdk+content": sdk_content,
    }
    pipelines = {name: bench_pipeline(t, replies) for name, t in settings.items()}
    best = dict.fromkeys(settings, float("inf"))
    for _ in range(rounds):
        for name, pipeline in pipelines.items():
            started = time.perf_counter()
            for _ in range(number):
                report = await pipeline.run({"Instruction": "hi"}, CALLER)
                assert report.successful, report.result.errors
            best[name] = min(best[name], (time.perf_counter() - started) / number * 1e6)
            exporter.clear()
            exporter_content.clear()
    return best


def tracing_rows(number: int = 40, rounds: int = 5) -> list[tuple[str, dict[str, float]]]:
    """(workload, µs per turn by setting) for each workload."""
    workloads = {
        "Initial, final answer": [FINAL],
        "Initial, mode change + answer": [MODE, FINAL],
    }
    return [
        (label, asyncio.run(_measure(replies, number, rounds)))
        for label, replies in workloads.items()
    ]
