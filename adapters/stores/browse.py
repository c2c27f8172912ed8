"""Opening a store to browse, and reading a session whole (``aptix sessions``, ``aptix ui``).

Browsing never creates anything (docs/UI.md): a ``sqlite:PATH`` whose file does
not exist is refused instead of created empty, and ``memory`` is refused (a new
memory store holds nothing). Any other spec opens as ``open_store`` opens it
(``embedded.py``: ``sqlite:PATH``, a ``.db`` path, ``postgresql://``), and an
unknown scheme is refused there. Every refusal is a ``BrowseStoreError`` whose
message names the store (a PostgreSQL URL without its password).

``read_session_detail`` reads a session, all its turns and its whole transcript
through ``SessionBrowser`` (``stores/session_browser.py``), page by page; the JSON forms
(``summary_json``, ``turn_json``, ``entry_json``, ``detail_json``) are what
``aptix sessions --json`` prints.
"""

from __future__ import annotations

import inspect
import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from aptix_pipeline.contracts import (
    AptixPipelineError,
    KeptTrace,
    Session,
    SessionForks,
    TraceLog,
    Turn,
)

from .session_browser import (
    MAX_PAGE,
    SessionBrowser,
    SessionSummary,
    TranscriptEntry,
    message_text,
)

__all__ = [
    "BrowsableStore",
    "BrowseStoreError",
    "SessionDetail",
    "close_browse_store",
    "detail_json",
    "entry_json",
    "message_text",
    "open_browse_store",
    "read_session_detail",
    "summary_json",
    "trace_json",
    "turn_json",
]


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
"""A store spec's scheme (two letters at least: ``C:\\x.db`` is a path)."""
_SCHEMES = ("sqlite", "postgresql", "postgres")


class BrowseStoreError(AptixPipelineError, RuntimeError):
    """The store cannot be browsed: missing, unknown, unreachable or not a ``SessionBrowser``."""


class BrowsableStore(SessionBrowser, Protocol):
    """A store that browses and reads a session (every store of this package)."""

    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        """The session, if it belongs to this org and user."""


def open_browse_store(spec: str) -> BrowsableStore:
    """The store ``spec`` names, opened for browsing; ``BrowseStoreError`` when it cannot be."""
    from .urls import open_store, sqlite_target

    text = spec.strip()
    scheme = _SCHEME.match(text)
    if scheme is not None and scheme[1].lower() not in _SCHEMES:
        raise BrowseStoreError(
            f"unknown store scheme {scheme[1]!r}: use sqlite:PATH or postgresql://USER@HOST/DB"
        )
    if text == "memory":
        raise BrowseStoreError("a memory store holds nothing to browse: give sqlite:PATH or a URL")
    path: Path | None = None
    if text.startswith("sqlite:"):
        path = Path(sqlite_target(text)[0])
    elif text.endswith((".db", ".sqlite", ".sqlite3")) and "://" not in text:
        path = Path(text)
    if path is not None and not path.is_file():
        raise BrowseStoreError(f"no store at {path}: the SQLite file does not exist")
    try:
        store = open_store(text)
    except (ValueError, RuntimeError, OSError, sqlite3.Error) as error:
        raise BrowseStoreError(f"{error}") from None
    if not isinstance(store, SessionBrowser):  # pragma: no cover - every store here is one
        raise BrowseStoreError(f"the store {type(store).__name__} cannot list sessions")
    return store


async def close_browse_store(store: object) -> None:
    """Close a store ``open_browse_store`` opened (``aclose`` preferred, else ``close``)."""
    for name in ("aclose", "close"):
        close = getattr(store, name, None)
        if close is not None:
            outcome = close()
            if inspect.isawaitable(outcome):
                await outcome
            return


@dataclass(frozen=True, slots=True)
class SessionDetail:
    """A session as ``aptix sessions show`` prints it: the session, its turns, its transcript."""

    session: Session
    summary: SessionSummary
    turns: tuple[Turn, ...]
    transcript: tuple[TranscriptEntry, ...]
    forks: tuple[Session, ...] = ()
    """The sessions forked from this one, oldest first (a store that forks, docs/FORKS.md)."""
    traces: tuple[KeptTrace, ...] = ()
    """The turns' kept traces, failed turns included, newest first (a ``TraceLog``
    store; the newest ``MAX_PAGE``)."""


