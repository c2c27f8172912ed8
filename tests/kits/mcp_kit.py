"""Real MCP servers for the tests (``mcp_demo_server.py``, written with the official SDK):
the stdio server as a ``StdioServer``, the HTTP one started on a loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aptix_pipeline.adapters.tools import HttpServer, StdioServer

DEMO_SERVER = Path(__file__).with_name("mcp_demo_server.py")


def stdio_demo(name: str = "demo", **more: Any) -> StdioServer:
    """The demo server over stdio, its tools offered in mode ``general``."""
    more.setdefault("modes", ("general",))
    return StdioServer(name=name, command=sys.executable, args=(str(DEMO_SERVER), "stdio"), **more)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def http_demo(env: Mapping[str, str] | None = None) -> Iterator[str]:
    """The demo server over streamable HTTP on loopback: its URL, while it runs."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(DEMO_SERVER), "http", str(port)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("the demo HTTP server exited") from None
                time.sleep(0.1)
        else:
            raise RuntimeError("the demo HTTP server did not listen within 30 s")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def http_demo_server(url: str, name: str = "web", **more: Any) -> HttpServer:
    """The HTTP demo server at ``url``, its tools offered in mode ``general``."""
    more.setdefault("modes", ("general",))
    return HttpServer(name=name, url=url, **more)


def children_of(pid: int) -> Sequence[int]:
    """The live child processes of ``pid`` (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found
