"""The turn browser's screenshots in docs/: which the Chromium tests take, which the
docs show, and the copy that makes the docs' ones current (issue 33 part 8).

The browser tests (tests/adapters/ui/) keep each screenshot in
``build/test-artifacts/`` (tests/kits/browser_kit.py). docs/UI.md shows each of them
from ``docs/images/``; ``python tests/kits/screenshot_files.py --write`` (``make
screenshots``, after the browser tests ran) copies them there.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from browser_kit import ARTIFACTS
from repo import ROOT

__all__ = ["IMAGES", "PAGES", "shown", "taken", "write"]

IMAGES = ROOT / "docs" / "images"
PAGES = (ROOT / "docs" / "UI.md", ROOT / "README.md")
BROWSER_TESTS = ROOT / "tests" / "adapters" / "ui"
_TAKEN = re.compile(r"""\bscreenshot\(\s*tab,\s*["']([\w.-]+\.png)["']""")
_SHOWN = re.compile(r"!\[[^\]]*\]\((?:docs/)?images/([\w.-]+\.png)\)")


def taken() -> set[str]:
    """The names of the screenshots the browser tests take."""
    return {
        name
        for path in BROWSER_TESTS.glob("test_*.py")
        for name in _TAKEN.findall(path.read_text(encoding="utf-8"))
    }


def shown(page: Path) -> set[str]:
    """The names of the images from ``docs/images/`` that ``page`` shows."""
    return set(_SHOWN.findall(page.read_text(encoding="utf-8")))


def write() -> list[str]:
    """Copy each screenshot the docs show from the last browser test run into
    ``docs/images/``; the names of those the run did not leave (none copied then)."""
    names = sorted(set().union(*(shown(page) for page in PAGES)))
    absent = [name for name in names if not (ARTIFACTS / name).is_file()]
    if absent:
        return absent
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(ARTIFACTS / name, IMAGES / name)
    return []


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: screenshot_files.py --write")
    missing = write()
    if missing:
        sys.exit(f"no screenshot {', '.join(missing)} in {ARTIFACTS}: run the browser tests first")
