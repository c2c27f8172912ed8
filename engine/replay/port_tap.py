"""The seam recording and replay share: ports whose every call goes through a tap.

``tap_ports(tap, ports)`` wraps each port of a turn (the store and its
transaction, both catalogs, the LLM, every server tool, the file store, the
retriever, the usage ledger, the clock and the id source) so that each call reaches ``tap`` as
*(port, call, arguments)* before
anything else happens. A ``RecordingTap`` (``recorder.py``) passes the
call on to the real port and writes down its answer; a ``ReplayTap``
(``replayer.py``) never calls a real port: it checks the call against the
recording and answers what the real port answered then (DESIGN.md "Replay").

Arguments and answers travel as JSON (the ports' wire models in their DDR
PascalCase form): that is what a recording holds and what a replay compares.
The tap sits *inside* the engine's port guards (``engine/guarded_ports.py``), so
it sees what the real port did — an exception included — and a replay feeds the
same through the same guards.

A model that streams (``StreamingLLM``, AGN-034 §4.7) is tapped by a
``TappedStreamingLLM``, whose ``stream`` goes through the tap as well; any other
model by a ``TappedLLM``, which has no ``stream``: the engine asks a model to
stream when it is a ``StreamingLLM`` (by the methods it has), so a tapped model
streams exactly when the real one does (a replay: when the recorded one did).

A server tool's ``ToolOutput`` travels as its JSON, which holds each file's name,
MIME type, size and hash but never its bytes (``contracts/files.py``): a replay
hands the engine the same files without their bytes, and answers the file
store's ``put`` as recorded, so no bytes are needed.

The usage ledger (``UsageLedger``, issue 31) is tapped like the store: each
``reserve_usage`` (the call, the budget checks, the settlements it carries) and
each ``settle_usage`` is a port call whose answer (the ``ReserveOutcome``) a
replay gives back, so a budget's verdict replays as it was made (D594).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar, cast

from pydantic import TypeAdapter, ValidationError

from aptix_pipeline.contracts import (
    AgentContext,
    BudgetCheck,
    ChatMessage,
    ConversationContext,
    LLMReply,
    LLMRequest,
    ModeHistoryEntry,
    ModeSpec,
    Passage,
    ReplyChunk,
    ReserveOutcome,
    RetrievalQuery,
    Retriever,
    Session,
    StoredFile,
    StoredOutcome,
    StreamingLLM,
    ToolExecutor,
    ToolFile,
    ToolInvocation,
    ToolOutput,
    ToolPause,
    Turn,
    UsageCall,
    UsageQuery,
)
from aptix_pipeline.engine.events import TurnFaulted
from aptix_pipeline.engine.telemetry import provider_name_of
from aptix_pipeline.steps import Ports, collection_of

from .live import LivePorts

__all__ = [
    "PortTap",
    "TappedAgentCatalog",
    "TappedClock",
    "TappedFileStore",
    "TappedIds",
    "TappedLLM",
    "TappedModeCatalog",
    "TappedRetriever",
    "TappedStore",
    "TappedStreamingLLM",
    "TappedTool",
    "TappedTransaction",
    "TappedUsageLedger",
    "decode_answer",
    "tap_ports",
]

T = TypeVar("T")

STORE, TRANSACTION = "SessionStore", "SessionTransaction"
MODES, AGENTS = "ModeCatalog", "AgentCatalog"
LLM_PORT, TOOLS, CLOCK, IDS = "LLM", "ToolExecutor", "Clock", "IdSource"
FILES = "FileStore"
RETRIEVER = "Retriever"
USAGE = "UsageLedger"
STREAM = "stream"
"""The call name of a streamed model call (``LLM.stream``)."""

_NOTHING: TypeAdapter[None] = TypeAdapter(type(None))
_SESSION: TypeAdapter[Session] = TypeAdapter(Session)
_MAYBE_SESSION: TypeAdapter[Session | None] = TypeAdapter(Session | None)
_MAYBE_TURN: TypeAdapter[Turn | None] = TypeAdapter(Turn | None)
_MAYBE_OUTCOME: TypeAdapter[StoredOutcome | None] = TypeAdapter(StoredOutcome | None)
_MESSAGES: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])
_MAYBE_MODE: TypeAdapter[ModeSpec | None] = TypeAdapter(ModeSpec | None)
_MODES: TypeAdapter[list[ModeSpec]] = TypeAdapter(list[ModeSpec])
_MAYBE_AGENT: TypeAdapter[AgentContext | None] = TypeAdapter(AgentContext | None)
_MAYBE_CONVERSATION: TypeAdapter[ConversationContext | None] = TypeAdapter(
    ConversationContext | None
)
_REPLY: TypeAdapter[LLMReply] = TypeAdapter(LLMReply)
_TEXT: TypeAdapter[str] = TypeAdapter(str)
_TOOL_ANSWER: TypeAdapter[str | ToolOutput | ToolPause] = TypeAdapter(str | ToolOutput | ToolPause)
_STORED_FILE: TypeAdapter[StoredFile] = TypeAdapter(StoredFile)
_PASSAGES: TypeAdapter[list[Passage]] = TypeAdapter(list[Passage])
_TIME: TypeAdapter[datetime] = TypeAdapter(datetime)
_RESERVED: TypeAdapter[ReserveOutcome] = TypeAdapter(ReserveOutcome)
_USAGE_CALLS: TypeAdapter[list[UsageCall]] = TypeAdapter(list[UsageCall])


def decode_answer(adapter: TypeAdapter[T], data: Any) -> T:
    """A recorded answer as the object the port returned: the model the port's signature names.

    An answer that does not fit the signature (a host port that returned something
    else) is handed back as recorded, as the real port handed it then.
    """
    try:
        return adapter.validate_python(data)
    except ValidationError:
        return data  # type: ignore[no-any-return]


class PortTap(Protocol):
    """Where every port call of a turn goes first (recording or replay).

    ``target`` is the real port object (``None`` in a replay: there is none);
    ``args`` are the call's arguments by parameter name, in the port's order.
    """

    step: str | None
    """The machine transition running now (``None`` once the machine has stopped)."""

    async def acall(
        self,
        target: Any,
        port: str,
        call: str,
        answer: TypeAdapter[T],
        args: Mapping[str, Any],
        *,
        method: str | None = None,
    ) -> T:
        """Make (or answer) one awaited port call; ``method`` is the target's attribute."""
        ...

    def call(
        self, target: Any, port: str, call: str, answer: TypeAdapter[T], args: Mapping[str, Any]
    ) -> T:
        """Make (or answer) one plain port call (the clock, the id source)."""
        ...

    def begin(self, target: Any, org: str, user: str) -> Any:
        """``SessionStore.begin``: the real transaction when recording, ``None`` in a replay."""
        ...

    def stream(
        self, target: Any, port: str, call: str, args: Mapping[str, Any]
    ) -> AsyncIterator[Any]:
        """Make (or answer) one streamed call: its chunks, as an async iterator."""
        ...

    def faulted(self, event: TurnFaulted) -> None:
        """The turn faulted (``StepFollower`` tells): a stop from outside lands as a fault."""
        ...


