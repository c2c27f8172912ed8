"""Killing a worker during turns leaves a sound SQLite file (D243).

A child process runs turns on one SQLite file in a loop — an Initial, a FollowOn
that changes the mode, a FollowOn that leaves client tool calls pending, and their
continuation — printing each acknowledged (committed) turn. The test kills it with
``SIGKILL`` at seeded random points, several times over the same file, then checks
``PRAGMA integrity_check`` (through the store, which reopens the file and recovers
its WAL, as tests/adapters/stores/test_sqlite_durability.py does for one turn) and the store's
invariants (``store_invariant_errors``): every acknowledged turn is there, no turn
is half-written, at most one turn of a session awaits tools, the mode history
agrees with the session's mode, and no row is an orphan.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from contextlib import closing
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from store_kit import sqlite_pragma

from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import ChatMessage, ModeHistoryEntry, Turn, TurnStatus

pytestmark = pytest.mark.decision("D243")

KILLS = 8
COMPLETED, AWAITING = TurnStatus.COMPLETED.value, TurnStatus.AWAITING_CLIENT_TOOLS.value

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from aptix_pipeline.adapters.embedded import embedded_pipeline
    from aptix_pipeline.contracts import LLMReply, ToolCall

    class Model:
        # A mode change when asked to review, client tool calls when asked for tools.
        def __init__(self):
            self.calls = 0

        def call(self, name, arguments):
            self.calls += 1
            return ToolCall(tool_call_id=f"call-{self.calls}", name=name,
                            arguments_json=json.dumps(arguments))

        async def complete(self, request):
            last = request.messages[-1]
            if last.role == "user" and "review" in last.content:
                mode = "general" if request.mode == "review" else "review"
                return LLMReply(tool_calls=[self.call("agent_change_mode",
                                                      {"mode": mode, "reason": "asked"})])
            if last.role == "user" and "tools" in last.content:
                return LLMReply(tool_calls=[self.call("read_file", {"path": "a.py"}),
                                            self.call("run_tests", {})])
            return LLMReply(text="done")

    async def main():
        pipeline = embedded_pipeline(llm=Model(), store=sys.argv[1])
        caller = {"org": "acme", "user": "ana"}

        async def turn(request):
            result = await pipeline.execute(request, caller)
            assert result.successful, result.to_json()
            response = result.result
            status = "awaiting_client_tools" if response.tool_calls else "completed"
            # The acknowledgement: execute returned, so the turn is committed.
            print(json.dumps({"session": response.session_id, "turn": response.turn_id,
                              "status": status}), flush=True)
            return response

        while True:
            first = await turn({"Instruction": "hello"})
            ids = {"SessionId": first.session_id}
            review = await turn({**ids, "TurnId": first.turn_id, "Instruction": "review it"})
            pending = await turn({**ids, "TurnId": review.turn_id, "Instruction": "use tools"})
            results = [{"ToolCallId": call.tool_call_id, "ExecutionMs": 1, "ResultJson": "{}"}
                       for call in pending.tool_calls]
            await turn({**ids, "TurnId": pending.turn_id, "ToolResults": results})
            await turn({**ids, "TurnId": pending.turn_id, "Instruction": "review again"})

    asyncio.run(main())
    """
)


def _run_and_kill(path: Path, acks: int, pause: float) -> list[dict[str, str]]:
    """Start the child, kill it after ``acks`` acknowledgements and ``pause`` seconds."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"sqlite:{path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stderr is not None
    lines: list[str] = []
    try:
        while len(lines) < acks:
            line = child.stdout.readline()
            assert line, child.stderr.read() or "the child stopped"
            lines.append(line)
        time.sleep(pause)  # lands the kill somewhere in a later turn
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest, errors = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, errors
    lines.extend(rest.splitlines())  # acknowledged before the kill, not yet read
    return [json.loads(line) for line in lines if line.strip()]


def store_invariant_errors(db: sqlite3.Connection, acknowledged: list[dict[str, str]]) -> list[str]:
    """What is wrong with the SQLite store's tables (adapters/stores/sqlite.py), if anything."""
    errors: list[str] = [f"foreign key: {row}" for row in db.execute("PRAGMA foreign_key_check")]
    sessions = {row[0]: row[1] for row in db.execute("SELECT id, mode FROM sessions")}
    turns: dict[tuple[str, str], Turn] = {}
    for session_id, turn_id, status, data in db.execute(
        "SELECT session_id, id, status, data FROM turns"
    ):
        turn = Turn.model_validate_json(data)
        turns[session_id, turn_id] = turn
        if (turn.session_id, turn.id, turn.status.value) != (session_id, turn_id, status):
            errors.append(f"turn {turn_id}: its row and its data disagree")
        if session_id not in sessions:
            errors.append(f"turn {turn_id}: orphan (no session {session_id})")
    for key, session_id, turn_id in db.execute("SELECT key, session_id, turn_id FROM outcomes"):
        if (session_id, turn_id) not in turns:  # an answer is stored with its turn
            errors.append(f"outcome {key}: orphan (no turn {turn_id} of session {session_id})")
    transcript: dict[str, list[tuple[int, str, ChatMessage]]] = defaultdict(list)
    for session_id, seq, turn_id, message in db.execute(
        "SELECT session_id, seq, turn_id, message FROM transcript ORDER BY session_id, seq"
    ):
        transcript[session_id].append((seq, turn_id, ChatMessage.model_validate_json(message)))
    history: dict[str, list[tuple[int, ModeHistoryEntry]]] = defaultdict(list)
    for session_id, seq, entry in db.execute(
        "SELECT session_id, seq, entry FROM mode_history ORDER BY session_id, seq"
    ):
        history[session_id].append((seq, ModeHistoryEntry.model_validate_json(entry)))

    for ack in acknowledged:
        kept = turns.get((ack["session"], ack["turn"]))
        if kept is None:
            errors.append(f"acknowledged turn {ack['turn']} is missing")
        elif ack["status"] == COMPLETED and kept.status.value != COMPLETED:
            errors.append(f"acknowledged turn {ack['turn']} is {kept.status.value}")

    for session_id, mode in sessions.items():
        own = {turn_id: turn for (sid, turn_id), turn in turns.items() if sid == session_id}
        if not own:
            errors.append(f"session {session_id} has no turn")
        awaiting = [turn_id for turn_id, turn in own.items() if turn.status.value == AWAITING]
        if len(awaiting) > 1:
            errors.append(f"session {session_id}: {len(awaiting)} turns await tools")
        errors += _transcript_errors(session_id, own, transcript.pop(session_id, []))
        errors += _history_errors(session_id, mode, own, history.pop(session_id, []))
    errors += [f"transcript of missing session {sid}" for sid in transcript]
    errors += [f"mode history of missing session {sid}" for sid in history]
    return errors


