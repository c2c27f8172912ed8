"""A real ``llama-server`` on loopback for the ``e2e`` tests (``make e2e``).

``LlamaServer(log_dir)`` starts the binary that ``kits/local_model.py`` built, on
127.0.0.1 at a free port, with the cached model, ``--jinja`` (the model's own chat
template), one slot and one compute thread (D502); ``start`` waits for ``/health`` to
answer 200. The server stops with ``stop`` (SIGTERM) or dies at once with ``kill``
(SIGKILL, a crash), and never outlives the test process (``PR_SET_PDEATHSIG``). Its
output goes to a log file in pytest's temporary folder, kept after the run (pytest
keeps its last three), that a failed start quotes.

``slot()`` is the server's one slot as ``GET /slots`` shows it, ``decoded()`` how many
tokens it generated for its last request, ``wait_idle`` waits for it to finish one.

- ``llama_server`` (session scope): one server with a 1024-token context, shared.
- ``own_llama_server``: a server for one test, which may kill it.

When the binary or the model is missing the tests fail with the command that
makes them (``make e2e``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import signal
import subprocess
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

CONTEXT_TOKENS: Final = 1024
"""The servers' context: small, so an overflow is cheap to provoke, and room for a
long reply that a test cancels."""
START_TIMEOUT_S: Final = 60.0
IDLE_TIMEOUT_S: Final = 60.0


def _die_with_parent() -> None:
    """In the server's process: get SIGKILL when the test process dies."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class LlamaServer:
    """One ``llama-server`` process; ``start`` then ``stop`` (or ``kill``)."""

    def __init__(self, log_dir: Path, context: int = CONTEXT_TOKENS) -> None:
        binary, model = server_path(), model_path()
        missing = [str(path) for path in (binary, model) if not path.is_file()]
        if missing:
            pytest.fail(
                f"the e2e tests need {' and '.join(missing)}: run `make e2e`", pytrace=False
            )
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._log = log_dir / f"llama-server-{self.port}.log"
        # One slot: /slots then says what the one request did. One compute thread: two
        # meet at a barrier for every operation of every token, and on a shared
        # two-core machine a descheduled partner stalls the other (D502).
        self._command = [
            str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--jinja", "-c", str(context), "--parallel", "1", "--threads", "1",
            "--threads-batch", "1", "--no-webui",
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
        pytest.fail(
            f"llama-server did not start ({' '.join(self._command)}; log {self._log}):\n{tail}"
        )

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

    def slot(self) -> dict[str, Any]:
        """The server's one slot, as ``GET /slots`` shows it."""
        (slot,) = self.get("/slots")
        return dict(slot)

    def busy(self) -> bool:
        """Whether the slot is working on a request."""
        return bool(self.slot()["is_processing"])

    def decoded(self) -> int:
        """How many tokens the slot generated for its last request (so far)."""
        return int(self.slot()["next_token"][0]["n_decoded"])

    async def wait_idle(self, poll_s: float = 0.05) -> None:
        """Until the slot is idle, asking every ``poll_s`` (a bound, not a measure)."""
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while self.busy():
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server still busy after {IDLE_TIMEOUT_S:.0f} s")
            await asyncio.sleep(poll_s)

    async def wait_busy(self) -> None:
        """Until the slot is working on a request."""
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while not self.busy():
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server took no request in {IDLE_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.02)

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


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One real server for the session's e2e tests."""
    server = LlamaServer(tmp_path_factory.mktemp("llama-server")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_llama_server(tmp_path: Path) -> Iterator[LlamaServer]:
    """A real server for one test alone (it may kill it)."""
    server = LlamaServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()
