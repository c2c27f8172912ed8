"""The durable turn: a Temporal workflow that walks the same machine as ``Pipeline.run``.

The workflow builds a ``Pipeline`` on proxy ports and runs the turn inside Temporal's
sandbox: transitions, guards, steps and POST rules run in the workflow, exactly the
code that runs in process (AGN-036 §4, AGN-011 §5); each port call with an effect or
an answer that may change is an activity (``activities.py``):

- the model, the server tools, retrieval, the file store and the commit
  (``StoreBackend.apply``) are activities: Temporal keeps their answers in the
  workflow's history, so a worker that takes over after a crash gets them from
  there and makes no completed call again (D533);
- the store's reads and the catalogs' are *local* activities: they run on the
  workflow's own worker with no round trip through the server, which the history
  still records; a turn reads each catalog entry once (D560). A crash re-runs a
  read that had not answered, which changes nothing;
  the model call and the commit are never local, because a crash would run them again;
- the usage ledger's reservations and settlements (issue 31) are activities: they
  write, and a reservation Temporal runs again is answered by its call's id (D595);
  the turn's prices and budgets are the worker's pipeline options;
- the clock and the ids are the workflow's (``workflow.now()``, ``workflow.uuid4()``),
  deterministic on replay;
- the store's writes are buffered in the workflow by ``BufferedTransaction`` and
  reach the store in the one ``apply`` (adapters/stores/unit_of_work.py).

Retries are Temporal's: the in-process retries (``PipelineOptions.llm_attempts``,
tenacity) are set to one try in the workflow, and the activity's retry policy takes
their count and back-off (D534). An activity cancelled by the turn's deadline raises
``asyncio.CancelledError`` in the workflow, the ports' contract (D531).

The turn keeps its state trace as a turn in process does (``PipelineOptions.keep_traces``,
a worker whose store is a ``TraceLog``): the engine hands it to the workflow's store,
which adds the durable facts — the workflow, its run and task queue, the workers
that ran its activities and each model call's, server tool's and commit's attempts
(``durable`` in the trace's JSON) — and keeps it by the local activity
``aptix.trace.keep`` (D678): on the workflow's own worker, with no round trip through
the server; a crash that runs it again keeps nothing twice (its id is the workflow's).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from aptix_pipeline.adapters.stores import BufferedTransaction, TurnWrites
    from aptix_pipeline.contracts import (
        AgentContext,
        BudgetCheck,
        ChatMessage,
        ConversationContext,
        KeptTrace,
        LLMReply,
        LLMRequest,
        ModeSpec,
        Passage,
        PermanentPortError,
        ReserveOutcome,
        RetrievalQuery,
        Session,
        StoreConflictError,
        StoredFile,
        StoredOutcome,
        ToolFile,
        ToolInvocation,
        ToolOutput,
        ToolPause,
        Turn,
        UsageCall,
        UsageQuery,
    )
    from aptix_pipeline.engine import (
        PROGRESS_EVENTS,
        Listener,
        Pipeline,
        Proceed,
        TurnCall,
        TurnEvent,
        TurnInterceptor,
        TurnReport,
        progress_json,
    )
    from aptix_pipeline.engine.replay import Recorder, RecordingOptions
    from aptix_pipeline.steps import PipelineOptions, Ports, ToolPossiblyExecutedError

    from .payloads import (
        ApplyAnswer,
        FileWithBytes,
        ModelAnswer,
        ToolAnswer,
        TurnInput,
        TurnOutput,
    )

__all__ = ["WORKFLOW_NAME", "DurableSettings", "TurnWorkflow", "register_host", "unregister_host"]

WORKFLOW_NAME = "aptix.turn"


@dataclass(frozen=True, slots=True)
class DurableSettings:
    """How a durable turn's activities are timed and retried (docs/DURABLE.md).

    - ``heartbeat_seconds``: the most a running model call, server tool or commit may go
      without a heartbeat before Temporal takes its worker for dead and runs the call
      on another (its activities heartbeat four times as often);
    - ``model_timeout_seconds`` / ``tool_timeout_seconds``: one attempt's limit
      (start to close); by default the turn's deadline, else 10 minutes; a server
      tool takes ``server_tool_timeout_seconds`` when the options set one;
    - ``read_timeout_seconds``: a store or catalog read's limit;
    - ``commit_attempts``: tries of the commit (a worker that dies during it, a store
      that is briefly away); a conflict is never retried;
    - ``tool_attempts``: runs of one server tool call when its worker dies mid-call
      (the tool ledger says what a second run may do);
    - ``max_retry_wait_seconds``: the back-off cap of the model call's retries.
    """

    heartbeat_seconds: float = 10.0
    model_timeout_seconds: float | None = None
    tool_timeout_seconds: float | None = None
    read_timeout_seconds: float = 30.0
    commit_attempts: int = 5
    tool_attempts: int = 3
    max_retry_wait_seconds: float | None = None


@dataclass(slots=True)
class _Host:
    """What a worker gives the workflows it runs: the host's pipeline and settings."""

    pipeline: Pipeline
    settings: DurableSettings
    retriever_collection: str | None
    recording: RecordingOptions | None
    config_digest: str | None
    tool_names: tuple[str, ...]
    has_files: bool
    has_usage: bool = False
    """The worker's pipeline keeps a usage ledger (``Ports.usage``)."""
    keeps_traces: bool = False
    """The worker's store is a ``TraceLog`` and its options keep traces (D678)."""


