"""The built wheel installs exactly one top-level import package: ``aptix_pipeline``.

A host must be able to install us next to the PyPI packages ``validators`` and
``diagrams`` and next to its own ``engine`` module, so none of our folder names
may leak out as top-level packages.

The wheel installed into a fresh virtual environment gives an ``aptix`` command that
works: the environment sees exactly the distributions the wheel's metadata asks for
(with or without the ``http`` extra), linked file by file from the test environment,
so nothing is downloaded and nothing undeclared is importable.
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from repo import ROOT
from serve_process import free_port, serving


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel built from the repository, and what the build printed."""
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = out.glob("aptix_pipeline-*.whl")
    return wheel, run.stdout + run.stderr


@pytest.fixture(scope="module")
def wheel(built: tuple[Path, str]) -> Path:
    return built[0]


@pytest.mark.decision("D396")
def test_the_build_warns_of_no_folder_left_out_of_the_packages(built: tuple[Path, str]) -> None:
    assert "absent from the `packages` configuration" not in built[1]


def test_wheel_holds_only_the_aptix_pipeline_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    dist_info = {name for name in top_level if name.endswith(".dist-info")}

    assert top_level - dist_info == {"aptix_pipeline"}


def test_wheel_maps_the_folders_to_subpackages(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())

    rooms = [path.parent.name for path in (ROOT / "adapters").glob("*/__init__.py")]
    subpackages = ["contracts", "validators", "steps", "engine", "engine/replay", "adapters"]
    for subpackage in [*subpackages, *(f"adapters/{room}" for room in rooms), "testing"]:
        assert f"aptix_pipeline/{subpackage}/__init__.py" in names
    assert "aptix_pipeline/py.typed" in names
    assert "aptix_pipeline/adapters/config/default_config.toml" in names
    static = {path.name for path in (ROOT / "adapters" / "ui" / "static").iterdir()}
    assert {n.rpartition("/")[2] for n in names if "/ui/static/" in n} == static
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


