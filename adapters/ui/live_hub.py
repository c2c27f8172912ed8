"""The live view's events: turns this process runs, followed as they run, and turns
any process commits, announced as they commit (docs/UI.md "The live view").

A ``LiveHub`` fans events out to the live pages that watch (``subscribe``), each
one's own or every caller's. What it carries:

- ``turn`` events of the turns this process runs (``aptix serve``): the hub's
  ``listener`` is a subscriber of every turn's event stream (DESIGN.md "One event
  stream"), so a turn's start, steps, model calls, tool calls, faults and end are
  published as they happen, in ``progress_json``'s form (no user content unless the
  pipeline captures it). It does not ask for the model's text, so no turn is
  streamed because a page watches; ``tap`` adds the text of a streamed turn, piece
  by piece, from the stream its caller reads, and a turn that was not streamed
  gives its answer's text in one piece when it ends. ``tap`` and ``run_durably``
  follow a durable turn (Temporal) from the service's side alike.
- ``text`` events: the next piece of a turn's text and the model call that wrote it
  (``round``), which the page appends to that call's one growing block; a turn that
  was not streamed gives its answer with ``round`` ``None`` (its last call's).
- ``stored`` events: a turn was committed, by this process or another
  (``TurnNotifier``: PostgreSQL's ``LISTEN/NOTIFY``): the page reads its feed at once
  rather than at its next poll. One listening connection serves every page of the
  hub (``follow_notices``), opened for the first page that watches and closed when
  the last one leaves.

A slow or gone page never holds a turn up: publishing puts into each page's
bounded queue (``LIVE_QUEUE`` events) without waiting; a page whose queue is full
misses the events that do not fit and is told so (``lagged``), after which it reads
its feed afresh (D690).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from aptix_pipeline.adapters.stores import TurnNotice, TurnNotifier
from aptix_pipeline.contracts import AgentExecuteResponse, Caller, InvokeResult, scrubbed_logger
from aptix_pipeline.engine import (
    PROGRESS_EVENTS,
    StreamDelta,
    StreamProgress,
    StreamResult,
    TurnEvent,
    TurnFinished,
    TurnIdentified,
    TurnStarted,
    progress_json,
)

__all__ = ["LIVE_QUEUE", "LiveEvent", "LiveHub", "LiveSubscription"]

LIVE_QUEUE: Final = 256
"""Events a page may fall behind by before it misses some (module docstring)."""

_MAX_RUNS: Final = 10_000
"""Running turns followed at most: one cancelled before its end is never heard to end."""
_LISTEN_WAIT: Final = 10.0
"""How long a page waits for the store to listen before it is told it is subscribed."""

logger = scrubbed_logger(__name__)


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """One event for the live pages: ``name`` (``turn``, ``text``, ``stored``), whose
    (``org``, ``user``; empty: nobody's in particular), and its JSON ``data``."""

    name: str
    org: str
    user: str
    data: dict[str, Any]


@dataclass(slots=True, eq=False)
class LiveSubscription:
    """A page's place in the hub: its queue, and whether it missed events."""

    owner: tuple[str, str] | None
    queue: asyncio.Queue[LiveEvent] = field(default_factory=lambda: asyncio.Queue(LIVE_QUEUE))
    lagged: bool = False
    """Events were dropped because the queue was full (the page reads its feed afresh)."""

    def offer(self, event: LiveEvent) -> None:
        """Queue ``event`` if it is the page's to see and there is room; never waits."""
        if self.owner is not None and event.org and (event.org, event.user) != self.owner:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.lagged = True

    async def next(self, timeout: float) -> LiveEvent | None:
        """The next event, or ``None`` after ``timeout`` seconds without one."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None


class _Stream(Protocol):
    """A streamed turn as its caller reads it: ``TurnStream`` or ``DurableStream``."""

    def __anext__(self) -> Any: ...

    async def aclose(self) -> None: ...


class _HasResult(Protocol):
    @property
    def result(self) -> InvokeResult[AgentExecuteResponse]: ...


_Report = TypeVar("_Report", bound=_HasResult)
_DURABLE_RUNS = itertools.count(1)


class LiveHub:
    """Publishes the live view's events to the pages that watch (module docstring)."""

    def __init__(self) -> None:
        self._subscriptions: set[LiveSubscription] = set()
        self._runs: dict[str, tuple[str, str, bool]] = {}
        """Running turns: their caller, and whether their text came piece by piece."""
        self._notices: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self.listener = _TurnListener(self)
        """The subscriber of every turn's events (``Pipeline(listeners=[hub.listener])``)."""

    @property
    def watching(self) -> int:
        """How many pages watch."""
        return len(self._subscriptions)

    @contextmanager
    def subscribe(self, owner: tuple[str, str] | None) -> Iterator[LiveSubscription]:
        """A page's subscription for as long as the block runs: the events of ``owner``
        (org, user) and the anonymous ones, or every event when ``owner`` is ``None``."""
        subscription = LiveSubscription(owner)
        self._subscriptions.add(subscription)
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)
            if not self._subscriptions and self._notices is not None:
                self._notices.cancel()
                self._notices = None

    def publish(self, event: LiveEvent) -> None:
        """Offer ``event`` to every page (``LiveSubscription.offer``): never waits."""
        for subscription in self._subscriptions:
            subscription.offer(event)

    def progress(self, run: str, data: dict[str, Any]) -> None:
        """What a running turn did (a ``progress_json`` form, or its ids once known)."""
        org, user, _ = self._runs.get(run, ("", "", False))
        if org or user:
            self.publish(LiveEvent("turn", org, user, {"run": run, **data}))

    def started(self, run: str, org: str, user: str) -> None:
        """A turn of ``org``/``user`` began: ``run`` names it in the events that follow."""
        if len(self._runs) >= _MAX_RUNS:  # turns cancelled before their end: the oldest
            del self._runs[next(iter(self._runs))]
        self._runs[run] = (org, user, False)
        self.progress(run, {"kind": "turn_started", "org": org, "user": user})

    def text(self, run: str, text: str, round_: int | None = None) -> None:
        """The next piece of a running turn's text, written in model call ``round_``
        (``None``: the answer of a turn that was not streamed, given at its end)."""
        known = self._runs.get(run)
        if known is None or not text:
            return
        self._runs[run] = (known[0], known[1], True)
        data = {"run": run, "text": text, "round": round_}
        self.publish(LiveEvent("text", known[0], known[1], data))

    def ended(
        self,
        run: str,
        result: InvokeResult[AgentExecuteResponse],
        stored: tuple[str | None, str | None] = (None, None),
    ) -> None:
        """The turn is over: its status, ids and tokens; its text in one piece if none
        came. ``stored`` names the session and turn a failed turn left in the store."""
        known = self._runs.get(run)
        if known is None:
            return
        response = result.result
        if response is not None and not known[2] and response.primary_output_text:
            self.text(run, response.primary_output_text)
        usage = response.usage if response is not None else None
        session, turn = (response.session_id, response.turn_id) if response else stored
        status = "failed"
        if response is not None:
            status = "awaiting_client_tools" if response.tool_calls else "completed"
        self.progress(
            run,
            {
                "kind": "turn_ended",
                "successful": result.successful,
                "status": status,
                "session": session,
                "turn": turn,
                "error": result.errors[0].code if result.errors else None,
                "input_tokens": usage.input_tokens if usage is not None else None,
                "output_tokens": usage.output_tokens if usage is not None else None,
            },
        )
        del self._runs[run]
        if session and turn:
            self.stored(TurnNotice(known[0], known[1], session, turn, status))

    def forget(self, run: str) -> None:
        """Stop following ``run`` (a turn whose stream closed before its end was read)."""
        self._runs.pop(run, None)

    def stored(self, notice: TurnNotice) -> None:
        """A turn was committed (``TurnNotifier``): the pages read their feeds again."""
        data = {"org": notice.org, "user": notice.user, "session": notice.session_id}
        data |= {"turn": notice.turn_id, "status": notice.status}
        self.publish(LiveEvent("stored", notice.org, notice.user, data))

    async def follow_notices(self, store: object) -> None:
        """Listen for the commits ``store`` announces (a ``TurnNotifier``), once for every
        page, while any page watches; nothing for a store that announces none. Returns
        once the store listens (or failed to: the pages poll on)."""
        if not isinstance(store, TurnNotifier) or not self._subscriptions:
            return
        if self._notices is None:
            self._listening = asyncio.Event()
            self._notices = asyncio.get_running_loop().create_task(self._listen(store))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), _LISTEN_WAIT)

    async def _listen(self, store: TurnNotifier) -> None:
        try:
            async with store.turn_notices() as notices:
                self._listening.set()
                async for notice in notices:
                    self.stored(notice)
        except asyncio.CancelledError:
            raise
        except Exception:  # the pages poll on: the feed is still read every half second
            logger.exception("the store's turn notices stopped")
        finally:
            self._listening.set()
            if self._notices is asyncio.current_task():  # failed: the next page tries again
                self._notices = None

    def tap(self, stream: _Stream, caller: Caller, *, durable: bool) -> _TappedStream:
        """``stream`` as its caller reads it, its items published as they are read: the
        text pieces of an in-process turn (its ``listener`` publishes the rest), every
        item of a ``durable`` one (run elsewhere, its events are only in its stream)."""
        return _TappedStream(self, stream, caller, durable)

    async def run_durably(self, caller: Caller, run: Callable[[], Awaitable[_Report]]) -> _Report:
        """A durable turn that is not streamed: its start now, its end when ``run`` ends."""
        key = f"d{next(_DURABLE_RUNS)}"
        self.started(key, caller.org, caller.user)
        try:
            report = await run()
        except BaseException:
            self.forget(key)
            raise
        self.ended(key, report.result)
        return report


