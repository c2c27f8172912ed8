"""``/live/events``: the live view's events as Server-Sent Events (docs/UI.md "The live view").

The live page opens it with ``EventSource`` (``static/ui_live.js``). It sends
``ready`` once the page is subscribed to the ``LiveHub`` (``ui/live_hub.py``), then
each event the hub publishes that is the page's to see: ``turn`` (a running turn's
start, steps, model and tool calls, end), ``text`` (the next piece of its text),
``stored`` (a turn was committed: read the feed now), and ``lagged`` when the page
fell ``LIVE_QUEUE`` events behind and missed some. A ``: keep-alive`` comment goes
out after ``KEEPALIVE_SECONDS`` of silence, and a page that leaves is unsubscribed
at once (its disconnect is watched, not only found at the next write).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Final

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .live_hub import LiveHub

__all__ = ["EVENT_STREAM", "KEEPALIVE_SECONDS", "KEEP_ALIVE", "SSE_HEADERS", "LiveEventsResponse"]

# The Server-Sent Events basics the HTTP room's streamed answers share (http/sse.py
# imports them: the HTTP room may import this one, not the other way round).
KEEPALIVE_SECONDS: Final = 15.0
"""The longest a stream stays silent: a comment then keeps proxies from closing it."""
EVENT_STREAM: Final = "text/event-stream"
"""The media type of an event stream."""
KEEP_ALIVE: Final = b": keep-alive\n\n"
"""The comment sent while a stream has nothing else to say."""
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""No cache keeps a copy, no proxy (nginx's ``X-Accel-Buffering``) holds events back."""


def _event(name: str, data: object) -> bytes:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {name}\ndata: {text}\n\n".encode()


class LiveEventsResponse(Response):
    """The hub's events for one page: those of ``owner`` (org, user), or every one
    (``None``: the standalone page); ``store`` is followed for its commits when it
    announces them (``LiveHub.follow_notices``)."""

    media_type = EVENT_STREAM

    def __init__(
        self,
        hub: LiveHub,
        owner: tuple[str, str] | None,
        store: object,
        headers: dict[str, str],
        keepalive_seconds: float = KEEPALIVE_SECONDS,
    ) -> None:
        super().__init__(headers={**headers, **SSE_HEADERS}, media_type=self.media_type)
        # A stream has no length: the events go until the page leaves.
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self._hub, self._owner, self._store = hub, owner, store
        self._keepalive = keepalive_seconds

    async def _chunks(self) -> AsyncGenerator[bytes, None]:
        with self._hub.subscribe(self._owner) as subscription:
            await self._hub.follow_notices(self._store)
            yield b"retry: 1000\n\n" + _event("ready", {"watching": self._hub.watching})
            while True:
                event = await subscription.next(self._keepalive)
                if subscription.lagged:
                    subscription.lagged = False
                    yield _event("lagged", {"missed": "some events did not fit the queue"})
                if event is None:
                    yield KEEP_ALIVE
                else:
                    yield _event(event.name, event.data)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with anyio.create_task_group() as group:

            async def gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(gone)
            chunks = self._chunks()
            try:
                async for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except OSError:  # the connection went away while a chunk was sent
                pass
            finally:
                await chunks.aclose()
                group.cancel_scope.cancel()
