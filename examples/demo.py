"""The demo: a scripted session on the embedded defaults — two turns, three requests.

Run by ``make demo``. It runs on a SQLite file, the built-in catalog and a scripted
model (``examples/session/script.json``):

1. **Initial** — the model switches the session to ``review`` mode and asks the
   client to run ``read_file``: a ``client_tool_continuation``.
2. **Continuation** — the client's result goes back to the model, which answers.
3. **FollowOn** — a new turn in the new mode, whose server tool
   (``review_checklist``) the model now has.

It prints what a newcomer reads in one screen: a line a turn (what it came to),
then a line for each of the rest (D396). The whole story — each turn's progress
live, from a listener of the engine's event stream (docs/EVENTS.md), its state trace
(transitions, guards and exit hooks with their rule counts, model calls, tool calls,
mode changes) and its response, each replay, the last turn's path on the pipeline
diagram — goes to ``OUT/demo.log``, and to stdout too with ``--verbose``. Every turn
is recorded; each recording is then replayed against the code with no store and no
model, and the path of the last turn is drawn on the pipeline diagram
(``OUT/last-turn.mmd``; ``--diagram FILE.svg`` for a picture).

Then a turn whose server tool makes a file (``make_report``) shows the file as a
``FileRef`` on the final answer, kept in a ``LocalFileStore`` (docs/FILES.md); every
example request in ``examples/requests/`` is checked against AGN-034: the well-formed
ones in form only (02 and 03 continue the session 01 starts, as docs/CLI.md "Example
requests" runs them), the others refused by the rules they break; and a pasted image
reaches the model, which echoes what it received (docs/MODELS.md).

What it keeps goes to ``--out`` (default ``build/demo``): the store, the recordings
(``--db``/``--record`` say otherwise), the diagram and the log, made afresh each
run. The demo ends with the ``aptix ui`` command that opens the turn browser page
on them (docs/UI.md), written as it runs in a fresh shell.

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
from typing import Any, TextIO

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


class Output:
    """Where the demo writes: the lines a newcomer reads (``say``) on stdout, and
    everything — those and the details: traces, responses, the diagram — in the log
    file; the details on stdout too with ``--verbose``."""

    def __init__(self) -> None:
        self.verbose = False
        self.log: TextIO | None = None

    def say(self, text: str = "", end: str = "\n") -> None:
        """A line of the one-screen summary."""
        print(text, end=end, flush=True)
        self._logged(text, end)

    def detail(self, text: str = "", end: str = "\n") -> None:
        """A line of the whole story: in the log, and on stdout with --verbose."""
        if self.verbose:
            print(text, end=end, flush=True)
        self._logged(text, end)

    def _logged(self, text: str, end: str) -> None:
        if self.log is not None:
            self.log.write(text + end)


OUT = Output()


def progress(event: TurnEvent) -> None:
    """A host's listener: one line that grows as the turn runs."""
    if isinstance(event, StepStarted):
        OUT.detail(f"{event.step} ", end="")
    elif isinstance(event, ModelCallFinished):
        OUT.detail(f"[model call {event.call.round}] ", end="")
    elif isinstance(event, ToolExecuted):
        OUT.detail(f"[{event.name}: {event.outcome}] ", end="")
    elif isinstance(event, TurnFinished):
        OUT.detail("✓" if event.successful else "✗")


async def _run(title: str, pipeline: Pipeline, request: dict[str, Any]) -> TurnReport:
    OUT.detail(f"\n=== {title}")
    OUT.detail("request:  " + json.dumps(request))
    OUT.detail("live:     ", end="")
    report = await pipeline.run(request, CALLER)
    OUT.say(f"{title:<48} {'✓' if report.result.successful else '✗'} {_outcome(report)}")
    return report


def _outcome(report: TurnReport) -> str:
    """What the turn came to, in a few words: its kind, what it asked of the client or
    its answer's first words, and its mode change."""
    response = report.result.result
    if response is None:
        return f"refused: {', '.join(report.result.rule_ids)}"
    if response.tool_calls:
        said = "asks the client for " + ", ".join(call.name for call in response.tool_calls)
    else:
        text = (response.primary_output_text or "").splitlines()[0]
        said = f"answers {text[:40]!r}" + ("…" if len(text) > 40 else "")
    changes = [f"; mode {c.previous_mode} → {c.new_mode}" for c in report.mode_changes]
    return f"{response.kind}: {said}{''.join(changes)}"