class _TappedStream:
    """A stream whose items the hub sees as its reader takes them (``LiveHub.tap``)."""

    def __init__(self, hub: LiveHub, stream: _Stream, caller: Caller, durable: bool) -> None:
        self._hub, self._stream, self._durable = hub, stream, durable
        self._run: str | None = None
        if durable:
            self._run = f"d{next(_DURABLE_RUNS)}"
            hub.started(self._run, caller.org, caller.user)

    @property
    def report(self) -> Any:
        """The wrapped stream's report."""
        return getattr(self._stream, "report", None)

    def __aiter__(self) -> _TappedStream:
        return self

    async def __anext__(self) -> Any:
        item = await self._stream.__anext__()
        run, hub = self._run, self._hub
        if isinstance(item, StreamDelta):
            if run is not None:
                hub.text(run, item.text, item.round)
        elif isinstance(item, StreamResult):
            if self._durable and run is not None:
                hub.ended(run, item.result)
        elif isinstance(item, StreamProgress):
            if run is None:
                self._run = f"r{item.event.run_id}"
        elif self._durable and run is not None:  # a durable turn's progress
            hub.progress(run, dict(item.to_json()))
        return item

    async def aclose(self) -> None:
        """Close the wrapped stream; a durable turn the page followed is let go."""
        try:
            await self._stream.aclose()
        finally:
            if self._durable and self._run is not None:
                self._hub.forget(self._run)


_LISTENED: Final = frozenset({*PROGRESS_EVENTS, TurnIdentified, TurnFinished})


class _TurnListener:
    """The hub's subscriber of every in-process turn's events (``LiveHub.listener``).

    Called inline, so it only looks the run up and offers to queues (and, while no
    page watches, notes only each turn's start and end). It declares
    the events it reads (``event_types``), text deltas not among them: watching never
    makes a turn streamed.
    """

    event_types: Final = _LISTENED

    def __init__(self, hub: LiveHub) -> None:
        self._hub = hub

    def __call__(self, event: TurnEvent) -> None:
        hub = self._hub
        run = f"r{event.run_id}"
        if isinstance(event, TurnStarted):
            hub.started(run, event.org, event.user)
        elif isinstance(event, TurnFinished):
            hub.ended(run, event.result, (event.session_id, event.turn_id))
        elif not hub.watching:  # no page to tell: nothing more to make
            return
        elif isinstance(event, TurnIdentified):
            ids = {"session": event.session_id, "turn": event.turn_id}
            hub.progress(run, {"kind": "turn_identified", **ids})
        elif type(event) in _LISTENED:
            hub.progress(run, progress_json(event))
