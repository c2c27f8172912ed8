"""The pipeline steps of AGN-036 §4, one module each.

A step is a plain ``async`` function of the turn's ``TurnScope``: it does its DDR
job through the ports and changes the context. Nothing here depends on the state
machine library; ``aptix_pipeline.engine`` wires the steps together by name, with
each step's PRE rules as its guard and its POST rules as its exit hook.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

from aptix_pipeline.contracts import PipelineStep

from .agent_context_loader import agent_context_loader
from .agent_context_resolver import agent_context_resolver
from .agent_session_creator import agent_session_creator
from .budget import (
    IMAGE_TOKENS,
    budget_checks,
    call_estimate,
    estimate_prompt_tokens,
    reserve_call,
    settle_turn,
)
from .client_tool_continuation_resolver import client_tool_continuation_resolver
from .completion import complete_turn
from .exception_text import (
    ERROR_DETAILS,
    MAX_RULE_DETAIL_CHARS,
    PROPAGATED,
    SHORT_ERROR_CHARS,
    TOOL_ERROR_DETAILS,
    ErrorDetail,
    ToolErrorDetail,
    bounded,
    error_text,
    exception_type,
    internal_text,
    port_failed,
    propagate_also,
    runtime_error_in,
    traceback_text,
)
from .faults import StepFaultError, described
from .hooks import (
    AfterModelReply,
    AfterTool,
    BeforeModelRequest,
    HookFailedError,
    Hooks,
    ToolExecution,
    hooked_llm,
    hooked_ports,
    hooked_tools,
)
from .llm_client import check_round_limit, llm_client, model_request
from .mode_change import AGENT_CHANGE_MODE
from .prompt_content_provider_initializer import prompt_content_provider_initializer
from .reasoner import reasoner
from .request_handler import request_handler
from .response_builder import response_builder
from .retrieval import RETRIEVED_CONTEXT_LABEL, collection_of
from .scope import (
    MAX_IDEMPOTENCY_TTL_SECONDS,
    TRANSCRIPT_POLICIES,
    AnswerKeys,
    PipelineOptions,
    Ports,
    TranscriptPolicy,
    TurnScope,
)
from .session_restorer import session_restorer
from .tool_ledger import (
    POSSIBLY_EXECUTED_POLICIES,
    TOOL_CALL_KEY_PREFIX,
    TOOL_POSSIBLY_EXECUTED,
    LedgeredTool,
    PossiblyExecutedPolicy,
    ToolPossiblyExecutedError,
    decode_ledger_result,
    encode_ledger_result,
    ledgered_tools,
    run_ledgered,
    tool_call_key,
)
from .tool_records import ModeChange, RejectionKind, ToolCallFate, ToolCallRecord, ToolCallSide

__all__ = [
    "AGENT_CHANGE_MODE",
    "ERROR_DETAILS",
    "IMAGE_TOKENS",
    "MAX_IDEMPOTENCY_TTL_SECONDS",
    "MAX_RULE_DETAIL_CHARS",
    "POSSIBLY_EXECUTED_POLICIES",
    "PROPAGATED",
    "RETRIEVED_CONTEXT_LABEL",
    "SHORT_ERROR_CHARS",
    "STEP_FUNCTIONS",
    "TOOL_CALL_KEY_PREFIX",
    "TOOL_ERROR_DETAILS",
    "TOOL_POSSIBLY_EXECUTED",
    "TRANSCRIPT_POLICIES",
    "AfterModelReply",
    "AfterTool",
    "AnswerKeys",
    "BeforeModelRequest",
    "ErrorDetail",
    "HookFailedError",
    "Hooks",
    "LedgeredTool",
    "ModeChange",
    "PipelineOptions",
    "Ports",
    "PossiblyExecutedPolicy",
    "RejectionKind",
    "StepFaultError",
    "StepFunction",
    "ToolCallFate",
    "ToolCallRecord",
    "ToolCallSide",
    "ToolErrorDetail",
    "ToolExecution",
    "ToolPossiblyExecutedError",
    "TranscriptPolicy",
    "TurnScope",
    "bounded",
    "budget_checks",
    "call_estimate",
    "check_round_limit",
    "collection_of",
    "complete_turn",
    "decode_ledger_result",
    "described",
    "encode_ledger_result",
    "error_text",
    "estimate_prompt_tokens",
    "exception_type",
    "hooked_llm",
    "hooked_ports",
    "hooked_tools",
    "internal_text",
    "ledgered_tools",
    "model_request",
    "port_failed",
    "propagate_also",
    "reserve_call",
    "run_ledgered",
    "runtime_error_in",
    "settle_turn",
    "tool_call_key",
    "traceback_text",
]

StepFunction = Callable[[TurnScope], Awaitable[None]]

STEP_FUNCTIONS: Mapping[PipelineStep, StepFunction] = MappingProxyType(
    {
        PipelineStep.REQUEST_HANDLER: request_handler,
        PipelineStep.SESSION_RESTORER: session_restorer,
        PipelineStep.AGENT_CONTEXT_RESOLVER: agent_context_resolver,
        PipelineStep.CLIENT_TOOL_CONTINUATION_RESOLVER: client_tool_continuation_resolver,
        PipelineStep.AGENT_SESSION_CREATOR: agent_session_creator,
        PipelineStep.AGENT_CONTEXT_LOADER: agent_context_loader,
        PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER: prompt_content_provider_initializer,
        PipelineStep.REASONER: reasoner,
        PipelineStep.LLM_CLIENT: llm_client,
        PipelineStep.RESPONSE_BUILDER: response_builder,
    }
)
"""Each step of AGN-036 §4 and the function that does its job, in section order."""
