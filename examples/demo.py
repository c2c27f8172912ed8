"""The demo: a scripted session on the embedded defaults — two turns, three requests.

Run by ``make demo``. It runs on a SQLite file, the built-in catalog and a scripted
model (``examples/session/script.json``):

1. **Initial** — the model switches the session to ``review`` mode and asks the
   client to run ``read_file``: a ``client_tool_continuation``.
2. **Continuation** — the client's result goes back to the model, which answers.
3. **FollowOn** — a new turn in the new mode, whose server tool
   (``review_checklist``) the model now has.

Each turn prints its progress live, from a listener of the engine's event stream
(docs/EVENTS.md), then its state trace (transitions, guards and exit hooks with
their rule counts, model calls, tool calls, mode changes) and the response. Every turn
is recorded; each recording is then replayed against the code with no store and no
model, and the path of the last turn is drawn on the pipeline diagram (Mermaid;
``--diagram FILE.svg`` for a picture).

Then a turn whose server tool makes a file (``make_report``) shows the file as a
``FileRef`` on the final answer, kept in a ``LocalFileStore`` (docs/FILES.md); every
example request in ``examples/requests/`` is checked against AGN-034: the well-formed
ones in form only (02 and 03 continue the session 01 starts, as docs/CLI.md "Example
requests" runs them), the others refused by the rules they break; and a pasted image
reaches the model, which echoes what it received (docs/MODELS.md).

The store and the recordings are kept (``build/demo/aptix.db`` and
``build/demo/recordings/`` unless ``--db``/``--record`` say otherwise, made afresh
each run), and the demo ends with the ``aptix ui`` command that opens the turn
browser page on them (docs/UI.md).

Spans: ``OTEL_TRACES_EXPORTER=console make demo`` prints the OpenTelemetry spans of
the session (invoke_agent, step, chat, execute_tool) as JSON on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from aptix_pipeline import RecordingOptions, TurnRecording, replay
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.files.local import LocalFileStore
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.tracing import configure_tracing
from aptix_pipeline.adapters.tools.builtin import MAKE_REPORT_TOOL
from aptix_pipeline.contracts import AgentExecuteResponse, Caller
from aptix_pipeline.engine import (
    DiagramError,
    DiagramFormat,
    ModelCallFinished,
    Pipeline,
    StepStarted,
    Telemetry,
    ToolExecuted,
    TurnEvent,
    TurnFinished,
    TurnReport,
    diagram_text,
    format_for,
    pipeline_diagram,
)
from aptix_pipeline.validators import classify_request, parse_request

EXAMPLES = Path(__file__).resolve().parent
DEMO_FOLDER = EXAMPLES.parent / "build" / "demo"
"""Where the demo keeps its store and recordings unless told otherwise (``build/`` is ignored)."""
CALLER = Caller(org="acme", user="ana")
FILE_CONTENTS = (
    "def load_config(path):\n"
    "    try:\n"
    "        return json.load(open(path))\n"
    "    except Exception:\n"
    "        pass\n"
)


def progress(event: TurnEvent) -> None:
    """A host's listener: one line that grows as the turn runs."""
    if isinstance(event, StepStarted):
        print(f"{event.step} ", end="", flush=True)
    elif isinstance(event, ModelCallFinished):
        print(f"[model call {event.call.round}] ", end="", flush=True)
    elif isinstance(event, ToolExecuted):
        print(f"[{event.name}: {event.outcome}] ", end="", flush=True)
    elif isinstance(event, TurnFinished):
        print("✓" if event.successful else "✗")


async def _run(title: str, pipeline: Pipeline, request: dict[str, Any]) -> TurnReport:
    print(f"\n=== {title}")
    print("request:  " + json.dumps(request))
    print("live:     ", end="")
    return await pipeline.run(request, CALLER)


def _show(report: TurnReport) -> AgentExecuteResponse:
    print("states:   " + " → ".join(report.states))
    if report.trace is not None:
        print("trace:")
        print("\n".join(f"  {line}" for line in report.trace.describe()))
    for change in report.mode_changes:
        print(
            f"mode:     {change.previous_mode} → {change.new_mode} "
            f"(reason: {change.reason!r}, branch: {change.branch})"
        )
    print("result:")
    print(report.result.to_json(indent=2))
    if report.result.result is None:
        raise SystemExit(f"the demo turn failed: {report.result.rule_ids}")
    return report.result.result


