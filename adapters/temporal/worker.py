"""Workers of durable turns, and the Temporal client they and the hosts use.

``DurableWorker(client, pipeline)`` serves a task queue: it runs ``TurnWorkflow``
(``workflow.py``) in Temporal's sandbox and the turn's activities
(``activities.py``) on ``pipeline``'s ports. ``connect(address)`` gives the
client, with the pydantic data converter and, when given a ``BlobStore``, the
claim-check codec that keeps large payloads out of the history (``codec.py``).

The sandbox re-imports a workflow's modules for every run unless they are passed
through. The engine and the libraries it runs on are passed through
(``PASSED_THROUGH``): they are deterministic between port calls (recordings and
replays prove it), and re-importing them would cost 0.6 s a turn. The standard
library stays restricted, so the engine's code is still held to the sandbox's
rules (no clock, no randomness, no I/O outside the ports). Temporal's own control
errors are registered with ``propagate_also``, so the engine re-raises them and
Temporal retries the workflow task instead of the turn faulting (D531).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from types import TracebackType

from temporalio import workflow
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from aptix_pipeline.contracts import scrubbed_logger
from aptix_pipeline.engine import Pipeline
from aptix_pipeline.engine.replay import Recorder, config_digest
from aptix_pipeline.steps import propagate_also

from .activities import TurnActivities, _recording_options
from .codec import BlobStore, ClaimCheckCodec
from .workflow import DurableSettings, TurnWorkflow, _Host, register_host, unregister_host

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "PASSED_THROUGH",
    "DurableWorker",
    "connect",
    "data_converter",
    "sandbox_runner",
]

logger = scrubbed_logger(__name__)

DEFAULT_TASK_QUEUE = "aptix-turns"

PASSED_THROUGH: tuple[str, ...] = (
    "aptix_pipeline",
    "annotated_types",
    "attr",
    "attrs",
    "jsonschema",
    "jsonschema_specifications",
    "opentelemetry",
    "pydantic",
    "pydantic_core",
    "referencing",
    "rpds",
    "statemachine",
    "tenacity",
    "typing_extensions",
    "typing_inspection",
)
"""The modules a workflow shares with its worker instead of importing them again."""


def _temporal_control_errors() -> tuple[type[BaseException], ...]:
    from temporalio.worker._workflow_instance import _WorkflowBeingEvictedError
    from temporalio.workflow import NondeterminismError, ReadOnlyContextError

    kinds: list[type[BaseException]] = [
        NondeterminismError,  # the sandbox's refusals are a kind of it
        ReadOnlyContextError,
        _WorkflowBeingEvictedError,
    ]
    not_in_loop = getattr(workflow, "_NotInWorkflowEventLoopError", None)
    if isinstance(not_in_loop, type) and issubclass(not_in_loop, BaseException):
        kinds.append(not_in_loop)
    return tuple(kinds)


propagate_also(*_temporal_control_errors())


class _QuietWhileReplaying(logging.Filter):
    """Drops the engine's log records while a workflow replays its history (D532)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (workflow.in_workflow() and workflow.unsafe.is_replaying())


_QUIET = _QuietWhileReplaying()


def _quiet_engine_logs() -> None:
    handlers_logger = logging.getLogger("aptix_pipeline")
    if _QUIET not in handlers_logger.filters:
        handlers_logger.addFilter(_QUIET)
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("aptix_pipeline."):
            each = logging.getLogger(name)
            if _QUIET not in each.filters:
                each.addFilter(_QUIET)


def sandbox_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox, with ``PASSED_THROUGH`` shared with the worker."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )


def data_converter(blobs: BlobStore | None = None) -> DataConverter:
    """The converter of durable turns: pydantic JSON, large payloads to ``blobs``."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    if blobs is None:
        return pydantic_data_converter
    return DataConverter(
        payload_converter_class=pydantic_data_converter.payload_converter_class,
        payload_codec=ClaimCheckCodec(blobs),
    )


async def connect(
    address: str,
    *,
    namespace: str = "default",
    blobs: BlobStore | None = None,
    lazy: bool = False,
) -> Client:
    """A Temporal client for durable turns (``data_converter``); with ``lazy`` it
    connects at its first call instead of here."""
    return await Client.connect(
        address, namespace=namespace, data_converter=data_converter(blobs), lazy=lazy
    )


class DurableWorker:
    """Runs durable turns of ``pipeline`` from ``task_queue`` (docs/DURABLE.md).

    Use ``async with DurableWorker(...)`` (it serves until the block ends) or
    ``await worker.run()`` (until cancelled). ``identity`` names the worker in each
    turn's ``workers`` and in Temporal's history (default ``aptix@host:pid``).
    ``max_concurrent_turns`` bounds the workflow tasks and activities it runs at
    once. ``sticky_timeout_seconds`` is how long a turn's next workflow task waits for
    this worker before any worker may take it (a dead worker's turns move on after it).
    ``max_cached_workflows`` is how many running turns the worker keeps in memory
    between their workflow tasks; one it does not keep is replayed from its history.
    """

    def __init__(
        self,
        client: Client,
        pipeline: Pipeline,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        identity: str | None = None,
        settings: DurableSettings | None = None,
        max_concurrent_turns: int = 100,
        sticky_timeout_seconds: float = 5.0,
        max_cached_workflows: int = 1000,
    ) -> None:
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"pipeline must be a Pipeline, not {type(pipeline).__name__}")
        self.settings = settings or DurableSettings()
        self.activities = TurnActivities(
            pipeline, identity=identity, heartbeat_seconds=self.settings.heartbeat_seconds / 4
        )
        self.identity = self.activities.identity
        self.task_queue = task_queue
        recording = _recording_options(pipeline)
        ports = pipeline.turn_ports
        retriever = ports.retriever
        self._host = _Host(
            pipeline=pipeline,
            settings=self.settings,
            retriever_collection=None if retriever is None else retriever.collection,
            recording=recording,
            config_digest=_digest(pipeline) if recording is not None else None,
            tool_names=tuple(ports.tools),
            has_files=ports.files is not None,
        )
        self._worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[TurnWorkflow],
            activities=self.activities.all(),
            workflow_runner=sandbox_runner(),
            identity=self.identity,
            max_concurrent_workflow_tasks=max_concurrent_turns,
            max_concurrent_activities=max_concurrent_turns,
            max_concurrent_local_activities=max_concurrent_turns,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout_seconds),
            max_cached_workflows=max_cached_workflows,
            graceful_shutdown_timeout=timedelta(seconds=5),
        )
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Serve until cancelled (or until ``shutdown``)."""
        _quiet_engine_logs()
        register_host(self.task_queue, self._host)
        try:
            await self._worker.run()
        finally:
            unregister_host(self.task_queue, self._host)

    async def shutdown(self) -> None:
        """Stop taking work, finish what runs (up to 5 s), and stop."""
        await self._worker.shutdown()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def __aenter__(self) -> DurableWorker:
        self._task = asyncio.create_task(self.run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown()


def _digest(pipeline: Pipeline) -> str:
    for interceptor in pipeline.interceptors:
        if isinstance(interceptor, Recorder) and interceptor.options.config_digest:
            return interceptor.options.config_digest
    return config_digest(pipeline.turn_ports, pipeline.options)
