"""Record the example turns in ``examples/recordings/`` (``make recordings``).

The demo session (``examples/demo.py``) recorded turn by turn, with one faulted
turn in the middle — a client that sends a tool result back for a tool call the
turn never made — on the memory store, the built-in catalog, the scripted model
of ``examples/session/script.json``, a stepping clock and sequential ids, so the
files come out the same byte for byte on every run:

1. ``01-initial.json`` — the request file's bytes, as ``aptix run`` sends them:
   the model switches to ``review`` mode and asks the client to run ``read_file``;
2. ``02-faulted-unknown-tool-call-id.json`` — a continuation whose result names
   ``call_unknown``: AGN-036 §5's manifest rules fault it after the continuation
   resolver, and nothing is stored;
3. ``03-continuation.json`` — the right result; the model answers;
4. ``04-follow-on.json`` — a new turn in review mode, with a server tool round;
5. ``05-streamed-initial.json`` — a new session's turn delivered as a stream
   (``Pipeline.stream``, AGN-034 §4.7): the model's replies come in chunks, a
   server tool round runs between them, and each model call is an ``LLM.stream``
   port call (docs/RECORDING.md "Streamed model calls").

``tests/project/test_example_recordings.py`` replays them and checks they are current.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aptix_pipeline import RecordingOptions, TurnRecording
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.contracts import Caller
from aptix_pipeline.engine import Telemetry

EXAMPLES = Path(__file__).resolve().parent
CALLER = Caller(org="acme", user="ana")
FILE_CONTENTS = "def load_config(path):\n    return json.load(open(path))\n"
STREAMED_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "call_math", "name": "Math", "arguments": {}}]},
    {
        "text": "Adding them on the server. ",
        "tool_calls": [{"id": "call_add", "name": "Add", "arguments": {"a": 2, "b": 3}}],
    },
    {"text": "2 + 3 = 5, as the server's Add tool computed."},
]
"""The streamed turn's model: expand Math, run Add on the server, then answer."""


async def record_session() -> dict[str, TurnRecording]:
    """The example turns, recorded, by file name."""
    recorded: list[TurnRecording] = []
    pipeline = embedded_pipeline(
        llm=ScriptedLLM.from_file(EXAMPLES / "session" / "script.json"),
        store="memory",
        clock=SteppingClock(),
        ids=SequentialIds(),
        telemetry=Telemetry.off(),
        recording=RecordingOptions(sink=recorded.append, timer=None),
    )
    # The file's bytes, as `aptix run` and `aptix serve` hand a request to the engine: the
    # recording keeps them as readable JSON (`bytes_json`, docs/RECORDING.md).
    first = await pipeline.execute((EXAMPLES / "session" / "01-initial.json").read_bytes(), CALLER)
    response = first.result
    if response is None or not response.tool_calls:
        raise SystemExit(f"the initial turn did not ask for a client tool: {first.rule_ids}")
    contents = json.dumps({"path": "src/app.py", "contents": FILE_CONTENTS})

    def continuation(tool_call_id: str) -> dict[str, Any]:
        assert response is not None
        result = {"ToolCallId": tool_call_id, "ExecutionMs": 4, "ResultJson": contents}
        return {
            "SessionId": response.session_id,
            "TurnId": response.turn_id,
            "ToolResults": [result],
        }

    faulted = await pipeline.execute(continuation("call_unknown"), CALLER)
    if faulted.successful:
        raise SystemExit("the continuation with an unknown tool call id did not fault")
    second = await pipeline.execute(continuation(response.tool_calls[0].tool_call_id), CALLER)
    if second.result is None:
        raise SystemExit(f"the continuation failed: {second.rule_ids}")
    follow_on = {
        "SessionId": second.result.session_id,
        "TurnId": second.result.turn_id,
        "Instruction": "Check it against the team's review checklist.",
    }
    third = await pipeline.execute(follow_on, CALLER)
    if not third.successful:
        raise SystemExit(f"the follow-on turn failed: {third.rule_ids}")
    await record_streamed_turn(recorded.append)
    names = [
        "01-initial.json",
        "02-faulted-unknown-tool-call-id.json",
        "03-continuation.json",
        "04-follow-on.json",
        "05-streamed-initial.json",
    ]
    return dict(zip(names, recorded, strict=True))


async def record_streamed_turn(sink: Callable[[TurnRecording], None]) -> None:
    """A new session's turn through ``Pipeline.stream``, taking every item; recorded."""
    pipeline = embedded_pipeline(
        llm=ScriptedLLM(STREAMED_SCRIPT, chunk_size=8),
        store="memory",
        clock=SteppingClock(),
        ids=SequentialIds(),
        telemetry=Telemetry.off(),
        recording=RecordingOptions(sink=sink, timer=None),
    )
    async with pipeline.stream({"Instruction": "What is 2 + 3?"}, CALLER) as stream:
        async for _item in stream:  # progress, the text as it comes, then the result
            pass
    if stream.report is None or not stream.report.successful:
        raise SystemExit("the streamed turn failed")


def main() -> int:
    """Write the recordings into the folder given (default: ``examples/recordings``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", default=EXAMPLES / "recordings")
    folder: Path = parser.parse_args().folder
    folder.mkdir(parents=True, exist_ok=True)
    for name, recording in asyncio.run(record_session()).items():
        (folder / name).write_text(recording.to_json(), encoding="utf-8")
        print(f"{folder / name}: {len(recording.calls)} port calls, {recording.trace.outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
