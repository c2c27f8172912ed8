"""Builders of valid subjects for the rule tests: requests, contexts, responses, manifests.

``context_before(step, kind)`` and ``context_after(step, kind)`` give the pipeline
context exactly as it stands when a step's PRE rules and POST rules run on a
correct turn of the given type, by replaying the effects of the steps on the
DESIGN.md paths. Rule tests take one of those and break one thing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aptix_pipeline.contracts import (
    AgentContext,
    AgentExecuteResponse,
    Caller,
    ContextType,
    ConversationContext,
    Envelope,
    ManifestToolResult,
    PipelineContext,
    PipelineStep,
    ResponsePayload,
    ResponseType,
    Session,
    ToolCall,
    ToolCallManifest,
    ToolResult,
    Turn,
    TurnStatus,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CALLER = Caller(org="org-1", user="user-1")
SESSION_ID = "session-1"
PREVIOUS_TURN_ID = "turn-1"
NEW_TURN_ID = "turn-2"

S = PipelineStep
PATHS: dict[ContextType, tuple[PipelineStep, ...]] = {
    ContextType.INITIAL: (
        S.REQUEST_HANDLER, S.AGENT_CONTEXT_RESOLVER, S.AGENT_SESSION_CREATOR,
        S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER, S.LLM_CLIENT, S.RESPONSE_BUILDER,
    ),
    ContextType.FOLLOW_ON: (
        S.REQUEST_HANDLER, S.SESSION_RESTORER, S.AGENT_CONTEXT_LOADER,
        S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER, S.LLM_CLIENT, S.RESPONSE_BUILDER,
    ),
    ContextType.CLIENT_TOOL_CALL_CONTINUATION: (
        S.REQUEST_HANDLER, S.SESSION_RESTORER, S.CLIENT_TOOL_CONTINUATION_RESOLVER,
        S.AGENT_CONTEXT_LOADER, S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER,
        S.LLM_CLIENT, S.RESPONSE_BUILDER,
    ),
}  # fmt: skip
"""The three paths of DESIGN.md "The machine"."""

PENDING_CALLS = [
    ToolCall(tool_call_id="call-1", name="read_file", arguments_json='{"path": "a.py"}'),
    ToolCall(tool_call_id="call-2", name="list_dir", arguments_json="{}"),
]


def request_data(kind: ContextType) -> dict[str, Any]:
    """A valid wire request (PascalCase JSON object) of the given scenario."""
    if kind is ContextType.INITIAL:
        return {"Instruction": "Explain this file.", "AgentContextId": "coder"}
    if kind is ContextType.FOLLOW_ON:
        return {"SessionId": SESSION_ID, "TurnId": PREVIOUS_TURN_ID, "Instruction": "And now?"}
    return {
        "SessionId": SESSION_ID,
        "TurnId": PREVIOUS_TURN_ID,
        "ToolResults": [
            {"ToolCallId": "call-1", "ExecutionMs": 12, "ResultJson": '{"text": "x = 1"}'},
            {"ToolCallId": "call-2", "ExecutionMs": 3, "ErrorMessage": "permission denied"},
        ],
    }


def _envelope(kind: ContextType) -> Envelope:
    if kind is ContextType.INITIAL:
        return Envelope(org=CALLER.org, user=CALLER.user, instructions="Explain this file.")
    if kind is ContextType.FOLLOW_ON:
        return Envelope(
            org=CALLER.org,
            user=CALLER.user,
            session_id=SESSION_ID,
            turn_id=PREVIOUS_TURN_ID,
            instructions="And now?",
        )
    return Envelope(
        org=CALLER.org,
        user=CALLER.user,
        session_id=SESSION_ID,
        turn_id=PREVIOUS_TURN_ID,
        tool_results=[
            ToolResult(tool_call_id="call-1", execution_ms=12, result_json='{"text": "x = 1"}'),
            ToolResult(tool_call_id="call-2", execution_ms=3, error_message="permission denied"),
        ],
    )


def valid_manifest() -> ToolCallManifest:
    """A valid manifest for ``PENDING_CALLS``: the failed tool's error became ResultJson (R3)."""
    return ToolCallManifest(
        tool_calls=[call.model_copy() for call in PENDING_CALLS],
        tool_call_results=[
            ManifestToolResult(
                tool_call_id="call-1", name="read_file", result_json='{"text": "x = 1"}'
            ),
            ManifestToolResult(
                tool_call_id="call-2",
                name="list_dir",
                result_json='{"error": "permission denied"}',
            ),
        ],
    )


