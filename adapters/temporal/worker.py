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
import contextlib
import functools
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from types import CodeType, TracebackType
from typing import Any

from pydantic import TypeAdapter
from temporalio import workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, Worker, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox import _runner as sandbox_internals

from aptix_pipeline.contracts import TraceLog, scrubbed_logger
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
    "TurnPayloadConverter",
    "connect",
    "data_converter",
    "replaying",
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


@functools.lru_cache(maxsize=64)
def _compiled(code: str) -> CodeType:
    return compile(code, "<string>", "exec")


class _CompiledInstance(sandbox_internals._Instance):
    """The sandbox's workflow instance, running its fixed snippets compiled once.

    The sandbox enters a workflow run through a few lines of source that it gives
    ``exec`` as text, so Python compiles them again on every call: some 70 calls a
    durable turn (each activation, and each payload's serialization context), about
    70 µs each. ``exec`` runs a code object exactly as it runs its text.
    """

    def _run_code(self, code: Any, **extra_globals: Any) -> None:
        if isinstance(code, str):
            code = _compiled(code)
        super()._run_code(code, **extra_globals)


class _SandboxRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` with ``_CompiledInstance``; the same restrictions."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledInstance(det, self.runner_class, self.restrictions)


def sandbox_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox, with ``PASSED_THROUGH`` shared with the worker."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    if callable(getattr(sandbox_internals._Instance, "_run_code", None)):
        return _SandboxRunner(restrictions=restrictions)
    return SandboxedWorkflowRunner(restrictions=restrictions)  # a temporalio without it


_TYPE_ADAPTERS = functools.lru_cache(maxsize=1024)(TypeAdapter)
"""pydantic's ``TypeAdapter`` of each payload type, built once per process."""


class TurnPayloadConverter(PydanticPayloadConverter):
    """temporalio's pydantic converter, its ``TypeAdapter``s shared by every workflow run.

    A workflow run makes its own payload converter, and the stock one caches the
    adapters it builds in itself: each durable turn built about seven again (an
    adapter of ``Session | None`` costs about 0.6 ms), a few ms of a worker's CPU per
    turn (docs/PERFORMANCE.md "Durable turns"). The payload types are the engine's
    own, passed through the sandbox, so one adapter serves every run.
    """

    def __init__(self) -> None:
        super().__init__()
        for converter in self.converters.values():
            if isinstance(converter, PydanticJSONPlainPayloadConverter):
                converter._type_adapter = _TYPE_ADAPTERS


def data_converter(blobs: BlobStore | None = None) -> DataConverter:
    """The converter of durable turns: pydantic JSON, large payloads to ``blobs``."""
    if blobs is None:
        return DataConverter(payload_converter_class=TurnPayloadConverter)
    return DataConverter(
        payload_converter_class=TurnPayloadConverter, payload_codec=ClaimCheckCodec(blobs)
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
        heartbeat_every = timedelta(seconds=self.settings.heartbeat_seconds / 4)
        self.activities = TurnActivities(
            pipeline, identity=identity, heartbeat_seconds=self.settings.heartbeat_seconds / 4
        )
        self.identity = self.activities.identity
        self.task_queue = task_queue
        self._host = _host_of(pipeline, self.settings)
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
            # The SDK sends a heartbeat at most every 0.8 x the heartbeat timeout unless
            # told otherwise: a worker a little slow (a busy machine) then misses the
            # timeout, and a live call is run again elsewhere. Send what the activities
            # give, four times per timeout (D541).
            max_heartbeat_throttle_interval=heartbeat_every,
            default_heartbeat_throttle_interval=heartbeat_every,
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


def _host_of(pipeline: Pipeline, settings: DurableSettings) -> _Host:
    """What the workflows of ``pipeline`` need of it (``workflow.py``'s ``_Host``)."""
    recording = _recording_options(pipeline)
    ports = pipeline.turn_ports
    retriever = ports.retriever
    return _Host(
        pipeline=pipeline,
        settings=settings,
        retriever_collection=None if retriever is None else retriever.collection,
        recording=recording,
        config_digest=_digest(pipeline) if recording is not None else None,
        tool_names=tuple(ports.tools),
        has_files=ports.files is not None,
        has_usage=ports.usage is not None,
        keeps_traces=pipeline.options.keep_traces and isinstance(ports.store, TraceLog),
    )


@contextlib.contextmanager
def replaying(
    pipeline: Pipeline,
    *,
    settings: DurableSettings | None = None,
    blobs: BlobStore | None = None,
) -> Iterator[Replayer]:
    """Temporal's ``Replayer`` for durable turns, for the block: ``TurnWorkflow`` in the
    workers' sandbox (``sandbox_runner``) with their converter (``data_converter``),
    ``pipeline`` the host of the turns it replays (D543).

    ``replay_workflow(history)`` runs a turn's history (``WorkflowHandle.fetch_history``)
    again on today's code and fails when the code would take another path than the
    history holds: a nondeterminism error. ``pipeline`` and ``settings`` are the
    workers' own configuration (the workflow reads the options and the tool names;
    every port's answer comes from the history, so no port is called).
    """
    # The replayer runs its workflows on the task queue "replay-<build id>"; the
    # workflow finds its host by that name.
    build_id = f"aptix-replay-{uuid.uuid4().hex}"
    checker = Replayer(
        workflows=[TurnWorkflow],
        workflow_runner=sandbox_runner(),
        data_converter=data_converter(blobs),
        build_id=build_id,
    )
    host = _host_of(pipeline, settings or DurableSettings())
    queue = f"replay-{build_id}"
    register_host(queue, host)
    try:
        yield checker
    finally:
        unregister_host(queue, host)


def _digest(pipeline: Pipeline) -> str:
    for interceptor in pipeline.interceptors:
        if isinstance(interceptor, Recorder) and interceptor.options.config_digest:
            return interceptor.options.config_digest
    return config_digest(pipeline.turn_ports, pipeline.options)
