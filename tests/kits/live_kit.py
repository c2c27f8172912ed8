"""Reading the live page's event stream (``/live/events``) as a browser's EventSource does.

``LiveEvents`` reads a Server-Sent Events response in a thread of its own, through a
real HTTP client, and keeps each event (name, JSON data) in order; ``wait_for``
waits until one matches, ``WAIT`` at most (generous, never asserted as a timing).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from server_thread import WAIT

__all__ = ["LiveEvents", "live_events"]


@dataclass
class LiveEvents:
    """The events read so far, and a condition to wait on them."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    status: int | None = None

    def add(self, name: str, data: dict[str, Any]) -> None:
        with self.changed:
            self.events.append((name, data))
            self.changed.notify_all()

    def wait_for(
        self, match: Callable[[str, dict[str, Any]], bool], wait: float = WAIT
    ) -> dict[str, Any]:
        """The data of the first event that ``match``es, once it has come."""
        deadline = time.monotonic() + wait
        with self.changed:
            while True:
                for name, data in self.events:
                    if match(name, data):
                        return data
                left = deadline - time.monotonic()
                assert left > 0, f"no matching event among {self.events}"
                self.changed.wait(left)

    def of(self, name: str) -> list[dict[str, Any]]:
        """The data of every event named ``name`` so far."""
        with self.changed:
            return [data for n, data in self.events if n == name]


def _read(response: httpx.Response, into: LiveEvents) -> None:
    name, data = "message", []
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            into.add(name, json.loads("\n".join(data)))
            name, data = "message", []


@contextmanager
def live_events(client: httpx.Client, path: str) -> Iterator[LiveEvents]:
    """``path`` read as an event stream by ``client`` while the block runs; the block
    begins once the page is subscribed (its ``ready`` event came)."""
    events = LiveEvents()
    stop = threading.Event()

    def read() -> None:
        try:
            with client.stream("GET", path, timeout=httpx.Timeout(WAIT, read=None)) as response:
                events.status = response.status_code
                if response.status_code == 200:
                    _read(response, events)
                else:
                    events.add("refused", {"status": response.status_code})
        except (httpx.HTTPError, RuntimeError):
            if not stop.is_set():
                raise

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        events.wait_for(lambda name, _: name in ("ready", "refused"))
        yield events
    finally:
        stop.set()
        client.close()  # ends the stream; the reader thread then stops
        thread.join(WAIT)