class TappedTransaction:
    """A ``SessionTransaction`` whose calls go through the tap."""

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    async def load_session(self, session_id: str) -> Session | None:
        """See ``SessionTransaction``."""
        return await self._tap.acall(
            self._target, TRANSACTION, "load_session", _MAYBE_SESSION, {"session_id": session_id}
        )

    async def create_session(self, session: Session) -> None:
        """See ``SessionTransaction``."""
        await self._tap.acall(
            self._target, TRANSACTION, "create_session", _NOTHING, {"session": session}
        )

    async def load_turn(self, session_id: str, turn_id: str) -> Turn | None:
        """See ``SessionTransaction``."""
        return await self._tap.acall(
            self._target,
            TRANSACTION,
            "load_turn",
            _MAYBE_TURN,
            {"session_id": session_id, "turn_id": turn_id},
        )

    async def open_turn(self, turn: Turn) -> None:
        """See ``SessionTransaction``."""
        await self._tap.acall(self._target, TRANSACTION, "open_turn", _NOTHING, {"turn": turn})

    async def complete_turn(self, turn: Turn) -> None:
        """See ``SessionTransaction``."""
        await self._tap.acall(self._target, TRANSACTION, "complete_turn", _NOTHING, {"turn": turn})

    async def find_pending_turn(self, session_id: str) -> Turn | None:
        """See ``SessionTransaction``."""
        return await self._tap.acall(
            self._target, TRANSACTION, "find_pending_turn", _MAYBE_TURN, {"session_id": session_id}
        )

    async def load_transcript(self, session_id: str) -> list[ChatMessage]:
        """See ``SessionTransaction``."""
        return await self._tap.acall(
            self._target, TRANSACTION, "load_transcript", _MESSAGES, {"session_id": session_id}
        )

    async def append_transcript(
        self, session_id: str, turn_id: str, messages: Sequence[ChatMessage]
    ) -> None:
        """See ``SessionTransaction``."""
        await self._tap.acall(
            self._target,
            TRANSACTION,
            "append_transcript",
            _NOTHING,
            {"session_id": session_id, "turn_id": turn_id, "messages": messages},
        )

    async def set_session_mode(self, session_id: str, entry: ModeHistoryEntry) -> Session:
        """See ``SessionTransaction``."""
        return await self._tap.acall(
            self._target,
            TRANSACTION,
            "set_session_mode",
            _SESSION,
            {"session_id": session_id, "entry": entry},
        )

    async def set_solution_context(self, session_id: str, text: str) -> Session:
        """See ``SessionTransaction``."""
        return await self._tap.acall(
            self._target,
            TRANSACTION,
            "set_solution_context",
            _SESSION,
            {"session_id": session_id, "text": text},
        )

    async def load_outcome(self, key: str) -> StoredOutcome | None:
        """See ``SessionTransaction``."""
        return await self._tap.acall(
            self._target, TRANSACTION, "load_outcome", _MAYBE_OUTCOME, {"key": key}
        )

    async def save_outcome(self, outcome: StoredOutcome) -> None:
        """See ``SessionTransaction``."""
        await self._tap.acall(
            self._target, TRANSACTION, "save_outcome", _NOTHING, {"outcome": outcome}
        )

    async def commit(self) -> None:
        """See ``SessionTransaction``."""
        await self._tap.acall(self._target, TRANSACTION, "commit", _NOTHING, {})

    async def rollback(self) -> None:
        """See ``SessionTransaction``."""
        await self._tap.acall(self._target, TRANSACTION, "rollback", _NOTHING, {})


