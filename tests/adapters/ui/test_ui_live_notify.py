"""The live page on a PostgreSQL store (adapters/ui/live_hub.py): the commit notices of
``LISTEN/NOTIFY`` reach the page's event stream, so a turn another process commits
makes the page read its feed at once. A real PostgreSQL server (tests/kits/pg_server.py),
the standalone page under uvicorn, ``aptix run`` as the other process."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from cli_kit import turn_from_another_process
from http_kit import ANA_KEY, ENV, write_config
from live_kit import live_events
from server_thread import WAIT, server_thread
from ui_kit import with_token

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import create_app
from aptix_pipeline.adapters.stores import PostgresStore
from aptix_pipeline.adapters.ui.app import create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard


@pytest.mark.decision("D691")
def test_a_turn_another_process_commits_reaches_the_pages_stream(
    postgres_db_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(postgres_db_url)
    guard = UIGuard.start()
    app = create_ui_app(store, None, store_name="pg", guard=guard, close_store=store.aclose)
    with server_thread(app) as port:
        base = f"http://127.0.0.1:{port}"
        page_client = httpx.Client(base_url=base, timeout=WAIT)
        with_token(page_client, guard.token)
        page = page_client.get("/live")
        events_client = httpx.Client(base_url=base, timeout=WAIT)
        with_token(events_client, guard.token)
        with live_events(events_client, "/live/events") as events:
            turn_id = turn_from_another_process(
                tmp_path, postgres_db_url, "Committed elsewhere", "noted", org="globex", user="zoe"
            )
            stored = events.wait_for(lambda name, data: name == "stored")
        feed = page_client.get("/live/feed").text
        page_client.close()

    assert "<section id='live-running' data-events='/live/events'>" in page.text
    assert "hx-trigger='live-stored from:body'" in page.text  # a notice reads the feed
    assert stored["turn"] == turn_id
    assert (stored["org"], stored["user"], stored["status"]) == ("globex", "zoe", "completed")
    assert re.search(f"<tr data-turn='{turn_id}' data-status='completed'>", feed)


@pytest.mark.decision("D691")
def test_mounted_a_page_hears_only_its_callers_commits(
    postgres_db_url: str, tmp_path: Path
) -> None:
    config = write_config(
        tmp_path,
        [{"text": "served"}],
        store=f'url = "{postgres_db_url}"',
        more="[ui]\nenabled = true\n",
    )
    with server_thread(create_app(load_service_config(config, env=ENV))) as port:
        page = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT)
        page.post(
            "/ui/login",
            content=f"key={ANA_KEY}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with live_events(page, "/ui/live/events") as events:
            turns: dict[str, str] = {}
            for user in ("zoe", "ana"):
                (tmp_path / user).mkdir()
                said = f"{user} commits elsewhere"
                turns[user] = turn_from_another_process(
                    tmp_path / user, postgres_db_url, said, "noted", user=user
                )
            events.wait_for(lambda name, data: name == "stored" and data["turn"] == turns["ana"])

    heard = {data["turn"] for data in events.of("stored")}
    assert heard == {turns["ana"]}  # zoe's commit, announced first, is not ana's to see
