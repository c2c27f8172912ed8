"""The turn browser's live view (adapters/ui/live.py) over real HTTP: uvicorn in a thread.

The standalone page on a real SQLite store (tests/kits/ui_kit.py) lists the store's
newest turns, of every caller; a turn ``aptix run`` stores from a process of its own
is in the very next read of the fragment the page polls for. Mounted in ``aptix
serve`` it lists the key's caller's turns only. The browser follows the polling in
tests/adapters/ui/test_ui_browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_kit import turn_from_another_process
from http_kit import ANA_KEY, ENV
from server_thread import WAIT, server_thread
from ui_kit import (
    Browsed,
    browsed_store,
    signed_in_client,
    standalone_app,
    write_ui_config,
)

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import create_app
from aptix_pipeline.adapters.ui.guard import UIGuard


@pytest.fixture
def browsed(tmp_path: Path) -> Browsed:
    """A store of the test's own: a test here adds turns to it."""
    return browsed_store(tmp_path / "browsed")


@pytest.fixture
def page(browsed: Browsed) -> Iterator[httpx.Client]:
    guard = UIGuard.start()
    with signed_in_client(standalone_app(browsed, guard), guard) as client:
        yield client


def _turn_rows(fragment: str) -> list[tuple[str, str]]:
    """The live list's rows: (turn id, status), in the order shown."""
    return re.findall(r"<tr data-turn='([^']+)' data-status='([^']+)'>", fragment)


@pytest.mark.decision("D685")
def test_the_live_view_lists_every_callers_turns_newest_first(
    page: httpx.Client, browsed: Browsed
) -> None:
    answer = page.get("/live/feed")

    assert answer.status_code == 200
    rows = _turn_rows(answer.text)
    ids = [turn for turn, _ in rows]
    assert browsed.first_turn in ids
    assert browsed.second_turn in ids
    assert ids.index(browsed.second_turn) < ids.index(browsed.first_turn)
    assert len(rows) == 3  # ana's two turns and zoe's one
    assert "globex / zoe" in answer.text
    assert {status for _, status in rows} == {"completed"}


@pytest.mark.decision("D685")
def test_the_live_page_polls_its_feed_within_a_second(page: httpx.Client) -> None:
    answer = page.get("/live")

    assert answer.status_code == 200
    poll = re.search(r"<div id='live' hx-get='/live/feed' hx-trigger='every (\d+)ms'", answer.text)
    assert poll is not None
    assert int(poll.group(1)) <= 1000
    assert "<table id='live-turns'>" in answer.text  # the first read comes with the page
    assert "href='/live'" in page.get("/").text  # every page links it


@pytest.mark.decision("D685")
def test_a_turn_another_process_stores_is_in_the_next_read(
    page: httpx.Client, browsed: Browsed, tmp_path: Path
) -> None:
    before = _turn_rows(page.get("/live/feed").text)

    turn_id = turn_from_another_process(
        tmp_path, browsed.store_url, "Anything new?", "stored by another process"
    )
    after = page.get("/live/feed").text

    assert turn_id not in [turn for turn, _ in before]
    assert _turn_rows(after)[0] == (turn_id, "completed")
    assert "acme / ana" in after


@pytest.mark.decision("D685")
def test_mounted_the_live_view_lists_only_the_keys_callers_turns(
    tmp_path: Path, browsed: Browsed
) -> None:
    config = load_service_config(write_ui_config(tmp_path, browsed), env=ENV)
    with (
        server_thread(create_app(config)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        refused = client.get("/ui/live/feed")
        client.post(
            "/ui/login",
            content=f"key={ANA_KEY}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        live = client.get("/ui/live")

    assert refused.status_code == 303
    assert live.status_code == 200
    assert "hx-get='/ui/live/feed'" in live.text
    ids = [turn for turn, _ in _turn_rows(live.text)]
    assert ids == [browsed.second_turn, browsed.first_turn]
    assert "globex / zoe" not in live.text
