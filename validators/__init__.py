"""Pure, stateless, non-mutating rule checks (AGN-036 §2).

Every function here returns a result and never raises for a failed rule; each
error names a stable rule id (see ``all_rules`` and docs/CONFORMANCE.md). Every
rule is declared in a module of this subpackage, and this ``__init__`` imports them
all, so ``all_rules()`` holds the full set whatever part of the package was
imported; the rules the steps and the runner enforce while they work are in
``turn_work`` and exported here.
"""

from . import turn_work
from .core import has_text, validate_core
from .host_rules import HOST_RULE_ID_PATTERN, HostCheck, HostRule, HostRules
from .json_text import (
    strict_json_loads,
    text_depth_exceeds,
    text_too_deep_at,
    utf8_text,
    value_depth_exceeds,
)
from .manifest import manifest_for, validate_tool_call_manifest
from .protocol import (
    CONTINUATION_PREFIX,
    FOLLOW_ON_TURN_SETTLED,
    KEY_PREFIX,
    stored_answer_conflict,
    validate_idempotency_key,
    validate_turn_protocol,
)
from .request import (
    DEFAULT_IMAGE_CAPS,
    ImageCaps,
    ImageInput,
    classify_request,
    image_inputs,
    is_base64,
    is_image_type,
    parse_request,
    validate_request,
)
from .response import (
    guard_machine_payloads,
    is_reference_url,
    parse_response,
    validate_response,
)
from .rules import HOST_RULE_PREFIX, Rule, all_rules
from .snapshot import ContextSnapshot, snapshot_context
from .steps import Phase, step_rule_ids, validate_post_step, validate_pre_step
from .tool_calls import ToolCallOutcome, ToolCallVerdict, check_tool_call
from .tool_files import file_name_problem, mime_type_problem, tool_file_problem
from .turn_work import *  # noqa: F403 - the rules the steps and the runner check

__all__ = [
    "CONTINUATION_PREFIX",
    "DEFAULT_IMAGE_CAPS",
    "FOLLOW_ON_TURN_SETTLED",
    "HOST_RULE_ID_PATTERN",
    "HOST_RULE_PREFIX",
    "KEY_PREFIX",
    "ContextSnapshot",
    "HostCheck",
    "HostRule",
    "HostRules",
    "ImageCaps",
    "ImageInput",
    "Phase",
    "Rule",
    "ToolCallOutcome",
    "ToolCallVerdict",
    "all_rules",
    "check_tool_call",
    "classify_request",
    "file_name_problem",
    "guard_machine_payloads",
    "has_text",
    "image_inputs",
    "is_base64",
    "is_image_type",
    "is_reference_url",
    "manifest_for",
    "mime_type_problem",
    "parse_request",
    "parse_response",
    "snapshot_context",
    "step_rule_ids",
    "stored_answer_conflict",
    "strict_json_loads",
    "text_depth_exceeds",
    "text_too_deep_at",
    "tool_file_problem",
    "utf8_text",
    "validate_core",
    "validate_idempotency_key",
    "validate_post_step",
    "validate_pre_step",
    "validate_request",
    "validate_response",
    "validate_tool_call_manifest",
    "validate_turn_protocol",
    "value_depth_exceeds",
]
__all__ += turn_work.__all__
