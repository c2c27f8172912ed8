"""Headless Chromium for the turn browser's tests: where its screenshots go and how
one is taken (issue 33 part 8). The ``browser`` and ``tab`` fixtures are in
tests/adapters/ui/conftest.py.

Chromium comes from the system's package manager (``make chromium``), never from
Playwright's own download. Without it (or without Playwright) the browser tests
skip, except under CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from repo import ROOT

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["ARTIFACTS", "CHROMIUM", "missing", "off_the_loop", "screenshot"]

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
