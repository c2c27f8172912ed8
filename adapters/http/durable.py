"""``POST /v1/agent/execute`` in durable mode: with ``[temporal]`` each turn is a Temporal
workflow that ``aptix worker`` runs (docs/DURABLE.md "Workers and the service").

The answer is the one the in-process service gives: the same body, the same status
(``http_status``, the host rules' statuses too), ``Idempotent-Replayed`` on a stored
answer. The request's raw body goes to the workflow, which validates it exactly as
``Pipeline.run`` does; the ``Idempotency-Key`` header goes with it, and the turn's
workflow id comes from its answer keys, so a retry while the first copy runs waits
for that same workflow (D530). A Temporal that cannot be reached, or a workflow that
failed, is answered 502 ``port_failed`` naming ``Temporal``, as a store that cannot
be reached is (D551).

Streamed (``"Stream": true`` or ``Accept: text/event-stream``), the events are the
in-process ones, from ``DurablePipeline.stream``: ``progress`` per step, model call
and tool (polled from the workflow), the answer's text as one ``delta``, and the
``result``. As in process, the items are held until the turn reaches its model
call, so a refused request gets its JSON answer and status. A client that leaves
stops the events, not the turn: a durable turn runs to its end and is stored, and a
retry with its ``Idempotency-Key`` gets its answer (D552).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

from fastapi.responses import Response

from aptix_pipeline.contracts import Caller
from aptix_pipeline.engine import StreamDelta, StreamResult, TurnReport, TurnStream

from .sse import EventStreamResponse, hold_until_begun

if TYPE_CHECKING:
    from aptix_pipeline.adapters.temporal import DurablePipeline, DurableProgress, DurableStream
    from aptix_pipeline.adapters.ui import LiveHub

__all__ = ["stream_durably"]


def _begins(item: DurableProgress | StreamDelta | StreamResult) -> bool:
    """Whether ``item`` is the first the client may see: the model call has begun."""
    if isinstance(item, StreamDelta):
        return True
    if isinstance(item, StreamResult):
        return False
    return item.data.get("event") == "ModelCallStarted"


async def stream_durably(
    durable: DurablePipeline,
    body: bytes,
    caller: Caller,
    idempotency_key: str | None,
    *,
    keepalive_seconds: float,
    headers: Callable[[TurnReport | None], Mapping[str, str] | None],
    live: LiveHub | None = None,
) -> Response | TurnReport:
    """The streamed turn as Server-Sent Events, or its report when it ended refused
    before its model call (the caller answers it as JSON); ``headers`` gives the
    response's headers from the report of a turn that ended while held; ``live``
    follows the turn's items on the turn browser's live page as they are read."""
    stream = durable.stream(body, caller, idempotency_key=idempotency_key)
    if live is not None:
        stream = cast("DurableStream", live.tap(stream, caller, durable=True))
    held = await hold_until_begun(stream, _begins)
    ended: TurnReport | None = stream.report
    if ended is not None and not ended.successful:
        await stream.aclose()
        return ended
    # A DurableStream is read as a TurnStream is (anext, aclose, items with a name and
    # a to_json()): the same response sends it.
    return EventStreamResponse(
        cast(TurnStream, stream),
        cast(list[StreamResult], held),
        keepalive_seconds=keepalive_seconds,
        headers=headers(ended),
    )
