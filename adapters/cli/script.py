"""The ``--llm-script`` of a CLI turn: which of a session's turns a request is (D363).

A ``ScriptedLLM`` plays its replies in order, but ``aptix run`` starts a fresh
process a request, so a flat script starts over at its first reply each time. A
script keyed by turn (``{"turns": [[...], [...]]}``, ``models/scripted.py``) is played
from the right place instead: the session's stored transcript says where.

- An Initial request is turn 1, nothing played.
- A FollowOn is the turn after the last stored one: one user message a turn
  (``prompt_content_provider_initializer``), so the turn number is their count + 1.
- A ClientToolCallContinuation goes on with the last stored turn, after the model
  replies it already played: the assistant messages stored since its user message
  (one a model call, ``llm_client``).

A flat script that meets a session it has already played into fails its turn
with ``AGN-033/5.1/model-tool-call-ids`` (its first reply's tool call ids are the
session's); ``reused_script_hint`` then says why, in the user's terms.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aptix_pipeline.adapters.models import ScriptedLLM
from aptix_pipeline.contracts import Caller, ChatRole

if TYPE_CHECKING:
    from aptix_pipeline.contracts import SessionStore
    from aptix_pipeline.engine import TurnReport

__all__ = ["REPEATED_CALL_ID_RULE", "open_script", "reused_script_hint", "script_position"]

REPEATED_CALL_ID_RULE: Final = "AGN-033/5.1/model-tool-call-ids"
"""The rule a model's reply breaks when it repeats a tool call id of the session."""


def _session_of(body: bytes) -> tuple[str | None, bool]:
    """The request's ``SessionId`` (``None`` for an Initial request or a body that is not
    a JSON object) and whether it carries ``ToolResults`` (a continuation)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None, False
    if not isinstance(data, dict):
        return None, False
    session = data.get("SessionId")
    return (session if isinstance(session, str) and session else None), bool(
        data.get("ToolResults")
    )


async def script_position(store: SessionStore, caller: Caller, body: bytes) -> tuple[int, int]:
    """The request's turn of its session (from 0) and the model replies that turn has
    already played, read from the caller's stored transcript (the module docstring)."""
    session_id, continuation = _session_of(body)
    if session_id is None:
        return 0, 0
    transaction = store.begin(caller.org, caller.user)
    try:
        transcript = await transaction.load_transcript(session_id)
    finally:
        await transaction.rollback()
    users = [index for index, message in enumerate(transcript) if message.role is ChatRole.USER]
    if not continuation:
        return len(users), 0
    last = users[-1] if users else -1
    played = sum(message.role is ChatRole.ASSISTANT for message in transcript[last + 1 :])
    return max(len(users) - 1, 0), played


def open_script(path: Path, store: SessionStore, caller: Caller, body: bytes) -> ScriptedLLM:
    """The script at ``path`` for this request: a script keyed by turn at the request's
    turn and reply, a flat one from its first reply. Raises ``OSError`` or ``ScriptError``."""
    text = path.read_bytes()
    if not ScriptedLLM.has_turns(text):
        return ScriptedLLM.from_json(text)
    turn, played = asyncio.run(script_position(store, caller, body))
    return ScriptedLLM.from_json(text, turn=turn, played=played)


def reused_script_hint(report: TurnReport, body: bytes, script: Path) -> str | None:
    """What to tell a user whose flat script replayed its first reply into a session it
    had played before; ``None`` when the turn did not fail so."""
    session_id, _ = _session_of(body)
    if session_id is None or REPEATED_CALL_ID_RULE not in report.result.rule_ids:
        return None
    try:
        keyed = ScriptedLLM.has_turns(script.read_bytes())
    except OSError:
        return None
    if keyed:
        return None
    return (
        f"the script replayed its first reply: each run plays --llm-script {script} from "
        "its start, and that reply's tool call ids are already in the session; give each "
        'turn its own replies, or key them by turn: {"turns": [[...turn 1...], '
        '[...turn 2...]]} (docs/CLI.md "Scripts for a session")'
    )