_HOSTS: dict[str, _Host] = {}
"""The hosts by task queue. This module is passed through Temporal's sandbox, so the
workflows of a worker see the dict its ``DurableWorker`` filled."""


def register_host(task_queue: str, host: _Host) -> None:
    """Make ``host`` the one the workflows on ``task_queue`` in this process run on."""
    known = _HOSTS.get(task_queue)
    if known is not None and known is not host:
        raise ValueError(
            f"task queue {task_queue!r} already has another pipeline in this process; "
            "give each pipeline its own task queue"
        )
    _HOSTS[task_queue] = host


def unregister_host(task_queue: str, host: _Host) -> None:
    """Forget ``host`` (its worker has stopped)."""
    if _HOSTS.get(task_queue) is host:
        del _HOSTS[task_queue]


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _replaying() -> bool:
    return workflow.unsafe.is_replaying()


class _Calls:
    """The workflow's side of the activities: how each is timed, retried and undone."""

    def __init__(self, host: _Host, options: PipelineOptions) -> None:
        settings = host.settings
        deadline = options.turn_deadline_seconds
        self.heartbeat = timedelta(seconds=settings.heartbeat_seconds)
        self.model_timeout = timedelta(seconds=settings.model_timeout_seconds or deadline or 600.0)
        self.tool_timeout = timedelta(
            seconds=settings.tool_timeout_seconds
            or options.server_tool_timeout_seconds
            or deadline
            or 600.0
        )
        self.read_timeout = timedelta(seconds=settings.read_timeout_seconds)
        self.model_retry = RetryPolicy(
            maximum_attempts=max(1, options.llm_attempts),
            initial_interval=timedelta(seconds=max(options.retry_wait_seconds, 0.001)),
            maximum_interval=_seconds(
                settings.max_retry_wait_seconds or options.retry_max_wait_seconds
            ),
            non_retryable_error_types=["PermanentPortError"],
        )
        self.once = RetryPolicy(maximum_attempts=1)
        self.commit_retry = RetryPolicy(
            maximum_attempts=settings.commit_attempts,
            initial_interval=timedelta(milliseconds=100),
            non_retryable_error_types=["StoreConflictError"],
        )
        self.tool_retry = RetryPolicy(
            maximum_attempts=settings.tool_attempts,
            initial_interval=timedelta(milliseconds=100),
        )
        self.workers: list[str] = []
        self.activities: list[dict[str, Any]] = []
        """Each model call's, server tool's and commit's activity: its name, the worker
        that answered and on which attempt, or how it failed (D678)."""

    def ran(self, name: str, worker: str, attempt: int) -> None:
        """The activity ``name`` answered from ``worker`` on its ``attempt``-th attempt."""
        if worker not in self.workers:
            self.workers.append(worker)
        self.activities.append({"activity": name, "worker": worker, "attempt": attempt})

    def durable(self) -> dict[str, Any]:
        """The durable facts of the turn so far (``durable`` of its kept trace)."""
        info = workflow.info()
        return {
            "workflow_id": info.workflow_id,
            "run_id": info.run_id,
            "task_queue": info.task_queue,
            "workers": list(self.workers),
            "activities": [dict(each) for each in self.activities],
        }

    async def read(
        self, name: str, *args: Any, result_type: Any = None, retry: RetryPolicy | None = None
    ) -> Any:
        """A local activity: a store or catalog read (see the module docstring), or the
        trace's keeping, which a crash may run again harmlessly (its id is kept once)."""
        try:
            return await workflow.execute_local_activity(
                name,
                args=args,
                start_to_close_timeout=self.read_timeout,
                retry_policy=retry or self.once,
                result_type=result_type,
            )
        except ActivityError as error:
            raise _port_error(error) from None

    async def call(
        self,
        name: str,
        *args: Any,
        result_type: Any,
        timeout: timedelta,
        retry: RetryPolicy,
        heartbeat: bool = False,
    ) -> Any:
        """An activity, its failure raised as the port's own (see ``_port_error``)."""
        try:
            return await workflow.execute_activity(
                name,
                args=args,
                start_to_close_timeout=timeout,
                heartbeat_timeout=self.heartbeat if heartbeat else None,
                retry_policy=retry,
                result_type=result_type,
            )
        except ActivityError as error:
            if name in _COUNTED:
                cause = error.cause
                self.activities.append(
                    {
                        "activity": name,
                        "failed": cause.type
                        if isinstance(cause, ApplicationError) and cause.type
                        else type(cause or error).__name__,
                        "retry_state": error.retry_state.name if error.retry_state else None,
                    }
                )
            raise _port_error(error) from None


