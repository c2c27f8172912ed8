"""The CLI and the demo as OpenTelemetry hosts: the SDK configured from OTEL_* variables.

Real processes: ``aptix run`` and ``examples/demo.py`` with ``OTEL_TRACES_EXPORTER``
set, their spans read back from stderr (the console exporter's JSON) or received by
an OTLP/HTTP receiver on loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from repo import ROOT

from aptix_pipeline.adapters.system.tracing import TelemetrySetupError, configure_tracing

APTIX = Path(sys.executable).parent / "aptix"
SCRIPT = [
    {"tool_calls": [
        {"id": "m1", "name": "agent_change_mode", "arguments": {"mode": "review"}},
        {"id": "r1", "name": "read_file", "arguments": {"path": "a.py"}},
    ]}
]  # fmt: skip


def _env(**otel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(otel)
    return env


def _spans(stderr: str) -> list[dict[str, Any]]:
    """The console exporter's spans: one JSON object per span, pretty-printed."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (start := stderr.find("{", at)) != -1:
        try:
            value, end = decoder.raw_decode(stderr, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(value, dict) and "context" in value and "name" in value:
            spans.append(value)
        at = end
    return spans


def _run(tmp: Path, *args: str, **otel: str) -> subprocess.CompletedProcess[str]:
    (tmp / "request.json").write_text(json.dumps({"Instruction": "review a.py"}))
    (tmp / "script.json").write_text(json.dumps(SCRIPT))
    return subprocess.run(
        [
            str(APTIX),
            "run",
            "request.json",
            "--llm-script",
            "script.json",
            "--store",
            "memory",
            "--compact",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp,
        env=_env(**otel),
    )


@pytest.mark.decision("D57")
def test_console_exporter_prints_the_turns_spans_on_stderr(tmp_path: Path) -> None:
    run = _run(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="ide-backend")

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["Successful"] is True  # stdout stays the result
    spans = _spans(run.stderr)
    names = [span["name"] for span in spans]
    assert names[-1] == "invoke_agent Aptix assistant"
    assert {"chat scripted", "execute_tool agent_change_mode", "step llm_client"} <= set(names)
    root = spans[-1]
    assert root["parent_id"] is None
    assert all(span["context"]["trace_id"] == root["context"]["trace_id"] for span in spans)
    assert root["resource"]["attributes"]["service.name"] == "ide-backend"


def test_no_exporter_prints_no_span(tmp_path: Path) -> None:
    run = _run(tmp_path)

    assert run.returncode == 0, run.stderr
    assert _spans(run.stderr) == []


@pytest.mark.decision("D57")
def test_service_name_defaults_to_aptix(tmp_path: Path) -> None:
    run = _run(tmp_path, OTEL_TRACES_EXPORTER="console")

    assert _spans(run.stderr)[-1]["resource"]["attributes"]["service.name"] == "aptix"


@pytest.mark.decision("D57")
def test_unknown_exporter_is_a_usage_error_naming_the_variable(tmp_path: Path) -> None:
    run = _run(tmp_path, OTEL_TRACES_EXPORTER="zipkin")

    assert run.returncode == 2
    assert "OTEL_TRACES_EXPORTER" in run.stderr
    assert "zipkin" in run.stderr
    assert run.stdout == ""  # nothing ran


def test_trace_option_prints_the_state_trace(tmp_path: Path) -> None:
    run = _run(tmp_path, "--trace")

    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert lines[0].startswith("transition  step=request_handler from=received to=validated")
    assert any(line.startswith("mode_change") and "new=review" in line for line in lines)
    assert lines[-1] == "outcome     done"


def test_demo_with_console_exporter_shows_every_kind_of_span(tmp_path: Path) -> None:
    demo = ROOT / "examples" / "demo.py"
    run = subprocess.run(
        [sys.executable, str(demo), "--verbose", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env=_env(OTEL_TRACES_EXPORTER="console"),
    )

    assert run.returncode == 0, run.stderr
    names = [span["name"] for span in _spans(run.stderr)]
    assert names.count("invoke_agent Aptix assistant") == 3  # three requests
    assert "execute_tool review_checklist" in names
    assert "step server_tool_round" in names
    assert sum(name.startswith("chat ") for name in names) == 4
    assert "trace:" in run.stdout


@pytest.mark.parametrize(
    ("variables", "exporters"),
    [
        ({}, None),
        ({"OTEL_TRACES_EXPORTER": "none"}, None),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["ConsoleSpanExporter"]),
        ({"OTEL_TRACES_EXPORTER": "console, console"}, ["ConsoleSpanExporter"]),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, None),
    ],
)
def test_configure_tracing_reads_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], exporters: list[str] | None
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)

    provider = configure_tracing()

    if exporters is None:
        assert provider is None
        return
    assert isinstance(provider, TracerProvider)
    processors = provider._active_span_processor._span_processors
    assert [type(p.span_exporter).__name__ for p in processors] == exporters  # type: ignore[attr-defined]
    provider.shutdown()


@pytest.mark.decision("D57")
def test_otlp_without_the_exporter_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)

    with pytest.raises(TelemetrySetupError, match=r"aptix-pipeline\[otlp\]"):
        configure_tracing()


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each export request's body."""

    bodies: list[bytes]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path == "/v1/traces":
            type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_otlp_exporter_sends_the_turns_spans_to_the_endpoint(tmp_path: Path) -> None:
    handler: type[_Collector] = type("Collector", (_Collector,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        run = _run(
            tmp_path,
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_TIMEOUT="5",
        )
    finally:
        server.shutdown()
        server.server_close()

    assert run.returncode == 0, run.stderr
    names = []
    for body in handler.bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "aptix_pipeline"
                names += [span.name for span in scope_spans.spans]
    assert "invoke_agent Aptix assistant" in names
    assert {"chat scripted", "execute_tool agent_change_mode", "step llm_client"} <= set(names)
