"""Streamed delivery of a turn (AGN-034 §4.7, DESIGN.md R11): ``Pipeline.stream``.

A ``TurnStream`` is an async iterator over one turn, ending with exactly one result:

- ``StreamProgress`` — a sign of life from the turn's event stream (a step began, a
  model call or a server tool started or ended, the mode changed); diagnostics and
  progress are out-of-band (AGN-033 §1.3, §3.1), so they are never part of the
  response. They hold no user content unless the pipeline captures content.
- ``StreamDelta`` — the next piece of the model's text, as it is written. It is
  provisional: the POST rules judge the assembled response, and a refused one ends
  the stream with an unsuccessful result (the response's ``PrimaryOutputText`` is
  the text they accepted, which may differ: AGN-033 §4.1's fences).
- ``StreamResult`` — last: the ``InvokeResult`` that ``execute`` returns for the
  same turn.

The stream is one more subscriber of the turn's event stream (DESIGN.md "One event
stream"): it declares the progress events it reads and ``ModelTextDelta``, which is
what makes the engine ask the model to stream. Items wait in a queue until the
consumer takes them; text deltas that pile up behind a slow consumer are joined
into one. The turn waits before its commit until the consumer has taken every
item: a turn is stored only once its consumer has seen all of its text. A consumer
that stops early (``aclose``, leaving ``async with``, or dropping the stream)
cancels the turn: it faults with ``DESIGN/streaming/consumer-gone``, its
transaction is rolled back and its trace keeps the fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import deque
from collections.abc import Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Final, TypeAlias

from aptix_pipeline.contracts import AgentExecuteResponse, InvokeResult

from .events import (
    Listener,
    ModeChanged,
    ModelCallFinished,
    ModelCallRetried,
    ModelCallStarted,
    ModelFirstChunk,
    ModelTextDelta,
    RetrievalFinished,
    RetrievalStarted,
    StepEnded,
    StepStarted,
    ToolCallHandled,
    ToolExecuted,
    ToolExecutionStarted,
    TurnEvent,
    TurnFaulted,
    TurnFinished,
    TurnStarted,
    WarningRaised,
)
from .report import TurnReport
from .runner import TurnStop
from .trace import entry_to_dict

__all__ = [
    "PROGRESS_EVENTS",
    "StreamDelta",
    "StreamItem",
    "StreamProgress",
    "StreamResult",
    "TurnStream",
    "asks_to_stream",
    "progress_json",
]

PROGRESS_EVENTS: Final[frozenset[type[TurnEvent]]] = frozenset(
    {
        TurnStarted,
        StepStarted,
        ModelCallStarted,
        ModelCallRetried,
        ModelFirstChunk,
        ModelCallFinished,
        RetrievalStarted,
        RetrievalFinished,
        ToolExecutionStarted,
        ToolExecuted,
        ToolCallHandled,
        ModeChanged,
        WarningRaised,
        TurnFaulted,
    }
)
"""The events a stream passes on as progress by default: what the turn is doing, not
how the machine checks it (``CheckRan``, ``TransitionTaken`` and ``StepEnded`` — the
next step's start says as much — are left out; ask for them with ``progress=``)."""


def progress_json(event: TurnEvent) -> dict[str, Any]:
    """The JSON form of a progress event: ``kind``, then what it says (docs/STREAMING.md).

    An event that carries a state-trace entry is shown as that entry is in the trace
    (``entry_to_dict``: ``llm_call``, ``tool_call``, ``mode_change``, ``warning``,
    ``fault``, ``guard``/``exit_hook``, ``transition``), so a progress item and the
    trace read alike. User content appears only where the event holds it (content
    capture on).
    """
    if event.trace_entry:
        return entry_to_dict(getattr(event, event.trace_entry))
    if isinstance(event, StepStarted):
        return {"kind": "step_started", "step": event.step, "state": event.source}
    if isinstance(event, StepEnded):
        return {
            "kind": "step_ended",
            "step": event.step,
            "state": event.state,
            "taken": event.taken,
        }
    if isinstance(event, ModelCallStarted):
        return {
            "kind": "model_call_started",
            "round": event.round,
            "mode": event.mode,
            "model": event.model,
            "tools": list(event.tools),
        }
    if isinstance(event, ModelCallRetried):
        return {
            "kind": "model_call_retried",
            "round": event.round,
            "attempt": event.attempt,
            "error_type": event.error_type,
            "wait_seconds": event.wait_seconds,
        }
    if isinstance(event, ModelFirstChunk):
        return {"kind": "model_first_chunk", "round": event.round}
    if isinstance(event, RetrievalStarted):
        return {
            "kind": "retrieval_started",
            "collection": event.collection,
            "limit": event.limit,
            "conditions": event.conditions,
        }
    if isinstance(event, ToolExecutionStarted):
        data: dict[str, Any] = {
            "kind": "tool_started",
            "tool_call_id": event.tool_call_id,
            "name": event.name,
        }
        if event.arguments is not None:
            data["arguments"] = event.arguments
        return data
    if isinstance(event, ToolExecuted):
        data = {
            "kind": "tool_finished",
            "tool_call_id": event.tool_call_id,
            "name": event.name,
            "outcome": None if event.outcome is None else str(event.outcome),
            "failed": event.failed,
        }
        if event.result_json is not None:
            data["result_json"] = event.result_json
        return data
    if isinstance(event, TurnStarted):
        return {"kind": "turn_started"}
    if isinstance(event, TurnFinished):
        return {"kind": "turn_finished", "successful": event.successful}
    return {"kind": type(event).__name__}  # a host's own event type


_STREAM_KEY = re.compile(rb"Stream")
_ESCAPE = re.compile(rb"\\u")


def asks_to_stream(body: bytes) -> bool:
    """Whether the request body is a JSON object with ``"Stream": true`` (AGN-034 §4.7).

    Most bodies do not name the field and are not parsed here (the engine parses
    every body once); one whose keys may be spelled with JSON escapes is. A body
    that does not parse gets ``False``: the engine refuses it, and the refusal is
    the same JSON answer either way.
    """
    # Literal searches with ``re`` (and a backslash first, by memchr): about three
    # times faster than ``in`` over a megabyte, which every large body is scanned for.
    if _STREAM_KEY.search(body) is None and (b"\\" not in body or _ESCAPE.search(body) is None):
        return False
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("Stream") is True


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """A progress event of the turn (``event``), and its JSON form."""

    name: ClassVar[str] = "progress"
    """The SSE event name."""

    event: TurnEvent

    def to_json(self) -> dict[str, Any]:
        """See ``progress_json``."""
        return progress_json(self.event)


@dataclass(frozen=True, slots=True)
class StreamDelta:
    """The next piece of the model's text in model call ``round`` (provisional)."""

    name: ClassVar[str] = "delta"

    text: str
    round: int

    def to_json(self) -> dict[str, Any]:
        """``{"text": ..., "round": ...}``."""
        return {"text": self.text, "round": self.round}


@dataclass(frozen=True, slots=True)
class StreamResult:
    """The turn's ``InvokeResult``: the last item, the same ``execute`` returns."""

    name: ClassVar[str] = "result"

    result: InvokeResult[AgentExecuteResponse]

    def to_json(self) -> dict[str, Any]:
        """The ``InvokeResult`` in its wire (PascalCase) JSON form."""
        return self.result.model_dump(mode="json", by_alias=True)


StreamItem: TypeAlias = StreamProgress | StreamDelta | StreamResult
"""One item of a ``TurnStream``."""


class _PendingText:
    """A delta the consumer has not taken yet: more text of its round joins it."""

    __slots__ = ("parts", "round")

    def __init__(self, text: str, round_: int) -> None:
        self.parts, self.round = [text], round_


class _Inbox:
    """Where the turn's subscriber leaves items and the consumer takes them.

    It holds no reference to the ``TurnStream``, so a stream its consumer dropped
    can be collected (and cancel its turn) while the turn still runs.
    """

    __slots__ = ("drain_waiter", "event_types", "items", "pending", "waiter")

    def __init__(self, progress: frozenset[type[TurnEvent]]) -> None:
        self.event_types = progress | {ModelTextDelta}
        self.items: deque[StreamItem | _PendingText] = deque()
        self.pending: _PendingText | None = None
        """The last queued delta, while the consumer has not taken it."""
        self.waiter: asyncio.Future[None] | None = None
        self.drain_waiter: asyncio.Future[None] | None = None

    def __call__(self, event: TurnEvent) -> None:
        kind = type(event)
        if isinstance(event, ModelTextDelta):
            pending = self.pending
            if pending is not None and pending.round == event.round:
                pending.parts.append(event.text)  # the consumer is behind: join the text
                return
            self.pending = pending = _PendingText(event.text, event.round)
            self.put(pending)
        elif kind in self.event_types:
            self.put(StreamProgress(event))

    def put(self, item: StreamItem | _PendingText) -> None:
        if item is not self.pending:
            self.pending = None  # text after another item is a new delta
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drained(self) -> None:
        """Wait until the consumer has taken every item given so far."""
        if self.items:
            self.drain_waiter = asyncio.get_running_loop().create_future()
            try:
                await self.drain_waiter
            finally:
                self.drain_waiter = None

    def take(self) -> StreamItem:
        item = self.items.popleft()
        drain = self.drain_waiter
        if drain is not None and not self.items and not drain.done():
            drain.set_result(None)
        if isinstance(item, _PendingText):
            if item is self.pending:
                self.pending = None
            return StreamDelta("".join(item.parts), item.round)
        return item


_RUNNING: set[asyncio.Task[TurnReport]] = set()
"""Turns of streams in flight: a task is kept alive until it is done."""

StartTurn: TypeAlias = Callable[[Sequence[Listener], TurnStop], Coroutine[Any, Any, TurnReport]]


async def _run(start: StartTurn, inbox: _Inbox, stop: TurnStop) -> TurnReport:
    """The turn, with the inbox as its listener; the end is marked however it ends."""
    try:
        return await start([inbox], stop)
    finally:
        _RUNNING.discard(asyncio.current_task())
        inbox.put(_END)


class TurnStream:
    """One streamed turn; see the module docstring. Made by ``Pipeline.stream``.

    Iterate it (``async for item in stream``), in ``async with`` to be sure the turn
    is cancelled if the loop stops early. The turn starts at the first item asked
    for. ``report`` is the ``TurnReport`` once the result has been given.
    """

    def __init__(self, start: StartTurn, progress: Collection[type[TurnEvent]]) -> None:
        self._start: StartTurn | None = start
        self._inbox = _Inbox(frozenset(progress))
        self._stop = TurnStop(hold=self._inbox.drained)
        self._task: asyncio.Task[TurnReport] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended = False
        self.report: TurnReport | None = None
        """The turn's report, once its result has been given."""

    def __aiter__(self) -> TurnStream:
        return self

    async def __aenter__(self) -> TurnStream:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _begin(self) -> asyncio.Task[TurnReport]:
        start, self._start = self._start, None
        if start is None:
            raise RuntimeError("this stream was closed before it started")
        self._loop = asyncio.get_running_loop()
        task = self._loop.create_task(_run(start, self._inbox, self._stop))
        _RUNNING.add(task)
        self._task = task
        return task

    async def __anext__(self) -> StreamItem:
        if self._ended:
            raise StopAsyncIteration
        task = self._task or self._begin()
        inbox = self._inbox
        while True:
            if inbox.items:
                item = inbox.take()
                if item is not _END:
                    return item
                self._ended = True
                self.report = task.result()  # the turn's own exception, if it raised
                return StreamResult(self.report.result)
            inbox.waiter = asyncio.get_running_loop().create_future()
            try:
                await inbox.waiter
            finally:
                inbox.waiter = None

    async def aclose(self) -> None:
        """Stop reading: a turn still running is cancelled, and this waits until it has
        rolled back (``DESIGN/streaming/consumer-gone``)."""
        self._ended = True
        self._start = None
        task = self._task
        if task is None:
            return
        if task.done():  # ended before its result was read: keep its report all the same
            if self.report is None and not task.cancelled() and task.exception() is None:
                self.report = task.result()
            return
        self._stop.request()
        with contextlib.suppress(Exception):
            self.report = await asyncio.shield(task)

    def __del__(self) -> None:
        task, loop = self._task, self._loop
        if task is None or task.done() or loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._stop.request)


_END: Final = StreamProgress(TurnEvent(0))
"""Put after the turn's last item: the result is next."""