def _show(report: TurnReport) -> AgentExecuteResponse:
    OUT.detail("states:   " + " → ".join(report.states))
    if report.trace is not None:
        OUT.detail("trace:")
        OUT.detail("\n".join(f"  {line}" for line in report.trace.describe()))
    for change in report.mode_changes:
        OUT.detail(
            f"mode:     {change.previous_mode} → {change.new_mode} "
            f"(reason: {change.reason!r}, branch: {change.branch})"
        )
    OUT.detail("result:")
    OUT.detail(report.result.to_json(indent=2))
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
    OUT.detail("\n=== Replay: each recorded turn again, ports answering from the recording")
    for number, recording in enumerate(recordings, start=1):
        outcome = asyncio.run(replay(recording))
        OUT.detail(f"turn {number} ({recording.trace.context_type}): {outcome.describe()[-1]}")
        if not outcome.ok:
            raise SystemExit("a recorded turn did not replay")
    OUT.say(f"Replay: the {len(recordings)} recorded turns replay with no divergence")
    last = recordings[-1].trace
    OUT.detail(f"\n=== The path of the last turn ({last.context_type}) on the pipeline diagram")
    OUT.detail(diagram_text(DiagramFormat.MERMAID, path=last), end="")
    if diagram is not None:
        try:
            diagram.write_bytes(pipeline_diagram(format_for(diagram), path=last))
            OUT.say(f"The last turn's path on the pipeline diagram: {shown(diagram)}")
        except (DiagramError, ValueError) as error:
            OUT.say(f"no path diagram: {error}")


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
    OUT.detail("\n=== A server tool makes a file: a FileRef on the final answer")
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
    OUT.detail(f"answer:   {response.primary_output_text}")
    for ref in response.files:
        OUT.detail(f"FileRef:  {ref.to_json()}")
        kept = files.path(ref.content_hash).read_bytes()
        OUT.detail(f"kept:     {files.path(ref.content_hash)} ({len(kept)} bytes)")
        OUT.say(
            f"A server tool made a file: FileRef {ref.name} ({ref.mime_type}, "
            f"{ref.size_bytes} bytes) on the final answer"
        )


def check_examples() -> None:
    """Check every example request against AGN-034, one line each."""
    OUT.detail("\n=== Example requests (AGN-034)")
    files = sorted((EXAMPLES / "requests").glob("*.json"))
    well_formed = 0
    for path in files:
        result = parse_request(path.read_bytes())
        if result.result is not None:
            well_formed += 1
            OUT.detail(f"{path.name}: a well-formed {classify_request(result.result)} request")
        else:
            OUT.detail(f"{path.name}: refused — {', '.join(result.rule_ids)}")
    counts = f"{well_formed} well-formed, {len(files) - well_formed} refused, {len(files)} requests"
    OUT.detail(counts)
    OUT.detail(
        "(well-formed in form only: 02 and 03 go on with the session 01 starts, "
        'run one after the other as docs/CLI.md "Example requests" shows)'
    )
    OUT.say(f"Example requests, checked against AGN-034: {counts}")


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

    OUT.detail("\n=== An image reaches the model (the scripted model echoes what it received)")
    image = base64.b64encode(tiny_png()).decode("ascii")
    request = {
        "Instruction": "look at this",
        "ClipboardImages": [{"Id": "img1", "MimeType": "image/png", "DataBase64": image}],
    }
    echo = embedded_pipeline(llm=ScriptedLLM([{"text": "{received}"}]))
    answer = echo.execute_sync(request, CALLER).result
    if answer is None or answer.primary_output_text is None:
        raise SystemExit("the image turn failed")
    OUT.detail(f"model:    {answer.primary_output_text}")
    OUT.say(f"A pasted image reaches the model, which says: {answer.primary_output_text}")
    return answer.primary_output_text


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    """Run the session on a SQLite file, then the file, the example requests and an image."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=DEMO_FOLDER, help="Folder of what the demo keeps (build/demo)"
    )
    parser.add_argument("--db", type=Path, help="SQLite file to keep (default: OUT/aptix.db)")
    parser.add_argument("--record", type=Path, help="Recordings folder (default: OUT/recordings)")
    parser.add_argument(
        "--diagram", type=Path, help="The last turn's path: .mmd (default OUT/last-turn.mmd), .svg…"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="Print the whole story, not only the summary"
    )
    args = parser.parse_args()
    OUT.verbose = args.verbose
    recordings: list[TurnRecording] = []
    provider = configure_tracing()  # OTEL_TRACES_EXPORTER=console prints the spans
    path: Path = args.db or fresh(args.out / "aptix.db")
    args.record = args.record or fresh(args.out / "recordings")
    diagram: Path = args.diagram or args.out / "last-turn.mmd"
    log = args.out / "demo.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as OUT.log:
        OUT.say(f"aptix-pipeline demo: a scripted session on the SQLite file {shown(path)}\n")
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
        OUT.say()
        replay_recordings(recordings, diagram)
        OUT.detail(f"recordings kept in {args.record}: aptix replay {args.record}")
        with tempfile.TemporaryDirectory() as scratch:
            show_a_file(Path(scratch))
        check_examples()
        show_an_image_reaching_the_model()
        OUT.log.flush()
        OUT.say(f"\nThe whole story — traces, responses, the diagram: {shown(log)}")
        OUT.say("(or: make demo DEMO_ARGS=--verbose)")
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


def shown(path: Path) -> Path:
    """``path`` as a newcomer types it: relative to the working folder when inside it."""
    resolved = path.resolve()
    return resolved.relative_to(Path.cwd()) if resolved.is_relative_to(Path.cwd()) else path


def print_ui_command(store: Path, recordings: Path) -> None:
    """The last lines: the command that opens the turn browser page on the demo's store,
    as it runs in a fresh shell: the ``aptix`` beside this interpreter, which a shell
    without the virtual environment activated has not on its ``PATH`` (D396)."""
    aptix = shown(Path(sys.executable).parent / "aptix")
    command = f"{aptix} ui --store sqlite:{shown(store)} --recordings {shown(recordings)}"
    OUT.say("See the turns in the browser (docs/UI.md):")
    OUT.say(f"  {command}")


if __name__ == "__main__":
    sys.exit(main())
