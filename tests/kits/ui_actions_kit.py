"""A store for the fork button and the budgets of a session's page (adapters/ui/actions.py).

``budget_shop`` runs, with a real pipeline on a SQLite file, a session of acme/ana
under ``BUDGETS`` (two model calls a day per user): two completed turns, then a
third refused for budget (``budget_exceeded``, kept as a trace only); and writes a
session ``waiting`` whose one turn awaits a client tool. ``session_rows`` counts the
file's sessions, to see that a refused fork wrote nothing.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from ui_kit import ANA

from aptix_pipeline import PipelineOptions
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    Budget,
    BudgetMetric,
    BudgetScope,
    BudgetWindow,
    Session,
    Turn,
    TurnStatus,
)
from aptix_pipeline.engine import Telemetry
from aptix_pipeline.testing.store_contract_cases import user_says

__all__ = ["BUDGETS", "BUDGETS_TOML", "Shop", "budget_shop", "session_rows"]

BUDGETS = (
    Budget(
        id="two-calls-a-day",
        metric=BudgetMetric.MODEL_CALLS,
        limit=Decimal(2),
        window=BudgetWindow.DAY,
        per=BudgetScope.USER,
    ),
)


@dataclass(frozen=True)
class Shop:
    db: Path
    session: str
    turns: tuple[str, str]


async def _fill(db: Path) -> Shop:
    with SQLiteStore(db) as store:
        pipeline = embedded_pipeline(
            llm=ScriptedLLM([{"text": "Paris."}, {"text": "Rome."}, {"text": "Lisbon."}]),
            store=store,
            telemetry=Telemetry.off(),
            options=PipelineOptions(budgets=BUDGETS),
        )
        first = (await pipeline.execute({"Instruction": "Capital of France?"}, ANA)).result
        assert first is not None
        follow = {"SessionId": first.session_id, "TurnId": first.turn_id}
        second = (await pipeline.execute({**follow, "Instruction": "And Italy?"}, ANA)).result
        assert second is not None
        again = {"SessionId": first.session_id, "TurnId": second.turn_id}
        refused = await pipeline.execute({**again, "Instruction": "And Portugal?"}, ANA)
        assert [e.code for e in refused.errors] == ["budget_exceeded"]
        tx = store.begin("acme", "ana")
        at = datetime(2026, 3, 1, tzinfo=UTC)
        await tx.create_session(
            Session(id="waiting", org="acme", user="ana", mode="general", created_at=at)
        )
        await tx.open_turn(
            Turn(
                id="w1",
                session_id="waiting",
                mode="general",
                status=TurnStatus.AWAITING_CLIENT_TOOLS,
                created_at=at,
            )
        )
        await tx.append_transcript("waiting", "w1", [user_says("read it")])
        await tx.commit()
        return Shop(db, first.session_id, (first.turn_id, second.turn_id))


BUDGETS_TOML = (
    '[[budgets]]\nid = "two-calls-a-day"\nmetric = "model_calls"\nlimit = 2\n'
    'window = "day"\nper = "user"\n'
)
"""``BUDGETS`` as a service configuration writes them."""


def budget_shop(db: Path) -> Shop:
    """The sessions of the module docstring in ``db``."""
    return asyncio.run(_fill(db))


def session_rows(db: Path) -> int:
    """How many sessions the SQLite file ``db`` holds."""
    with sqlite3.connect(db) as connection:
        (count,) = connection.execute("SELECT count(*) FROM sessions").fetchone()
    return int(count)
