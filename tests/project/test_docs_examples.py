"""Every ```python block of README.md and of docs/*.md runs as written.

The pages are found by glob (README.md and every docs/*.md), never listed here.
The blocks of one page run in order in one namespace, in a fresh temporary working
directory: a page may build on its earlier blocks (docs/RECORDING.md replays the
recordings its first block wrote), and whatever a block writes (a SQLite file,
recordings) lands there, never in the repository. The blocks run offline: memory
stores or files in that directory, ``ScriptedLLM``, no network and no servers.

A renamed class or a changed signature breaks this test, not the reader. The blocks
import from the package root only (STYLE.md "A small public surface").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from repo import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
SUBMODULE_IMPORT = re.compile(r"^\s*(?:from|import)\s+aptix_pipeline\.(?!testing\b)", re.MULTILINE)
"""A subpackage import; the host's test kit, ``aptix_pipeline.testing``, is a door of its own."""


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order."""
    return BLOCK.findall(page.read_text(encoding="utf-8"))


PAGES_WITH_CODE = [page for page in PAGES if python_blocks(page)]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def test_the_readme_and_the_docs_pages_hold_examples() -> None:
    assert README in PAGES_WITH_CODE
    assert len(PAGES_WITH_CODE) > 5


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_name)
def test_the_examples_of_a_page_run_in_order(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.lower()}"}

    for number, code in enumerate(python_blocks(page), start=1):
        exec(compile(code, f"{_name(page)} python block {number}", "exec"), namespace)


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_name)
def test_the_examples_import_from_the_package_root_only(page: Path) -> None:
    found = [
        f"block {number}: {match.group(0).strip()}"
        for number, code in enumerate(python_blocks(page), start=1)
        for match in SUBMODULE_IMPORT.finditer(code)
    ]

    assert not found, f"{_name(page)} imports from aptix_pipeline's subpackages: {found}"
