"""What the turn browser's tests browse: a real SQLite store and a folder of recordings.

``browsed_store`` runs the demo session (examples/session/) on a SQLite file with
every turn recorded into a folder: turn 1 asks for ``read_file``, a continuation
naming a tool call the turn never made faults (AGN-036 §5, ``AGN-036/5/id-match``),
the right continuation completes turn 1, and a follow-on is turn 2 in review mode.
A second caller (globex/zoe) holds a session of its own, so scoping shows. Clock
and ids are the stepping and sequential ones, so each run stores the same thing.
``write_ui_config`` writes the config of ``aptix serve`` with the page mounted on it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from http_kit import KEYS
from repo import ROOT

from aptix_pipeline import RecordingOptions
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.contracts import Caller
from aptix_pipeline.engine import Telemetry

__all__ = ["ANA", "EXAMPLES", "ZOE", "Browsed", "browsed_store", "write_ui_config"]

EXAMPLES = ROOT / "examples"
ANA = Caller(org="acme", user="ana")
ZOE = Caller(org="globex", user="zoe")
FAULT_RULE = "AGN-036/5/id-match"


@dataclass(frozen=True)
class Browsed:
    """The store file, the recordings folder, and the ids the session got."""

    db: Path
    recordings: Path
    session_id: str
    first_turn: str
    second_turn: str
    other_session: str

    @property
    def store_url(self) -> str:
        return f"sqlite:{self.db}"


async def _session(db: Path, recordings: Path) -> Browsed:
    with SQLiteStore(db) as store:
        pipeline = embedded_pipeline(
            llm=ScriptedLLM.from_file(EXAMPLES / "session" / "script.json"),
            store=store,
            clock=SteppingClock(),
            ids=SequentialIds(),
            telemetry=Telemetry.off(),
            recording=RecordingOptions(directory=recordings),
        )
        first = await pipeline.execute(
            json.loads((EXAMPLES / "session" / "01-initial.json").read_text()), ANA
        )
        response = first.result
        assert response is not None
        assert response.tool_calls

        def continuation(tool_call_id: str) -> dict[str, Any]:
            assert response is not None
            contents = json.dumps({"path": "src/app.py", "contents": "print('hi')\n"})
            result = {"ToolCallId": tool_call_id, "ExecutionMs": 4, "ResultJson": contents}
            return {
                "SessionId": response.session_id,
                "TurnId": response.turn_id,
                "ToolResults": [result],
            }

        faulted = await pipeline.execute(continuation("call_unknown"), ANA)
        assert not faulted.successful
        second = await pipeline.execute(continuation(response.tool_calls[0].tool_call_id), ANA)
        assert second.result is not None, second.rule_ids
        follow_on = {
            "SessionId": response.session_id,
            "TurnId": second.result.turn_id,
            "Instruction": "Check it against the team's review checklist.",
        }
        third = await pipeline.execute(follow_on, ANA)
        assert third.result is not None, third.rule_ids
        other = embedded_pipeline(
            llm=ScriptedLLM([{"text": "<b>zoe's</b> answer"}]),
            store=store,
            clock=SteppingClock(),
            ids=SequentialIds(prefix="zoe-"),
            telemetry=Telemetry.off(),
        )
        theirs = await other.execute({"Instruction": "<script>alert(1)</script>"}, ZOE)
        assert theirs.result is not None
        return Browsed(
            db=db,
            recordings=recordings,
            session_id=response.session_id,
            first_turn=response.turn_id,
            second_turn=third.result.turn_id,
            other_session=theirs.result.session_id,
        )


def browsed_store(folder: Path) -> Browsed:
    """The demo session and globex/zoe's session in ``folder/aptix.db``, recorded in
    ``folder/recordings`` (module docstring)."""
    recordings = folder / "recordings"
    recordings.mkdir(parents=True, exist_ok=True)
    return asyncio.run(_session(folder / "aptix.db", recordings))


def write_ui_config(folder: Path, browsed: Browsed, ui: str = "[ui]\nenabled = true\n") -> Path:
    """An ``aptix.toml`` in ``folder`` for ``aptix serve`` with the page mounted: the
    browsed store and its recordings, a one-reply scripted model, the API keys ``KEYS``,
    and the ``[ui]`` table ``ui`` (enabled by default); its path."""
    (folder / "script.json").write_text('[{"text": "2 + 3 = 5"}]', encoding="utf-8")
    path = folder / "aptix.toml"
    path.write_text(
        f'[store]\nurl = "sqlite:{browsed.db}"\n[model]\nkind = "scripted"\n'
        f'script = "script.json"\n{KEYS}\n{ui}recordings = "{browsed.recordings}"\n',
        encoding="utf-8",
    )
    return path