def _transcript_errors(
    session_id: str, turns: dict[str, Turn], rows: list[tuple[int, str, ChatMessage]]
) -> list[str]:
    """Each turn's messages: one unbroken block, from the user's to the turn's last word."""
    errors: list[str] = []
    if [seq for seq, _, _ in rows] != list(range(1, len(rows) + 1)):
        errors.append(f"session {session_id}: transcript seqs have gaps")
    blocks: dict[str, list[ChatMessage]] = {}
    previous = None
    for _, turn_id, message in rows:
        if turn_id != previous and turn_id in blocks:
            errors.append(f"turn {turn_id}: its messages are not together")
        blocks.setdefault(turn_id, []).append(message)
        previous = turn_id
    for turn_id in set(blocks) - set(turns):
        errors.append(f"turn {turn_id}: messages without a turn")
    for turn_id, turn in turns.items():
        messages = blocks.get(turn_id, [])
        if not messages or messages[0].role != "user":
            errors.append(f"turn {turn_id}: no user message first")
            continue
        last = messages[-1]
        if turn.status is TurnStatus.COMPLETED:
            if last.role != "assistant" or last.tool_calls or turn.pending_tool_calls:
                errors.append(f"turn {turn_id}: completed without a final answer")
        elif turn.status is TurnStatus.AWAITING_CLIENT_TOOLS:
            asked = [call.tool_call_id for call in last.tool_calls or []]
            pending = [call.tool_call_id for call in turn.pending_tool_calls]
            if last.role != "assistant" or not pending or asked != pending:
                errors.append(f"turn {turn_id}: awaits tools its transcript did not ask for")
        else:
            errors.append(f"turn {turn_id}: stored {turn.status.value}")
    return errors


def _history_errors(
    session_id: str,
    mode: Any,
    turns: dict[str, Turn],
    rows: list[tuple[int, ModeHistoryEntry]],
) -> list[str]:
    """The mode history: numbered from 1, each change from the mode before, ending in ``mode``."""
    errors: list[str] = []
    if [seq for seq, _ in rows] != list(range(1, len(rows) + 1)):
        errors.append(f"session {session_id}: mode history seqs have gaps")
    entries = [entry for _, entry in rows]
    for before, after in pairwise(entries):
        if after.previous_mode != before.new_mode:
            errors.append(f"session {session_id}: mode history is not a chain")
    if entries and entries[-1].new_mode != mode:
        errors.append(f"session {session_id}: mode {mode}, history ends in {entries[-1].new_mode}")
    if not entries and any(turn.mode != mode for turn in turns.values()):
        errors.append(f"session {session_id}: a turn's mode changed without history")
    for entry in entries:
        if entry.turn_id not in turns:
            errors.append(f"session {session_id}: mode changed by missing turn {entry.turn_id}")
    return errors


@pytest.mark.decision("D186")
def test_killed_workers_leave_every_acknowledged_turn_and_no_half_written_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "aptix.db"
    rng = random.Random(13)
    acknowledged: list[dict[str, str]] = []

    for _ in range(KILLS):
        acknowledged += _run_and_kill(path, rng.randint(1, 12), rng.uniform(0, 0.02))

    with SQLiteStore(path) as store:  # reopening recovers the WAL the kills left
        assert sqlite_pragma(store, "integrity_check") == "ok"
    with closing(sqlite3.connect(path)) as db:
        assert store_invariant_errors(db, acknowledged) == []
        (stored,) = db.execute("SELECT COUNT(*) FROM turns").fetchone()
    assert len({(ack["session"], ack["turn"]) for ack in acknowledged}) <= stored


def test_the_invariants_see_a_half_written_turn_and_a_lost_one(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"
    acknowledged = _run_and_kill(path, 5, 0)
    with closing(sqlite3.connect(path)) as db:
        assert store_invariant_errors(db, acknowledged) == []
        session_id, turn_id = db.execute(
            "SELECT session_id, turn_id FROM transcript ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        db.execute("DELETE FROM transcript WHERE turn_id = ? AND seq > 1", (turn_id,))
        db.execute("UPDATE sessions SET mode = 'nowhere'")
        db.execute("DELETE FROM turns WHERE id = ?", (acknowledged[0]["turn"],))

        errors = store_invariant_errors(db, acknowledged)

    assert f"acknowledged turn {acknowledged[0]['turn']} is missing" in errors
    assert any(f"turn {turn_id}: " in error for error in errors)
    assert any(f"session {session_id}: mode nowhere" in error for error in errors)
