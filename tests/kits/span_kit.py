"""Helpers for span tests: an SDK tracer provider into memory, and turns read back as trees.

``Recorded`` is a ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
``InMemorySpanExporter``; it is given to the pipeline as
``Telemetry(tracer_provider=...)`` and never set as the global provider, so tests
do not see each other's spans. ``TurnSpans`` is one turn's tree: its
``invoke_agent`` root and each span's children in the order they ran.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aptix_pipeline.engine import SpanMode, Telemetry

__all__ = ["Recorded", "TurnSpans", "attributes_of", "events_named", "span_id", "values_of"]


def span_id(span: ReadableSpan) -> int:
    """The span's id (an exported span always has a context)."""
    context = span.context
    assert context is not None
    found: int = context.span_id
    return found


def attributes_of(item: ReadableSpan | Event) -> dict[str, Any]:
    """A span's or an event's attributes as a plain dict (sequences as lists)."""
    found = item.attributes or {}
    return {
        key: list(value) if isinstance(value, Sequence) and not isinstance(value, str) else value
        for key, value in found.items()
    }


def events_named(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    """The attributes of the span's events called ``name``, in order."""
    return [attributes_of(event) for event in span.events if event.name == name]


def values_of(span: ReadableSpan) -> Iterator[tuple[str, str]]:
    """(where, text) for everything a span says: name, status, attribute and event values."""
    yield "name", span.name
    yield "status", span.status.description or ""

    def texts(prefix: str, found: Mapping[str, Any] | None) -> Iterator[tuple[str, str]]:
        for key, value in (found or {}).items():
            items = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
            for item in items:
                yield f"{prefix}{key}", str(item)

    yield from texts("", span.attributes)
    for event in span.events:
        yield f"event {event.name}", event.name
        yield from texts(f"event {event.name}: ", event.attributes)


@dataclass(frozen=True)
class TurnSpans:
    """One turn's spans: the ``invoke_agent`` root and every span below it."""

    root: ReadableSpan
    spans: tuple[ReadableSpan, ...]

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        """The span's direct children in the order they ran.

        Siblings here never overlap, so the order they ended in (the exporter's)
        is the order they started in.
        """
        parent = span_id(span)
        return [s for s in self.spans if s.parent is not None and s.parent.span_id == parent]

    @property
    def steps(self) -> list[ReadableSpan]:
        """The ``step`` spans, in order."""
        return self.children(self.root)

    def named(self, prefix: str) -> list[ReadableSpan]:
        """Every span of the turn whose name starts with ``prefix``, in the order they ended."""
        return [s for s in self.spans if s.name.startswith(prefix)]

    def step_of(self, span: ReadableSpan) -> ReadableSpan:
        """The ``step`` span a span is a child of."""
        assert span.parent is not None
        [parent] = [s for s in self.spans if span_id(s) == span.parent.span_id]
        assert parent.name.startswith("step "), parent.name
        return parent


class Recorded:
    """An SDK tracer provider that keeps its finished spans in memory (see module docstring)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def telemetry(
        self,
        *,
        capture_content: bool | None = False,
        spans: bool = True,
        span_mode: SpanMode = SpanMode.FULL,
    ) -> Telemetry:
        """Telemetry into this provider (content capture off unless asked)."""
        return Telemetry(
            spans=spans,
            tracer_provider=self.provider,
            capture_content=capture_content,
            span_mode=span_mode,
        )

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every finished span, in the order they ended."""
        return tuple(self.exporter.get_finished_spans())

    def turns(self) -> list[TurnSpans]:
        """One tree per root span, in the order the turns ended; every span is in one tree."""
        spans = self.spans
        by_id = {span_id(span): span for span in spans}

        def root_of(span: ReadableSpan) -> int:
            while span.parent is not None:
                span = by_id[span.parent.span_id]  # a parent outside the export fails here
            return span_id(span)

        roots = [span for span in spans if span.parent is None]
        return [
            TurnSpans(
                root, tuple(s for s in spans if s is not root and root_of(s) == span_id(root))
            )
            for root in roots
        ]

    def turn(self) -> TurnSpans:
        """The one turn recorded since the last ``clear``."""
        [turn] = self.turns()
        return turn

    def clear(self) -> None:
        """Forget the spans recorded so far."""
        self.exporter.clear()

    def shutdown(self) -> None:
        """Stop the provider."""
        self.provider.shutdown()
