"""``make e2e``'s machinery, checked by ``make test`` without the build (D510, D511).

The e2e tests are selected by ``--e2e`` alone; the server and the model live in a
cache outside the clone, found by the documented variables, and a cached server is
used as it is while a half-made one (a temporary folder) is not taken for it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import local_model
import pytest
from repo import ROOT

E2E_TESTS = "tests/adapters/models/test_openai_local_model.py"


def _collected(*options: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.decision("D510")
def test_the_e2e_tests_run_only_under_the_e2e_option() -> None:
    normal = _collected(E2E_TESTS, "tests/project/test_layout.py")
    selected = _collected("--e2e", E2E_TESTS, "tests/project/test_layout.py")

    assert normal
    assert not any(line.startswith(E2E_TESTS) for line in normal)
    assert selected
    assert all(line.startswith(E2E_TESTS) for line in selected)


@pytest.mark.decision("D511")
def test_the_cache_is_outside_the_clone_and_found_by_the_documented_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("APTIX_E2E_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert local_model.cache_root() == tmp_path / "home" / ".cache" / "aptix-pipeline"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert local_model.cache_root() == tmp_path / "xdg" / "aptix-pipeline"
    monkeypatch.setenv("APTIX_E2E_CACHE", str(tmp_path / "given"))

    assert local_model.cache_root() == tmp_path / "given"
    assert local_model.server_path().parent.name == (
        f"llama-server-{local_model.LLAMA_VERSION}-{local_model.BUILD_TAG}"
    )


@pytest.mark.decision("D511")
def test_a_cached_server_is_used_and_a_half_made_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APTIX_E2E_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", "")  # no cmake: a build would fail at once
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-venv" / "python"))
    interrupted = tmp_path / f".{local_model.server_path().parent.name}-x1y2"
    (interrupted / "out").mkdir(parents=True)
    (interrupted / "out" / "llama-server").write_bytes(b"half")

    with pytest.raises(local_model.BuildError, match="cmake is not installed"):
        local_model.ensure_server(say=False)

    built = local_model.server_path()
    built.parent.mkdir()
    built.write_bytes(b"built")
    assert local_model.ensure_server(say=False) == built  # no tool needed: nothing to build


@pytest.mark.decision("D511")
def test_a_model_named_by_the_environment_must_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APTIX_E2E_MODEL", str(tmp_path / "missing.gguf"))

    with pytest.raises(local_model.BuildError, match="APTIX_E2E_MODEL names"):
        local_model.ensure_model(say=False)