async def run_session(pipeline: Pipeline) -> None:
    """The three turns of the demo session."""
    first_request = json.loads((EXAMPLES / "session" / "01-initial.json").read_text())
    first = _show(await _run("Turn 1 — Initial", pipeline, first_request))

    call = (first.tool_calls or [])[0]
    contents = json.dumps({"path": "src/app.py", "contents": FILE_CONTENTS})
    result = {"ToolCallId": call.tool_call_id, "ExecutionMs": 4, "ResultJson": contents}
    second_request = {
        "SessionId": first.session_id,
        "TurnId": first.turn_id,
        "ToolResults": [result],
    }
    second = _show(
        await _run("Turn 1, continued — ClientToolCallContinuation", pipeline, second_request)
    )

    third_request = {
        "SessionId": second.session_id,
        "TurnId": second.turn_id,
        "Instruction": "Check it against the team's review checklist.",
    }
    _show(await _run("Turn 2 — FollowOn, in review mode", pipeline, third_request))


def replay_recordings(recordings: list[TurnRecording], diagram: Path | None) -> None:
    """Replay each recorded turn offline, then draw the last one's path."""
    print("\n=== Replay: each recorded turn again, ports answering from the recording")
    for number, recording in enumerate(recordings, start=1):
        outcome = asyncio.run(replay(recording))
        print(f"turn {number} ({recording.trace.context_type}): {outcome.describe()[-1]}")
        if not outcome.ok:
            raise SystemExit("a recorded turn did not replay")
    last = recordings[-1].trace
    print(f"\n=== The path of the last turn ({last.context_type}) on the pipeline diagram")
    print(diagram_text(DiagramFormat.MERMAID, path=last), end="")
    if diagram is not None:
        try:
            diagram.write_bytes(pipeline_diagram(format_for(diagram), path=last))
            print(f"path diagram written to {diagram}")
        except (DiagramError, ValueError) as error:
            print(f"no path diagram: {error}")


# --- A tool that makes a file (AGN-033 §6, docs/FILES.md) --------------------------------

REPORT_CATALOG: dict[str, Any] = {
    "modes": [{"name": "general", "display_name": "General", "server_tools": ["make_report"]}],
    "server_tools": [dict(MAKE_REPORT_TOOL)],
    "agents": [{"id": "assistant", "name": "Aptix assistant", "default": True}],
    "conversations": [{"id": "chat", "name": "Chat", "default": True}],
}
REPORT_SCRIPT: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {
                "id": "call_report",
                "name": "make_report",
                "arguments": {
                    "title": "Review of src/app.py",
                    "points": [
                        "Close the file with `with open(...)`.",
                        "Test a bad settings.json.",
                    ],
                },
            }
        ]
    },
    {"text": "The review is in the attached report."},
]


def show_a_file(directory: Path) -> None:
    """One turn whose scripted model calls ``make_report``: its file comes back as a FileRef."""
    print("\n=== A server tool makes a file: a FileRef on the final answer")
    clock = SystemClock()
    files = LocalFileStore(
        directory,
        url_base="http://127.0.0.1:8080",
        signing_key=b"demo signing key, not a secret",
        clock=clock,
    )
    pipeline = embedded_pipeline(
        llm=ScriptedLLM(REPORT_SCRIPT),
        catalog=ConfigCatalog(REPORT_CATALOG, source="demo", demo_tools=True),
        files=files,
        clock=clock,
    )
    report = asyncio.run(pipeline.run({"Instruction": "Write the review up as a report."}, CALLER))
    response = report.result.result
    if response is None or not response.files:
        raise SystemExit(f"the file turn made no FileRef: {report.result.rule_ids}")
    print(f"answer:   {response.primary_output_text}")
    for ref in response.files:
        print(f"FileRef:  {ref.to_json()}")
        kept = files.path(ref.content_hash).read_bytes()
        print(f"kept:     {files.path(ref.content_hash)} ({len(kept)} bytes)")


