"""Reads for browsing a store: ``SessionBrowser``, apart from the turn's ``SessionStore`` port.

A turn needs ``SessionStore`` (contracts/ports.py) and nothing else; an operator's
tools (``aptix sessions``, the turn browser page of ``aptix ui``, docs/UI.md) also
need to list what a store holds. Those reads are this protocol, so a host's own
store owes the engine nothing more than ``StoreBackend`` (adapters/stores/unit_of_work.py)
and implements ``SessionBrowser`` only if it wants the tools. The memory, SQLite
and PostgreSQL stores implement both; ``SessionBrowserContract``
(``session_browser_cases.py``) holds the cases each passes.

Every read is scoped to one org and user, as the turn's reads are (DESIGN.md
"Isolation"): another caller's sessions are not listed and read as not found.
Lists are pages: ``limit`` items at most (1 to ``MAX_PAGE``) after ``offset``.

- ``list_owners``: the (org, user) pairs holding sessions, with their session
  counts, ordered by org then user — what an operator starts from.
- ``list_sessions``: a caller's sessions, most recent activity first (ties by id).
  A session's last activity is its latest turn's ``created_at``, else its own
  ``created_at`` (turns are the only thing a session gains after it is created).
- ``list_turns``: a session's turns in the order they were created (``created_at``,
  ties by id); ``None`` when the caller has no such session.
- ``read_transcript_page``: a session's messages in order, each with its position
  (from 1) and the turn that appended it; ``None`` when there is no such session.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol, runtime_checkable

from aptix_pipeline.contracts import ChatMessage, Session, Turn

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "OwnerSummary",
    "SessionBrowser",
    "SessionSummary",
    "TranscriptEntry",
    "check_page",
    "message_text",
    "turn_order",
]

DEFAULT_PAGE: Final = 50
"""Items a page holds when the caller does not say."""
MAX_PAGE: Final = 1000
"""The most items one read returns."""
_NO_TIME: Final = datetime.min.replace(tzinfo=UTC)


def check_page(limit: int, offset: int) -> None:
    """``ValueError`` naming the argument unless 1 <= ``limit`` <= ``MAX_PAGE``, ``offset`` >= 0."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")


def message_text(message: ChatMessage) -> str:
    """A message's content as text: the text itself, or the JSON of structured content."""
    content: Any = message.content
    if isinstance(content, str):
        return content
    return json.dumps(
        [part.model_dump(mode="json") if hasattr(part, "model_dump") else part for part in content],
        ensure_ascii=False,
    )


def _aware(moment: datetime | None) -> datetime:
    """``moment`` comparable with any other: a naive time counts as UTC, none as the earliest."""
    if moment is None:
        return _NO_TIME
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def turn_order(turn: Turn) -> tuple[datetime, str]:
    """The key turns are listed by: creation time (none first), then id."""
    return _aware(turn.created_at), turn.id


@dataclass(frozen=True, slots=True)
class OwnerSummary:
    """An org and user holding sessions in the store, and how many."""

    org: str
    user: str
    sessions: int


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One session as a list shows it: its id, owner, mode, turn count and times."""

    id: str
    org: str
    user: str
    mode: str | None
    turns: int
    created_at: datetime | None
    last_activity: datetime | None

    @classmethod
    def of(
        cls,
        session_id: str,
        org: str,
        user: str,
        mode: str | None,
        created_at: datetime | None,
        turn_times: Sequence[datetime | None],
    ) -> SessionSummary:
        """The summary of a session with turns created at ``turn_times``: its last
        activity is its latest turn's creation time, else its own."""
        times = [time for time in turn_times if time is not None]
        return cls(
            id=session_id,
            org=org,
            user=user,
            mode=mode,
            turns=len(turn_times),
            created_at=created_at,
            last_activity=max(times, key=_aware) if times else created_at,
        )

    @classmethod
    def of_session(cls, session: Session, turn_times: Sequence[datetime | None]) -> SessionSummary:
        """``of`` a stored ``Session`` whose turns were created at ``turn_times``."""
        return cls.of(
            session.id, session.org, session.user, session.mode, session.created_at, turn_times
        )

    def sort_key(self) -> tuple[float, str]:
        """The key sessions are listed by: most recent activity first, then by id."""
        return -_aware(self.last_activity).timestamp(), self.id


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    """One message of a session's transcript: its position (from 1) and the turn that added it."""

    seq: int
    turn_id: str
    message: ChatMessage


@runtime_checkable
class SessionBrowser(Protocol):
    """The browsing reads of a store (module docstring); each scoped to one org and user."""

    async def list_owners(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[OwnerSummary]:
        """The org and user pairs holding sessions, by org then user."""

    async def list_sessions(
        self, org: str, user: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[SessionSummary]:
        """The caller's sessions, most recent activity first."""

    async def list_turns(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[Turn] | None:
        """The session's turns in creation order; ``None`` when the caller has no such session."""

    async def read_transcript_page(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[TranscriptEntry] | None:
        """The session's messages in order; ``None`` when the caller has no such session."""
