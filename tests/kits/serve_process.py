"""An ``aptix serve`` (or any server command) as a real process on 127.0.0.1, for tests.

``serving(argv, env)`` starts the command, waits until ``GET /healthz`` answers 200,
yields the base URL and the path of its log (stdout and stderr), and stops it when
the block ends. ``free_port()`` finds a port to give it. ``stop_detached(printed)``
stops the servers an ``aptix serve --detach`` started, with the ``kill PID`` it printed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

__all__ = ["Served", "free_port", "serving", "stop_detached"]

WAIT = 30.0
"""How long a test waits for the server to come up or go down: generous, never asserted."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on just now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class Served:
    """A running server: its base URL and the file its output goes to."""

    def __init__(self, base: str, log: Path) -> None:
        self.base = base
        self.log = log

    def output(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def serving(
    argv: Sequence[object],
    env: Mapping[str, str],
    *,
    port: int,
    cwd: Path,
    log: Path,
    wait: bool = True,
) -> Iterator[Served]:
    """``argv`` running in ``cwd`` with ``env``, healthy on ``port`` (unless not ``wait``:
    started, as a shell's ``&`` starts it); stopped afterwards."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(arg) for arg in argv], stdout=out, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd
        )
    served = Served(f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + WAIT
        while wait:
            assert process.poll() is None, served.output()
            try:
                if httpx.get(served.base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "no health: " + served.output()
            time.sleep(0.1)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


DETACHED = re.compile(r"stop it: kill (\d+)")
"""The end of the line ``aptix serve --detach`` prints once its server answers."""


def _gone(pid: int) -> bool:
    """Whether process ``pid`` ended (a zombie no one reaps yet counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def stop_detached(printed: str) -> list[int]:
    """Stop each server whose ``kill PID`` is in ``printed``, as its line says, and wait
    until it has ended; their pids."""
    pids = [int(pid) for pid in DETACHED.findall(printed)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + WAIT
    for pid in pids:
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
    return pids
