"""A session's page shows its lineage and its usage (adapters/ui/session_extras.py).

On a real SQLite file: a session of two completed turns, forked after the first
(``SQLiteStore.fork_session``), with priced and unpriced calls settled in its usage
ledger; the standalone page served on loopback, read with httpx.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from server_thread import WAIT, server_thread
from ui_kit import signed_in_client, with_token

from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.ui.app import create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard
from aptix_pipeline.contracts import Charge, Session, Turn, TurnStatus, UsageCall
from aptix_pipeline.testing.store_contract_cases import assistant_says, user_says

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _call(call_id: str, turn_id: str, cost: str | None, tokens: int) -> UsageCall:
    return UsageCall(
        id=call_id,
        org="acme",
        user="ana",
        session_id="src",
        turn_id=turn_id,
        mode="general",
        at=T0,
        settled=True,
        charge=Charge(tokens=tokens, model_calls=1),
        reported=True,
        input_tokens=tokens,
        output_tokens=5,
        priced=cost is not None,
        cost=None if cost is None else Decimal(cost),
        currency=None if cost is None else "USD",
    )


async def _fill(db: Path) -> None:
    with SQLiteStore(db) as store:
        tx = store.begin("acme", "ana")
        await tx.create_session(
            Session(id="src", org="acme", user="ana", mode="general", created_at=T0)
        )
        for n in (1, 2):
            turn = Turn(
                id=f"t{n}",
                session_id="src",
                mode="general",
                status=TurnStatus.COMPLETED,
                created_at=T0 + timedelta(minutes=n),
            )
            await tx.open_turn(turn)
            await tx.append_transcript("src", f"t{n}", [user_says("q"), assistant_says("a")])
        await tx.commit()
        await store.fork_session("acme", "ana", "src", "t1", "the-fork", T0 + timedelta(hours=1))
        await store.settle_usage(
            [
                _call("c1", "t1", "0.10", 100),
                _call("c2", "t2", "0.05", 40),
                _call("c3", "t2", None, 10),
            ]
        )


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    db = tmp_path_factory.mktemp("extras") / "s.db"
    asyncio.run(_fill(db))
    guard = UIGuard.start()
    app = create_ui_app(SQLiteStore(db), None, store_name="s", guard=guard)
    with signed_in_client(app, guard) as client:
        yield client


def _session(page: httpx.Client, session_id: str) -> str:
    answer = page.get("/session", params={"org": "acme", "user": "ana", "id": session_id})
    assert answer.status_code == 200
    return answer.text


@pytest.mark.decision("D673")
def test_a_fork_links_its_parent_and_the_parent_lists_its_forks(page: httpx.Client) -> None:
    fork = _session(page, "the-fork")
    parent = re.search(r"<p id='forked-from'>(.*?)</p>", fork)
    assert parent is not None
    assert "href='/session?org=acme&amp;user=ana&amp;id=src'" in parent[1]
    assert (
        "after turn <a href='/turn?org=acme&amp;user=ana&amp;session=src&amp;id=t1'>" in parent[1]
    )
    assert "(2 messages shared)" in parent[1]

    source = _session(page, "src")
    forks = re.search(r"<ul id='forks'>(.*?)</ul>", source)
    assert forks is not None
    assert "id=the-fork'>the-fork</a>" in forks[1]
    assert "after turn t1" in forks[1]
    assert "id='forked-from'" not in source


@pytest.mark.decision("D673")
def test_the_session_page_shows_usage_and_cost_per_turn_and_in_total(page: httpx.Client) -> None:
    text = _session(page, "src")

    rows = dict(re.findall(r"<tr data-usage-turn='([^']+)'>(.*?)</tr>", text))
    assert rows["t1"] == "<td>t1</td><td>1</td><td>100</td><td>5</td><td>0.10 USD</td><td>-</td>"
    assert rows["t2"] == "<td>t2</td><td>2</td><td>50</td><td>10</td><td>0.05 USD</td><td>1</td>"
    total = re.search(r"<tr data-usage-total class='total'>(.*?)</tr>", text)
    assert total is not None
    assert total[1] == (
        "<td>session</td><td>3</td><td>150</td><td>15</td><td>0.15 USD</td><td>1</td>"
    )
    assert "id='usage'" not in _session(page, "the-fork")


@pytest.mark.decision("D674")
def test_the_first_page_links_the_eval_reports_when_it_serves_them(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "nightly.html").write_text("<html>report</html>", encoding="utf-8")
    guard = UIGuard.start()
    with (
        server_thread(create_ui_app(None, None, guard=guard, evals=reports)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        first = with_token(client, guard.token).text
        link = re.search(r"<p id='eval-link'><a href='([^']+)'>(.*?)</a>", first)
        assert link is not None
        assert link[2] == "1 eval reports"
        assert "nightly.html" in client.get(link[1]).text
    guard = UIGuard.start()
    with (
        server_thread(create_ui_app(None, None, guard=guard)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        assert "eval-link" not in with_token(client, guard.token).text
