"""Headless Chromium for the turn browser's tests: the ``browser`` and ``tab`` fixtures
(a pytest plugin, tests/conftest.py's ``pytest_plugins``), where screenshots go and
how one is taken (issue 33 part 8).

Chromium comes from the system's package manager (``make chromium``), never from
Playwright's own download. Without it (or without Playwright) the browser tests
skip, except under CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from repo import ROOT
from server_thread import WAIT

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

__all__ = ["ARTIFACTS", "CHROMIUM", "browser", "missing", "off_the_loop", "screenshot", "tab"]

ARTIFACTS = ROOT / "build" / "test-artifacts"
"""Where the browser tests keep their screenshots; ``make screenshots`` copies the
ones docs/UI.md shows into docs/images/."""
T = TypeVar("T")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def missing(reason: str) -> None:
    """Skip for ``reason``; under CI, fail: the browser tests must run there."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the browser tests may not skip; run make chromium)")
    pytest.skip(reason)


def screenshot(tab: Page, name: str) -> Path:
    """The whole page as ``build/test-artifacts/<name>``; its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    tab.screenshot(path=str(path), full_page=True)
    return path


def off_the_loop(make: Callable[[Path], T], folder: Path) -> T:
    """``make(folder)`` in a thread of its own: a store is written with ``asyncio.run``,
    which cannot run where Playwright's loop already runs (a test's ``tab``)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(make, folder).result()


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
