"""The house has a room per concern (docs/DEVELOPMENT.md "Layout: a map of the house").

``adapters/`` holds rooms, not modules: only the composition root sits at its top. No
module repeats its folder's name as a prefix, no room grows past about fifteen
modules, and each room's ``__init__`` says what it holds and what it may import. The
map in docs/DEVELOPMENT.md names every room, and ``tests/`` mirrors the package with
its kits in one folder and test file names unique (docs/CONFORMANCE.md names tests by
file name).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest
from repo import ROOT

PACKAGE_FOLDERS = ("package", "contracts", "validators", "steps", "engine", "adapters", "testing")
ADAPTERS = ROOT / "adapters"
ROOMS = sorted(path.parent.name for path in ADAPTERS.glob("*/__init__.py"))
MAX_MODULES = 15


def _modules(folder: Path) -> list[Path]:
    return sorted(path for path in folder.glob("*.py") if path.name != "__init__.py")


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


@pytest.mark.decision("D388")
def test_adapters_holds_rooms_and_only_the_composition_root_at_its_top() -> None:
    assert [path.name for path in _modules(ADAPTERS)] == ["embedded.py"]
    assert set(ROOMS) >= {"cli", "http", "ui", "stores", "models", "retrieval", "files", "config"}


@pytest.mark.decision("D388")
@pytest.mark.parametrize("room", ROOMS)
def test_a_room_is_small_and_says_at_its_door_what_it_holds_and_may_import(room: str) -> None:
    door = _docstring(ADAPTERS / room / "__init__.py")

    assert len(_modules(ADAPTERS / room)) <= MAX_MODULES
    assert door, f"adapters/{room}/__init__.py has no docstring"
    assert re.search(r"\bmay import\b", door, flags=re.IGNORECASE), door


@pytest.mark.decision("D388")
def test_no_module_repeats_its_folders_name_as_a_prefix() -> None:
    repeating = [
        str(path.relative_to(ROOT))
        for top in PACKAGE_FOLDERS
        for path in (ROOT / top).rglob("*.py")
        if path.stem.startswith(f"{path.parent.name.rstrip('s')}_")
        or path.stem.startswith(f"{path.parent.name}_")
    ]

    assert repeating == []


@pytest.mark.decision("D388")
def test_the_map_of_the_house_names_every_room_and_top_folder() -> None:
    page = (ROOT / "docs" / "DEVELOPMENT.md").read_text(encoding="utf-8")

    missing = [f"adapters/{room}/" for room in ROOMS if f"`adapters/{room}/`" not in page]
    missing += [f"{top}/" for top in PACKAGE_FOLDERS if f"`{top}/`" not in page]
    assert missing == []


@pytest.mark.decision("D388")
def test_tests_mirror_the_package_with_the_kits_in_one_folder() -> None:
    tests = ROOT / "tests"
    allowed = {"kits", "project", "package", "__snapshots__"}
    folders = {
        path.relative_to(tests).parts[0]
        for path in tests.rglob("*.py")
        if len(path.relative_to(tests).parts) > 1
    }
    strays = [path.name for path in tests.glob("*.py") if path.name != "conftest.py"]
    kits_with_tests = [path.name for path in (tests / "kits").glob("test_*.py")]
    unmirrored = [
        str(path.relative_to(tests))
        for path in tests.rglob("test_*.py")
        if path.parent.relative_to(tests).parts[0] not in allowed
        and not (ROOT / path.parent.relative_to(tests)).is_dir()
    ]

    assert strays == []
    assert kits_with_tests == []
    assert unmirrored == []
    assert folders <= allowed | set(PACKAGE_FOLDERS)


@pytest.mark.decision("D388")
def test_test_file_names_are_unique_across_the_folders() -> None:
    names = Counter(path.name for path in (ROOT / "tests").rglob("test_*.py"))

    assert [name for name, count in names.items() if count > 1] == []


@pytest.mark.decision("D388")
def test_no_module_imports_a_test_module() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for top in ("tests", "bench", "examples")
        for path in (ROOT / top).rglob("*.py")
        if re.search(r"^\s*(from|import) test_\w+", path.read_text(encoding="utf-8"), re.M)
        and path.name != "test_store_contract_kit.py"  # its own module, in a child process
    ]

    assert offenders == []