def _session() -> Session:
    return Session(id=SESSION_ID, org=CALLER.org, user=CALLER.user, mode="general", created_at=NOW)


def _restore(ctx: PipelineContext) -> None:
    ctx.session = _session()
    if ctx.type is ContextType.CLIENT_TOOL_CALL_CONTINUATION:
        ctx.turn = Turn(
            id=PREVIOUS_TURN_ID,
            session_id=SESSION_ID,
            mode="general",
            status=TurnStatus.AWAITING_CLIENT_TOOLS,
            pending_tool_calls=list(PENDING_CALLS),
        )
    else:
        ctx.turn = Turn(id=NEW_TURN_ID, session_id=SESSION_ID, mode="general")
    ctx.mode = "general"


def _load_agent(ctx: PipelineContext) -> None:
    ctx.agent_context = AgentContext(id="coder", name="Coder")
    ctx.conversation_context = ConversationContext(id="default")


def _create_session(ctx: PipelineContext) -> None:
    ctx.session = _session()
    ctx.turn = Turn(id=PREVIOUS_TURN_ID, session_id=SESSION_ID, mode="general")
    ctx.mode = "general"


def _resolve_continuation(ctx: PipelineContext) -> None:
    ctx.tool_call_manifest = valid_manifest()


def _ready(ctx: PipelineContext) -> None:
    ctx.prompt_provider_ready = True


def _nothing(ctx: PipelineContext) -> None:
    del ctx


def _answer(ctx: PipelineContext) -> None:
    ctx.response_payload = ResponsePayload(primary_output_text="Here is the answer.")
    ctx.response_type = ResponseType.FINAL


def _build(ctx: PipelineContext) -> None:
    assert ctx.session is not None
    assert ctx.turn is not None
    ctx.response = AgentExecuteResponse.final(
        session_id=ctx.session.id,
        turn_id=ctx.turn.id,
        mode_display_name="General",
        primary_output_text="Here is the answer.",
    )


EFFECTS: dict[PipelineStep, Callable[[PipelineContext], None]] = {
    S.REQUEST_HANDLER: _nothing,
    S.SESSION_RESTORER: _restore,
    S.AGENT_CONTEXT_RESOLVER: _load_agent,
    S.CLIENT_TOOL_CONTINUATION_RESOLVER: _resolve_continuation,
    S.AGENT_SESSION_CREATOR: _create_session,
    S.AGENT_CONTEXT_LOADER: _load_agent,
    S.PROMPT_CONTENT_PROVIDER_INITIALIZER: _ready,
    S.REASONER: _nothing,
    S.LLM_CLIENT: _answer,
    S.RESPONSE_BUILDER: _build,
}
"""What each step does to the context on a correct turn (a stand-in for the steps)."""


def new_context(kind: ContextType) -> PipelineContext:
    """The context as the RequestHandler creates it (AGN-036 §4.1)."""
    return PipelineContext(
        type=kind, time_stamp=NOW, correlation_id="corr-1", envelope=_envelope(kind)
    )


def context_before(step: PipelineStep, kind: ContextType) -> PipelineContext:
    """The context when ``step``'s PRE rules run on a correct turn of type ``kind``."""
    path = PATHS[kind]
    if step not in path:
        raise ValueError(f"{step} is not on the {kind} path")
    ctx = new_context(kind)
    for earlier in path[: path.index(step)]:
        EFFECTS[earlier](ctx)
    return ctx


def context_after(step: PipelineStep, kind: ContextType) -> PipelineContext:
    """The context when ``step``'s POST rules run on a correct turn of type ``kind``."""
    ctx = context_before(step, kind)
    EFFECTS[step](ctx)
    return ctx


def continuation_response(ctx: PipelineContext) -> AgentExecuteResponse:
    """A valid client_tool_continuation response for ``ctx``'s session and turn."""
    assert ctx.session is not None
    assert ctx.turn is not None
    return AgentExecuteResponse.client_tool_continuation(
        session_id=ctx.session.id,
        turn_id=ctx.turn.id,
        mode_display_name="General",
        tool_calls=list(PENDING_CALLS),
        tool_continuation_message="Running two tools.",
    )
