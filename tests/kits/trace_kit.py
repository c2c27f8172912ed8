"""A store whose turns failed without a recording (issue 33 part 2): for the CLI and
the page. ``acme``/``ana`` holds one session whose first turn ended and whose second
faulted at the model, and one first turn that faulted and left no session."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from engine_kit import CALLER, FailingLLM, follow_on, make_pipeline, ok, text

from aptix_pipeline.adapters import SQLiteStore

__all__ = ["FailedTurns", "failed_turns_store"]


@dataclass(frozen=True)
class FailedTurns:
    """Where the store is and what it holds."""

    db: Path
    session_id: str
    done_turn: str

    @property
    def store_url(self) -> str:
        """The store as ``--store`` takes it."""
        return f"sqlite:{self.db}"


async def _fill(db: Path) -> FailedTurns:
    store = SQLiteStore(db)
    try:
        pipeline, _ = make_pipeline(store, FailingLLM([text("hi"), text("unused")], fail_on=2))
        first = ok(await pipeline.execute({"Instruction": "hello"}, CALLER))
        failed = await pipeline.execute(follow_on(first), CALLER)
        assert not failed.successful
        lost, _ = make_pipeline(store, FailingLLM([], fail_on=1))
        assert not (await lost.execute({"Instruction": "again"}, CALLER)).successful
        assert first.session_id is not None
        assert first.turn_id is not None
        return FailedTurns(db, first.session_id, first.turn_id)
    finally:
        await store.aclose()


def failed_turns_store(folder: Path) -> FailedTurns:
    """Fill ``folder/failed.db`` (module docstring)."""
    return asyncio.run(_fill(folder / "failed.db"))
