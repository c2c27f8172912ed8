"""The activities of a durable turn: every port call with an effect or an answer that
may change, run on a worker against the host's real ports (docs/DURABLE.md).

``TurnActivities`` holds the ports of the host's ``Pipeline`` as the turn sees them
(``Pipeline.turn_ports``: the host's hooks wrapped around the model and the server
tools, so hooks run here, once per call, never in the workflow). Each method is one
activity; the workflow (``workflow.py``) calls them through its proxy ports.

Errors cross the wire as Temporal ``ApplicationError``s named by the class that was
raised, and the proxies raise them again under the same name, so a turn tells the
caller what it would tell in process (``steps/exception_text.py``):

- ``PermanentPortError`` and ``StoreConflictError`` are non-retryable: Temporal's
  retry policy never repeats them (D534);
- a server tool's own exception is an answer (``ToolAnswer`` of kind ``"error"``),
  not a failed activity: the model is told, as in process; only a worker that dies
  mid-call makes Temporal run the activity again, and the tool ledger decides what
  that second run may do (docs/DURABLE.md "Tool effects").

Model calls, server tools and the commit heartbeat while they run, so a killed
worker is noticed after the heartbeat timeout, not the whole call's (D547).

The usage ledger's ``reserve_usage`` and ``settle_usage`` (issue 31) are activities
too: they write, outside the turn's commit, and must outlive a crash. A reservation
Temporal runs again (its first answer lost) is answered by the ledger as reserved
already: its call id is the turn's, the correlation's and the round's (D595).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from aptix_pipeline.adapters.stores import StoreBackend, TurnWrites
from aptix_pipeline.contracts import (
    AgentContext,
    BudgetCheck,
    ChatMessage,
    ConversationContext,
    KeptTrace,
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
    ToolInvocation,
    ToolOutput,
    ToolPause,
    TraceLog,
    Turn,
    UsageCall,
    UsageLedger,
    scrubbed_logger,
)
from aptix_pipeline.engine import Pipeline
from aptix_pipeline.steps import Ports

from .payloads import ApplyAnswer, FileWithBytes, ModelAnswer, ToolAnswer

__all__ = ["ACTIVITY_NAMES", "TurnActivities", "default_identity"]

logger = scrubbed_logger(__name__)

T = TypeVar("T")

_NON_RETRYABLE = (PermanentPortError, StoreConflictError)


def default_identity() -> str:
    """A worker's name when the host gives none: ``aptix@<host>:<pid>``."""
    import os

    return f"aptix@{socket.gethostname()}:{os.getpid()}"


def _attempt() -> int:
    """The attempt of the running activity (1 the first; Temporal counts its retries);
    1 when called outside an activity (a host or test calling the method itself)."""
    return activity.info().attempt if activity.in_activity() else 1


def _application_error(error: BaseException) -> ApplicationError:
    """``error`` as Temporal carries it: its class name as the type, its message."""
    return ApplicationError(
        str(error),
        type=type(error).__name__,
        non_retryable=isinstance(error, _NON_RETRYABLE),
    )


