"""``DurablePipeline``: a host starts durable turns and awaits their answers.

It answers as ``Pipeline`` does — ``run`` a ``TurnReport``, ``execute`` an
``InvokeResult``, ``stream`` a stream of items ending with the result — but the
turn runs as a Temporal workflow on whichever worker takes it (docs/DURABLE.md).

- **One turn per key.** A request with answer keys (an idempotency key, or a
  continuation) starts the workflow whose id its keys give (``workflow_id_for``):
  the same request sent twice while the first runs attaches to the running turn,
  and after it ended runs a workflow that reads the stored answer, as in process
  (D530). A request without keys gets a new id each time.
- **Never raises** for a bad request or a failing Temporal: a service that cannot be
  reached, or a workflow that failed, is an unsuccessful result with a
  ``port_failed`` error naming ``Temporal`` (D539).
- **Streaming** (``DurableStream``) asks the workflow for its progress events with
  a query every ``poll_seconds`` while it runs: progress per step, tool and model
  call; then the answer's text in one piece (a ``StreamDelta``: a worker streams
  nothing to the client, the text is in the model activity's answer), and the
  result last.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    AgentExecuteResponse,
    Caller,
    ErrorCode,
    InvokeError,
    InvokeResult,
    scrubbed_logger,
)
from aptix_pipeline.engine import (
    RequestInput,
    ResponseResult,
    StreamDelta,
    StreamResult,
    TurnReport,
    answered_report,
    caller_key,
    request_keys,
)

from .payloads import TurnInput, TurnOutput
from .worker import DEFAULT_TASK_QUEUE
from .workflow import WORKFLOW_NAME, workflow_id_for

__all__ = ["DurablePipeline", "DurableProgress", "DurableStream"]

logger = scrubbed_logger(__name__)


@dataclass(frozen=True, slots=True)
class DurableProgress:
    """A progress event of a durable turn, as its workflow kept it (``progress_json``,
    with the event's class under ``event``)."""

    name: ClassVar[str] = "progress"
    data: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The event's JSON form, as a streamed in-process turn gives it."""
        return {key: value for key, value in self.data.items() if key != "event"}


def _wire_request(request: RequestInput) -> Any:
    if isinstance(request, AgentExecuteRequest):
        return request.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(request, bytes | bytearray):
        return bytes(request).decode("utf-8", errors="replace")
    if isinstance(request, Mapping):
        return dict(request)
    return request


def _described(error: BaseException) -> str:
    """``error`` and the causes Temporal gives it, in one line (``failed: timed out``)."""
    parts: list[str] = []
    current: BaseException | None = error
    while current is not None and len(parts) < 4:
        text = str(current).strip() or type(current).__name__
        if text not in parts:
            parts.append(text)
        current = getattr(current, "cause", None) or current.__cause__
    return ": ".join(parts)


def _temporal_failed(what: str) -> TurnReport:
    error = InvokeError(code=ErrorCode.PORT_FAILED, field="Temporal", message=what)
    return answered_report(ResponseResult.failure([error]), None, None)


class DurablePipeline:
    """Runs turns as Temporal workflows on ``task_queue``; see the module docstring.

    ``client`` comes from ``connect`` (the pydantic converter; the same ``BlobStore``
    as the workers when payloads may be large). ``max_json_depth`` is the workers'
    ``PipelineOptions.max_json_depth``, used to read a request's answer keys.
    ``turn_timeout_seconds`` bounds a whole workflow (default: none, the turn's own
    deadline applies inside it).
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        max_json_depth: int = 64,
        turn_timeout_seconds: float | None = None,
        poll_seconds: float = 0.05,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self._max_depth = max_json_depth
        self._timeout = (
            None if turn_timeout_seconds is None else timedelta(seconds=turn_timeout_seconds)
        )
        self.poll_seconds = poll_seconds

    async def start(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
        progress: bool = False,
    ) -> WorkflowHandle[Any, TurnOutput]:
        """Start the turn's workflow (or attach to the one running for its keys)."""
        org, user = caller_key(caller)
        keys = request_keys(
            request,
            org,
            user,
            idempotency_key=idempotency_key,
            initial_mode=initial_mode,
            max_depth=self._max_depth,
        )
        flight = keys.flight if keys is not None and not isinstance(keys, InvokeError) else None
        workflow_id = workflow_id_for(flight, uuid.uuid4().hex)
        turn = TurnInput(
            request=_wire_request(request),
            org=org,
            user=user,
            initial_mode=initial_mode,
            idempotency_key=idempotency_key,
            progress=progress,
        )
        return await self.client.start_workflow(
            WORKFLOW_NAME,
            turn,
            id=workflow_id,
            task_queue=self.task_queue,
            result_type=TurnOutput,
            execution_timeout=self._timeout,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )

    async def run(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> TurnReport:
        """Run one durable turn and report what it did; never raises for a failing Temporal."""
        report, _ = await self.run_with_workers(
            request, caller, initial_mode=initial_mode, idempotency_key=idempotency_key
        )
        return report

    async def run_with_workers(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[TurnReport, TurnOutput | None]:
        """``run``, with the workflow's answer (its id and the workers that ran it)."""
        try:
            handle = await self.start(
                request, caller, initial_mode=initial_mode, idempotency_key=idempotency_key
            )
            output = await handle.result()
        except asyncio.CancelledError:
            raise
        except (RPCError, WorkflowFailureError, RuntimeError, OSError) as error:
            told = _described(error)
            logger.error("a durable turn failed in Temporal: %s", told)
            return _temporal_failed(f"the durable turn failed: {told}"), None
        return TurnReport.from_dict(output.report), output

    async def execute(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> InvokeResult[AgentExecuteResponse]:
        """The turn's ``InvokeResult`` (``run``'s ``result``)."""
        report = await self.run(
            request, caller, initial_mode=initial_mode, idempotency_key=idempotency_key
        )
        return report.result

    def stream(
        self,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> DurableStream:
        """The turn's progress events while it runs, then its text in one piece (a
        ``StreamDelta``, when it answered text), then its ``StreamResult``; never raises
        for a failing Temporal (the result says so)."""
        return DurableStream(
            self, request, caller, initial_mode=initial_mode, idempotency_key=idempotency_key
        )


class DurableStream:
    """One streamed durable turn (``DurablePipeline.stream``): iterate it as a
    ``TurnStream``; ``report`` is the turn's ``TurnReport`` once the result is given.

    Closing it stops reading, never the turn: a durable turn runs to its end on its
    worker whoever waits for it (docs/DURABLE.md "Streaming").
    """

    def __init__(
        self,
        durable: DurablePipeline,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        *,
        initial_mode: str | None,
        idempotency_key: str | None,
    ) -> None:
        self.report: TurnReport | None = None
        """The turn's report, once its result has been given."""
        self._items = self._read(durable, request, caller, initial_mode, idempotency_key)

    def __aiter__(self) -> DurableStream:
        return self

    async def __anext__(self) -> DurableProgress | StreamDelta | StreamResult:
        return await anext(self._items)

    async def __aenter__(self) -> DurableStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop reading (the turn goes on)."""
        await self._items.aclose()

    def _ended(self, report: TurnReport) -> Iterator[StreamDelta | StreamResult]:
        self.report = report
        text = report.result.result.primary_output_text if report.result.result else None
        if report.successful and text:
            yield StreamDelta(text, max(1, report.llm_calls))
        yield StreamResult(report.result)

    async def _read(
        self,
        durable: DurablePipeline,
        request: RequestInput,
        caller: Caller | Mapping[str, Any],
        initial_mode: str | None,
        idempotency_key: str | None,
    ) -> AsyncGenerator[DurableProgress | StreamDelta | StreamResult, None]:
        try:
            handle = await durable.start(
                request,
                caller,
                initial_mode=initial_mode,
                idempotency_key=idempotency_key,
                progress=True,
            )
        except asyncio.CancelledError:
            raise
        except (RPCError, RuntimeError, OSError) as error:  # a lazy client connects here
            told = _described(error)
            logger.error("a durable turn could not start in Temporal: %s", told)
            for item in self._ended(_temporal_failed(f"the durable turn failed: {told}")):
                yield item
            return
        result = asyncio.ensure_future(handle.result())
        seen = 0
        try:
            while True:
                with contextlib.suppress(RPCError):
                    page = await handle.query("progress", seen, result_type=dict[str, Any])
                    events = page.get("events", [])
                    for event in events:
                        yield DurableProgress(event)
                    seen += len(events)
                if result.done():
                    break
                await asyncio.wait({result}, timeout=durable.poll_seconds)
            try:
                output = result.result()
            except (RPCError, WorkflowFailureError, RuntimeError, OSError) as error:
                told = _described(error)
                logger.error("a durable turn failed in Temporal: %s", told)
                for item in self._ended(_temporal_failed(f"the durable turn failed: {told}")):
                    yield item
                return
            with contextlib.suppress(RPCError):  # what came after the last poll
                page = await handle.query("progress", seen, result_type=dict[str, Any])
                for event in page.get("events", []):
                    yield DurableProgress(event)
            for item in self._ended(TurnReport.from_dict(output.report)):
                yield item
        finally:
            if not result.done():
                result.cancel()
