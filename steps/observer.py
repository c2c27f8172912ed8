"""What a turn tells its observer: model calls, retrievals, tool executions, tool verdicts,
mode changes.

The steps report what they do through ``scope.observer`` so the engine can keep a
deterministic state trace and emit OpenTelemetry spans from one stream of facts
(DESIGN.md "What every part promises": observability without leaks). Nothing here
depends on OpenTelemetry; ``aptix_pipeline.engine.telemetry`` implements the port.

``NullObserver`` does nothing and is what a ``TurnScope`` has unless the engine
gives it another, so a step can be run and tested alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from aptix_pipeline.contracts import (
    InvokeWarning,
    LLMReply,
    LLMRequest,
    Passage,
    RetrievalQuery,
    ToolCall,
    ToolDefinition,
)

from .tool_records import ModeChange, RejectionKind, ToolCallFate, ToolCallRecord

__all__ = [
    "LLMCallObservation",
    "NullObserver",
    "RetrievalObservation",
    "ToolObservation",
    "TurnObserver",
]


class LLMCallObservation(Protocol):
    """One model call in progress (its attempts and its reply).

    ``streaming`` says whether the turn is delivered as a stream (AGN-034 §4.7):
    then the step asks a model that can stream for its reply chunk by chunk and
    reports the call's first chunk and each piece of text as it comes.
    """

    @property
    def streaming(self) -> bool:
        """Whether the reply's text is delivered as it is written."""
        ...

    def first_chunk(self) -> None:
        """The model's first chunk of this call came (time to first token)."""
        ...

    def text_delta(self, text: str) -> None:
        """The next piece of the reply's text, on its way to the client."""
        ...

    def retry(self, attempt: int, error: BaseException, wait_seconds: float) -> None:
        """Attempt ``attempt`` failed with ``error``; the next starts after ``wait_seconds``."""
        ...

    def replied(self, reply: LLMReply, attempts: int) -> None:
        """The model answered after ``attempts`` attempts."""
        ...


class ToolObservation(Protocol):
    """One server-side tool execution in progress."""

    def finished(
        self,
        outcome: ToolCallFate,
        result_json: str,
        error: str | None,
        exception: BaseException | None = None,
    ) -> None:
        """The tool ran: its outcome (``ToolCallRecord.outcome``), result and error text;
        ``exception`` is what the tool raised, when it raised."""
        ...


class RetrievalObservation(Protocol):
    """One call of the ``Retriever`` port in progress (AGN-034 §4.4)."""

    def found(self, passages: Sequence[Passage]) -> None:
        """The retriever answered with ``passages`` (those the prompt gets)."""
        ...


class TurnObserver(Protocol):
    """The port the steps report through; see the module docstring.

    A context manager's body raising means the call failed; the observer records
    that and lets the exception propagate.
    """

    @property
    def streaming(self) -> bool:
        """Whether the turn is delivered as a stream (AGN-034 §4.7)."""
        ...

    def llm_call(
        self, request: LLMRequest, *, streamed: bool = False
    ) -> AbstractContextManager[LLMCallObservation]:
        """Around one model call (all its attempts) of the LLMClient (AGN-036 §4.9);
        ``streamed`` when the model is asked to stream its reply."""
        ...

    def tool_execution(
        self, call: ToolCall, tool: ToolDefinition, arguments: Any
    ) -> AbstractContextManager[ToolObservation]:
        """Around one server-side tool execution (AGN-011 §5, DESIGN.md R5)."""
        ...

    def retrieval(
        self, collection: str, query: RetrievalQuery
    ) -> AbstractContextManager[RetrievalObservation]:
        """Around one call of the ``Retriever`` port (AGN-034 §4.4, ``steps/retrieval.py``)."""
        ...

    def tool_call(
        self, record: ToolCallRecord, rejection_kind: RejectionKind | None = None
    ) -> None:
        """What became of one tool call of the model; ``rejection_kind`` says why it was
        refused."""
        ...

    def mode_changed(self, change: ModeChange) -> None:
        """A mode change was persisted through SetSessionMode (AGN-011 §5.2)."""
        ...

    def identified(self, session_id: str, turn_id: str) -> None:
        """The turn's session and turn ids are known: made by the AgentSessionCreator
        (AGN-036 §4.2, Initial) or read by the SessionRestorer (§4.3)."""
        ...

    def warned(self, warning: InvokeWarning) -> None:
        """The turn raised a warning (e.g. DESIGN.md R8's several mode changes)."""
        ...


class _NullCall:
    streaming = False

    def first_chunk(self) -> None:
        return None

    def text_delta(self, text: str) -> None:
        return None

    def retry(self, attempt: int, error: BaseException, wait_seconds: float) -> None:
        return None

    def replied(self, reply: LLMReply, attempts: int) -> None:
        return None

    def finished(
        self,
        outcome: ToolCallFate,
        result_json: str,
        error: str | None,
        exception: BaseException | None = None,
    ) -> None:
        return None

    def found(self, passages: Sequence[Passage]) -> None:
        return None


_NULL_CALL = _NullCall()


class NullObserver:
    """An observer that records nothing."""

    streaming = False

    @contextmanager
    def llm_call(
        self, request: LLMRequest, *, streamed: bool = False
    ) -> Iterator[LLMCallObservation]:
        """Nothing to observe."""
        yield _NULL_CALL

    @contextmanager
    def tool_execution(
        self, call: ToolCall, tool: ToolDefinition, arguments: Any
    ) -> Iterator[ToolObservation]:
        """Nothing to observe."""
        yield _NULL_CALL

    @contextmanager
    def retrieval(self, collection: str, query: RetrievalQuery) -> Iterator[RetrievalObservation]:
        """Nothing to observe."""
        yield _NULL_CALL

    def tool_call(
        self, record: ToolCallRecord, rejection_kind: RejectionKind | None = None
    ) -> None:
        """Nothing to observe."""

    def mode_changed(self, change: ModeChange) -> None:
        """Nothing to observe."""

    def identified(self, session_id: str, turn_id: str) -> None:
        """Nothing to observe."""

    def warned(self, warning: InvokeWarning) -> None:
        """Nothing to observe."""