def check_examples() -> None:
    """Check every example request against AGN-034, one line each."""
    print("\n=== Example requests (AGN-034)")
    files = sorted((EXAMPLES / "requests").glob("*.json"))
    well_formed = 0
    for path in files:
        result = parse_request(path.read_bytes())
        if result.result is not None:
            well_formed += 1
            print(f"{path.name}: a well-formed {classify_request(result.result)} request")
        else:
            print(f"{path.name}: refused — {', '.join(result.rule_ids)}")
    print(f"{well_formed} well-formed, {len(files) - well_formed} refused, {len(files)} requests")
    print(
        "(well-formed in form only: 02 and 03 go on with the session 01 starts, "
        'run one after the other as docs/CLI.md "Example requests" shows)'
    )


# --- an image reaches the model ----------------------------------------------------------


def tiny_png(width: int = 4, height: int = 4) -> bytes:
    """A small grey PNG (RFC 2083), made here so the demo ships no binary file."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    rows = b"".join(b"\x00" + bytes([128]) * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def show_an_image_reaching_the_model() -> str:
    """A pasted screenshot goes to a scripted model that echoes what it received."""
    import base64

    print("\n=== An image reaches the model (the scripted model echoes what it received)")
    image = base64.b64encode(tiny_png()).decode("ascii")
    request = {
        "Instruction": "look at this",
        "ClipboardImages": [{"Id": "img1", "MimeType": "image/png", "DataBase64": image}],
    }
    echo = embedded_pipeline(llm=ScriptedLLM([{"text": "{received}"}]))
    answer = echo.execute_sync(request, CALLER).result
    if answer is None or answer.primary_output_text is None:
        raise SystemExit("the image turn failed")
    print(f"model:    {answer.primary_output_text}")
    return answer.primary_output_text


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    """Run the session on a SQLite file, then check the example requests."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite file to keep (default: a temporary one)")
    parser.add_argument("--record", type=Path, help="Keep the turn recordings in this folder")
    parser.add_argument("--diagram", type=Path, help="Draw the last turn's path (.svg, .png, .dot)")
    args = parser.parse_args()
    recordings: list[TurnRecording] = []
    provider = configure_tracing()  # OTEL_TRACES_EXPORTER=console prints the spans
    path: Path = args.db or fresh(DEMO_FOLDER / "aptix.db")
    args.record = args.record or fresh(DEMO_FOLDER / "recordings")
    print(f"SQLite store: {path}")
    with SQLiteStore(path) as store:
        llm = ScriptedLLM.from_file(EXAMPLES / "session" / "script.json")
        telemetry = Telemetry(tracer_provider=provider)
        recording = RecordingOptions(directory=args.record, sink=recordings.append)
        pipeline = embedded_pipeline(
            llm=llm,
            store=store,
            telemetry=telemetry,
            recording=recording,
            listeners=[progress],
        )
        asyncio.run(run_session(pipeline))
    if provider is not None:
        provider.shutdown()
    replay_recordings(recordings, args.diagram)
    if args.record is not None:
        print(f"recordings kept in {args.record}: aptix replay {args.record}")
    with tempfile.TemporaryDirectory() as scratch:
        show_a_file(Path(scratch))
    check_examples()
    show_an_image_reaching_the_model()
    print_ui_command(path, args.record)
    return 0


def fresh(path: Path) -> Path:
    """``path`` in the demo's own folder (``build/demo``), emptied: each run shows its own
    session alone (a SQLite file with its WAL files, or the recordings' folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in [path, *path.parent.glob(f"{path.name}-*"), *path.glob("*.json")]:
        if not old.is_dir():
            old.unlink(missing_ok=True)
    return path


def print_ui_command(store: Path, recordings: Path) -> None:
    """The last lines: the command that opens the turn browser page on the demo's store."""

    def shown(path: Path) -> Path:
        return (
            path.resolve().relative_to(Path.cwd())
            if path.resolve().is_relative_to(Path.cwd())
            else path
        )

    print("\n=== See the turns in the browser (docs/UI.md)")
    print(f"aptix ui --store sqlite:{shown(store)} --recordings {shown(recordings)}")


if __name__ == "__main__":
    sys.exit(main())
