"""``POST /v1/agent/execute``: one agent turn per request, answered with its ``InvokeResult``.

The raw body goes to ``Pipeline.run``, so the engine's own rule ids and messages
answer a malformed request, never a framework's validation error. The status
follows the result (``http_status``). An ``Idempotency-Key`` header goes to the
engine as ``idempotency_key``; an answer stored by an earlier copy of the request
carries ``Idempotent-Replayed: true`` (docs/CONFORMANCE.md D181-D185).

A request with ``"Stream": true``, or whose ``Accept`` asks for
``text/event-stream``, goes to ``Pipeline.stream`` instead and is answered with
Server-Sent Events once its turn reaches the model call; one the engine refuses
before that gets its JSON answer as above (``http/sse.py``, AGN-034 §4.7).

Failures the engine never sees answer the same ``InvokeResult`` envelope with their
own ``Code`` (``http/errors.py``): no key or a wrong one (401 ``unauthorized``), a
body declared as something other than JSON (415 ``unsupported_media_type``; no
``Content-Type`` is taken as JSON), a body over the limit (413 ``body_too_large``,
refused from ``Content-Length`` before any of it is read, and counted while it
streams), an app not yet started (503 ``unavailable``).

A turn whose model call a budget refused ends with ``budget_exceeded``: 429, with
``Retry-After`` for a day, month or rolling window (docs/BUDGETS.md). Streamed, the
refusal of the turn's first model call comes before the events begin, so it is the
same 429 JSON answer; a later call's (after a server-tool round) is the ``result``
event of a 200 stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from aptix_pipeline.contracts import AgentExecuteResponse, Caller, ErrorCode, InvokeResult
from aptix_pipeline.engine import Pipeline, TurnReport, TurnStream, asks_to_stream

from .auth import Authenticator, authenticated_caller
from .errors import error_code, error_response, missing_key_response
from .sse import (
    DEFAULT_SSE_KEEPALIVE_SECONDS,
    EventStreamResponse,
    accepts_event_stream,
    hold_until_begun,
)

if TYPE_CHECKING:
    from aptix_pipeline.adapters.temporal import DurablePipeline
    from aptix_pipeline.adapters.ui import LiveHub

__all__ = [
    "EXECUTE_PATH",
    "IDEMPOTENCY_KEY_HEADER",
    "REPLAYED_HEADER",
    "RETRY_AFTER_HEADER",
    "ServiceState",
    "answer",
    "http_status",
    "problem",
    "replayed_header",
    "retry_after_header",
    "run_turn",
]

EXECUTE_PATH = "/v1/agent/execute"
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
"""The request header naming a retryable request (Stripe's), scoped to the caller."""
REPLAYED_HEADER = "Idempotent-Replayed"
"""The response header (``true``) of an answer stored by an earlier copy of the request."""
RETRY_AFTER_HEADER = "Retry-After"
"""The response header of a 429 ``budget_exceeded``: seconds until the budget's window
has room again (docs/BUDGETS.md)."""

_STATUS: Mapping[str, int] = {  # a host code (host.<name>) answers 500
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.TOOL_CALL_MANIFEST_INVALID: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PORT_FAILED: 502,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.CANCELLED: 499,
    ErrorCode.BUDGET_EXCEEDED: 429,
}


def http_status(
    result: InvokeResult[AgentExecuteResponse], host_statuses: Mapping[str, int] | None = None
) -> int:
    """The HTTP status of a turn's result (docs/CONFORMANCE.md D82).

    200 when Successful; otherwise by the first error's code: ``invalid_request``
    and ``tool_call_manifest_invalid`` 400, ``not_found`` 404, ``conflict`` 409,
    ``port_failed`` (the model or store failed) 502, ``deadline_exceeded`` (the turn
    ran past ``turn_deadline_seconds``) 504, ``cancelled`` 499, ``budget_exceeded``
    (a model call would exceed a budget, docs/BUDGETS.md) 429, a host rule's code
    the ``http_status`` its ``HostRule`` gives (``host_statuses``), anything else
    500. The body is the ``InvokeResult`` either way.
    """
    if result.successful:
        return 200
    code = result.errors[0].code
    status = _STATUS.get(code)
    if status is None and host_statuses:
        status = host_statuses.get(str(code))
    return status or 500


@dataclass(slots=True)
class ServiceState:
    """What the routes share: the pipeline (``None`` until the app has started, and
    again once it stops), who may call, the largest body accepted, the longest a
    streamed answer stays silent, and with ``[temporal]`` the ``DurablePipeline``
    that runs the turns as workflows (``http/durable.py``; the pipeline then serves
    the store to the other routes and the host rules' statuses). ``live`` is the
    turn browser's ``LiveHub`` when the page is mounted: every turn the service runs,
    in whichever mode, is published to its live page as it runs (docs/UI.md)."""

    pipeline: Pipeline | None
    authenticator: Authenticator
    max_body_bytes: int
    sse_keepalive_seconds: float = DEFAULT_SSE_KEEPALIVE_SECONDS
    durable: DurablePipeline | None = None
    live: LiveHub | None = None


class _TooLargeError(Exception):
    """The body holds (or declares) more than the service accepts."""


def problem(status: int, error: str, message: str, **headers: str) -> Response:
    """An answer to a request the engine never saw: the ``InvokeResult`` envelope with one
    error, whose ``Code`` is ``error`` when it is an ``ErrorCode``, else the status's
    (``http_errors.error_code``)."""
    try:
        code = ErrorCode(error)
    except ValueError:
        code = error_code(status)
    return error_response(status, message, code=code, headers=headers)


def _is_json(content_type: str | None) -> bool:
    """Whether a body declared with this ``Content-Type`` is JSON (no header: taken as JSON)."""
    if content_type is None:
        return True
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type in ("application/json", "") or media_type.endswith("+json")


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes (declared or streamed).

    Read from the ASGI messages themselves (what ``Request.stream`` does, without its
    async generator): a body that arrives in one message is used as it came.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise _TooLargeError
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        if message["type"] != "http.request":
            continue
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _idempotency_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header as sent; ``None`` when there is none.

    A key given twice is passed joined as HTTP joins repeated fields (``a, b``) and
    an empty one as it is: the engine refuses both with ``DESIGN/idempotency/key-format``
    (a key holds no spaces, and is never empty), so no copy is silently preferred.
    """
    values = request.headers.getlist(IDEMPOTENCY_KEY_HEADER)
    return ", ".join(values) if values else None


def replayed_header(report: TurnReport | None) -> dict[str, str] | None:
    """The ``Idempotent-Replayed`` header of a stored answer; ``None`` for a turn that ran."""
    return {REPLAYED_HEADER: "true"} if report is not None and report.replayed else None


def retry_after_header(result: InvokeResult[AgentExecuteResponse]) -> dict[str, str] | None:
    """The ``Retry-After`` header (seconds) of a turn a windowed budget refused: when the
    window has room again (``BudgetRefusal.retry_after_seconds``); ``None`` otherwise,
    a per-turn budget's refusal included (its window never refills)."""
    if result.successful or not result.errors:
        return None
    budget = result.errors[0].budget
    if budget is None or budget.retry_after_seconds is None:
        return None
    return {RETRY_AFTER_HEADER: str(budget.retry_after_seconds)}


def answer(report: TurnReport, pipeline: Pipeline) -> Response:
    """The turn's ``InvokeResult`` as the response, its status by ``http_status``; a
    budget's refusal with ``Retry-After`` (``retry_after_header``)."""
    result = report.result
    headers = replayed_header(report)
    retry = retry_after_header(result)
    if retry is not None:
        headers = {**(headers or {}), **retry}
    return Response(
        result.to_json(),
        status_code=http_status(result, pipeline.rules.http_statuses),
        media_type="application/json",
        headers=headers,
    )


async def _stream_turn(
    service: ServiceState,
    pipeline: Pipeline,
    body: bytes,
    caller: Caller,
    idempotency_key: str | None,
) -> Response:
    """The turn as Server-Sent Events, or its JSON refusal when it ends before its
    model call (``http/sse.py``: the status is chosen before the first byte)."""
    stream = pipeline.stream(body, caller, idempotency_key=idempotency_key)
    if service.live is not None:  # the live page gets its text as it is written
        stream = cast(TurnStream, service.live.tap(stream, caller, durable=False))
    held = await hold_until_begun(stream)
    ended = stream.report  # the turn ended while its items were held
    if ended is not None and not ended.successful:
        return answer(ended, pipeline)
    return EventStreamResponse(
        stream,
        held,
        keepalive_seconds=service.sse_keepalive_seconds,
        headers=replayed_header(ended),
    )


async def _durable_turn(
    service: ServiceState,
    durable: DurablePipeline,
    pipeline: Pipeline,
    body: bytes,
    caller: Caller,
    key: str | None,
    streamed: bool,
) -> Response:
    """The turn as a Temporal workflow, answered as in process (``http/durable.py``)."""
    live = service.live
    if not streamed:

        async def run() -> TurnReport:
            return await durable.run(body, caller, idempotency_key=key)

        return answer(await (run() if live is None else live.run_durably(caller, run)), pipeline)
    from .durable import stream_durably

    outcome = await stream_durably(
        durable,
        body,
        caller,
        key,
        keepalive_seconds=service.sse_keepalive_seconds,
        headers=replayed_header,
        live=live,
    )
    return outcome if isinstance(outcome, Response) else answer(outcome, pipeline)


async def run_turn(service: ServiceState, request: Request) -> Response:
    """``POST /v1/agent/execute``: authenticate, read the body, run the turn, answer."""
    caller = await authenticated_caller(service.authenticator, request.headers)
    if caller is None:
        return missing_key_response()
    content_type = request.headers.get("content-type")
    if not _is_json(content_type):
        return error_response(
            415,
            f"the body is an AgentExecuteRequest as JSON: send Content-Type: application/json, "
            f"not {content_type}",
            field="Content-Type",
        )
    try:
        body = await _read_body(request, service.max_body_bytes)
    except _TooLargeError:
        return error_response(
            413, f"the request body may hold at most {service.max_body_bytes} bytes"
        )
    except ClientDisconnect:  # gone mid-body, or cut off by the read timeout: nobody to answer
        return Response(status_code=408)
    pipeline = service.pipeline
    if pipeline is None:
        return error_response(503, "the service is starting or stopping")
    key = _idempotency_key(request)
    streamed = asks_to_stream(body) or accepts_event_stream(request.headers.getlist("accept"))
    if service.durable is not None:  # [temporal]: the turn is a workflow (http/durable.py)
        return await _durable_turn(service, service.durable, pipeline, body, caller, key, streamed)
    if streamed:
        return await _stream_turn(service, pipeline, body, caller, key)
    # The raw body: parsed once, by the engine.
    return answer(await pipeline.run(body, caller, idempotency_key=key), pipeline)
