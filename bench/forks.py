"""What a fork costs (docs/FORKS.md): forking after turn 2 of a session of 4 turns and of
400, and reading a fork's transcript beside the same transcript never forked.

Sessions are written through the store's own transactions (two messages a turn), on
the memory store and on a SQLite file. A fork shares its parent's transcript, so
forking must cost the same whatever the turns before (ratio 400 ÷ 4 ≈ 1: O(1) in prior
turns). Reading a fork's 800 messages (a fork after turn 400, and a fork of a fork of
a fork of it) is set beside reading the source's own 800, with the SQLite store's
transcript cache off, so each read decodes every message. Settings run interleaved,
round by round; a figure is µs per call, the minimum and the median over the rounds.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from itertools import count
from pathlib import Path
from typing import Any

from rounds import rounds_of

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    Session,
    Turn,
    TurnStatus,
)

__all__ = ["TARGET", "fork_rows"]

TARGET = 1.5
"""Forking after 400 prior turns costs at most 1.5 x forking after 4 (O(1) in prior turns)."""
ORG, USER = "bench", "bench"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(1)

Store = MemoryStore | SQLiteStore


async def _session(store: Store, session_id: str, turns: int) -> None:
    tx = store.begin(ORG, USER)
    await tx.create_session(Session(id=session_id, org=ORG, user=USER, mode="general"))
    await tx.commit()
    for n in range(1, turns + 1):
        tx = store.begin(ORG, USER)
        turn_id = f"{session_id}-t{n}"
        await tx.open_turn(Turn(id=turn_id, session_id=session_id, status=TurnStatus.COMPLETED))
        await tx.append_transcript(
            session_id,
            turn_id,
            [
                ChatMessage(role=ChatRole.USER, content=f"question {n} " + "x" * 200),
                ChatMessage(role=ChatRole.ASSISTANT, content=f"answer {n} " + "y" * 400),
            ],
        )
        await tx.commit()


def _fork(store: Store, session_id: str) -> Callable[[], Awaitable[object]]:
    async def run() -> object:
        return await store.fork_session(
            ORG, USER, session_id, f"{session_id}-t2", f"f{next(_ids)}", NOW
        )

    return run


def _read(store: Store, session_id: str) -> Callable[[], Awaitable[object]]:
    async def run() -> object:
        tx = store.begin(ORG, USER)
        transcript = await tx.load_transcript(session_id)
        await tx.rollback()
        assert len(transcript) == 800, len(transcript)
        return transcript

    return run


def _row(times: list[float], base: list[float]) -> dict[str, float]:
    return {
        "min_us": min(times),
        "median_us": statistics.median(times),
        "ratio_min": min(times) / min(base),
        "ratio_median": statistics.median(times) / statistics.median(base),
    }


async def _measure(store: Store, number: int, rounds: int) -> dict[str, Any]:
    await _session(store, "s4", 4)
    await _session(store, "s400", 400)
    deep = await store.fork_session(ORG, USER, "s400", "s400-t400", "d1", NOW)
    for level in (2, 3):  # a fork of a fork of a fork, each after a turn of its own
        tx = store.begin(ORG, USER)
        await tx.open_turn(Turn(id=f"d{level}-t", session_id=deep.id, status=TurnStatus.COMPLETED))
        await tx.commit()
        deep = await store.fork_session(ORG, USER, deep.id, f"d{level}-t", f"d{level}", NOW)
    forks = await rounds_of({"4": _fork(store, "s4"), "400": _fork(store, "s400")}, number, rounds)
    reads = await rounds_of(
        {
            "unforked": _read(store, "s400"),
            "fork": _read(store, "d1"),
            "fork of a fork of a fork": _read(store, deep.id),
        },
        max(1, number // 10),
        rounds,
    )
    return {
        "fork": {prior: _row(forks[prior], forks["4"]) for prior in ("4", "400")},
        "read 800 messages": {name: _row(reads[name], reads["unforked"]) for name in reads},
    }


async def _all(folder: Path, number: int, rounds: int) -> dict[str, Any]:
    figures = {"memory": await _measure(MemoryStore(), number, rounds)}
    sqlite = SQLiteStore(folder / "forks.db", transcript_cache_bytes=0)
    try:
        figures["sqlite"] = await _measure(sqlite, number, rounds)
    finally:
        await sqlite.aclose()
    return figures


def fork_rows(number: int = 200, rounds: int = 7) -> dict[str, Any]:
    """Every store's figures: forks by prior turns, reads by how the transcript is held."""
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_all(Path(folder), number, rounds))
