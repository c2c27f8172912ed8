"""``aptix worker`` as a real process, and service configurations with ``[temporal]``.

``aptix_worker(config, env)`` starts ``aptix worker --config CONFIG``, waits for its
``ready`` line, yields the process and its log, and stops it (SIGTERM) when the
block ends. ``temporal_table(address, task_queue)`` is the ``[temporal]`` table of
a configuration.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from cli_kit import APTIX

__all__ = ["READY", "Worker", "aptix_worker", "temporal_table"]

READY = "aptix worker: ready"
"""The start of the line a worker writes once it serves."""
WAIT = 30.0
"""How long a test waits for a worker to start or stop: generous, never asserted."""


def temporal_table(address: str, task_queue: str, more: str = "") -> str:
    """``[temporal]`` for ``address`` and ``task_queue`` (a short heartbeat), and ``more``."""
    return (
        f'[temporal]\naddress = "{address}"\ntask_queue = "{task_queue}"\n'
        f"heartbeat_seconds = 2\n{more}\n"
    )


class Worker:
    """A running ``aptix worker``: its process and the file its output goes to."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        """SIGTERM, and its exit code (killed after ``WAIT``)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=5)


@contextmanager
def aptix_worker(
    config: Path, env: Mapping[str, str] | None = None, *args: str
) -> Iterator[Worker]:
    """``aptix worker --config CONFIG ARGS`` in the configuration's folder, ready."""
    log = config.parent / f"worker-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(APTIX), "worker", "--config", str(config), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=config.parent,
        )
    running = Worker(process, log)
    try:
        deadline = time.monotonic() + WAIT
        while READY not in running.output():
            assert process.poll() is None, running.output()
            assert time.monotonic() < deadline, "not ready: " + running.output()
            time.sleep(0.05)
        yield running
    finally:
        running.stop()
