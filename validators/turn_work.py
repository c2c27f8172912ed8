"""The rules a turn's work enforces, beside the PRE/POST rule sets (AGN-036 §4, AGN-011).

The PRE and POST sets (``steps.py`` here) check the context between steps. These
rules are checked while a step works — a session, turn, context or mode it looks up
must exist, the model's reply must be usable, a mode change must be valid — or by
the runner around the steps (the turn's deadline). The steps and the runner enforce
them; they are declared here, with every other rule, so the registry is complete
whatever part of the package was imported. They are grouped by the step that
enforces them.
"""

from __future__ import annotations

from dataclasses import dataclass

from aptix_pipeline.contracts import ErrorCode

from .rules import Rule, rule

__all__ = [
    "BUDGET_UNPRICED",
    "BUDGET_WITHIN",
    "INITIAL_MODE_KNOWN",
    "MODEL_REPLY_SIZE",
    "MODE_KNOWN",
    "MODE_RESULT_VALID",
    "REQUESTED_CONTEXTS_KNOWN",
    "ROUND_LIMIT",
    "SERVER_TOOL_TIMEOUT",
    "SESSION_FOUND",
    "SEVERAL_MODE_CHANGES",
    "STORED_CONTEXTS_KNOWN",
    "STREAM_INTERRUPTED",
    "TOOL_CALL_IDS",
    "TOOL_POSSIBLY_EXECUTED",
    "TRANSCRIPT_SIZE",
    "TURN_CANCELLED",
    "TURN_DEADLINE",
    "TURN_FOUND",
    "ContextRules",
]

# AGN-036 §4.2 SessionRestorer (steps/session_restorer.py)

SESSION_FOUND = rule(
    "AGN-033/3.1/session-found",
    "AGN-033 §3.1, DESIGN.md Isolation",
    "SessionId must name a session of the calling org and user",
    ErrorCode.NOT_FOUND,
    module=__name__,
)
TURN_FOUND = rule(
    "AGN-033/3.1/turn-in-session",
    "AGN-033 §3.1",
    "TurnId must name a turn of that session (TurnIds are scoped to their session)",
    ErrorCode.NOT_FOUND,
    module=__name__,
)


# AGN-036 §4.3 AgentContextResolver and §4.6 AgentContextLoader (steps/agent_contexts.py)


@dataclass(frozen=True, slots=True)
class ContextRules:
    """The two "known" rules of one step's section: its agent and conversation contexts."""

    agent: Rule
    conversation: Rule


def _context_rules(section: str, source: str) -> ContextRules:
    return ContextRules(
        agent=rule(
            f"AGN-036/{section}/agent-context-known",
            f"AGN-036 §{section}",
            f"the AgentContextId {source} must name a known agent context",
            ErrorCode.NOT_FOUND,
            module=__name__,
        ),
        conversation=rule(
            f"AGN-036/{section}/conversation-context-known",
            f"AGN-036 §{section}",
            f"the ConversationContextId {source} must name a known conversation context",
            ErrorCode.NOT_FOUND,
            module=__name__,
        ),
    )


REQUESTED_CONTEXTS_KNOWN = _context_rules("4.3", "of the request")
"""§4.3: the contexts the request names (steps/agent_context_resolver.py)."""
STORED_CONTEXTS_KNOWN = _context_rules("4.6", "the session stored")
"""§4.6: the contexts the session stored (steps/agent_context_loader.py)."""


# AGN-036 §4.5 AgentSessionCreator (steps/agent_session_creator.py)

INITIAL_MODE_KNOWN = rule(
    "AGN-011/3.1/initial-mode-known",
    "AGN-011 §3.1, DESIGN.md R2",
    "a new session's mode (the host's initial mode, else \"general\") must be in the Mode Catalog",
    ErrorCode.INVALID_REQUEST,
    module=__name__,
)


# AGN-036 §4.7 PromptContentProviderInitializer (steps/prompt_content_provider_initializer.py)

TRANSCRIPT_SIZE = rule(
    "DESIGN/limits/transcript-size",
    "AGN-036 §4.7",
    "a session's stored transcript may hold at most PipelineOptions.max_transcript_messages "
    "messages for the model; start a new session",
    ErrorCode.INVALID_REQUEST,
    module=__name__,
)


# AGN-036 §4.9 LLMClient and its server-tool rounds (steps/llm_client.py)