_COUNTED = frozenset({"aptix.llm.complete", "aptix.tool.call", "aptix.store.apply"})
"""The activities a kept trace lists with their workers and attempts (D678)."""

_ERROR_CLASSES: dict[str, type[Exception]] = {
    # The tool ledger's verdict keeps its class: the step names its rule (D565).
    "ToolPossiblyExecutedError": ToolPossiblyExecutedError,
}


def _named_error(name: str) -> type[Exception]:
    """An exception class named as the one the worker's port raised (one per name)."""
    known = _ERROR_CLASSES.get(name)
    if known is None:
        safe = name if name.isidentifier() else "PortError"
        known = _ERROR_CLASSES[name] = type(safe, (Exception,), {"__module__": "aptix_pipeline"})
    return known


def _port_error(error: ActivityError) -> BaseException:
    """What a port raises in process for the activity failure ``error`` (D531, D534)."""
    cause = error.cause
    if isinstance(cause, TemporalCancelledError):
        return asyncio.CancelledError()
    if isinstance(cause, TemporalTimeoutError):
        return TimeoutError(f"the activity {error.activity_type} timed out ({cause.type})")
    if isinstance(cause, ApplicationError):
        kind = cause.type or "Exception"
        if kind == "PermanentPortError":
            return PermanentPortError(cause.message)
        if kind == "StoreConflictError":
            return StoreConflictError(cause.message)
        return _named_error(kind)(cause.message)
    return _named_error(type(cause).__name__ if cause is not None else "ActivityError")(
        str(cause or error)
    )


# --- the proxy ports ---------------------------------------------------------------


class _WorkflowClock:
    def now(self) -> Any:
        return workflow.now()


class _WorkflowIds:
    """``<kind>_<32 hex digits>``, as ``RandomIds`` makes them, from the workflow's seed."""

    def new_id(self, kind: str) -> str:
        return f"{kind}_{workflow.uuid4().hex}"


