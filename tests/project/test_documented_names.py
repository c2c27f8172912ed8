"""Every name and file the README and docs/ point at is where they say.

A ``from aptix_pipeline… import …`` anywhere in README.md or docs/*.md (in a code
block or in running text) imports; a dotted ``aptix_pipeline.…`` name in backticks
resolves, as a module or as an attribute of one; a path of the repository in
backticks or in a link (``adapters/http/sse.py``, ``tests/kits/pg_server.py``)
exists. So a module that moves takes its documentation with it.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from repo import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
INLINE_IMPORT = re.compile(r"`from (aptix_pipeline(?:\.\w+)*) import ([\w, ]+)`")
DOTTED = re.compile(r"`(aptix_pipeline(?:\.\w+)+)(?::(\w+))?[`(]")
TOPS = "package|contracts|validators|steps|engine|adapters|testing|tests|bench|examples|diagrams"
EXTENSIONS = "py|md|toml|json|mmd|dot|svg|png|js|ambr|txt"
PATH = re.compile(rf"[`(](?:\.\./)?((?:{TOPS})/(?:[\w-]+/)*(?:[\w-]+\.(?:{EXTENSIONS}))?)[`)#:]")


LOGGERS = {"aptix_pipeline.retries"}
"""Logger names, which read like modules (``models/retry_notices.py`` ``LOGGER_NAME``)."""


def _imports(text: str) -> list[tuple[str, str]]:
    """``(module, name)`` of every ``from aptix_pipeline… import name`` of a page: in its
    python blocks (parsed), and in backticks in its running text."""
    found = []
    for block in BLOCK.findall(text):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aptix_"):
                found += [(node.module or "", alias.name) for alias in node.names]
    for module, names in INLINE_IMPORT.findall(text):
        found += [(module, name.strip()) for name in names.split(",") if name.strip()]
    return found


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_import_a_page_shows_imports(page: Path) -> None:
    missing = []
    for module, name in _imports(page.read_text(encoding="utf-8")):
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as error:
            missing.append(f"from {module} import {name}: {error}")

    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_dotted_name_a_page_gives_resolves(page: Path) -> None:
    missing = []
    for dotted, attribute in DOTTED.findall(page.read_text(encoding="utf-8")):
        if dotted in LOGGERS:
            continue
        try:
            value = _resolve(dotted)
            if attribute:
                getattr(value, attribute)
        except (ImportError, AttributeError) as error:
            missing.append(f"{dotted}{':' + attribute if attribute else ''}: {error}")

    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_repository_path_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")

    assert [path for path in PATH.findall(text) if not (ROOT / path).exists()] == []


def test_the_retries_logger_is_the_one_the_pages_name() -> None:
    from aptix_pipeline.adapters.models.retry_notices import LOGGER_NAME

    assert {LOGGER_NAME} == LOGGERS


def test_the_pages_name_modules_and_files() -> None:
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)

    assert len(_imports(text)) > 50
    assert len(DOTTED.findall(text)) > 10
    assert len(PATH.findall(text)) > 20