class TappedStore:
    """A ``SessionStore`` whose transactions are tapped."""

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    def begin(self, org: str, user: str) -> TappedTransaction:
        """See ``SessionStore``."""
        return TappedTransaction(self._tap, self._tap.begin(self._target, org, user))


class TappedModeCatalog:
    """A ``ModeCatalog`` whose calls go through the tap."""

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    async def get_mode(self, mode: str) -> ModeSpec | None:
        """See ``ModeCatalog``."""
        return await self._tap.acall(self._target, MODES, "get_mode", _MAYBE_MODE, {"mode": mode})

    async def list_modes(self) -> list[ModeSpec]:
        """See ``ModeCatalog``."""
        return await self._tap.acall(self._target, MODES, "list_modes", _MODES, {})


class TappedAgentCatalog:
    """An ``AgentCatalog`` whose calls go through the tap."""

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    async def get_agent_context(self, agent_context_id: str | None) -> AgentContext | None:
        """See ``AgentCatalog``."""
        return await self._tap.acall(
            self._target,
            AGENTS,
            "get_agent_context",
            _MAYBE_AGENT,
            {"agent_context_id": agent_context_id},
        )

    async def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> ConversationContext | None:
        """See ``AgentCatalog``."""
        return await self._tap.acall(
            self._target,
            AGENTS,
            "get_conversation_context",
            _MAYBE_CONVERSATION,
            {"conversation_context_id": conversation_context_id},
        )


