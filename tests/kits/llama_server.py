"""A real ``llama-server`` on loopback for the ``e2e`` tests (``make e2e``).

``LlamaServer(context=...)`` starts the binary that ``kits/local_model.py`` built, on
127.0.0.1 at a free port, with the cached model, ``--jinja`` (the model's own chat
template) and one slot; ``start`` waits for ``/health`` to answer 200. The server
stops with ``stop`` (SIGTERM) or dies at once with ``kill`` (SIGKILL, a crash), and
never outlives the test process (``PR_SET_PDEATHSIG``). Its output goes to a log
file that a failed start quotes.

- ``llama_server`` (session scope): one server with a 512-token context, shared.
- ``own_llama_server``: a server for one test, which may kill it.

When the binary or the model is missing the tests fail with the command that
makes them (``make e2e``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from local_model import model_path, server_path
from serve_process import free_port

__all__ = ["CONTEXT_TOKENS", "LlamaServer", "llama_server", "own_llama_server"]

CONTEXT_TOKENS: Final = 512
"""The shared server's context: small, so an overflow is cheap to provoke."""
START_TIMEOUT_S: Final = 60.0


def _die_with_parent() -> None:
    """In the server's process: get SIGKILL when the test process dies."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class LlamaServer:
    """One ``llama-server`` process; ``start`` then ``stop`` (or ``kill``)."""

    def __init__(self, context: int = CONTEXT_TOKENS) -> None:
        binary, model = server_path(), model_path()
        missing = [str(path) for path in (binary, model) if not path.is_file()]
        if missing:
            pytest.fail(
                f"the e2e tests need {' and '.join(missing)}: run `make e2e`", pytrace=False
            )
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        self._command = [
            str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--jinja", "-c", str(context), "--parallel", "1", "--threads", "2",
            "--no-webui",
        ]  # fmt: skip
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LlamaServer:
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                self._command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # the server must not outlive the tests
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            if self._healthy():
                return self
            time.sleep(0.1)
        self.kill()
        tail = "\n".join(self.log().splitlines()[-20:])
        pytest.fail(f"llama-server did not start ({' '.join(self._command)}):\n{tail}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.root_url}/health", timeout=2) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def get(self, path: str) -> Any:
        """``GET path`` of the server's own API, as JSON."""
        with urllib.request.urlopen(f"{self.root_url}{path}", timeout=10) as answer:
            return json.load(answer)

    def log(self) -> str:
        return self._log.read_text(errors="replace")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the server dies as a crashed one does, mid-reply if it is writing one."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """One real server for the session's e2e tests."""
    server = LlamaServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_llama_server() -> Iterator[LlamaServer]:
    """A real server for one test alone (it may kill it)."""
    server = LlamaServer().start()
    try:
        yield server
    finally:
        server.stop()
