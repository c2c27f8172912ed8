"""A SQLite store to search (``aptix sessions list``, adapters/stores/session_search.py).

``search_store(folder)`` writes ``folder/search.db`` through the store's own
transactions: five sessions of three owners, each created a minute after the one
before, with turns a minute after that (10 tokens each, the first message saying
what the session is):

- ``local``/``local``: ``s-local-1`` (turn ``t1``, completed; a priced call of
  0.25 USD), ``s-local-2`` (turn ``t2``, awaiting client tools, mode ``research``),
  ``s-local-3`` (turn ``t3``, completed, then a failed turn: its last kept trace
  faulted with ``port_failed``);
- ``acme``/``ana``: ``s-acme`` (turn ``t4``, completed);
- ``acme``/``bob``: ``s-bob`` (no turns).

``SEARCH_T0`` is the first session's creation time.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    Charge,
    ChatMessage,
    ChatRole,
    KeptTrace,
    Session,
    Turn,
    TurnStatus,
    Usage,
    UsageCall,
)

__all__ = ["SEARCH_T0", "search_store"]

SEARCH_T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_SESSIONS = (
    # id, org, user, mode, turn (id, status) or None
    ("s-local-1", "local", "local", "general", ("t1", TurnStatus.COMPLETED)),
    ("s-local-2", "local", "local", "research", ("t2", TurnStatus.AWAITING_CLIENT_TOOLS)),
    ("s-local-3", "local", "local", "general", ("t3", TurnStatus.COMPLETED)),
    ("s-acme", "acme", "ana", "general", ("t4", TurnStatus.COMPLETED)),
    ("s-bob", "acme", "bob", "general", None),
)


async def _fill(path: Path) -> None:
    store = SQLiteStore(path)
    try:
        for n, (session_id, org, user, mode, turn) in enumerate(_SESSIONS):
            created = SEARCH_T0 + timedelta(minutes=2 * n)
            tx = store.begin(org, user)
            await tx.create_session(
                Session(id=session_id, org=org, user=user, mode=mode, created_at=created)
            )
            if turn is not None:
                turn_id, status = turn
                await tx.open_turn(
                    Turn(
                        id=turn_id,
                        session_id=session_id,
                        mode=mode,
                        status=status,
                        created_at=created + timedelta(minutes=1),
                        usage=Usage(input_tokens=10, total_tokens=10),
                    )
                )
                await tx.append_transcript(
                    session_id,
                    turn_id,
                    [ChatMessage(role=ChatRole.USER, content=f"about {session_id}")],
                )
            await tx.commit()
        await store.settle_usage(
            [
                UsageCall(
                    id="c1",
                    org="local",
                    user="local",
                    session_id="s-local-1",
                    turn_id="t1",
                    mode="general",
                    at=SEARCH_T0,
                    settled=True,
                    charge=Charge(tokens=10, model_calls=1),
                    priced=True,
                    cost=Decimal("0.25"),
                    currency="USD",
                )
            ]
        )
        await store.keep_trace(
            KeptTrace(
                id="k1",
                org="local",
                user="local",
                session_id="s-local-3",
                turn_id=None,
                at=SEARCH_T0 + timedelta(minutes=30),
                outcome="faulted",
                trace="{}",
                error_code="port_failed",
                error_message="the LLM failed: the model is gone",
            )
        )
    finally:
        await store.aclose()


def search_store(folder: Path) -> Path:
    """Write ``folder/search.db`` (module docstring); its path."""
    path = folder / "search.db"
    asyncio.run(_fill(path))
    return path
