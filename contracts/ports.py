"""The ports: the only ways the pipeline talks to the world (DESIGN.md "Ports").

Each is a small ``typing.Protocol``; adapters under ``aptix_pipeline.adapters``
implement them, and a host may bring its own.

- ``SessionStore`` — sessions, turns, transcripts and mode, scoped by org + user.
  A turn reads and writes through one ``SessionTransaction``, committed only when
  the turn completes, so a failed turn writes nothing. ``set_session_mode`` is the
  SetSessionMode port of AGN-011 §3.2: the only way a mode changes, appending a
  ModeHistory entry. A turn's answer is kept with it (``StoredOutcome``), so a
  retried request is answered again instead of running twice.
- ``ModeCatalog`` — a mode's display name and server tools (AGN-011 §4.2).
- ``AgentCatalog`` — agent and conversation contexts, with their client tools.
- ``LLM`` — messages and advertised tools in, text or tool calls out (AGN-036 §4.9);
  ``StreamingLLM`` also answers as it writes (AGN-034 §4.7, ``contracts/llm_stream.py``).
- ``ToolExecutor`` — runs one server-side tool call (AGN-011 §5.2, DESIGN.md R5);
  it may return files with its result (``ToolOutput``, ``contracts/files.py``,
  where the ``FileStore`` port that keeps them is).
- ``ToolLedger`` (``contracts/ledger.py``) — reserve → done for server-tool calls,
  so a retried turn never runs a done call again.
- ``SessionForks`` — optional: a store that can fork a session after one of its
  settled turns, sharing the parent's transcript (docs/FORKS.md). The built-in
  stores are; a host store that is only a ``SessionStore`` keeps working, and
  ``Pipeline.fork`` refuses on it.
- ``Clock`` and ``IdSource`` — time and ids, so runs are repeatable (STYLE.md
  "Determinism first").

Cancellation is part of every async port's contract: a call cancelled from outside
(the turn's deadline, a stream's consumer gone, a durable turn's activity
cancelled) raises ``asyncio.CancelledError``, never another exception standing for
it — the engine tells a cancelled call from a failed one by that alone, and retries
only a failed one. A port that wraps another transport (Temporal's activities in
``adapters/temporal/``) translates that transport's cancellation into it
(docs/DURABLE.md, D531).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import ConfigDict

from .catalog import ModeSpec
from .context import (
    AgentContext,
    ConversationContext,
    ModeHistoryEntry,
    Session,
    StoredOutcome,
    Turn,
)
from .errors import AptixPipelineError
from .files import ToolOutput, ToolPause
from .llm import ChatMessage, LLMReply, LLMRequest
from .llm_stream import ReplyChunk
from .tools import Idempotence
from .wire import WireModel

__all__ = [
    "LLM",
    "AgentCatalog",
    "Clock",
    "ForkRefusal",
    "ForkRefusedError",
    "IdSource",
    "ModeCatalog",
    "PermanentPortError",
    "SessionForks",
    "SessionStore",
    "SessionTransaction",
    "StoreConflictError",
    "StreamingLLM",
    "ToolExecutor",
    "ToolInvocation",
]


class PermanentPortError(AptixPipelineError):
    """A port failure that trying again cannot fix (a script that ran out, a bad key).

    The pipeline retries other failures of the LLM port; this one faults at once.
    """


class StoreConflictError(AptixPipelineError):
    """A commit lost a race: the session changed after this turn read it.

    The store writes nothing of the losing turn; the pipeline answers it with the
    ``conflict`` error code.
    """


@runtime_checkable
class SessionTransaction(Protocol):
    """One turn's view of the store: reads see this turn's own writes.

    Every method is scoped to the caller the transaction was begun for: a session
    of another org or user reads as ``None`` ("not found", DESIGN.md "Isolation").
    Nothing is visible to other turns until ``commit``; ``rollback`` (or never
    committing) discards everything.
    """

    async def load_session(self, session_id: str) -> Session | None:
        """The caller's session with this id, or ``None``."""
        ...

    async def create_session(self, session: Session) -> None:
        """Create a new session (AGN-036 §4.5); its org and user must be the caller's."""
        ...

    async def load_turn(self, session_id: str, turn_id: str) -> Turn | None:
        """The turn with this id inside the caller's session, or ``None`` (AGN-033 §3.1)."""
        ...

    async def open_turn(self, turn: Turn) -> None:
        """Add a new turn to a session."""
        ...

    async def complete_turn(self, turn: Turn) -> None:
        """Save where a turn stands: its status and the client tool calls it awaits."""
        ...

    async def find_pending_turn(self, session_id: str) -> Turn | None:
        """The caller's turn of this session that awaits client tool results, if any."""
        ...

    async def load_transcript(self, session_id: str) -> list[ChatMessage]:
        """Every message of the session, oldest first."""
        ...

    async def append_transcript(
        self, session_id: str, turn_id: str, messages: Sequence[ChatMessage]
    ) -> None:
        """Add messages of a turn to the session's transcript."""
        ...

    async def set_session_mode(self, session_id: str, entry: ModeHistoryEntry) -> Session:
        """SetSessionMode (AGN-011 §3.2): set the mode to ``entry.new_mode``, append ``entry``.

        Returns the session as it now stands. Raises ``LookupError`` when the caller
        has no such session and ``ValueError`` when ``entry.previous_mode`` is not the
        session's current mode.
        """
        ...

    async def set_solution_context(self, session_id: str, text: str) -> Session:
        """Replace the session's stored solution context (AGN-034 §4.5, session-latched)."""
        ...

    async def load_outcome(self, key: str) -> StoredOutcome | None:
        """The caller's stored outcome under ``key``, expired or not, or ``None``.

        What a retried request is answered with (docs/CONFORMANCE.md D181): read
        before a turn runs, and again by a turn that lost a race to the commit.
        """
        ...

    async def save_outcome(self, outcome: StoredOutcome) -> None:
        """Keep ``outcome`` under its key for the caller, written by ``commit``.

        The commit raises ``StoreConflictError`` when the caller already has an
        unexpired outcome under that key (another turn answered it first); an
        expired one is replaced.
        """
        ...

    async def commit(self) -> None:
        """Write everything at once; raises ``StoreConflictError`` when a concurrent turn won."""
        ...

    async def rollback(self) -> None:
        """Discard everything this transaction wrote."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live (AGN-011 §3.2: the session is the authority on mode)."""

    def begin(self, org: str, user: str) -> SessionTransaction:
        """Start one turn's transaction for this caller."""
        ...


