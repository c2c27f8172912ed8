"""The live page on a PostgreSQL store (adapters/ui/live_hub.py): the commit notices of
``LISTEN/NOTIFY`` reach the page's event stream, so a turn another process commits
makes the page read its feed at once. A real PostgreSQL server (tests/kits/pg_server.py),
the standalone page under uvicorn, ``aptix run`` as the other process."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from cli_kit import aptix_run, stdout_json
from live_kit import live_events
from server_thread import WAIT, server_thread
from ui_kit import with_token

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
            run = aptix_run(
                tmp_path,
                {"Instruction": "Committed elsewhere"},
                [{"text": "noted"}],
                "--store",
                postgres_db_url,
                "--org",
                "globex",
                "--user",
                "zoe",
            )
            assert run.returncode == 0, run.stderr
            turn_id = stdout_json(run)["Result"]["TurnId"]
            stored = events.wait_for(lambda name, data: name == "stored")
        feed = page_client.get("/live/feed").text
        page_client.close()

    assert "<section id='live-running' data-events='/live/events'>" in page.text
    assert "hx-trigger='live-stored from:body'" in page.text  # a notice reads the feed
    assert stored["turn"] == turn_id
    assert (stored["org"], stored["user"], stored["status"]) == ("globex", "zoe", "completed")
    assert re.search(f"<tr data-turn='{turn_id}' data-status='completed'>", feed)