def test_wheel_carries_the_licence_pyproject_names(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    (licence,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]

    text = zipfile.ZipFile(wheel).read(licence).decode()
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 The aptix-pipeline authors" in text


# --- the wheel in a fresh virtual environment -------------------------------------------


def _declared(wheel: Path, extras: frozenset[str]) -> set[str]:
    """The distributions installing the wheel with ``extras`` brings, by name (recursive)."""
    archive = zipfile.ZipFile(wheel)
    (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    headers = email.parser.Parser().parsestr(archive.read(meta).decode())
    wanted = [(Requirement(text), extras) for text in headers.get_all("Requires-Dist") or []]
    found: set[str] = set()
    while wanted:
        requirement, asked = wanted.pop()
        marker = requirement.marker
        if marker and not any(marker.evaluate({"extra": e}) for e in {"", *asked}):
            continue
        name = canonicalize_name(requirement.name)
        if name == "aptix-pipeline" or name in found:  # ours: only the test extra names it
            continue
        found.add(name)
        own = frozenset(requirement.extras)
        wanted += [(Requirement(text), own) for text in metadata.requires(name) or []]
    return found


def _fresh_venv(root: Path, wheel: Path, extras: frozenset[str]) -> Path:
    """A new virtual environment holding the wheel and, linked in, what it declares."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--no-deps", "--no-index", wheel], check=True)
    linked = root / "dependencies"
    for name in _declared(wheel, extras):
        distribution = metadata.distribution(name)
        for file in distribution.files or ():
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            target = linked / file
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(Path(str(distribution.locate_file(file))).resolve())
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    Path(purelib, "dependencies.pth").write_text(f"{linked}\n", encoding="utf-8")
    return venv / "bin"


def _aptix(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd), "XDG_DATA_HOME": str(cwd)}
    return subprocess.run(
        [bin_dir / "aptix", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def plain_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install aptix-pipeline``: the wheel and its base dependencies only."""
    return _fresh_venv(tmp_path_factory.mktemp("plain"), wheel, frozenset())


@pytest.mark.decision("D380")
def test_a_plain_install_runs_a_turn_with_the_aptix_command(
    plain_install: Path, tmp_path: Path
) -> None:
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    (tmp_path / "replies.json").write_text('[{"text": "hello"}]', encoding="utf-8")

    ran = _aptix(
        plain_install,
        "run",
        "request.json",
        "--llm-script",
        "replies.json",
        "--store",
        "memory",
        cwd=tmp_path,
    )

    assert ran.returncode == 0, ran.stderr
    assert '"Successful": true' in ran.stdout


def _makefile_value(name: str) -> str:
    """A variable of the repository's Makefile, as make expands it."""
    shown = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "--eval",
            f'show-value: ; @echo "$({name})"',
            "show-value",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return shown.stdout.strip()


@pytest.mark.decision("D642")
def test_make_install_tells_a_copy_installed_over_the_editable_one(plain_install: Path) -> None:
    check = _makefile_value("EDITABLE_CHECK")

    copy = subprocess.run([plain_install / "python", "-c", check], capture_output=True)
    editable = subprocess.run([sys.executable, "-c", check], capture_output=True)

    # `pip install '.[http]'` (the README's quick start) leaves a copy like the wheel's:
    # make install then installs the editable tree again; the suite's own is editable
    assert copy.returncode == 1, copy.stderr
    assert editable.returncode == 0, editable.stderr


@pytest.mark.decision("D380")
def test_a_plain_install_holds_no_framework_the_command_does_not_need(
    plain_install: Path, tmp_path: Path
) -> None:
    python = plain_install / "python"

    found = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util as u; print([m for m in ('fastapi', "
            "'openai', 'psycopg', 'opentelemetry.sdk') if u.find_spec(m.split('.')[0]) and "
            "u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )

    assert found.stdout.strip() == "[]"


@pytest.mark.decision("D381")
def test_serve_without_the_http_extra_says_which_extra_in_one_line(
    plain_install: Path, tmp_path: Path
) -> None:
    config = ROOT / "examples" / "quickstart" / "aptix.toml"

    served = _aptix(plain_install, "serve", "--config", str(config), cwd=tmp_path)

    assert served.returncode == 2
    assert served.stderr.count("\n") == 1
    assert "pip install 'aptix-pipeline[http]'" in served.stderr


@pytest.mark.decision("D381")
def test_console_spans_without_the_sdk_say_which_extra_in_one_line(
    plain_install: Path, tmp_path: Path
) -> None:
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    (tmp_path / "replies.json").write_text('[{"text": "hello"}]', encoding="utf-8")

    ran = subprocess.run(
        [
            plain_install / "aptix",
            "run",
            "request.json",
            "--llm-script",
            "replies.json",
            "--store",
            "memory",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OTEL_TRACES_EXPORTER": "console"},
    )

    assert ran.returncode == 2
    assert ran.stderr.strip().count("\n") == 0
    assert "pip install 'aptix-pipeline[cli]'" in ran.stderr


@pytest.fixture(scope="module")
def http_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install 'aptix-pipeline[http]'``: the wheel, its base dependencies and the extra."""
    return _fresh_venv(tmp_path_factory.mktemp("http"), wheel, frozenset({"http"}))


@pytest.mark.decision("D381")
def test_an_install_with_the_http_extra_serves(http_install: Path, tmp_path: Path) -> None:
    port = free_port()
    config = ROOT / "examples" / "quickstart" / "aptix.toml"
    env = {"PATH": f"{http_install}:/usr/bin:/bin", "HOME": str(tmp_path), "APTIX_KEY_ANA": "k"}
    command = [http_install / "aptix", "serve", "--config", config, "--port", str(port)]

    with serving(command, env, port=port, cwd=tmp_path, log=tmp_path / "serve.log") as served:
        answer = httpx.post(
            served.base + "/v1/agent/execute",
            json={"Instruction": "Review app.py"},
            headers={"Authorization": "Bearer k"},
            timeout=10,
        )

    assert answer.status_code == 200, answer.text
    assert answer.json()["Successful"] is True


def _openai_config(folder: Path) -> Path:
    path = folder / "openai.toml"
    path.write_text(
        '[store]\nurl = "memory"\n[model]\nkind = "openai"\nmodel = "m"\n'
        'base_url = "http://127.0.0.1:9/v1"\n'
        '[[auth.keys]]\norg = "acme"\nuser = "ana"\nkey_sha256 = "' + "0" * 64 + '"\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.decision("D381")
def test_an_openai_model_without_the_openai_extra_says_which_extra_in_one_line(
    plain_install: Path, tmp_path: Path
) -> None:
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    config = _openai_config(tmp_path)

    ran = _aptix(plain_install, "run", "request.json", "--config", str(config), cwd=tmp_path)

    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1
    assert "pip install 'aptix-pipeline[openai]'" in ran.stderr


@pytest.mark.decision("D381")
def test_serve_on_an_openai_model_without_its_extra_says_which_in_one_line(
    http_install: Path, tmp_path: Path
) -> None:
    config = _openai_config(tmp_path)

    refused = _aptix(http_install, "serve", "--config", str(config), cwd=tmp_path)

    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "pip install 'aptix-pipeline[openai]'" in refused.stderr
