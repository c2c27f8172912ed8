"""The tool ledger's cost: an in-process turn with one server tool, ledger on against off.

The same Initial turn (the model calls one server tool, then answers: two model
calls), tracing off, on the memory store and on a SQLite file, with
``PipelineOptions.tool_ledger`` on (a reserve and a done per call, each committed
on its own) and off. Settings run interleaved, round by round; a figure is µs per
turn, the minimum and the median over the rounds. Target (issue 29): the ledger
costs at most 5 % of the turn.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rounds import rounds_of
from send_turn import CALLER, send_pipeline, send_turn

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    SessionStore,
)
from aptix_pipeline.steps import PipelineOptions

__all__ = ["TARGET", "ledger_rows"]

TARGET = 1.05
"""At most 5 % more per turn with the ledger on."""


async def _measure(folder: Path, number: int, rounds: int) -> dict[str, Any]:
    stores: dict[str, SessionStore] = {
        "memory": MemoryStore(),
        "sqlite": SQLiteStore(folder / "ledger.db"),
    }
    try:
        work: dict[str, Callable[[], Awaitable[object]]] = {}
        for store_name, store in stores.items():
            for ledger in (False, True):
                pipeline = send_pipeline(store, PipelineOptions(tool_ledger=ledger))
                report = await pipeline.run({"Instruction": "send"}, CALLER)
                assert report.successful, report.result.rule_ids
                work[f"{store_name}, ledger {'on' if ledger else 'off'}"] = send_turn(pipeline)
        times = await rounds_of(work, number, rounds)
    finally:
        sqlite = stores["sqlite"]
        assert isinstance(sqlite, SQLiteStore)
        await sqlite.aclose()
    figures: dict[str, Any] = {}
    for store_name in stores:
        off, on = times[f"{store_name}, ledger off"], times[f"{store_name}, ledger on"]
        figures[store_name] = {
            "off_min_us": min(off),
            "off_median_us": statistics.median(off),
            "on_min_us": min(on),
            "on_median_us": statistics.median(on),
            "ratio_min": min(on) / min(off),
            "ratio_median": statistics.median(on) / statistics.median(off),
        }
    return figures


def ledger_rows(number: int = 40, rounds: int = 9) -> dict[str, Any]:
    """µs per turn with the ledger on and off, per store (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_measure(Path(folder), number, rounds))