class _WorkflowStore:
    """A ``StoreBackend`` whose reads are local activities and whose ``apply`` is one."""

    def __init__(self, calls: _Calls) -> None:
        self._calls = calls

    def begin(self, org: str, user: str) -> BufferedTransaction:
        return BufferedTransaction(self, org, user)

    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        return await self._calls.read(  # type: ignore[no-any-return]
            "aptix.store.read_session", org, user, session_id, result_type=Session | None
        )

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        return await self._calls.read(  # type: ignore[no-any-return]
            "aptix.store.read_turn", org, user, session_id, turn_id, result_type=Turn | None
        )

    async def read_transcript(self, org: str, user: str, session_id: str) -> list[ChatMessage]:
        return await self._calls.read(  # type: ignore[no-any-return]
            "aptix.store.read_transcript", org, user, session_id, result_type=list[ChatMessage]
        )

    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        return await self._calls.read(  # type: ignore[no-any-return]
            "aptix.store.read_pending_turn", org, user, session_id, result_type=Turn | None
        )

    async def read_outcome(self, org: str, user: str, key: str) -> StoredOutcome | None:
        return await self._calls.read(  # type: ignore[no-any-return]
            "aptix.store.read_outcome", org, user, key, result_type=StoredOutcome | None
        )

    async def apply(self, writes: TurnWrites) -> None:
        calls = self._calls
        answer: ApplyAnswer = await calls.call(
            "aptix.store.apply",
            writes,
            result_type=ApplyAnswer,
            timeout=calls.read_timeout,
            retry=calls.commit_retry,
            heartbeat=True,  # a worker that dies mid-commit is noticed at once (D547)
        )
        calls.ran("aptix.store.apply", answer.worker, answer.attempt)


class _WorkflowTracingStore(_WorkflowStore):
    """The workflow's store where the worker keeps traces: a ``TraceLog`` whose
    ``keep_trace`` adds the durable facts to the trace and keeps it by an activity."""

    async def keep_trace(self, trace: KeptTrace) -> None:
        calls = self._calls
        data = json.loads(trace.trace)
        data["durable"] = calls.durable()
        kept = replace(
            trace,
            id=workflow.uuid4().hex,  # the engine's would differ on replay
            trace=json.dumps(data, separators=(",", ":"), ensure_ascii=False),
        )
        await calls.read("aptix.trace.keep", kept, result_type=type(None), retry=calls.commit_retry)

    async def list_traces(
        self,
        org: str,
        user: str,
        session_id: str | None = None,
        *,
        limit: int = 50,
        offset: int = 0,
    ) -> list[KeptTrace]:
        raise NotImplementedError("a durable turn lists no traces; read the store's")

    async def read_trace(self, org: str, user: str, trace_id: str) -> KeptTrace | None:
        raise NotImplementedError("a durable turn reads no traces; read the store's")

    async def purge_traces(self, now: Any) -> int:
        raise NotImplementedError("a durable turn purges no traces; Pipeline.purge_traces does")


class _WorkflowCatalog:
    """The mode and agent catalogs, read by local activities, each answer once a turn.

    A turn asks for its mode three or four times (the session creator, the prompt,
    the reasoner, the response builder): in the workflow each read is a local
    activity, a workflow activation and a marker in the history, so the same
    question gets the answer it got first in this turn (D560). A failed read is
    not kept: the next asks again.
    """

    def __init__(self, calls: _Calls) -> None:
        self._calls = calls
        self._answers: dict[tuple[str | None, ...], Any] = {}

    async def _read(self, name: str, *args: str | None, result_type: Any) -> Any:
        key = (name, *args)
        if key in self._answers:
            return self._answers[key]
        answer = await self._calls.read(name, *args, result_type=result_type)
        self._answers[key] = answer
        return answer

    async def get_mode(self, mode: str) -> ModeSpec | None:
        return await self._read(  # type: ignore[no-any-return]
            "aptix.modes.get_mode", mode, result_type=ModeSpec | None
        )

    async def list_modes(self) -> list[ModeSpec]:
        return list(await self._read("aptix.modes.list_modes", result_type=list[ModeSpec]))

    async def get_agent_context(self, agent_context_id: str | None) -> AgentContext | None:
        return await self._read(  # type: ignore[no-any-return]
            "aptix.agents.get_agent_context", agent_context_id, result_type=AgentContext | None
        )

    async def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> ConversationContext | None:
        return await self._read(  # type: ignore[no-any-return]
            "aptix.agents.get_conversation_context",
            conversation_context_id,
            result_type=ConversationContext | None,
        )