async def read_session_detail(
    store: BrowsableStore, org: str, user: str, session_id: str
) -> SessionDetail | None:
    """The caller's session with every turn and message; ``None`` when there is no such session."""
    session = await store.read_session(org, user, session_id)
    if session is None:
        return None
    turns: list[Turn] = []
    while page := await store.list_turns(org, user, session_id, limit=MAX_PAGE, offset=len(turns)):
        turns.extend(page)
        if len(page) < MAX_PAGE:
            break
    transcript: list[TranscriptEntry] = []
    while page_of_messages := await store.read_transcript_page(
        org, user, session_id, limit=MAX_PAGE, offset=len(transcript)
    ):
        transcript.extend(page_of_messages)
        if len(page_of_messages) < MAX_PAGE:
            break
    summary = SessionSummary.of_session(session, [turn.created_at for turn in turns])
    forks = await store.forks_of(org, user, session_id) if isinstance(store, SessionForks) else None
    traces = (
        await store.list_traces(org, user, session_id, limit=MAX_PAGE)
        if isinstance(store, TraceLog)
        else []
    )
    return SessionDetail(
        session, summary, tuple(turns), tuple(transcript), tuple(forks or ()), tuple(traces)
    )


# --- the JSON forms ---------------------------------------------------------------------------


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def summary_json(summary: SessionSummary) -> dict[str, Any]:
    """A session's summary as JSON: id, org, user, mode, turns, created_at, last_activity."""
    return {
        "id": summary.id,
        "org": summary.org,
        "user": summary.user,
        "mode": summary.mode,
        "turns": summary.turns,
        "created_at": _time(summary.created_at),
        "last_activity": _time(summary.last_activity),
    }


def turn_json(turn: Turn) -> dict[str, Any]:
    """A turn as JSON: id, mode, status, usage, created_at, pending calls, server tool results."""
    return {
        "id": turn.id,
        "mode": turn.mode,
        "status": turn.status.value,
        "usage": None if turn.usage is None else turn.usage.model_dump(mode="json"),
        "created_at": _time(turn.created_at),
        "pending_tool_calls": [call.to_wire() for call in turn.pending_tool_calls],
        "server_tool_results": [result.to_wire() for result in turn.server_tool_results],
    }


def entry_json(entry: TranscriptEntry) -> dict[str, Any]:
    """A transcript message as JSON: its position, turn, role, content and tool fields."""
    message = entry.message
    return {
        "seq": entry.seq,
        "turn_id": entry.turn_id,
        "role": message.role.value,
        "content": message_text(message),
        "tool_calls": [call.to_wire() for call in message.tool_calls or ()],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }


def trace_json(trace: KeptTrace) -> dict[str, Any]:
    """A kept trace as JSON: id, time, session, turn, outcome, error, faulted step, the
    states it went through, and the state trace and step changes themselves."""
    body = json.loads(trace.trace)
    return {
        "id": trace.id,
        "at": _time(trace.at),
        "session_id": trace.session_id,
        "turn_id": trace.turn_id,
        "outcome": trace.outcome,
        "error": None
        if trace.error_code is None
        else {"code": trace.error_code, "message": trace.error_message},
        "faulted_step": trace.faulted_step,
        "states": body.get("states", []) if isinstance(body, dict) else [],
        "trace": body,
        "steps": json.loads(trace.steps),
    }


def detail_json(detail: SessionDetail) -> dict[str, Any]:
    """``aptix sessions show --json``: the session, its mode history, turns and transcript;
    a fork's ``forked_from`` (session id, turn id, messages shared) and a forked
    session's ``forks`` (each one's id and turn), each only when there is one."""
    session = detail.session
    parent: dict[str, Any] = (
        {}
        if session.forked_from is None
        else {
            "forked_from": {
                "session_id": session.forked_from.session_id,
                "turn_id": session.forked_from.turn_id,
                "messages": session.forked_from.messages,
            }
        }
    )
    forks: dict[str, Any] = {
        "forks": [
            {"id": fork.id, "turn_id": fork.forked_from.turn_id}
            for fork in detail.forks
            if fork.forked_from is not None
        ]
    }
    return {
        "session": summary_json(detail.summary)
        | {
            "mode_history": [
                entry.model_dump(mode="json") for entry in detail.session.mode_history
            ],
            "agent_context_id": detail.session.agent_context_id,
            "conversation_context_id": detail.session.conversation_context_id,
        }
        | parent
        | (forks if detail.forks else {}),
        "turns": [turn_json(turn) for turn in detail.turns],
        "transcript": [entry_json(entry) for entry in detail.transcript],
        "traces": [trace_json(trace) for trace in detail.traces],
    }
