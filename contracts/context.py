"""The AGN-036 pipeline context and the session state it is built from.

``PipelineContext`` is ``IAgentPipelineContext``: created by the RequestHandler
(AGN-036 §4.1) from the request and the caller's identity, then filled in by each
step. The validators read it and never change it (AGN-036 §2). ``Session``,
``Turn`` and ``ModeHistoryEntry`` are the persisted state of AGN-011 §3.2.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import ConfigDict, Field

from .request import ClipboardImage, InputArtifact, RagScopeCondition, WorkspaceHints
from .response import AgentExecuteResponse, FileRef, Usage
from .tools import ToolCall, ToolCallManifest, ToolDefinition, ToolResult
from .wire import FrozenWireModel, WireModel

__all__ = [
    "DEFAULT_MODE",
    "AgentContext",
    "Caller",
    "ContextType",
    "ConversationContext",
    "Envelope",
    "ForkPoint",
    "ModeHistoryEntry",
    "PipelineContext",
    "PipelineStep",
    "ResponsePayload",
    "ResponseType",
    "Session",
    "StoredOutcome",
    "Turn",
    "TurnStatus",
]

DEFAULT_MODE = "general"
"""The mode of a new session when the host supplies none (AGN-011 §3.1, DESIGN.md R2)."""


class ContextType(StrEnum):
    """``AgentPipelineContextTypes`` (AGN-036 §3.1)."""

    INITIAL = "Initial"
    FOLLOW_ON = "FollowOn"
    CLIENT_TOOL_CALL_CONTINUATION = "ClientToolCallContinuation"


class ResponseType(StrEnum):
    """The outcome the LLMClient step produced (AGN-036 §4.9, §4.10)."""

    FINAL = "Final"
    TOOL_CONTINUATION = "ToolContinuation"


class PipelineStep(StrEnum):
    """The ten pipeline steps of AGN-036 §4, in section order."""

    REQUEST_HANDLER = "request_handler"
    SESSION_RESTORER = "session_restorer"
    AGENT_CONTEXT_RESOLVER = "agent_context_resolver"
    CLIENT_TOOL_CONTINUATION_RESOLVER = "client_tool_continuation_resolver"
    AGENT_SESSION_CREATOR = "agent_session_creator"
    AGENT_CONTEXT_LOADER = "agent_context_loader"
    PROMPT_CONTENT_PROVIDER_INITIALIZER = "prompt_content_provider_initializer"
    REASONER = "reasoner"
    LLM_CLIENT = "llm_client"
    RESPONSE_BUILDER = "response_builder"

    @classmethod
    def _missing_(cls, value: object) -> PipelineStep | None:
        # Also accept the DDR's names: "SessionRestorer", "LLMClient" (AGN-036 §4).
        if isinstance(value, str):
            wanted = value.replace("_", "").lower()
            for step in cls:
                if step.value.replace("_", "") == wanted:
                    return step
        return None


class TurnStatus(StrEnum):
    """Where a turn stands (AGN-033 §3.3 continuation protocol)."""

    OPEN = "open"
    AWAITING_CLIENT_TOOLS = "awaiting_client_tools"
    COMPLETED = "completed"


class Caller(WireModel):
    """The authenticated identity a host passes with a request: org and user."""

    model_config = ConfigDict(frozen=True)

    org: str = Field(min_length=1)
    user: str = Field(min_length=1)


class Envelope(WireModel):
    """The request as the pipeline sees it, plus the caller's org and user (AGN-036 §3)."""

    org: str | None = None
    user: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    instructions: str | None = None
    input_artifacts: list[InputArtifact] | None = None
    clip_board_images: list[ClipboardImage] | None = None
    tool_results: list[ToolResult] | None = None
    rag_scope: list[RagScopeCondition] | None = None
    solution_context_text: str | None = None
    workspace_hints: WorkspaceHints | None = None
    stream: bool | None = None
    agent_context_id: str | None = None
    conversation_context_id: str | None = None


class ModeHistoryEntry(FrozenWireModel):
    """One mode transition of a session (AGN-011 §3.2, §5.7)."""

    previous_mode: str
    new_mode: str
    timestamp: datetime
    reason: str | None = None
    org: str | None = None
    user: str | None = None
    branch: bool = False
    turn_id: str | None = None


class ForkPoint(FrozenWireModel):
    """Where a forked session starts (``Pipeline.fork``, docs/FORKS.md).

    ``session_id`` and ``turn_id`` name the parent session and the settled turn it
    was forked after; ``messages`` is how many messages of the parent's transcript
    the fork starts with (its shared prefix: the fork's own messages follow them).
    """

    session_id: str
    turn_id: str
    messages: int = Field(ge=0)