class TappedLLM:
    """An ``LLM`` whose calls go through the tap; ``provider_name`` is the real one's."""

    def __init__(self, tap: PortTap, target: Any, provider_name: str | None) -> None:
        self._tap, self._target = tap, target
        self.provider_name = provider_name

    async def complete(self, request: LLMRequest) -> LLMReply:
        """See ``LLM``."""
        return await self._tap.acall(
            self._target, LLM_PORT, "complete", _REPLY, {"request": request}
        )


class TappedStreamingLLM(TappedLLM):
    """A ``StreamingLLM`` whose calls, ``stream`` too, go through the tap (see the module doc)."""

    def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """See ``StreamingLLM``."""
        chunks = self._tap.stream(self._target, LLM_PORT, STREAM, {"request": request})
        return cast(AsyncIterator[ReplyChunk], chunks)


class TappedTool:
    """A server tool (``ToolExecutor``) whose runs go through the tap; the call is its name."""

    def __init__(self, tap: PortTap, name: str, target: Any) -> None:
        self._tap, self._name, self._target = tap, name, target

    async def __call__(
        self, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> str | ToolOutput | ToolPause:
        """See ``ToolExecutor``.

        The call is written down without the invocation's idempotency key and
        idempotence: both follow from the recorded call and catalog (``tool_call_key``),
        and recordings made before they existed replay unchanged. The tool itself gets
        the whole invocation.
        """
        recorded = invocation
        if invocation.idempotency_key is not None or invocation.idempotent is not None:
            recorded = invocation.model_copy(update={"idempotency_key": None, "idempotent": None})
        target = None if self._target is None else _KeyedCall(self._target, invocation)
        return await self._tap.acall(
            target,
            TOOLS,
            self._name,
            _TOOL_ANSWER,
            {"arguments": arguments, "invocation": recorded},
            method="__call__",
        )


class _KeyedCall:
    """The real tool, called with the whole invocation (``TappedTool``)."""

    def __init__(self, executor: ToolExecutor, invocation: ToolInvocation) -> None:
        self._executor, self._invocation = executor, invocation

    async def __call__(
        self, arguments: dict[str, Any], recorded: ToolInvocation
    ) -> str | ToolOutput | ToolPause:
        return await self._executor(arguments, self._invocation)


class TappedFileStore:
    """A ``FileStore`` whose ``put`` goes through the tap: the file as its JSON, no bytes."""

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    async def put(self, file: ToolFile) -> StoredFile:
        """See ``FileStore``."""
        return await self._tap.acall(self._target, FILES, "put", _STORED_FILE, {"file": file})


class _CollectionCall:
    """The real retriever, called with the tapped call's arguments (collection, query)."""

    def __init__(self, retriever: Retriever) -> None:
        self._retriever = retriever

    async def retrieve(self, collection: str, query: RetrievalQuery) -> Sequence[Passage]:
        return await self._retriever.retrieve(query)


class TappedRetriever:
    """A ``Retriever`` whose calls go through the tap.

    The call's arguments hold the ``collection`` beside the query: a replay has no
    retriever of its own, and takes the collection its trace names from there.
    """

    def __init__(self, tap: PortTap, target: Retriever | None, collection: str) -> None:
        self._tap = tap
        self._target = None if target is None else _CollectionCall(target)
        self.collection = collection

    async def retrieve(self, query: RetrievalQuery) -> list[Passage]:
        """See ``Retriever``."""
        return await self._tap.acall(
            self._target,
            RETRIEVER,
            "retrieve",
            _PASSAGES,
            {"collection": self.collection, "query": query},
            method="retrieve",
        )


class TappedUsageLedger:
    """A ``UsageLedger`` whose calls go through the tap (module docstring).

    A reservation is recorded with its settlements and checks as lists, whatever
    sequence the engine passed, so the recorded arguments are JSON arrays.
    """

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    async def reserve_usage(
        self,
        call: UsageCall,
        checks: Sequence[BudgetCheck],
        settle: Sequence[UsageCall] = (),
    ) -> ReserveOutcome:
        """See ``UsageLedger``."""
        return await self._tap.acall(
            self._target,
            USAGE,
            "reserve_usage",
            _RESERVED,
            {"call": call, "checks": list(checks), "settle": list(settle)},
        )

    async def settle_usage(self, calls: Sequence[UsageCall]) -> None:
        """See ``UsageLedger``."""
        await self._tap.acall(self._target, USAGE, "settle_usage", _NOTHING, {"calls": list(calls)})

    async def usage_calls(self, query: UsageQuery) -> list[UsageCall]:
        """See ``UsageLedger`` (a turn never reads reports; a host's code may)."""
        return await self._tap.acall(
            self._target, USAGE, "usage_calls", _USAGE_CALLS, {"query": query}
        )


class TappedClock:
    """A ``Clock`` whose readings go through the tap."""

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    def now(self) -> datetime:
        """See ``Clock``."""
        return self._tap.call(self._target, CLOCK, "now", _TIME, {})


class TappedIds:
    """An ``IdSource`` whose ids go through the tap."""

    def __init__(self, tap: PortTap, target: Any) -> None:
        self._tap, self._target = tap, target

    def new_id(self, kind: str) -> str:
        """See ``IdSource``."""
        return self._tap.call(self._target, IDS, "new_id", _TEXT, {"kind": kind})


def tap_ports(
    tap: PortTap,
    ports: Ports | None,
    *,
    server_tools: Sequence[str] = (),
    file_store: bool = False,
    provider_name: str | None = None,
    streaming: bool = False,
    live: LivePorts | None = None,
    retriever: str | None = None,
    usage: bool = False,
) -> Ports:
    """Ports for one turn whose every call goes through ``tap``.

    With ``ports`` the real ports stand behind the tap (recording), and the tapped
    model streams when the real one is a ``StreamingLLM``; without, only the
    ``live`` ones do (replay, ``live.py``): ``server_tools`` names the tools the
    host had (the live ones join them), ``file_store`` whether it had a
    ``FileStore``, and ``streaming`` says whether the
    recorded model streamed — a live model that cannot stream is then asked to
    ``complete``, which the replay names as another call; ``retriever`` is the
    collection of the recorded retriever (``None``: the turn had none), run live when
    ``live`` has one; ``usage`` whether the turn had a usage ledger
    (``TurnRecording.usage_ledger``), answered from the recording.
    """
    tools: Mapping[str, ToolExecutor | None]
    if ports is None:
        live = live or LivePorts()
        tools = {**dict.fromkeys(server_tools), **live.tools}
        llm, modes, agents = live.llm, live.modes, live.agents
        store = clock = ids = None
        files = TappedFileStore(tap, None) if file_store else None
        streaming = streaming and (llm is None or isinstance(llm, StreamingLLM))
    else:
        tools, provider_name = dict(ports.tools), provider_name_of(ports.llm)
        store, modes, agents, llm = ports.store, ports.modes, ports.agents, ports.llm
        clock, ids = ports.clock, ports.ids
        files = None if ports.files is None else TappedFileStore(tap, ports.files)
        streaming = isinstance(llm, StreamingLLM)
        retriever = None if ports.retriever is None else collection_of(ports.retriever)
        usage = ports.usage is not None
    target = ports.retriever if ports is not None else (live.retriever if live else None)
    tapped_llm = (TappedStreamingLLM if streaming else TappedLLM)(tap, llm, provider_name)
    return Ports(
        store=TappedStore(tap, store),
        llm=tapped_llm,
        modes=TappedModeCatalog(tap, modes),
        agents=TappedAgentCatalog(tap, agents),
        clock=TappedClock(tap, clock),
        ids=TappedIds(tap, ids),
        tools={name: TappedTool(tap, name, executor) for name, executor in tools.items()},
        files=files,
        retriever=None if retriever is None else TappedRetriever(tap, target, retriever),
        usage=TappedUsageLedger(tap, ports.usage if ports is not None else None) if usage else None,
    )