class ForkRefusal(StrEnum):
    """Why a store refused to fork (``ForkRefusedError.reason``)."""

    SESSION_NOT_FOUND = "session_not_found"
    """No such session for the caller (another org's or user's reads the same)."""
    TURN_NOT_FOUND = "turn_not_found"
    """The session has no turn of that id."""
    TURN_PENDING = "turn_pending"
    """The turn is not settled: still open, or awaiting client tool results."""


class ForkRefusedError(AptixPipelineError, LookupError):
    """``SessionForks.fork_session`` refused: ``reason`` says why; nothing was written."""

    def __init__(self, reason: ForkRefusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@runtime_checkable
class SessionForks(Protocol):
    """A store that forks sessions (docs/FORKS.md); optional beside ``SessionStore``.

    A fork is a new session of the same caller whose transcript, mode and mode
    history are the source's as they stood after one settled turn. The store
    shares the source's transcript up to that turn's last message instead of
    copying it, and records the parent on the fork (``Session.forked_from``).
    Scoped like every read: another org's or user's session is not found.
    """

    async def fork_session(
        self,
        org: str,
        user: str,
        session_id: str,
        turn_id: str,
        new_session_id: str,
        created_at: datetime,
    ) -> Session:
        """Make the fork ``new_session_id`` of ``session_id`` after ``turn_id``, atomically.

        Returns the new session. Raises ``ForkRefusedError`` (unknown session or
        turn, a turn not settled) and ``StoreConflictError`` (the new id is taken).
        """
        ...

    async def forks_of(self, org: str, user: str, session_id: str) -> list[Session] | None:
        """The caller's sessions forked from this one, oldest first; ``None`` when the
        caller has no such session."""
        ...


@runtime_checkable
class ModeCatalog(Protocol):
    """The Mode Catalog (AGN-011 §4.2; its contents are TUL-010's)."""

    async def get_mode(self, mode: str) -> ModeSpec | None:
        """The mode's entry, or ``None`` when the catalog does not know it."""
        ...

    async def list_modes(self) -> list[ModeSpec]:
        """Every mode, in catalog order."""
        ...


@runtime_checkable
class AgentCatalog(Protocol):
    """Agent and conversation contexts, by the ids a request or session names."""

    async def get_agent_context(self, agent_context_id: str | None) -> AgentContext | None:
        """The agent with this id, the default agent for ``None``, or ``None`` if unknown."""
        ...

    async def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> ConversationContext | None:
        """The conversation context with this id, the default for ``None``, or ``None``."""
        ...


@runtime_checkable
class LLM(Protocol):
    """A language model (AGN-036 §4.9)."""

    async def complete(self, request: LLMRequest) -> LLMReply:
        """Answer one request. Raising counts as a failed attempt; the pipeline retries."""
        ...


@runtime_checkable
class StreamingLLM(LLM, Protocol):
    """A language model that can also stream its reply (AGN-034 §4.7).

    The engine calls ``stream`` instead of ``complete`` only when the turn is
    delivered as a stream (``Pipeline.stream``, HTTP ``Stream: true``); the chunks
    it yields (``contracts/llm_stream.py``) are put together into the same
    ``LLMReply``. A failure before the first text chunk is retried like a failed
    ``complete``; after it, the turn faults (docs/STREAMING.md).
    """

    def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """The reply to ``request``, chunk by chunk (an async generator, usually)."""
        ...


class ToolInvocation(WireModel):
    """Who and what a server-side tool call is for."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str
    name: str
    session_id: str
    turn_id: str
    mode: str
    org: str
    user: str
    client_answer: str | None = None
    """The client's result (its ResultJson) for the call this tool paused with a
    ``ToolPause``, when the engine runs it again on the continuation; else ``None``."""
    idempotency_key: str | None = None
    """The call's stable key (``steps/tool_ledger.py`` ``tool_call_key``: its session,
    turn, tool call id and arguments), the same on every attempt at the call; a tool
    that declares ``idempotent = "by_key"`` acts once per key. ``None`` outside a turn."""
    idempotent: Idempotence | None = None
    """What the tool's definition declares (``ToolDefinition.idempotent``)."""


@runtime_checkable
class ToolExecutor(Protocol):
    """Runs one server-side tool call (AGN-011 §5.2, DESIGN.md R5).

    Returns the result as JSON text, or as a ``ToolOutput`` when the tool made
    files (AGN-033 §6), or a ``ToolPause`` when it needs the client's answer
    first (docs/MCP.md "Elicitation"). Raising reports a tool failure: the model
    is told the error and the turn goes on.
    """

    async def __call__(
        self, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> str | ToolOutput | ToolPause:
        """Run the tool with already validated ``arguments``."""
        ...


@runtime_checkable
class Clock(Protocol):
    """The time, through a port so traces and recordings repeat exactly."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


@runtime_checkable
class IdSource(Protocol):
    """New ids for sessions, turns and correlation, through a port for repeatability."""

    def new_id(self, kind: str) -> str:
        """A new id; ``kind`` is ``"session"``, ``"turn"`` or ``"correlation"``."""
        ...
