"""The OpenTelemetry SDK for the ``aptix`` commands, configured from the standard variables.

The engine uses only the OpenTelemetry API; a host configures the SDK. The CLI
and the demo are hosts, and configure it from the environment the way the
OpenTelemetry specification names it:

- ``OTEL_TRACES_EXPORTER``: ``none`` (default), ``console`` (spans as JSON on
  stderr, so stdout stays the command's output), ``otlp`` (OTLP over HTTP/protobuf;
  needs the ``otlp`` extra), or a comma-separated list of them.
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and the
  other ``OTEL_EXPORTER_OTLP_*`` variables are read by the OTLP exporter itself.
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the service
  (default service name: ``aptix``).
- ``OTEL_SDK_DISABLED=true`` turns everything off.

``configure_tracing()`` returns the provider (or ``None`` when nothing is
exported); ``shutdown`` flushes it before the process exits.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from aptix_pipeline.contracts import AptixPipelineError

if TYPE_CHECKING:  # the SDK is imported only when an exporter is configured
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["EXPORTERS", "TelemetrySetupError", "configure_tracing"]

EXPORTERS = ("none", "console", "otlp")


class TelemetrySetupError(AptixPipelineError, ValueError):
    """``OTEL_TRACES_EXPORTER`` names an exporter that is unknown or not installed."""


def _otlp_exporter() -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as error:
        raise TelemetrySetupError(
            "OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: pip install 'aptix-pipeline[otlp]'"
        ) from error
    exporter: SpanExporter = OTLPSpanExporter()
    return exporter


def configure_tracing(*, console_out: TextIO | None = None) -> TracerProvider | None:
    """A tracer provider exporting as ``OTEL_TRACES_EXPORTER`` says, or ``None`` for none.

    Raises ``TelemetrySetupError`` naming the variable for an unknown exporter.
    """
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "none").split(",")]
    names = [name for name in names if name and name != "none"]
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        raise TelemetrySetupError(
            f"OTEL_TRACES_EXPORTER: unknown exporter {unknown[0]!r} (use {', '.join(EXPORTERS)})"
        )
    if not names:
        return None
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError as error:
        raise TelemetrySetupError(
            f"OTEL_TRACES_EXPORTER={','.join(names)} needs the OpenTelemetry SDK: "
            "pip install 'aptix-pipeline[cli]'"
        ) from error

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "aptix"}))
    provider = TracerProvider(resource=resource)
    for name in dict.fromkeys(names):
        if name == "console":
            out = console_out or sys.stderr
            # Simple: each span is printed when it ends, in order, before the command's output.
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
        else:
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    return provider
