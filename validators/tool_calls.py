"""Tool-call checks of the container parameter validation design.

``check_tool_call(tool, arguments_json)`` decides what happens to one tool call
the model made (container design, "Validation Algorithm"):

- a **container** called with no arguments → ``EXPAND_CONTAINER``;
- a container called *with* arguments → rejected with a
  ``ContainerInvocationErrorResponse`` whose retry guidance names the first five
  functions followed by ``...`` (or generic guidance when it has no names);
- a **regular tool** → its arguments are validated against its JSON Schema
  (``jsonschema``, Draft 2020-12, formats checked); failures → a
  ``ValidationErrorResponse`` listing property, attempted value, message and error
  code; success → ``INVOKE``.

Rejections are not pipeline faults: the engine returns them to the LLM as the
call's tool result so it can retry. Decisions: an unknown tool name is rejected
with a ``ValidationErrorResponse`` (error code ``UNKNOWN_FUNCTION``); empty
arguments (``""``, ``null``, ``{}``, ``[]``) count as "no arguments"; malformed
or non-object arguments to a regular tool → ``INVALID_JSON`` / ``INVALID_TYPE``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from aptix_pipeline.contracts import (
    ArgumentError,
    ContainerInvocationErrorResponse,
    ErrorCode,
    ToolDefinition,
    ValidationErrorResponse,
)

from .json_text import json_path, strict_json_loads
from .rules import rule

if TYPE_CHECKING:  # jsonschema costs ~100 ms to import: loaded when arguments are checked
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError as SchemaViolation

__all__ = [
    "GUIDANCE_FUNCTION_LIMIT",
    "VALIDATION_RETRY_GUIDANCE",
    "ToolCallOutcome",
    "ToolCallVerdict",
    "check_tool_call",
]

_TOOL = ErrorCode.TOOL_CALL_INVALID

CONTAINER_WITHOUT_ARGUMENTS = rule(
    "CPV/container-without-arguments",
    "Container design, Validation Decision Tree",
    "a container must be called with no arguments to expand it",
    _TOOL,
    module=__name__,
)
ARGUMENTS_MATCH_SCHEMA = rule(
    "CPV/arguments-match-schema",
    "Container design, Validation Algorithm",
    "a tool's arguments must satisfy its JSON Schema",
    _TOOL,
    module=__name__,
)
ARGUMENTS_JSON_OBJECT = rule(
    "CPV/arguments-json-object",
    "Container design, Validation Algorithm (decision)",
    "a tool's arguments must be one JSON object",
    _TOOL,
    module=__name__,
)
TOOL_KNOWN = rule(
    "CPV/tool-known",
    "Container design (decision), AGN-011 §4.4",
    "the model may call only the tools advertised for this turn",
    _TOOL,
    module=__name__,
)

GUIDANCE_FUNCTION_LIMIT = 5
"""How many function names the container retry guidance shows (container design)."""

VALIDATION_RETRY_GUIDANCE = (
    "The provided arguments are invalid. Please review the errors, correct the arguments "
    "based on the function schema, and try again."
)

_ERROR_CODES = {
    "required": "REQUIRED_FIELD",
    "type": "INVALID_TYPE",
    "enum": "INVALID_VALUE",
    "const": "INVALID_VALUE",
    "format": "INVALID_FORMAT",
    "pattern": "PATTERN_MISMATCH",
    "minimum": "OUT_OF_RANGE",
    "maximum": "OUT_OF_RANGE",
    "exclusiveMinimum": "OUT_OF_RANGE",
    "exclusiveMaximum": "OUT_OF_RANGE",
    "multipleOf": "OUT_OF_RANGE",
    "minLength": "INVALID_LENGTH",
    "maxLength": "INVALID_LENGTH",
    "minItems": "INVALID_LENGTH",
    "maxItems": "INVALID_LENGTH",
    "uniqueItems": "DUPLICATE_ITEMS",
    "additionalProperties": "UNKNOWN_PROPERTY",
    "unevaluatedProperties": "UNKNOWN_PROPERTY",
}
_REQUIRED_NAME = re.compile(r"^'(.+)' is a required property$")


class ToolCallOutcome(StrEnum):
    """What the engine does with a tool call."""

    INVOKE = "invoke"
    EXPAND_CONTAINER = "expand_container"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class ToolCallVerdict:
    """The decision on one tool call; ``rejection`` is what the LLM is told on rejection."""

    outcome: ToolCallOutcome
    arguments: Any
    rejection: ContainerInvocationErrorResponse | ValidationErrorResponse | None = None
    rule_id: str | None = None

    @property
    def allowed(self) -> bool:
        """Whether the call may run (invoke the tool or expand the container)."""
        return self.outcome is not ToolCallOutcome.REJECTED

    def rejection_json(self) -> str:
        """The rejection as the JSON text handed back to the LLM as the tool result."""
        if self.rejection is None:
            raise ValueError("the call was not rejected")
        # The model's own text (a name, an argument) may hold a lone surrogate: escape it.
        return json.dumps(self.rejection.model_dump(), ensure_ascii=True)


def _parse(arguments_json: str | None) -> tuple[bool, Any]:
    """(well-formed, value); blank text is well-formed and means no arguments."""
    if arguments_json is None or not arguments_json.strip():
        return True, None
    try:
        return True, strict_json_loads(arguments_json)
    except (ValueError, RecursionError):
        return False, arguments_json


def _is_empty(value: Any) -> bool:
    return value is None or value == {} or value == [] or value == ""


def _container_rejection(tool: ToolDefinition, attempted: Any) -> ContainerInvocationErrorResponse:
    names = list(tool.function_names or ())
    guidance = (
        f"This requires TWO separate tool calls: (1) First call '{tool.name}' with NO "
        "arguments to expand it. (2) After expansion succeeds, call the individual function "
        "you need."
    )
    if names:
        shown = ", ".join(names[:GUIDANCE_FUNCTION_LIMIT])
        more = ", ..." if len(names) > GUIDANCE_FUNCTION_LIMIT else ""
        guidance += f" Available functions: {shown}{more}"
    return ContainerInvocationErrorResponse(
        container_name=tool.name,
        attempted_parameters=attempted,
        available_functions=names,
        error_message=(
            f"'{tool.name}' is a container function that groups related functions. "
            "It cannot be called with parameters."
        ),
        retry_guidance=guidance,
    )


@lru_cache(maxsize=4096)
def _validator(schema_json: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(
        json.loads(schema_json), format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def _argument_errors(violation: SchemaViolation) -> list[ArgumentError]:
    where = json_path(violation.absolute_path)
    keyword = str(violation.validator)
    code = _ERROR_CODES.get(keyword, "VALIDATION_FAILED")
    if keyword == "required":
        match = _REQUIRED_NAME.match(violation.message)
        missing = match.group(1) if match else violation.message
        prop = f"{where}.{missing}" if where else missing
        return [
            ArgumentError(
                property=prop,
                attempted_value=None,
                error_message=f"{prop} is required",
                error_code=code,
            )
        ]
    if keyword == "additionalProperties" and isinstance(violation.instance, dict):
        schema = violation.schema if isinstance(violation.schema, dict) else {}
        named = set(schema.get("properties", {}))
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]

        def allowed(name: str) -> bool:
            return name in named or any(p.search(name) for p in patterns)

        return [
            ArgumentError(
                property=f"{where}.{name}" if where else name,
                attempted_value=value,
                error_message=f"{name} is not a parameter of this function",
                error_code=code,
            )
            for name, value in violation.instance.items()
            if not allowed(name)
        ]
    label = where or "arguments"
    return [
        ArgumentError(
            property=where,
            attempted_value=violation.instance,
            error_message=f"{label}: {violation.message}",
            error_code=code,
        )
    ]


def _rejected(rule_id: str, arguments: Any, errors: list[ArgumentError]) -> ToolCallVerdict:
    return ToolCallVerdict(
        ToolCallOutcome.REJECTED,
        arguments,
        ValidationErrorResponse(errors=errors, retry_guidance=VALIDATION_RETRY_GUIDANCE),
        rule_id,
    )


def check_tool_call(
    tool: ToolDefinition | None, name: str, arguments_json: str | None
) -> ToolCallVerdict:
    """Decide one tool call: expand, invoke, or reject with the structured error.

    ``tool`` is the advertised definition the call's ``name`` resolves to, or
    ``None`` when the model called something not advertised. Never raises.
    """
    well_formed, arguments = _parse(arguments_json)
    if tool is None:
        return _rejected(
            TOOL_KNOWN.id,
            arguments,
            [
                ArgumentError(
                    property="name",
                    attempted_value=name,
                    error_message=f"'{name}' is not a function available in this turn",
                    error_code="UNKNOWN_FUNCTION",
                )
            ],
        )
    if tool.is_container:
        if well_formed and _is_empty(arguments):
            return ToolCallVerdict(ToolCallOutcome.EXPAND_CONTAINER, {})
        return ToolCallVerdict(
            ToolCallOutcome.REJECTED,
            arguments,
            _container_rejection(tool, arguments),
            CONTAINER_WITHOUT_ARGUMENTS.id,
        )
    if not well_formed:
        return _rejected(
            ARGUMENTS_JSON_OBJECT.id,
            arguments,
            [
                ArgumentError(
                    property="",
                    attempted_value=arguments,
                    error_message="arguments are not well-formed JSON",
                    error_code="INVALID_JSON",
                )
            ],
        )
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return _rejected(
            ARGUMENTS_JSON_OBJECT.id,
            arguments,
            [
                ArgumentError(
                    property="",
                    attempted_value=arguments,
                    error_message="arguments must be a JSON object",
                    error_code="INVALID_TYPE",
                )
            ],
        )
    validator = _validator(json.dumps(tool.parameters, sort_keys=True))
    from referencing.exceptions import Unresolvable  # loaded with jsonschema by _validator

    try:
        violations = sorted(
            validator.iter_errors(arguments),
            key=lambda v: (list(map(str, v.absolute_path)), str(v.validator)),
        )
    except Unresolvable as error:  # a $ref the definition check could not see (nested $id)
        return _rejected(
            ARGUMENTS_MATCH_SCHEMA.id,
            arguments,
            [
                ArgumentError(
                    property="",
                    attempted_value=arguments,
                    error_code="SCHEMA_UNUSABLE",
                    error_message=f"the function's argument schema cannot be applied: {error}",
                )
            ],
        )
    if violations:
        errors = [error for violation in violations for error in _argument_errors(violation)]
        return _rejected(ARGUMENTS_MATCH_SCHEMA.id, arguments, errors)
    return ToolCallVerdict(ToolCallOutcome.INVOKE, arguments)
