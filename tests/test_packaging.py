"""The built wheel installs exactly one top-level import package: ``aptix_pipeline``.

A host must be able to install us next to the PyPI packages ``validators`` and
``diagrams`` and next to its own ``engine`` module, so none of our folder names
may leak out as top-level packages.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (built,) = out.glob("aptix_pipeline-*.whl")
    return built


def test_wheel_holds_only_the_aptix_pipeline_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    dist_info = {name for name in top_level if name.endswith(".dist-info")}

    assert top_level - dist_info == {"aptix_pipeline"}


def test_wheel_maps_the_folders_to_subpackages(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())

    for subpackage in ("contracts", "validators", "steps", "engine", "engine/replay", "adapters"):
        assert f"aptix_pipeline/{subpackage}/__init__.py" in names
    assert "aptix_pipeline/py.typed" in names
    assert not [n for n in names if n.startswith(("aptix_pipeline/tests", "tests/"))]


def test_wheel_declares_one_top_level_name(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (top_level,) = [n for n in archive.namelist() if n.endswith("top_level.txt")]

    assert archive.read(top_level).decode().split() == ["aptix_pipeline"]


def test_top_level_exports_resolve_lazily() -> None:
    import aptix_pipeline

    exported = {name: getattr(aptix_pipeline, name) for name in aptix_pipeline.__all__}

    assert exported["parse_request"]('{"Instruction": "hi"}').successful
    assert set(aptix_pipeline.__all__) - {"__version__"} == set(aptix_pipeline._EXPORTS)


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    import aptix_pipeline

    with pytest.raises(AttributeError, match="no_such_name"):
        aptix_pipeline.no_such_name  # type: ignore[attr-defined]  # noqa: B018
