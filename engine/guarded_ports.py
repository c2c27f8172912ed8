"""Ports that report their own failures: an exception from a store or catalog
becomes a ``port_failed`` fault naming the port and the call.

Without this a failing store would surface as "step X raised OSError" (code
``internal``), indistinguishable from a bug in a step. The LLM port is guarded
by the LLMClient's retries and tool executors by the Reasoner (their failures go
back to the model), so only the store and the catalogs are wrapped here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any, TypeVar

from aptix_pipeline.contracts import (
    AgentCatalog,
    AgentContext,
    ChatMessage,
    ConversationContext,
    ModeCatalog,
    ModeHistoryEntry,
    ModeSpec,
    Session,
    SessionStore,
    SessionTransaction,
    StoreConflictError,
    StoredOutcome,
    Turn,
)
from aptix_pipeline.steps import PROPAGATED, ErrorDetail, StepFaultError, port_failed

__all__ = ["GuardedAgentCatalog", "GuardedModeCatalog", "GuardedStore"]

T = TypeVar("T")


async def _guard(port: str, call: str, work: Awaitable[T], detail: ErrorDetail) -> T:
    # The wrappers return this coroutine rather than await it: one frame per call.
    try:
        return await work
    except (StepFaultError, StoreConflictError, *PROPAGATED):
        raise
    except BaseException as error:  # SystemExit too: the host's port failed
        raise port_failed(port, call, error, detail) from error


class GuardedTransaction:
    """A ``SessionTransaction`` whose unexpected failures are ``port_failed`` faults."""

    def __init__(self, inner: SessionTransaction, detail: ErrorDetail = "short") -> None:
        self._inner, self._detail = inner, detail

    def load_session(self, session_id: str) -> Coroutine[Any, Any, Session | None]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore", "load_session", self._inner.load_session(session_id), self._detail
        )

    def create_session(self, session: Session) -> Coroutine[Any, Any, None]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore", "create_session", self._inner.create_session(session), self._detail
        )

    def load_turn(self, session_id: str, turn_id: str) -> Coroutine[Any, Any, Turn | None]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore", "load_turn", self._inner.load_turn(session_id, turn_id), self._detail
        )

    def open_turn(self, turn: Turn) -> Coroutine[Any, Any, None]:
        """See ``SessionTransaction``."""
        return _guard("SessionStore", "open_turn", self._inner.open_turn(turn), self._detail)

    def complete_turn(self, turn: Turn) -> Coroutine[Any, Any, None]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore", "complete_turn", self._inner.complete_turn(turn), self._detail
        )

    def find_pending_turn(self, session_id: str) -> Coroutine[Any, Any, Turn | None]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore",
            "find_pending_turn",
            self._inner.find_pending_turn(session_id),
            self._detail,
        )

    def set_solution_context(self, session_id: str, text: str) -> Coroutine[Any, Any, Session]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore",
            "set_solution_context",
            self._inner.set_solution_context(session_id, text),
            self._detail,
        )

    def load_transcript(self, session_id: str) -> Coroutine[Any, Any, list[ChatMessage]]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore", "load_transcript", self._inner.load_transcript(session_id), self._detail
        )

    def append_transcript(
        self, session_id: str, turn_id: str, messages: Sequence[ChatMessage]
    ) -> Coroutine[Any, Any, None]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore",
            "append_transcript",
            self._inner.append_transcript(session_id, turn_id, messages),
            self._detail,
        )

    def set_session_mode(
        self, session_id: str, entry: ModeHistoryEntry
    ) -> Coroutine[Any, Any, Session]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore",
            "set_session_mode",
            self._inner.set_session_mode(session_id, entry),
            self._detail,
        )

    def load_outcome(self, key: str) -> Coroutine[Any, Any, StoredOutcome | None]:
        """See ``SessionTransaction``."""
        return _guard("SessionStore", "load_outcome", self._inner.load_outcome(key), self._detail)

    def save_outcome(self, outcome: StoredOutcome) -> Coroutine[Any, Any, None]:
        """See ``SessionTransaction``."""
        return _guard(
            "SessionStore", "save_outcome", self._inner.save_outcome(outcome), self._detail
        )

    def commit(self) -> Coroutine[Any, Any, None]:
        """See ``SessionTransaction``."""
        return _guard("SessionStore", "commit", self._inner.commit(), self._detail)

    def rollback(self) -> Coroutine[Any, Any, None]:
        """See ``SessionTransaction``."""
        return _guard("SessionStore", "rollback", self._inner.rollback(), self._detail)


class GuardedStore:
    """A ``SessionStore`` whose transactions are guarded."""

    def __init__(self, inner: SessionStore, detail: ErrorDetail = "short") -> None:
        self.inner, self._detail = inner, detail

    def begin(self, org: str, user: str) -> GuardedTransaction:
        """See ``SessionStore``."""
        try:
            return GuardedTransaction(self.inner.begin(org, user), self._detail)
        except PROPAGATED:
            raise
        except BaseException as error:
            raise port_failed("SessionStore", "begin", error, self._detail) from error


class GuardedModeCatalog:
    """A ``ModeCatalog`` whose failures are ``port_failed`` faults."""

    def __init__(self, inner: ModeCatalog, detail: ErrorDetail = "short") -> None:
        self.inner, self._detail = inner, detail

    def get_mode(self, mode: str) -> Coroutine[Any, Any, ModeSpec | None]:
        """See ``ModeCatalog``."""
        return _guard("ModeCatalog", "get_mode", self.inner.get_mode(mode), self._detail)

    def list_modes(self) -> Coroutine[Any, Any, list[ModeSpec]]:
        """See ``ModeCatalog``."""
        return _guard("ModeCatalog", "list_modes", self.inner.list_modes(), self._detail)


class GuardedAgentCatalog:
    """An ``AgentCatalog`` whose failures are ``port_failed`` faults."""

    def __init__(self, inner: AgentCatalog, detail: ErrorDetail = "short") -> None:
        self.inner, self._detail = inner, detail

    def get_agent_context(
        self, agent_context_id: str | None
    ) -> Coroutine[Any, Any, AgentContext | None]:
        """See ``AgentCatalog``."""
        return _guard(
            "AgentCatalog",
            "get_agent_context",
            self.inner.get_agent_context(agent_context_id),
            self._detail,
        )

    def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> Coroutine[Any, Any, ConversationContext | None]:
        """See ``AgentCatalog``."""
        return _guard(
            "AgentCatalog",
            "get_conversation_context",
            self.inner.get_conversation_context(conversation_context_id),
            self._detail,
        )