class Session(FrozenWireModel):
    """``AgentSession``: the authoritative store of the current mode (AGN-011 §3.2).

    ``forked_from`` is set on a session made by ``Pipeline.fork`` (docs/FORKS.md):
    its transcript begins with its parent's first ``messages`` messages.
    """

    id: str
    org: str
    user: str
    mode: str | None
    mode_history: list[ModeHistoryEntry] = Field(default_factory=list)
    agent_context_id: str | None = None
    conversation_context_id: str | None = None
    solution_context_text: str | None = None
    created_at: datetime | None = None
    version: int = 0
    forked_from: ForkPoint | None = None


class Turn(FrozenWireModel):
    """``AgentSessionTurn``: one turn of a session, with its mode snapshot (AGN-011 §3.2).

    ``mode`` is the mode the turn started in: it selects the turn's tools, which stay
    frozen across its continuations (AGN-011 §4.4). ``expanded_containers`` are the
    containers the model expanded during the turn (container design, DESIGN.md R9).
    ``usage`` and ``server_tool_results`` add up over all the requests of the turn,
    so its final response reports the whole turn (AGN-033 §1.1, §5.3); so do
    ``files``, the ``FileRef``s of the files its server tools made, which only the
    final response carries (AGN-033 §6.2); ``None`` when there are none, so a turn
    without files reads as it always has.
    """

    id: str
    session_id: str
    mode: str | None = None
    status: TurnStatus = TurnStatus.OPEN
    pending_tool_calls: list[ToolCall] = Field(default_factory=list)
    expanded_containers: list[str] = Field(default_factory=list)
    usage: Usage | None = None
    server_tool_results: list[ToolResult] = Field(default_factory=list)
    files: list[FileRef] | None = None
    created_at: datetime | None = None


class StoredOutcome(FrozenWireModel):
    """The answer a committed turn gave, kept so a retried request gets it again.

    Stored with the turn, in the same commit, under ``key`` (scoped to the
    caller's org and user). The engine's keys are ``continuation:<sha256>`` (a
    continuation's SessionId, TurnId and ToolCallIds) and ``key:<Idempotency-Key>``
    (docs/CONFORMANCE.md D181-D183). ``request_digest`` is the SHA-256 of the
    request that produced the answer: a retry with the same key and another digest
    is a conflict, not a replay. ``result_json`` is the ``InvokeResult``'s JSON.
    ``expires_at`` (``None``: never) is when the key may be used afresh; a store
    keeps an expired outcome until a new one replaces it or it is purged.
    """

    key: str
    request_digest: str
    session_id: str
    turn_id: str
    result_json: str
    created_at: datetime
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """Whether the key may be used afresh at ``now``."""
        return self.expires_at is not None and self.expires_at <= now


class AgentContext(WireModel):
    """The agent a turn runs: its instructions and the client tools it advertises.

    ``vision``: whether the agent's model takes images; without it (or in a mode
    without it, ``ModeSpec.vision``) each image reaches the model as its described
    reference, and the final response says so in ``UserWarnings`` (AGN-033 §4.3).
    """

    id: str
    name: str
    system_prompt: str = ""
    model: str | None = None
    client_tools: list[ToolDefinition] = Field(default_factory=list)
    vision: bool = True


class ConversationContext(WireModel):
    """The conversation context a session runs in."""

    id: str
    name: str | None = None
    instructions: str = ""


class ResponsePayload(WireModel):
    """The final answer of a turn before it becomes an AGN-033 response (AGN-036 §4.9)."""

    primary_output_text: str
    files: list[FileRef] | None = None
    tool_results: list[ToolResult] | None = None
    user_warnings: list[str] | None = None
    usage: Usage | None = None


class PipelineContext(WireModel):
    """``IAgentPipelineContext`` (AGN-036 §3-§4).

    ``type``, ``time_stamp``, ``correlation_id`` and the envelope's org and user are
    the core invariants (§3). ``mode`` is the normalized mode of the turn (AGN-011
    §3.3, DESIGN.md R2); ``tools`` is the tool set frozen before the reasoner loop
    (AGN-011 §4.4, R9); ``response`` is what the ResponseBuilder returns (§4.10).
    """

    type: ContextType
    time_stamp: datetime | None = None
    correlation_id: str = ""
    envelope: Envelope = Field(default_factory=Envelope)
    session: Session | None = None
    turn: Turn | None = None
    agent_context: AgentContext | None = None
    conversation_context: ConversationContext | None = None
    tool_call_manifest: ToolCallManifest | None = None
    prompt_provider_ready: bool = False
    response_payload: ResponsePayload | None = None
    client_tool_calls: list[ToolCall] | None = None
    tool_continuation_message: str | None = None
    response_type: ResponseType | None = None
    mode: str | None = None
    tools: list[ToolDefinition] | None = None
    response: AgentExecuteResponse | None = None
