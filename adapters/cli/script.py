"""The ``--llm-script`` of a CLI turn: which of a session's turns a request is (D363).

A ``ScriptedLLM`` plays its replies in order, but ``aptix run`` starts a fresh
process a request, so a flat script starts over at its first reply each time. A
script keyed by turn (``{"turns": [[...], [...]]}``, ``models/scripted.py``) is played
from the right place instead: the session's stored transcript says where
(``script_position``, ``models/turn_script.py``, which a service's ``TurnScript``
uses for every session it holds).

A flat script that meets a session it has already played into fails its turn
with ``AGN-033/5.1/model-tool-call-ids`` (its first reply's tool call ids are the
session's); ``reused_script_hint`` then says why, in the user's terms.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aptix_pipeline.adapters.models import ScriptedLLM, script_position, session_of
from aptix_pipeline.contracts import Caller

if TYPE_CHECKING:
    from aptix_pipeline.contracts import SessionStore
    from aptix_pipeline.engine import TurnReport

__all__ = ["REPEATED_CALL_ID_RULE", "open_script", "reused_script_hint"]

REPEATED_CALL_ID_RULE: Final = "AGN-033/5.1/model-tool-call-ids"
"""The rule a model's reply breaks when it repeats a tool call id of the session."""


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
    session_id, _ = session_of(body)
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
