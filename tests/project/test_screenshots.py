"""docs/UI.md shows every page's screenshot, each one a browser test takes (issue 33
part 8, D663): ``make screenshots`` runs the Chromium tests and copies them into
docs/images/ (tests/kits/screenshot_files.py)."""

from __future__ import annotations

import pytest
from screenshot_files import IMAGES, PAGES, shown, taken

UI_MD = PAGES[0]


@pytest.mark.decision("D663")
def test_every_screenshot_the_browser_tests_take_is_shown_in_the_ui_guide() -> None:
    assert sorted(taken() - shown(UI_MD)) == []


@pytest.mark.decision("D663")
def test_every_image_the_docs_show_is_a_browser_tests_screenshot_and_is_committed() -> None:
    for page in PAGES:
        assert sorted(shown(page) - taken()) == [], page.name
        assert sorted(n for n in shown(page) if not (IMAGES / n).is_file()) == [], page.name


@pytest.mark.decision("D663")
def test_the_guide_shows_a_page_of_each_kind() -> None:
    # the pages of issue 33 part 8: session list and search, session, turn, trace, live, evals
    wanted = {
        "sessions-search.png",
        "session-page.png",
        "turn-page.png",
        "failed-turn-trace.png",
        "live-view.png",
        "eval-report.png",
        "watch-text.png",
    }
    assert sorted(wanted - shown(UI_MD)) == []
