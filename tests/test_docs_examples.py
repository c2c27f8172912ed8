"""The Python examples of the docs run as written.

Each ```python block of the pages listed here is executed in a fresh namespace, in
order, so a renamed class or a changed signature breaks the test, not the reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = ["EVENTS.md"]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in PAGES:
        for number, code in enumerate(BLOCK.findall((DOCS / page).read_text()), start=1):
            found.append((page, number, code))
    return found


def test_every_listed_page_has_examples() -> None:
    assert {page for page, _, _ in _blocks()} == set(PAGES)


@pytest.mark.parametrize(("page", "number", "code"), _blocks(), ids=lambda v: str(v)[:12])
def test_a_docs_example_runs(page: str, number: int, code: str) -> None:
    exec(compile(code, f"{page} block {number}", "exec"), {"__name__": f"docs_{number}"})