async def _heartbeating(work: Awaitable[T], every: float) -> T:
    """``work``'s answer, heartbeating every ``every`` seconds until it has one."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


@contextlib.asynccontextmanager
async def _as_temporal_errors() -> AsyncIterator[None]:
    """Raise what the port raised as an ``ApplicationError`` of its class name."""
    try:
        yield
    except asyncio.CancelledError:
        raise
    except ApplicationError:
        raise
    except Exception as error:
        raise _application_error(error) from error


class TurnActivities:
    """The activities of durable turns on one worker, over the ports of ``pipeline``.

    ``identity`` names the worker in the answers that say who ran a call (the turn
    browser shows them, D537). ``heartbeat_seconds`` is how often a running model
    call or server tool tells Temporal its worker is alive.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        identity: str | None = None,
        heartbeat_seconds: float = 1.0,
    ) -> None:
        ports: Ports = pipeline.turn_ports
        store = ports.store
        if not _is_backend(store):
            raise TypeError(
                "a durable turn needs a store with reads and one atomic apply (a "
                "StoreBackend: the memory, SQLite and PostgreSQL stores are); "
                f"{type(store).__name__} is not one (docs/DURABLE.md)"
            )
        self._backend: StoreBackend = store  # type: ignore[assignment]
        self._ports = ports
        self._pipeline = pipeline
        self.identity = identity or default_identity()
        self._heartbeat = heartbeat_seconds

    # --- the store ----------------------------------------------------------------

    @activity.defn(name="aptix.store.read_session")
    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        """``StoreBackend.read_session``."""
        async with _as_temporal_errors():
            return await self._backend.read_session(org, user, session_id)

    @activity.defn(name="aptix.store.read_turn")
    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        """``StoreBackend.read_turn``."""
        async with _as_temporal_errors():
            return await self._backend.read_turn(org, user, session_id, turn_id)

    @activity.defn(name="aptix.store.read_transcript")
    async def read_transcript(self, org: str, user: str, session_id: str) -> list[ChatMessage]:
        """``StoreBackend.read_transcript``."""
        async with _as_temporal_errors():
            return list(await self._backend.read_transcript(org, user, session_id))

    @activity.defn(name="aptix.store.read_pending_turn")
    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        """``StoreBackend.read_pending_turn``."""
        async with _as_temporal_errors():
            return await self._backend.read_pending_turn(org, user, session_id)

    @activity.defn(name="aptix.store.read_outcome")
    async def read_outcome(self, org: str, user: str, key: str) -> StoredOutcome | None:
        """``StoreBackend.read_outcome``."""
        async with _as_temporal_errors():
            return await self._backend.read_outcome(org, user, key)

    @activity.defn(name="aptix.store.apply")
    async def apply(self, writes: TurnWrites) -> ApplyAnswer:
        """``StoreBackend.apply``, idempotent per turn (D535).

        A commit whose first attempt landed but whose answer was lost (the worker
        died after the store wrote) is retried by Temporal; the store then refuses
        it as a conflict. When every turn the writes hold is stored exactly as
        written, the writes are the ones that landed: the answer is "applied before".
        """
        async with _as_temporal_errors():
            try:
                await _heartbeating(self._backend.apply(writes), self._heartbeat)
            except StoreConflictError:
                if writes.turns and await self._landed(writes):
                    logger.info(
                        "the commit of turn %s had landed before; not applied again",
                        writes.turns[0].turn.id,
                    )
                    return ApplyAnswer(applied="before", worker=self.identity, attempt=_attempt())
                raise
            return ApplyAnswer(applied="now", worker=self.identity, attempt=_attempt())

    async def _landed(self, writes: TurnWrites) -> bool:
        for written in writes.turns:
            turn = written.turn
            org, user = writes.org, writes.user
            if await self._backend.read_turn(org, user, turn.session_id, turn.id) != turn:
                return False
        return True

    # --- the catalogs ---------------------------------------------------------------

    @activity.defn(name="aptix.modes.get_mode")
    async def get_mode(self, mode: str) -> ModeSpec | None:
        """``ModeCatalog.get_mode``."""
        async with _as_temporal_errors():
            return await self._ports.modes.get_mode(mode)

    @activity.defn(name="aptix.modes.list_modes")
    async def list_modes(self) -> list[ModeSpec]:
        """``ModeCatalog.list_modes``."""
        async with _as_temporal_errors():
            return list(await self._ports.modes.list_modes())

    @activity.defn(name="aptix.agents.get_agent_context")
    async def get_agent_context(self, agent_context_id: str | None) -> AgentContext | None:
        """``AgentCatalog.get_agent_context``."""
        async with _as_temporal_errors():
            return await self._ports.agents.get_agent_context(agent_context_id)

    @activity.defn(name="aptix.agents.get_conversation_context")
    async def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> ConversationContext | None:
        """``AgentCatalog.get_conversation_context``."""
        async with _as_temporal_errors():
            return await self._ports.agents.get_conversation_context(conversation_context_id)

    # --- the model, the tools, retrieval, files ------------------------------------

    @activity.defn(name="aptix.llm.complete")
    async def complete(self, request: LLMRequest) -> ModelAnswer:
        """``LLM.complete`` (the host's hooks around it), heartbeating while it runs."""
        async with _as_temporal_errors():
            reply = await _heartbeating(self._ports.llm.complete(request), self._heartbeat)
            return ModelAnswer(
                reply=reply.model_dump(mode="json"), worker=self.identity, attempt=_attempt()
            )

    @activity.defn(name="aptix.tool.call")
    async def call_tool(
        self, name: str, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> ToolAnswer:
        """The server tool ``name`` (the host's hooks around it); its exception is an answer."""
        executor = self._ports.tools.get(name)
        if executor is None:
            raise ApplicationError(
                f"no executor for the server tool {name!r} on worker {self.identity}",
                type="ToolRoutingError",
                non_retryable=True,
            )
        try:
            answer = await _heartbeating(executor(arguments, invocation), self._heartbeat)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return ToolAnswer(
                kind="error",
                error_type=type(error).__name__,
                error=str(error),
                worker=self.identity,
                attempt=_attempt(),
            )
        if isinstance(answer, ToolOutput):
            files = [FileWithBytes.of(file) for file in answer.files]
            return ToolAnswer(
                kind="output", output=answer, files=files, worker=self.identity, attempt=_attempt()
            )
        if isinstance(answer, ToolPause):
            return ToolAnswer(kind="pause", pause=answer, worker=self.identity, attempt=_attempt())
        if isinstance(answer, str):
            return ToolAnswer(kind="text", text=answer, worker=self.identity, attempt=_attempt())
        return ToolAnswer(
            kind="error",
            error_type="TypeError",
            error=f"the tool returned {type(answer).__name__}, not JSON text",
            worker=self.identity,
            attempt=_attempt(),
        )

    @activity.defn(name="aptix.retriever.retrieve")
    async def retrieve(self, query: RetrievalQuery) -> list[Passage]:
        """``Retriever.retrieve``."""
        retriever = self._ports.retriever
        if retriever is None:
            raise ApplicationError("this worker has no retriever", non_retryable=True)
        async with _as_temporal_errors():
            return list(await retriever.retrieve(query))

    @activity.defn(name="aptix.files.put")
    async def put_file(self, file: FileWithBytes) -> StoredFile:
        """``FileStore.put`` (the file comes with its bytes)."""
        files = self._ports.files
        if files is None:
            raise ApplicationError("this worker has no file store", non_retryable=True)
        async with _as_temporal_errors():
            return await files.put(file.tool_file())

    # --- the usage ledger ------------------------------------------------------------

    def _usage(self) -> UsageLedger:
        usage = self._ports.usage
        if usage is None:
            raise ApplicationError("this worker keeps no usage ledger", non_retryable=True)
        return usage

    @activity.defn(name="aptix.usage.reserve")
    async def reserve_usage(
        self, call: UsageCall, checks: list[BudgetCheck], settle: list[UsageCall]
    ) -> ReserveOutcome:
        """``UsageLedger.reserve_usage``; run again, the ledger answers by the call's id."""
        usage = self._usage()
        async with _as_temporal_errors():
            return await usage.reserve_usage(call, checks, settle)

    @activity.defn(name="aptix.usage.settle")
    async def settle_usage(self, calls: list[UsageCall]) -> None:
        """``UsageLedger.settle_usage`` (settling a call twice stores it once)."""
        usage = self._usage()
        async with _as_temporal_errors():
            await usage.settle_usage(calls)

    @activity.defn(name="aptix.trace.keep")
    async def keep_trace(self, trace: KeptTrace) -> None:
        """``TraceLog.keep_trace`` of a durable turn's trace (D678); a trace the store
        holds already (an attempt whose answer was lost) is not kept twice."""
        store = self._ports.store
        if not isinstance(store, TraceLog):
            raise ApplicationError("this worker's store keeps no traces", non_retryable=True)
        async with _as_temporal_errors():
            if await store.read_trace(trace.org, trace.user, trace.id) is None:
                await store.keep_trace(trace)

    @activity.defn(name="aptix.recording.save")
    async def save_recording(self, recording: dict[str, Any]) -> None:
        """Deliver a durable turn's recording as the host's ``Recorder`` would."""
        from aptix_pipeline.engine.replay import TurnRecording

        options = _recording_options(self._pipeline)
        if options is None:
            return
        await options.deliver(TurnRecording.from_dict(recording))

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for ``temporalio.worker.Worker(activities=...)``."""
        return [getattr(self, name) for name in ACTIVITY_NAMES.values()]


ACTIVITY_NAMES: Mapping[str, str] = {
    "aptix.store.read_session": "read_session",
    "aptix.store.read_turn": "read_turn",
    "aptix.store.read_transcript": "read_transcript",
    "aptix.store.read_pending_turn": "read_pending_turn",
    "aptix.store.read_outcome": "read_outcome",
    "aptix.store.apply": "apply",
    "aptix.modes.get_mode": "get_mode",
    "aptix.modes.list_modes": "list_modes",
    "aptix.agents.get_agent_context": "get_agent_context",
    "aptix.agents.get_conversation_context": "get_conversation_context",
    "aptix.llm.complete": "complete",
    "aptix.tool.call": "call_tool",
    "aptix.retriever.retrieve": "retrieve",
    "aptix.files.put": "put_file",
    "aptix.usage.reserve": "reserve_usage",
    "aptix.usage.settle": "settle_usage",
    "aptix.recording.save": "save_recording",
    "aptix.trace.keep": "keep_trace",
}
"""Each activity's name on the wire, and the ``TurnActivities`` method that runs it."""


def _is_backend(store: object) -> bool:
    needed = ("read_session", "read_turn", "read_transcript", "read_pending_turn", "apply")
    return all(callable(getattr(store, name, None)) for name in needed)


def _recording_options(pipeline: Pipeline) -> Any:
    """The ``RecordingOptions`` of the pipeline's ``Recorder``, if it records."""
    from aptix_pipeline.engine.replay import Recorder

    for interceptor in pipeline.interceptors:
        if isinstance(interceptor, Recorder):
            return interceptor.options
    return None
