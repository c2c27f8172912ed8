"""Pure, stateless, non-mutating rule checks (AGN-036 §2).

Every function here returns a result and never raises for a failed rule; each
error names a stable rule id (see ``all_rules`` and docs/CONFORMANCE.md).
"""

from .core import validate_core
from .manifest import manifest_for, validate_tool_call_manifest
from .protocol import (
    CONTINUATION_PREFIX,
    KEY_PREFIX,
    stored_answer_conflict,
    validate_idempotency_key,
    validate_turn_protocol,
)
from .request import classify_request, parse_request, validate_request
from .response import parse_response, validate_response
from .rules import Rule, all_rules
from .snapshot import ContextSnapshot, snapshot_context
from .steps import Phase, step_rule_ids, validate_post_step, validate_pre_step
from .tool_calls import ToolCallOutcome, ToolCallVerdict, check_tool_call

__all__ = [
    "CONTINUATION_PREFIX",
    "KEY_PREFIX",
    "ContextSnapshot",
    "Phase",
    "Rule",
    "ToolCallOutcome",
    "ToolCallVerdict",
    "all_rules",
    "check_tool_call",
    "classify_request",
    "manifest_for",
    "parse_request",
    "parse_response",
    "snapshot_context",
    "step_rule_ids",
    "stored_answer_conflict",
    "validate_core",
    "validate_idempotency_key",
    "validate_post_step",
    "validate_pre_step",
    "validate_request",
    "validate_response",
    "validate_tool_call_manifest",
    "validate_turn_protocol",
]
