"""uvicorn's HTTP/1.1 protocols with a read timeout: slow clients lose their connection.

uvicorn times out only an idle keep-alive connection (``timeout_keep_alive``); a
client that opens a connection and sends nothing, half a header, or half a body
holds it, and a task waiting on it, for as long as it likes. Here a client has
``read_timeout_seconds`` (``[server]``, docs/CONFIGURATION.md "Limits") to
send one whole request — its headers and its body — counted from the moment the
connection opens, or from a request's first byte on a kept-alive connection. When
the time is up and no response has begun, the client gets ``408 Request Timeout``
(``request_timeout`` in the errors' envelope of ``http/errors.py``) with
``Connection: close``; either way the connection is closed, and the app's
``receive`` answers ``http.disconnect``. Time the server itself holds the client
back (a pipelined request waiting its turn, a body the app has not read yet)
does not count.

``aptix serve`` runs uvicorn with ``http=PROTOCOL_PATH``, this module's
``ReadTimeoutProtocol`` (httptools when it is installed, else h11, as uvicorn's own
``auto``); the value
comes from the app's lifespan state (``READ_TIMEOUT_STATE``), which ``create_app``
fills from the configuration. ``uvicorn --factory`` takes the same ``--http``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from aptix_pipeline.contracts import ErrorCode, InvokeError

from .errors import error_body

__all__ = [
    "DEFAULT_READ_TIMEOUT_SECONDS",
    "PROTOCOL_PATH",
    "READ_TIMEOUT_STATE",
    "H11ReadTimeoutProtocol",
    "ReadTimeoutProtocol",
]

PROTOCOL_PATH = "aptix_pipeline.adapters.http.protocol:ReadTimeoutProtocol"
"""What ``aptix serve`` gives uvicorn as ``http`` (``--http`` of the uvicorn command)."""
READ_TIMEOUT_STATE = "aptix.read_timeout_seconds"
"""The lifespan state key holding the read timeout in seconds (``0`` or ``None``: none)."""
DEFAULT_READ_TIMEOUT_SECONDS = 15.0
"""``[server] read_timeout_seconds`` when nothing says otherwise."""

_MESSAGE = error_body(
    [InvokeError(code=ErrorCode.REQUEST_TIMEOUT, message="the request was not received in time")]
)
"""The 408's body: the errors' envelope of ``http/errors.py``."""


class _ReadTimer:
    """The read timeout of one connection; ``protocol`` is the uvicorn protocol it guards.

    ``headers_done`` says whether the request being read has its headers complete (so
    ``protocol.cycle`` is that request's).

    One loop timer at most per connection, armed lazily: ``start`` sets the request's
    deadline and arms the timer only when none is pending, ``stop`` only forgets the
    deadline, and a timer that fires early (the deadline moved on meanwhile) re-arms
    itself for the current one, or does nothing when no request is being read. So a
    kept-alive connection whose requests arrive whole costs a timer every
    ``seconds``, not one made and cancelled per request (about 4 µs each).
    """

    __slots__ = ("_deadline", "_handle", "headers_done", "protocol", "seconds")

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        seconds = protocol.app_state.get(READ_TIMEOUT_STATE, DEFAULT_READ_TIMEOUT_SECONDS)
        self.seconds: float | None = float(seconds) if seconds else None
        self._handle: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self.headers_done = False

    @property
    def running(self) -> bool:
        """Whether a request is being read against the clock."""
        return self._deadline is not None

    def start(self) -> None:
        """A request begins: the client has ``seconds`` to send all of it."""
        self.headers_done = False
        if self.seconds is not None and self._deadline is None:
            loop = self.protocol.loop
            self._deadline = loop.time() + self.seconds
            if self._handle is None:
                self._handle = loop.call_at(self._deadline, self._fire)

    def stop(self) -> None:
        """The request is read: its clock stops (the timer, if pending, will find no
        deadline and end)."""
        self._deadline = None

    def close(self) -> None:
        """The connection is gone: no timer outlives it."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:  # no request is being read
            return
        loop = self.protocol.loop
        if loop.time() < deadline:  # a later request's clock: wait for its deadline
            self._handle = loop.call_at(deadline, self._fire)
            return
        self._deadline = None
        self._expired()

    def _expired(self) -> None:
        protocol = self.protocol
        transport = protocol.transport
        if transport is None or transport.is_closing():
            return
        if protocol.flow is not None and protocol.flow.read_paused:
            self.start_over()  # the server holds the client back: not the client's time
            return
        cycle = protocol.cycle
        if self.headers_done:  # the app has the request: it may not answer any more
            if not cycle.response_started:
                self._answer_408(protocol)
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        elif cycle is not None and not cycle.response_complete:
            self.start_over()  # a pipelined request behind one still being answered
            return
        else:
            self._answer_408(protocol)
        transport.close()

    def start_over(self) -> None:
        """Give the request a fresh ``seconds`` (its headers state is kept)."""
        done = self.headers_done
        self._deadline = None
        self.start()
        self.headers_done = done

    @staticmethod
    def _answer_408(protocol: Any) -> None:
        head = [b"HTTP/1.1 408 Request Timeout\r\n"]
        for name, value in protocol.server_state.default_headers:
            head.append(b"%s: %s\r\n" % (name, value))
        head.append(b"content-type: application/json\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_MESSAGE))
        protocol.transport.write(b"".join(head) + _MESSAGE)


class H11ReadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with the read timeout (module docstring)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Open: the first request's clock starts now."""
        super().connection_made(transport)
        self._read_timer = _ReadTimer(self)
        self._read_timer.start()

    def data_received(self, data: bytes) -> None:
        """Bytes of a request: start its clock at its first byte, stop it at its last."""
        timer = self._read_timer
        if not timer.running and self.conn.their_state is h11.IDLE:
            timer.start()
        super().data_received(data)
        state = self.conn.their_state
        timer.headers_done = state is not h11.IDLE
        if state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
            timer.stop()

    def connection_lost(self, exc: Exception | None) -> None:
        """Gone: no timer outlives the connection."""
        self._read_timer.close()
        super().connection_lost(exc)


ReadTimeoutProtocol: type[asyncio.Protocol]
"""The protocol ``aptix serve`` runs: httptools' when installed, else h11's."""

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - uvicorn without httptools
    ReadTimeoutProtocol = H11ReadTimeoutProtocol
else:

    class HttpToolsReadTimeoutProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with the read timeout (module docstring)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            """Open: the first request's clock starts now."""
            super().connection_made(transport)
            self._read_timer = _ReadTimer(self)
            self._read_timer.start()

        def on_message_begin(self) -> None:
            """A request's first byte: start its clock (if the connection's is not running)."""
            super().on_message_begin()
            self._read_timer.start()

        def on_headers_complete(self) -> None:
            """The request's cycle exists from here on."""
            super().on_headers_complete()
            self._read_timer.headers_done = True

        def on_message_complete(self) -> None:
            """The request's last byte: stop its clock."""
            super().on_message_complete()
            self._read_timer.stop()

        def connection_lost(self, exc: Exception | None) -> None:
            """Gone: no timer outlives the connection."""
            self._read_timer.close()
            super().connection_lost(exc)

    ReadTimeoutProtocol = HttpToolsReadTimeoutProtocol
    __all__ += ["HttpToolsReadTimeoutProtocol"]
