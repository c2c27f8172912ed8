"""The browser fixtures the turn browser's Chromium tests share (tests/kits/browser_kit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from browser_kit import CHROMIUM, missing
from server_thread import WAIT

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """The system's Chromium, headless, for one test module."""
    if CHROMIUM is None:
        missing("no chromium on PATH: make chromium installs it (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (the test extra): pip install -e '.[test]'")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Page]:
    """A fresh page; tests ask for it last, as Playwright's loop runs in this thread from
    then on and the store is written (``asyncio.run``) before."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(WAIT * 1000)
    yield opened
    context.close()