class _WorkflowLLM:
    """The model: one activity per call, retried by Temporal's policy."""

    def __init__(self, calls: _Calls, provider_name: str | None) -> None:
        self._calls = calls
        if provider_name is not None:
            self.provider_name = provider_name

    async def complete(self, request: LLMRequest) -> LLMReply:
        calls = self._calls
        answer: ModelAnswer = await calls.call(
            "aptix.llm.complete",
            request,
            result_type=ModelAnswer,
            timeout=calls.model_timeout,
            retry=calls.model_retry,
            heartbeat=True,
        )
        calls.ran("aptix.llm.complete", answer.worker, answer.attempt)
        return LLMReply.model_validate(answer.reply)


class _WorkflowTool:
    """One server tool: an activity per call; the tool's exception raised again here."""

    def __init__(self, calls: _Calls, name: str) -> None:
        self._calls = calls
        self._name = name

    async def __call__(
        self, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> str | ToolOutput | ToolPause:
        calls = self._calls
        answer: ToolAnswer = await calls.call(
            "aptix.tool.call",
            self._name,
            arguments,
            invocation,
            result_type=ToolAnswer,
            timeout=calls.tool_timeout,
            retry=calls.tool_retry,
            heartbeat=True,
        )
        calls.ran("aptix.tool.call", answer.worker, answer.attempt)
        if answer.kind == "output" and answer.output is not None:
            files = [file.tool_file() for file in answer.files]
            return ToolOutput(result_json=answer.output.result_json, files=files)
        if answer.kind == "pause" and answer.pause is not None:
            return answer.pause
        if answer.kind == "text" and answer.text is not None:
            return answer.text
        raise _named_error(answer.error_type or "Exception")(answer.error or "")


class _WorkflowRetriever:
    def __init__(self, calls: _Calls, collection: str) -> None:
        self._calls = calls
        self.collection = collection

    async def retrieve(self, query: RetrievalQuery) -> Sequence[Passage]:
        calls = self._calls
        return await calls.call(  # type: ignore[no-any-return]
            "aptix.retriever.retrieve",
            query,
            result_type=list[Passage],
            timeout=calls.read_timeout,
            retry=calls.once,
        )


class _WorkflowFiles:
    def __init__(self, calls: _Calls) -> None:
        self._calls = calls

    async def put(self, file: ToolFile) -> StoredFile:
        calls = self._calls
        return await calls.call(  # type: ignore[no-any-return]
            "aptix.files.put",
            FileWithBytes.of(file),
            result_type=StoredFile,
            timeout=calls.read_timeout,
            retry=calls.commit_retry,
        )


class _WorkflowUsage:
    """The usage ledger: a reservation and a settlement are each an activity (they write
    and must outlive a crash; D595), retried as the commit is."""

    def __init__(self, calls: _Calls) -> None:
        self._calls = calls

    async def reserve_usage(
        self,
        call: UsageCall,
        checks: Sequence[BudgetCheck],
        settle: Sequence[UsageCall] = (),
    ) -> ReserveOutcome:
        calls = self._calls
        return await calls.call(  # type: ignore[no-any-return]
            "aptix.usage.reserve",
            call,
            list(checks),
            list(settle),
            result_type=ReserveOutcome,
            timeout=calls.read_timeout,
            retry=calls.commit_retry,
        )

    async def settle_usage(self, settled: Sequence[UsageCall]) -> None:
        calls = self._calls
        await calls.call(
            "aptix.usage.settle",
            list(settled),
            result_type=type(None),
            timeout=calls.read_timeout,
            retry=calls.commit_retry,
        )

    async def usage_calls(self, query: UsageQuery) -> list[UsageCall]:
        raise NotImplementedError("a durable turn reports no usage; read the store's ledger")


def _proxy_ports(host: _Host, calls: _Calls) -> Ports:
    catalog = _WorkflowCatalog(calls)
    provider = getattr(host.pipeline.ports.llm, "provider_name", None)
    return Ports(
        store=_WorkflowTracingStore(calls) if host.keeps_traces else _WorkflowStore(calls),
        llm=_WorkflowLLM(calls, provider if isinstance(provider, str) else None),
        modes=catalog,
        agents=catalog,
        clock=_WorkflowClock(),
        ids=_WorkflowIds(),
        tools={name: _WorkflowTool(calls, name) for name in host.tool_names},
        files=_WorkflowFiles(calls) if host.has_files else None,
        retriever=None
        if host.retriever_collection is None
        else _WorkflowRetriever(calls, host.retriever_collection),
        usage=_WorkflowUsage(calls) if host.has_usage else None,
    )


class _Progress(TurnInterceptor):
    """Keeps the turn's progress events for the ``progress`` query (``DurablePipeline.stream``)."""

    def __init__(self, sink: list[dict[str, Any]]) -> None:
        self._sink = sink

    def intercept(self, call: TurnCall, proceed: Proceed) -> Any:
        def heard(event: TurnEvent) -> None:
            if type(event) in PROGRESS_EVENTS:
                self._sink.append({"event": type(event).__name__, **progress_json(event)})

        listeners: list[Listener] = [heard]
        return proceed(listeners=listeners)


@workflow.defn(name=WORKFLOW_NAME, sandboxed=True)
class TurnWorkflow:
    """One durable turn (see the module docstring)."""

    def __init__(self) -> None:
        self._progress: list[dict[str, Any]] = []
        self._ended = False

    @workflow.run
    async def run(self, turn: TurnInput) -> TurnOutput:
        """Run the turn on proxy ports and answer its report."""
        info = workflow.info()
        host = _HOSTS.get(info.task_queue)
        if host is None:  # a worker of this process serves the queue, or no workflow runs here
            raise ApplicationError(
                f"no aptix pipeline serves task queue {info.task_queue!r} in this worker",
                non_retryable=False,
            )
        options = replace(host.pipeline.options, llm_attempts=1)  # Temporal retries (D534)
        calls = _Calls(host, host.pipeline.options)
        interceptors: list[TurnInterceptor] = []
        if turn.progress:
            interceptors.append(_Progress(self._progress))
        if host.recording is not None:
            interceptors.append(
                Recorder(
                    RecordingOptions(
                        redact=host.recording.redact,
                        config_digest=host.config_digest,
                        timer=None,
                    ),
                    inline=True,
                )
            )
        pipeline = host.pipeline.on_ports(
            _proxy_ports(host, calls),
            options=options,
            interceptors=interceptors,
            replaying=_replaying,
        )
        try:
            report = await pipeline.run(
                turn.request,
                {"org": turn.org, "user": turn.user},
                initial_mode=turn.initial_mode,
                idempotency_key=turn.idempotency_key,
            )
        finally:
            self._ended = True
        if report.recording is not None:
            await calls.call(
                "aptix.recording.save",
                _durable_recording(report, info, calls.workers, calls.activities),
                result_type=type(None),
                timeout=calls.read_timeout,
                retry=calls.commit_retry,
            )
        return TurnOutput(
            report=report.to_dict(content=True),
            workers=calls.workers,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
        )

    @workflow.query(name="progress")
    def progress(self, since: int) -> dict[str, Any]:
        """The progress events from ``since`` on, and whether the turn has ended."""
        return {"events": self._progress[since:], "ended": self._ended}


def _durable_recording(
    report: TurnReport,
    info: workflow.Info,
    workers: Sequence[str],
    activities: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    recording = report.recording
    assert recording is not None
    data = recording.to_dict()
    data["durable"] = {
        "workflow_id": info.workflow_id,
        "run_id": info.run_id,
        "task_queue": info.task_queue,
        "attempt": info.attempt,
        "workers": list(workers),
        "activities": [dict(each) for each in activities],
    }
    return data


def workflow_id_for(flight: tuple[str, ...] | None, fallback: str) -> str:
    """The workflow id of a turn: from its answer keys (so the same keyed turn started
    twice is one workflow), else ``fallback`` (D530)."""
    if flight is None:
        return f"aptix-turn-{fallback}"
    digest = hashlib.sha256("\x1f".join(flight).encode("utf-8")).hexdigest()
    return f"aptix-turn-{digest[:40]}"
