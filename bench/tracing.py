"""Cost per turn of the engine's telemetry, as ratios to tracing off, from one run.

Settings of the same pipeline, measured round-robin so machine noise hits them
alike, in the process's CPU time (each figure is the median of the rounds, the
minimum beside it):

- **off** — ``Telemetry.off()``: no span is started; the state trace is kept.
- **no-op** — ``Telemetry()`` with no SDK configured: the OpenTelemetry API's
  no-op tracer (what an embedding host gets by default).
- **sdk** — the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter`` (spans built, ended and exported; no I/O).
- **sdk+content** — the same with content capture on.
- **compact** — the same SDK with ``Telemetry(span_mode="compact")``: the steps are
  events on ``invoke_agent``; ``chat`` and ``execute_tool`` stay spans.
- **bare** — no turn at all: a script making the same spans as **sdk** straight
  with the SDK's tracer (``bare_turn``), into the same processor and exporter,
  turn after turn in a tight loop.
- **off+bare** — the **off** turn followed by the bare script, each time: the bare
  SDK's cost among a turn's work (**off+bare - off**, ``bare_in_turn``), where the
  engine's spans are made. A tight loop keeps the SDK's code and data in the CPU's
  caches; among a turn's work the same calls cost about 1.4 x as much.

The span builder's own cost is **sdk - off** (the turn with spans, less the same
turn without); it is judged against **bare**, what the SDK alone costs to make
those spans (target ≤ 1.3 x), and shown against **bare_in_turn** beside it. The
bare script is taken from one traced turn (``span_script``): each
span started with the name and attributes the engine starts it with, made current
while open (as the engine does, so a host's spans nest under it), its children,
then the attributes, events and status the engine adds before it ends, its final
name, and its end. ``same_spans`` checks that both export the same spans (names,
kinds, parentage, attributes, events, status) before anything is timed.

Two workloads: an Initial turn with a final answer (ten spans), and an Initial turn
whose model changes mode (an ``execute_tool`` span) before answering (two ``chat``
spans).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from aptix_pipeline import PipelineOptions, Ports, Recorder, RecordingOptions
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds
from aptix_pipeline.contracts import Caller, LLMReply, LLMRequest, ToolCall, Usage
from aptix_pipeline.engine import Pipeline, Telemetry

__all__ = [
    "CALLER",
    "FINAL",
    "MODE",
    "SETTINGS",
    "WORKLOADS",
    "ReplayingLLM",
    "ScriptedSpan",
    "bare_turn",
    "bench_pipeline",
    "same_spans",
    "span_script",
    "span_shapes",
    "tracing_rows",
]

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
WORKLOADS: dict[str, Sequence[LLMReply]] = {
    "Initial, final answer": [FINAL],
    "Initial, mode change + answer": [MODE, FINAL],
}
SETTINGS = ("off", "no-op", "sdk", "sdk+content", "compact")
"""The pipelines' settings, in the order the rounds run them (``bare`` runs after)."""


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


def _provider(*processors: SpanProcessor) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    for processor in processors:
        provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


# --- the bare SDK: the same spans, made straight with the tracer -----------------------


@dataclass
class ScriptedSpan:
    """One span as the engine makes it: what it starts with, its children, what it ends with."""

    name: str
    kind: SpanKind
    start: dict[str, Any]
    end: dict[str, Any]
    final_name: str | None = None
    events: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    status: Status | None = None
    children: list[ScriptedSpan] = field(default_factory=list)


class _StartSeen(SpanProcessor):
    """Keeps each span's name and attributes as they were when it started."""

    def __init__(self) -> None:
        self.started: dict[int, tuple[str, dict[str, Any]]] = {}

    def on_start(self, span: SdkSpan, parent_context: Any = None) -> None:
        self.started[span.context.span_id] = (span.name, dict(span.attributes or {}))


def span_script(replies: Sequence[LLMReply]) -> ScriptedSpan:
    """The spans of one traced turn on ``replies``, as a script for ``bare_turn``."""
    seen = _StartSeen()
    provider, exporter = _provider(seen)
    pipeline = bench_pipeline(Telemetry(tracer_provider=provider, capture_content=False), replies)
    report = asyncio.run(pipeline.run({"Instruction": "hi"}, CALLER))
    assert report.successful, report.result.errors
    spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    made: dict[int, ScriptedSpan] = {}
    root: ScriptedSpan | None = None
    for span in spans:
        name, start = seen.started[span.context.span_id]
        attributes = dict(span.attributes or {})
        scripted = ScriptedSpan(
            name=name,
            kind=span.kind,
            start=start,
            end={k: v for k, v in attributes.items() if k not in start or start[k] != v},
            final_name=span.name if span.name != name else None,
            events=[(event.name, dict(event.attributes or {})) for event in span.events],
            status=span.status if span.status.status_code is not StatusCode.UNSET else None,
        )
        made[span.context.span_id] = scripted
        if span.parent is None:
            root = scripted
        else:
            made[span.parent.span_id].children.append(scripted)
    assert root is not None
    return root


