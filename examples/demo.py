"""The demo: a scripted session on the embedded defaults — two turns, three requests.

Run by ``make demo``. It runs on a SQLite file (in a temporary directory unless
``--db PATH`` is given), the built-in catalog and a scripted model
(``examples/session/script.json``):

1. **Initial** — the model switches the session to ``review`` mode and asks the
   client to run ``read_file``: a ``client_tool_continuation``.
2. **Continuation** — the client's result goes back to the model, which answers.
3. **FollowOn** — a new turn in the new mode, whose server tool
   (``review_checklist``) the model now has.

Each turn prints its progress live, from a listener of the engine's event stream
(docs/EVENTS.md), then its state trace (transitions, guards and exit hooks with
their rule counts, model calls, tool calls, mode changes) and the response. Every turn
is recorded (``--record DIR`` keeps the files); each recording is then replayed
against the code with no store and no model, and the path of the last turn is
drawn on the pipeline diagram (Mermaid; ``--diagram FILE.svg`` for a picture).
Then every example request in ``examples/requests/`` is checked against AGN-034: the
well-formed ones in form only (02 and 03 continue the session 01 starts, as docs/CLI.md
"Example requests" runs them), the others refused by the rules they break.

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
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.scripted_llm import ScriptedLLM
from aptix_pipeline.adapters.sqlite_store import SQLiteStore
from aptix_pipeline.adapters.telemetry_setup import configure_tracing
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


def main() -> int:
    """Run the session on a SQLite file, then check the example requests."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite file to keep (default: a temporary one)")
    parser.add_argument("--record", type=Path, help="Keep the turn recordings in this folder")
    parser.add_argument("--diagram", type=Path, help="Draw the last turn's path (.svg, .png, .dot)")
    args = parser.parse_args()
    recordings: list[TurnRecording] = []
    provider = configure_tracing()  # OTEL_TRACES_EXPORTER=console prints the spans
    with tempfile.TemporaryDirectory() as scratch:
        path = args.db or Path(scratch) / "aptix.db"
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
    check_examples()
    return 0


if __name__ == "__main__":
    sys.exit(main())