ROUND_LIMIT = rule(
    "DESIGN/R5/round-limit",
    "DESIGN.md R5, AGN-011 §5",
    "the model must reach an outcome (a final answer or client tool calls) within the "
    "configured number of server-tool rounds",
    ErrorCode.PIPELINE_RULE_FAILED,
    module=__name__,
)
TOOL_CALL_IDS = rule(
    "AGN-033/5.1/model-tool-call-ids",
    "AGN-033 §5.1, §3.3",
    "every tool call the model makes needs a non-empty ToolCallId, unique among the calls "
    "of this request and those it answers, so each result answers exactly one call",
    ErrorCode.PIPELINE_RULE_FAILED,
    module=__name__,
)
SERVER_TOOL_TIMEOUT = rule(
    "DESIGN/limits/server-tool-timeout",
    "DESIGN.md R5, AGN-011 §5",
    "a server tool must answer within PipelineOptions.server_tool_timeout_seconds; one that "
    "does not fails as a tool that raised, and the model is told so",
    ErrorCode.PORT_FAILED,
    module=__name__,
)
BUDGET_WITHIN = rule(
    "DESIGN/budget/within",
    "issue 31, docs/BUDGETS.md",
    "a model call is made only when its estimate (the prompt's tokens plus the call's "
    "output cap) fits every budget that applies to the caller and mode; otherwise the "
    "turn ends with budget_exceeded, naming the budget, its window and what remains",
    ErrorCode.BUDGET_EXCEEDED,
    module=__name__,
)
BUDGET_UNPRICED = rule(
    "DESIGN/budget/unpriced",
    "issue 31, docs/BUDGETS.md",
    'with [prices] unknown = "refuse", a model without a price is not called: the turn '
    "ends with budget_exceeded",
    ErrorCode.BUDGET_EXCEEDED,
    module=__name__,
)
TOOL_POSSIBLY_EXECUTED = rule(
    "DESIGN/ledger/possibly-executed",
    "issue 29, docs/TOOLS.md",
    "a server-tool call an earlier attempt of the turn started and never finished runs again "
    "only when its tool is declared idempotent; otherwise it fails as possibly executed "
    "(tool_possibly_executed), and the model is told so",
    ErrorCode.PORT_FAILED,
    module=__name__,
)
MODEL_REPLY_SIZE = rule(
    "DESIGN/limits/model-reply-size",
    "AGN-036 §4.9",
    "a model reply may hold at most PipelineOptions.max_model_reply_chars characters (text, "
    "tool call ids, names and arguments)",
    ErrorCode.PORT_FAILED,
    module=__name__,
)


# AGN-011 §5 the agent_change_mode tool, run in those rounds (steps/mode_change.py)

MODE_KNOWN = rule(
    "AGN-011/5.2/mode-known",
    "AGN-011 §5.2",
    "agent_change_mode must name a mode of the Mode Catalog; the model is told so as a "
    "tool error and the mode stays",
    ErrorCode.TOOL_CALL_INVALID,
    module=__name__,
)
MODE_RESULT_VALID = rule(
    "AGN-011/5.2/mode-result-valid",
    "AGN-011 §5.2",
    'the agent_change_mode result must be a JSON object with a non-empty "mode", an optional '
    'boolean "branch" and an optional text "reason"',
    ErrorCode.TOOL_CALL_INVALID,
    module=__name__,
)
SEVERAL_MODE_CHANGES = rule(
    "DESIGN/R8/several-mode-changes",
    "AGN-011 §5.1, DESIGN.md R8",
    "the model changed mode more than once in one turn; each change is persisted in order "
    "and the last one wins",
    ErrorCode.PIPELINE_RULE_FAILED,
    module=__name__,
)


# Around every step: the runner (engine/runner.py)

TURN_DEADLINE = rule(
    "DESIGN/limits/turn-deadline",
    'DESIGN.md "What every part promises"',
    "a turn must finish within PipelineOptions.turn_deadline_seconds; this one did not, "
    "and nothing of it was stored",
    ErrorCode.DEADLINE_EXCEEDED,
    module=__name__,
)

TURN_CANCELLED = rule(
    "DESIGN/streaming/consumer-gone",
    "AGN-034 §4.7, docs/STREAMING.md",
    "a streamed turn must have a consumer until it ends; this one's stopped reading, "
    "so the turn was cancelled and nothing of it was stored",
    ErrorCode.CANCELLED,
    module=__name__,
)

# AGN-036 §4.9 LLMClient, streamed (steps/llm_client.py)

STREAM_INTERRUPTED = rule(
    "DESIGN/streaming/interrupted",
    "AGN-034 §4.7, docs/STREAMING.md",
    "a streamed model reply whose text has begun to reach the client is not retried: "
    "it failed part-way, so the turn faulted and nothing of it was stored",
    ErrorCode.PORT_FAILED,
    module=__name__,
)
