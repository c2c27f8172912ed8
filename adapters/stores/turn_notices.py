"""Turn notices: a store that can tell its readers the moment a turn commits.

The PostgreSQL store sends a ``NOTIFY`` on ``TURNS_CHANNEL`` from inside each turn's
commit transaction (PostgreSQL delivers it when, and only if, the transaction
commits), with ``notice_payload``: the org, user, session, turn and status, no
content. ``async with store.turn_notices() as notices`` has ``LISTEN``ed on a
connection of its own once it is entered, and yields each as a ``TurnNotice``. The
live view (``ui/live_hub.py``, docs/UI.md) reads them to refresh at once instead of
at its next poll; a store that is no ``TurnNotifier`` (memory, SQLite) is polled
(D691). No schema change is involved.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

__all__ = ["TURNS_CHANNEL", "TurnNotice", "TurnNotifier", "notice_payload", "parse_notice"]

TURNS_CHANNEL: Final = "aptix_turns"
"""The PostgreSQL ``NOTIFY`` channel a committed turn is announced on."""
_MAX_PAYLOAD: Final = 7_999
"""PostgreSQL refuses a payload of 8000 bytes or more: a longer one names no ids."""


@dataclass(frozen=True, slots=True)
class TurnNotice:
    """A turn was committed: whose, which, and its status (empty strings: not said)."""

    org: str
    user: str
    session_id: str
    turn_id: str
    status: str


@runtime_checkable
class TurnNotifier(Protocol):
    """A store that announces committed turns (``PostgresStore``)."""

    def turn_notices(self) -> AbstractAsyncContextManager[AsyncIterator[TurnNotice]]:
        """Listening while the block runs: each turn committed, by any process, from
        the moment the block is entered."""
        ...


def notice_payload(org: str, user: str, session_id: str, turn_id: str, status: str) -> str:
    """The ``NOTIFY`` payload of a committed turn: compact JSON of its ids and status."""
    payload = json.dumps(
        {"org": org, "user": user, "session": session_id, "turn": turn_id, "status": status},
        separators=(",", ":"),
    )
    return payload if len(payload.encode("utf-8")) <= _MAX_PAYLOAD else "{}"


def parse_notice(payload: str) -> TurnNotice:
    """A ``TurnNotice`` from a payload (anything else gives one that names nothing)."""
    try:
        data = json.loads(payload)
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}

    def text(name: str) -> str:
        value = data.get(name)
        return value if isinstance(value, str) else ""

    return TurnNotice(text("org"), text("user"), text("session"), text("turn"), text("status"))
