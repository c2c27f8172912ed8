"""Each page of the turn browser in headless Chromium, with its screenshot kept
(issue 33 part 8): a failed turn that left no recording, found from the first page
to its fault and path; the session search, filtered and cleared; a session's page.
``make screenshots`` copies the screenshots docs/UI.md shows into docs/images/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from browser_kit import off_the_loop, screenshot
from trace_kit import FailedTurns, failed_turns_store
from ui_kit import Browsed, browsed_store
from ui_kit import aptix_ui as running_ui

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> FailedTurns:
    return off_the_loop(failed_turns_store, tmp_path_factory.mktemp("screens-failed"))


@pytest.fixture(scope="module")
def failed_ui(failed: FailedTurns) -> Iterator[str]:
    """``aptix ui`` on a store whose turns failed unrecorded: the URL with its token."""
    with running_ui("--store", failed.store_url, cwd=failed.db.parent) as running:
        yield running.url


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return off_the_loop(browsed_store, tmp_path_factory.mktemp("screens-browsed"))


@pytest.fixture(scope="module")
def browsed_ui(browsed: Browsed) -> Iterator[str]:
    with running_ui("--store", browsed.store_url, cwd=browsed.db.parent) as running:
        yield running.url


@pytest.mark.decision("D661")
def test_a_failed_unrecorded_turn_is_found_from_the_first_page_with_its_fault_and_path(
    failed_ui: str, failed: FailedTurns, tab: Page
) -> None:
    tab.goto(failed_ui)
    tab.click("text=turn traces")
    listed = tab.locator("table.traces tbody tr").evaluate_all(
        "rows => rows.map(row => row.className)"
    )
    screenshot(tab, "turn-traces.png")
    tab.click(f"table.traces tr.faulted:has-text('{failed.session_id}') a")
    banner = tab.locator(".fault-banner").inner_text()
    picture = tab.locator(".kept-trace [data-picture]").first.inner_text()
    fault = tab.locator("#timeline li.kind-fault").inner_text()
    diffs = tab.locator("#timeline ul.diff").count()
    screenshot(tab, "failed-turn-trace.png")

    assert sorted(listed) == ["done", "faulted", "faulted"]
    assert "faulted at llm_client" in banner
    assert "the model is gone" in banner
    assert "faulted at llm_client" in picture
    assert "llm_client" in fault
    assert diffs > 0  # what the steps changed, beside them
    assert not tab.locator("#replay").count()  # no recording: nothing to replay


@pytest.mark.decision("D662")
def test_the_session_search_filters_by_a_link_and_pages_back_to_all(
    browsed_ui: str, browsed: Browsed, tab: Page
) -> None:
    tab.goto(browsed_ui)
    tab.click("text=search all sessions")
    every = tab.locator("#session-rows tbody tr").evaluate_all(
        "rows => rows.map(row => row.dataset.session)"
    )
    tab.fill("#session-search input[name=org]", "globex")
    tab.click("#session-search button[type=submit]")
    tab.wait_for_url("**/sessions?*org=globex*")
    filtered = tab.locator("#session-rows tbody tr").evaluate_all(
        "rows => rows.map(row => row.dataset.session)"
    )
    screenshot(tab, "sessions-search.png")
    tab.fill("#session-search input[name=since]", "yesterday")
    tab.click("#session-search button[type=submit]")
    problem = tab.locator("#search-problem").inner_text()
    tab.click("#session-search >> text=clear")
    cleared = tab.locator("#session-rows tbody tr").count()

    assert sorted(every) == sorted([browsed.session_id, browsed.other_session])
    assert filtered == [browsed.other_session]
    assert "since" in problem
    assert cleared == 2


@pytest.mark.decision("D662")
def test_a_sessions_page_shows_its_turns_usage_and_traces(
    browsed_ui: str, browsed: Browsed, tab: Page
) -> None:
    tab.goto(browsed_ui)
    tab.click(f"tr[data-session='{browsed.session_id}'] a")
    turns = tab.locator("tr[data-turn]").evaluate_all("rows => rows.map(row => row.dataset.turn)")
    traces = tab.locator("table.traces tbody tr").count()
    screenshot(tab, "session-page.png")

    assert browsed.first_turn in turns
    assert browsed.second_turn in turns
    assert traces >= len(set(turns))  # every turn kept its trace, the faulted one too