def bare_turn(tracer: Tracer, span: ScriptedSpan) -> None:
    """Make ``span`` and its children with the SDK alone, each current while open."""
    made = tracer.start_span(span.name, kind=span.kind, attributes=span.start)
    token = otel_context.attach(trace.set_span_in_context(made))
    try:
        for child in span.children:
            bare_turn(tracer, child)
        if span.end:
            made.set_attributes(span.end)
        for name, attributes in span.events:
            made.add_event(name, attributes)
        if span.status is not None:
            made.set_status(span.status)
        if span.final_name is not None:
            made.update_name(span.final_name)
        made.end()
    finally:
        otel_context.detach(token)


_VOLATILE = frozenset({"gen_ai.conversation.id", "aptix.turn.id"})
"""Attributes holding the turn's random ids: compared for presence, not value."""


def span_shapes(spans: Sequence[ReadableSpan]) -> list[tuple[Any, ...]]:
    """What two runs of the same spans share: all but ids, times and random ids."""
    names = {span.context.span_id: span.name for span in spans}
    shapes = []
    for span in spans:
        attributes = {
            k: ("<id>" if k in _VOLATILE else v) for k, v in (span.attributes or {}).items()
        }
        shapes.append(
            (
                span.name,
                span.kind,
                names.get(span.parent.span_id) if span.parent is not None else None,
                attributes,
                [(event.name, dict(event.attributes or {})) for event in span.events],
                span.status.status_code,
                span.status.description,
            )
        )
    return shapes


def same_spans(replies: Sequence[LLMReply]) -> bool:
    """Whether ``bare_turn`` exports the spans a traced turn on ``replies`` exports."""
    provider, exporter = _provider()
    pipeline = bench_pipeline(Telemetry(tracer_provider=provider, capture_content=False), replies)
    asyncio.run(pipeline.run({"Instruction": "hi"}, CALLER))
    engine = span_shapes(exporter.get_finished_spans())
    exporter.clear()
    bare_turn(provider.get_tracer("bare"), span_script(replies))
    return span_shapes(exporter.get_finished_spans()) == engine


# --- the rounds -------------------------------------------------------------------------

_clock = time.process_time
"""The process's CPU time: the rounds are measured by what they cost, not by how long the
machine's other work kept them waiting."""


async def _measure(
    replies: Sequence[LLMReply], script: ScriptedSpan, number: int, rounds: int
) -> dict[str, list[float]]:
    sdk, exporter = _provider()
    sdk_content, exporter_content = _provider()
    compact, exporter_compact = _provider()
    bare, exporter_bare = _provider()
    settings = {
        "off": Telemetry.off(),
        "no-op": Telemetry(capture_content=False),
        "sdk": Telemetry(tracer_provider=sdk, capture_content=False),
        "sdk+content": Telemetry(tracer_provider=sdk_content, capture_content=True),
        "compact": Telemetry(tracer_provider=compact, capture_content=False, span_mode="compact"),
    }
    pipelines = {name: bench_pipeline(t, replies) for name, t in settings.items()}
    tracer = bare.get_tracer("bare")
    exporters = (exporter, exporter_content, exporter_compact, exporter_bare)
    times: dict[str, list[float]] = {name: [] for name in (*settings, "bare", "off+bare")}
    for _ in range(rounds):
        for name, pipeline in pipelines.items():
            started = _clock()
            for _ in range(number):
                report = await pipeline.run({"Instruction": "hi"}, CALLER)
                assert report.successful, report.result.errors
            times[name].append((_clock() - started) / number * 1e6)
        started = _clock()
        for _ in range(number):
            bare_turn(tracer, script)
        times["bare"].append((_clock() - started) / number * 1e6)
        off = pipelines["off"]
        started = _clock()
        for _ in range(number):
            await off.run({"Instruction": "hi"}, CALLER)
            bare_turn(tracer, script)
        times["off+bare"].append((_clock() - started) / number * 1e6)
        for each in exporters:
            each.clear()
    return times


def _figures(times: dict[str, list[float]]) -> dict[str, float]:
    """Each setting's median and minimum, and the builder's cost against the bare SDK's."""
    figures: dict[str, float] = {}
    for name, values in times.items():
        figures[name] = min(values)
        figures[f"{name}_median"] = statistics.median(values)
    for suffix in ("", "_median"):
        builder = figures[f"sdk{suffix}"] - figures[f"off{suffix}"]
        in_turn = figures[f"off+bare{suffix}"] - figures[f"off{suffix}"]
        figures[f"builder{suffix}"] = builder
        figures[f"bare_in_turn{suffix}"] = in_turn
        figures[f"builder/bare{suffix}"] = builder / figures[f"bare{suffix}"]
        figures[f"builder/bare_in_turn{suffix}"] = builder / in_turn
    return figures


def tracing_rows(number: int = 30, rounds: int = 15) -> list[tuple[str, dict[str, float]]]:
    """(workload, figures) per workload: µs per turn by setting (minimum; ``…_median``),
    the builder's cost (``builder``: sdk - off) and its ratio to the bare SDK's."""
    rows = []
    for label, replies in WORKLOADS.items():
        assert same_spans(replies), f"{label}: the bare script's spans differ from the engine's"
        script = span_script(replies)
        rows.append((label, _figures(asyncio.run(_measure(replies, script, number, rounds)))))
    return rows
