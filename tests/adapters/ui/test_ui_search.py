"""The searchable session list, ``/sessions`` (adapters/ui/search.py), over real HTTP.

The standalone page on the browsed store (tests/kits/ui_kit.py: acme/ana's session of
three turns, one failed continuation, and globex/zoe's), and on a SQLite file of 120
sessions for the pages; then the page mounted for one caller, who sees only their own.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from search_kit import search_store
from server_thread import WAIT, server_thread
from ui_kit import ANA, Browsed, browsed_store, signed_in_client, standalone_app, with_token

from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.ui.app import KEY_COOKIE, UIAccess, create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard
from aptix_pipeline.adapters.ui.search import PAGE_ROWS, search_query
from aptix_pipeline.contracts import Caller, Session, Turn, TurnStatus

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return browsed_store(tmp_path_factory.mktemp("search"))


@pytest.fixture(scope="module")
def page(browsed: Browsed) -> Iterator[httpx.Client]:
    guard = UIGuard.start()
    with signed_in_client(standalone_app(browsed, guard), guard) as client:
        yield client


def _listed(text: str) -> list[str]:
    return re.findall(r"<tr data-session='([^']+)'", text)


@pytest.mark.decision("D672")
def test_the_list_shows_each_sessions_status_preview_tokens_and_owner(
    page: httpx.Client, browsed: Browsed
) -> None:
    answer = page.get("/sessions")

    assert answer.status_code == 200
    assert set(_listed(answer.text)) == {browsed.session_id, browsed.other_session}
    row = re.search(rf"<tr data-session='{browsed.session_id}'.*?</tr>", answer.text)
    assert row is not None
    assert "data-status='completed'" in row[0]
    assert "<td>acme</td><td>ana</td>" in row[0]
    assert "class='preview'>" in row[0]
    assert re.search(r"<td>[1-9][0-9]*</td><td>-</td>", row[0]), "tokens, then no cost"
    zoe = re.search(rf"<tr data-session='{browsed.other_session}'.*?</tr>", answer.text)
    assert zoe is not None
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in zoe[0]
    assert "<script>alert" not in answer.text


@pytest.mark.decision("D672")
def test_the_form_filters_by_org_turn_and_status(page: httpx.Client, browsed: Browsed) -> None:
    assert _listed(page.get("/sessions", params={"org": "globex"}).text) == [browsed.other_session]
    by_turn = page.get("/sessions", params={"turn": browsed.second_turn})
    assert _listed(by_turn.text) == [browsed.session_id]
    assert _listed(page.get("/sessions", params={"status": "open"}).text) == []
    assert "no sessions match" in page.get("/sessions", params={"status": "open"}).text


@pytest.mark.decision("D672")
def test_the_first_page_links_the_search(page: httpx.Client) -> None:
    assert "<a id='search-sessions' href='/sessions'>" in page.get("/").text


@pytest.mark.decision("D672")
def test_a_wrong_field_is_a_400_naming_it(page: httpx.Client) -> None:
    answer = page.get("/sessions", params={"since": "yesterday"})

    assert answer.status_code == 400
    assert "since: not a date and time" in answer.text
    assert page.get("/sessions", params={"status": "lost"}).status_code == 400
    assert "page: a page number" in page.get("/sessions", params={"page": "0"}).text


@pytest.mark.decision("D672")
def test_a_time_without_a_zone_is_utc_and_pages_count_from_one() -> None:
    assert search_query({"since": "2026-01-31"}).where.since == datetime(2026, 1, 31, tzinfo=UTC)
    assert search_query({"org": " ", "page": "3"}).offset == 2 * PAGE_ROWS


async def _many(db: Path, count: int) -> None:
    with SQLiteStore(db) as store:
        tx = store.begin("acme", "ana")
        for n in range(count):
            sid = f"s{n:03d}"
            await tx.create_session(Session(id=sid, org="acme", user="ana", mode="general"))
            await tx.open_turn(
                Turn(
                    id=f"t{n}",
                    session_id=sid,
                    mode="general",
                    status=TurnStatus.COMPLETED,
                    created_at=T0 + timedelta(minutes=n),
                )
            )
        tx2 = store.begin("globex", "zoe")
        await tx.commit()
        await tx2.create_session(Session(id="zoe-1", org="globex", user="zoe", mode="general"))
        await tx2.commit()


@pytest.mark.decision("D672")
def test_the_list_pages_through_many_sessions_keeping_the_filter(tmp_path: Path) -> None:
    db = tmp_path / "many.db"
    asyncio.run(_many(db, 120))
    guard = UIGuard.start()
    app = create_ui_app(SQLiteStore(db), None, store_name="many", guard=guard)
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        seen: list[str] = []
        url: str | None = "/sessions?org=acme"
        while url is not None:
            answer = client.get(url)
            seen.extend(_listed(answer.text))
            older = re.search(r"<a rel='next' href='([^']+)'", answer.text)
            url = None if older is None else older[1].replace("&amp;", "&")
        assert seen == [f"s{n:03d}" for n in reversed(range(120))]
        last = client.get("/sessions", params={"org": "acme", "page": "3"}).text
        assert "sessions 101 to 120" in last
        assert "rel='prev'" in last
        assert "org=acme" in re.findall(r"<a rel='prev' href='([^']+)'", last)[0]


@pytest.mark.decision("D672")
def test_mounted_the_list_holds_only_the_callers_own_sessions(browsed: Browsed) -> None:
    async def caller_for_key(key: str) -> Caller | None:
        return ANA if key == "ana-key" else None

    app = create_ui_app(
        SQLiteStore(browsed.db),
        None,
        store_name="served",
        access=UIAccess(caller_for_key=caller_for_key),
    )
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        client.cookies.set(KEY_COOKIE, "ana-key")
        answer = client.get("/sessions", params={"org": "globex", "user": "zoe"})

        assert answer.status_code == 200
        assert _listed(answer.text) == [browsed.session_id]
        assert "name='org'" not in answer.text


@pytest.mark.decision("D644")
def test_a_session_whose_last_turn_failed_is_faulted_with_its_error(tmp_path: Path) -> None:
    guard = UIGuard.start()
    app = create_ui_app(SQLiteStore(search_store(tmp_path)), None, store_name="s", guard=guard)
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        faulted = client.get("/sessions", params={"status": "faulted"}).text
        completed = client.get("/sessions", params={"status": "completed"}).text

    assert _listed(faulted) == ["s-local-3"]
    assert "<tr data-session='s-local-3' data-status='faulted'>" in faulted
    assert (
        "faulted</span><div class='error last-error'>port_failed: the LLM failed: "
        "the model is gone</div>" in faulted
    )
    assert "class='error last-error'" not in completed
    assert "<option value='faulted' selected>" in faulted
    assert _listed(completed) == ["s-acme", "s-local-1"]
