"""Streamed answers of ``POST /v1/agent/execute``: Server-Sent Events (AGN-034 §4.7, DESIGN.md R11).

- **Which requests.** A request is answered as ``text/event-stream`` when its body
  has ``"Stream": true`` (AGN-034 §4.7), or when its ``Accept`` header names
  ``text/event-stream`` with a q above 0: a continuation cannot carry the flag
  (AGN-034 §2.2), so its client asks this way. Any other request gets JSON.
- **The format.** Each item of ``Pipeline.stream`` is one event: ``id:`` (1, 2, 3…
  within the response), ``event:`` (the item's ``name``: ``progress``, ``delta``,
  ``result``) and one ``data:`` line of JSON (the item's ``to_json()``; the
  ``result`` event's data is the ``InvokeResult`` JSON the unstreamed answer
  would have). ``result`` comes last, once. Events that come together are
  written together. While nothing else is sent for ``[server]
  sse_keepalive_seconds``, a ``: keep-alive`` comment is.
- **The status.** The status line goes out before the first event, so the items
  are held until the turn's model call begins (``ModelCallStarted``: past the
  ``llm_client`` guard, whose budget check may refuse the call): a request refused
  before that — not JSON, breaking AGN-034, a bad ``Idempotency-Key``, an unknown
  session or turn, tool results that do not match, a budget the call would exceed
  (429, ``Retry-After``) — or answered from a stored refusal gets the same JSON
  answer and status as without streaming. From the model call on, the status is
  200 and the ``result`` event says how the turn ended. A stored successful answer
  (a retry) is streamed: its one event is the ``result``.
- **A client that leaves.** The response closes its ``TurnStream`` however it ends,
  shielded from the cancellation that ends it: a turn still running is cancelled
  (``DESIGN/streaming/consumer-gone``) and stores nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import anyio
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from aptix_pipeline.adapters.ui import (
    EVENT_STREAM,
    KEEP_ALIVE,
    KEEPALIVE_SECONDS,
    SSE_HEADERS,
)
from aptix_pipeline.engine import (
    ModelCallStarted,
    StreamDelta,
    StreamItem,
    StreamProgress,
    StreamResult,
    TurnStream,
)

__all__ = [
    "DEFAULT_SSE_KEEPALIVE_SECONDS",
    "EVENT_STREAM",
    "KEEP_ALIVE",
    "EventStreamResponse",
    "accepts_event_stream",
    "hold_until_begun",
    "sse_event",
]

DEFAULT_SSE_KEEPALIVE_SECONDS = KEEPALIVE_SECONDS
"""``[server] sse_keepalive_seconds`` when nothing says otherwise."""
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def accepts_event_stream(values: Iterable[str]) -> bool:
    """Whether ``Accept`` header values name ``text/event-stream`` with a q above 0.

    Only the type itself counts: ``*/*`` and ``text/*`` accept JSON as well, and get it.
    A malformed q counts as 0.
    """
    for value in values:
        for media_range in value.split(","):
            kind, *parameters = media_range.split(";")
            if kind.strip().lower() != EVENT_STREAM:
                continue
            quality = 1.0
            for parameter in parameters:
                name, _, given = parameter.partition("=")
                if name.strip().lower() == "q":
                    try:
                        quality = float(given.strip())
                    except ValueError:
                        quality = 0.0
            if 0 < quality <= 1:
                return True
    return False


_Item = TypeVar("_Item")
_Given = TypeVar("_Given", covariant=True)


def _begins(item: StreamItem) -> bool:
    """Whether ``item`` is the first the client may see: the model call has begun (its
    guard, the budgets' check among its rules, passed)."""
    if isinstance(item, StreamProgress):
        return isinstance(item.event, ModelCallStarted)
    return isinstance(item, StreamDelta)


class _HeldStream(Protocol[_Given]):
    """A stream of items that can be closed: a ``TurnStream``, a ``DurableStream``."""

    def __anext__(self) -> Awaitable[_Given]: ...

    async def aclose(self) -> None: ...


async def hold_until_begun(
    stream: _HeldStream[_Item],
    begins: Callable[[_Item], bool] = _begins,  # type: ignore[assignment]
) -> list[_Item]:
    """The stream's items up to the one that ``begins`` it, or up to its result.

    When the last item held is a ``StreamResult``, the turn ended before its model
    call: the caller answers as it would without streaming. The stream is closed
    (its turn cancelled) if this is cancelled or fails. ``begins`` tells the item the
    client may see first (default: an in-process stream's, ``_begins``).
    """
    held: list[_Item] = []
    try:
        while True:
            item = await anext(stream)
            held.append(item)
            if isinstance(item, StreamResult) or begins(item):
                return held
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
        raise


def sse_event(number: int, item: StreamItem) -> bytes:
    """One item as a server-sent event with id ``number``.

    JSON never holds a raw line break, so ``data`` is one line. Text that has no
    UTF-8 form (a lone surrogate from a model) is sent as its ``\\udXXX`` escape.
    """
    data = item.result.to_json() if isinstance(item, StreamResult) else _JSON.encode(item.to_json())
    return f"id: {number}\nevent: {item.name}\ndata: {data}\n\n".encode("utf-8", "backslashreplace")


_READ_AHEAD = 64
"""The most items taken from a turn's stream and not yet sent: past it the stream
keeps them (joining text deltas), and the turn waits before its commit (a slow
client holds the turn back, as it holds the stream's own consumer back)."""


class _Relay:
    """A turn's items on their way to the client, and the keep-alive clock.

    A task reads the stream a little ahead of the response (``_read``, up to
    ``_READ_AHEAD`` items); each time the response asks (``next_chunk``) it gets
    every item read so far as one chunk, so items that come together go out in one
    write. One timer per response, re-armed only when it fires, tells when the
    response has been silent for ``keepalive_seconds``.
    """

    __slots__ = (
        "_failure",
        "_items",
        "_keepalive",
        "_keepalive_due",
        "_loop",
        "_number",
        "_reader",
        "_room",
        "_sent_at",
        "_stream",
        "_timer",
        "_wake",
        "ended",
    )

    def __init__(
        self, stream: TurnStream, held: Sequence[StreamItem], keepalive_seconds: float
    ) -> None:
        self._stream = stream
        self._items: deque[StreamItem] = deque(held)
        self._number = 0
        self._keepalive = keepalive_seconds
        self._loop = asyncio.get_running_loop()
        self._sent_at = self._loop.time()
        self._keepalive_due = False
        self._failure: Exception | None = None
        self._wake: asyncio.Future[None] | None = None
        """Set when the response waits for an item or a keep-alive."""
        self._room: asyncio.Future[None] | None = None
        """Set when the reader waits for the response to take what it read."""
        self._reader: asyncio.Task[None] | None = None
        self.ended = False
        """Whether the last chunk given holds the ``result`` event (the stream's end)."""
        if not (held and isinstance(held[-1], StreamResult)):
            self._reader = self._loop.create_task(self._read())
        self._timer = self._loop.call_later(keepalive_seconds, self._tick)

    def stop(self) -> None:
        """Stop reading and the clock (the stream itself is closed by its owner)."""
        self._timer.cancel()
        if self._reader is not None:
            self._reader.cancel()

    async def _read(self) -> None:
        items = self._items
        try:
            while True:
                if len(items) >= _READ_AHEAD:
                    self._room = self._loop.create_future()
                    await self._room
                    continue
                item = await anext(self._stream)
                items.append(item)
                _resolve(self._wake)
                if isinstance(item, StreamResult):
                    return
        except Exception as error:  # the turn's own failure: the response raises it
            self._failure = error
            _resolve(self._wake)

    def _tick(self) -> None:
        idle = self._loop.time() - self._sent_at
        if idle >= self._keepalive:
            self._keepalive_due = True
            _resolve(self._wake)
            idle = 0.0
        self._timer = self._loop.call_later(self._keepalive - idle, self._tick)

    async def next_chunk(self) -> bytes | None:
        """The next bytes to send: every item read so far, or a keep-alive; ``None``
        once the result has been sent."""
        while not self._items:
            if self._failure is not None:
                raise self._failure
            if self._keepalive_due:
                self._keepalive_due = False
                self._sent_at = self._loop.time()
                return KEEP_ALIVE
            if self._reader is None or self._reader.done():
                return None
            self._wake = self._loop.create_future()
            try:
                await self._wake
            finally:
                self._wake = None
        parts = []
        while self._items:
            self._number += 1
            item = self._items.popleft()
            parts.append(sse_event(self._number, item))
            if isinstance(item, StreamResult):
                self.ended = True
        _resolve(self._room)
        self._sent_at = self._loop.time()
        self._keepalive_due = False
        return b"".join(parts)


def _resolve(waiter: asyncio.Future[None] | None) -> None:
    """Wake whoever waits on ``waiter``, if anyone does."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class _ClientWatch:
    """Cancels the task sending a response when its client leaves, while it sends."""

    __slots__ = ("sending", "stopped", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.sending = True
        self.stopped = False
        """Whether this cancelled the sending task."""

    async def run(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if self.sending:
            self.stopped = True
            self.task.cancel()


class EventStreamResponse(StreamingResponse):
    """A streamed turn as ``text/event-stream``: the ``held`` items, then the rest.

    ``keepalive_seconds`` is the longest the response stays silent before it sends
    ``KEEP_ALIVE``. However the response ends — the result sent, the client gone
    (Starlette cancels the response), or a failure — its ``TurnStream`` is closed,
    and the close is shielded from that cancellation so that a turn still running
    is cancelled and rolled back before the response is done. A response that is
    never sent leaves its stream to be dropped, which cancels the turn too.
    """

    media_type = EVENT_STREAM

    def __init__(
        self,
        stream: TurnStream,
        held: Sequence[StreamItem],
        *,
        keepalive_seconds: float,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._stream = stream
        self._held = held
        self._keepalive = keepalive_seconds
        super().__init__(_no_body(), headers={**SSE_HEADERS, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the events while one asyncio task watches for the client leaving.

        Starlette's own response runs the sending and the watching in an anyio task
        group, which costs a streamed turn more server CPU than the rest of its
        delivery; a client that leaves cancels the sending just the same here.
        """
        version = scope.get("asgi", {}).get("spec_version", "2.0")
        if tuple(map(int, version.split("."))) >= (2, 4):  # send raises when the client left
            try:
                await self.stream_response(send)
            except OSError:
                raise ClientDisconnect() from None
            return
        task = asyncio.current_task()
        assert task is not None
        watch = _ClientWatch(task)
        watcher = asyncio.get_running_loop().create_task(watch.run(receive))
        try:
            try:
                await self.stream_response(send)
            finally:
                watch.sending = False
                watcher.cancel()
            if watch.stopped:  # the client left as the last bytes went: take its cancel here
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            if not watch.stopped or task.uncancel() > 0:
                raise  # cancelled from outside as well

    async def stream_response(self, send: Send) -> None:
        """Send the events, the last with the end of the body; close the turn's stream
        however sending ends."""
        relay: _Relay | None = None
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            relay = _Relay(self._stream, self._held, self._keepalive)
            while (chunk := await relay.next_chunk()) is not None:
                last = relay.ended  # the result: the end of the body goes with it
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if last:
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                if relay is not None:
                    relay.stop()
                await self._stream.aclose()


async def _no_body() -> AsyncGenerator[bytes, None]:
    """The body Starlette is given: never read (``stream_response`` sends the events)."""
    return
    yield b""  # pragma: no cover - makes this an async generator
