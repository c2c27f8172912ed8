"""An ASGI app under a real uvicorn server on 127.0.0.1, in a thread of the test process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from serve_process import free_port

__all__ = ["WAIT", "server_thread"]

WAIT = 20.0
"""How long a test waits for a server to start or stop: generous, never asserted."""


@contextmanager
def server_thread(app: Any, **config: Any) -> Iterator[int]:
    """``app`` served by uvicorn (``config``: more ``uvicorn.Config`` options); its port.

    The server has started when the block begins, and is asked to exit and joined
    when it ends.
    """
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **config
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT
        while not server.started:
            assert thread.is_alive(), "the server stopped while starting"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(WAIT)
