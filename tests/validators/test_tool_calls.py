"""Container parameter validation design: ``check_tool_call`` and the errors the LLM reads.

A container called with arguments is rejected with a ``ContainerInvocationErrorResponse``
("Validation Decision Tree"); a regular tool's arguments are checked against its
JSON Schema and failures come back as a ``ValidationErrorResponse`` ("Error Response
Examples"). Tests that show a CPV rule holding or broken carry its ``rule`` marker;
the tests of the rejection's JSON text and of ``ToolDefinition`` construction do not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from rulecases import rule_params

from aptix_pipeline.contracts import (
    ContainerInvocationErrorResponse,
    SourceType,
    ToolDefinition,
    ValidationErrorResponse,
)
from aptix_pipeline.validators import ToolCallOutcome, ToolCallVerdict, all_rules, check_tool_call

CONTAINER = "CPV/container-without-arguments"
SCHEMA = "CPV/arguments-match-schema"
JSON_OBJECT = "CPV/arguments-json-object"
KNOWN = "CPV/tool-known"

MATH_FUNCTIONS = ("Add", "Multiply", "Abs", "Square", "Subtract", "Min", "SolveQuadratic")
MATH = ToolDefinition(
    name="Math",
    executes_on="server",
    description="Math plugin with Add, Multiply, Abs, Square, Subtract...",
    is_container=True,
    plugin_name="Math",
    function_names=MATH_FUNCTIONS,
    function_count=len(MATH_FUNCTIONS),
    source_type=SourceType.PLUGIN,
)
UNNAMED_CONTAINER = ToolDefinition(
    name="Weather", executes_on="server", is_container=True, source_type=SourceType.MCP
)
READ_FILE = ToolDefinition(
    name="read_file",
    executes_on="client",
    parameters={
        "type": "object",
        "properties": {
            "file_path": {"type": "string"},
            "max_lines": {"type": "integer", "minimum": 1},
            "encoding": {"enum": ["utf-8", "latin-1"]},
            "modified_since": {"type": "string", "format": "date"},
            "options": {
                "type": "object",
                "properties": {"depth": {"type": "integer", "minimum": 0}},
            },
        },
        "required": ["file_path"],
        "additionalProperties": False,
    },
)
NO_PARAMETERS = ToolDefinition(name="now", executes_on="client")

MATH_CALL = '{"function": "Add", "a": 5, "b": 10}'
VALID_READ = {
    "file_path": "src/a.py",
    "max_lines": 10,
    "encoding": "utf-8",
    "modified_since": "2026-01-02",
    "options": {"depth": 2},
}

# The design's "Error Response Examples", verbatim.
DESIGN_CONTAINER_ERROR: dict[str, Any] = {
    "error_type": "container_invocation_error",
    "container_name": "Math",
    "attempted_parameters": {"function": "Add", "a": 5, "b": 10},
    "available_functions": [
        "Add", "Multiply", "Abs", "Square", "Subtract", "Min", "SolveQuadratic",
    ],
    "error_message": (
        "'Math' is a container function that groups related functions. "
        "It cannot be called with parameters."
    ),
    "retry_guidance": (
        "This requires TWO separate tool calls: (1) First call 'Math' with NO arguments to "
        "expand it. (2) After expansion succeeds, call the individual function you need. "
        "Available functions: Add, Multiply, Abs, Square, Subtract, ..."
    ),
}  # fmt: skip
DESIGN_RETRY_GUIDANCE = (
    "The provided arguments are invalid. Please review the errors, correct the arguments "
    "based on the function schema, and try again."
)
DESIGN_VALIDATION_ERROR: dict[str, Any] = {
    "error_type": "validation_error",
    "errors": [
        {
            "property": "file_path",
            "attempted_value": None,
            "error_message": "file_path is required",
            "error_code": "REQUIRED_FIELD",
        }
    ],
    "retry_guidance": DESIGN_RETRY_GUIDANCE,
}


def check(tool: ToolDefinition, arguments_json: str | None) -> ToolCallVerdict:
    """``check_tool_call`` for a call that names ``tool``."""
    return check_tool_call(tool, tool.name, arguments_json)


def container_rejection(verdict: ToolCallVerdict) -> ContainerInvocationErrorResponse:
    assert isinstance(verdict.rejection, ContainerInvocationErrorResponse)
    return verdict.rejection


def validation_rejection(verdict: ToolCallVerdict) -> ValidationErrorResponse:
    assert isinstance(verdict.rejection, ValidationErrorResponse)
    return verdict.rejection


# --- the decision table: every CPV rule holding and broken ---------------------------------


@dataclass(frozen=True)
class CallCase:
    """A call of ``tool`` (``None``: not advertised) named ``name`` with ``arguments_json``."""

    rule_id: str
    variant: str
    tool: ToolDefinition | None
    arguments_json: str | None
    outcome: ToolCallOutcome = ToolCallOutcome.REJECTED
    name: str | None = None


BROKEN_CALLS = [
    CallCase(CONTAINER, "design-example", MATH, MATH_CALL),
    CallCase(CONTAINER, "nested-parameters", MATH, '{"options": {"function": "Add"}}'),
    CallCase(CONTAINER, "malformed-json", MATH, '{"function": "Add", '),
    CallCase(CONTAINER, "no-function-names", UNNAMED_CONTAINER, '{"city": "Oslo"}'),
    CallCase(SCHEMA, "missing-required", READ_FILE, "{}"),
    CallCase(SCHEMA, "no-arguments-but-required", READ_FILE, ""),
    CallCase(SCHEMA, "wrong-type", READ_FILE, '{"file_path": 42}'),
    CallCase(SCHEMA, "below-minimum", READ_FILE, '{"file_path": "a", "max_lines": 0}'),
    CallCase(SCHEMA, "not-in-enum", READ_FILE, '{"file_path": "a", "encoding": "ebcdic"}'),
    CallCase(SCHEMA, "unknown-property", READ_FILE, '{"file_path": "a", "path": "b"}'),
    CallCase(SCHEMA, "nested-property", READ_FILE, '{"file_path": "a", "options": {"depth": -1}}'),
    CallCase(SCHEMA, "bad-format", READ_FILE, '{"file_path": "a", "modified_since": "soon"}'),
    CallCase(JSON_OBJECT, "malformed-json", READ_FILE, '{"file_path": '),
    CallCase(JSON_OBJECT, "array", READ_FILE, '["src/a.py"]'),
    CallCase(JSON_OBJECT, "string", READ_FILE, '"src/a.py"'),
    CallCase(KNOWN, "not-advertised", None, '{"a": 5, "b": 10}', name="Add"),
    CallCase(KNOWN, "not-advertised-without-arguments", None, None, name="Math.Add"),
]  # fmt: skip

HOLDING_CALLS = [
    CallCase(CONTAINER, "no-arguments", MATH, None, ToolCallOutcome.EXPAND_CONTAINER),
    CallCase(CONTAINER, "empty-text", MATH, "", ToolCallOutcome.EXPAND_CONTAINER),
    CallCase(CONTAINER, "empty-object", MATH, "{}", ToolCallOutcome.EXPAND_CONTAINER),
    CallCase(CONTAINER, "json-null", MATH, "null", ToolCallOutcome.EXPAND_CONTAINER),
    CallCase(CONTAINER, "empty-array", MATH, "[]", ToolCallOutcome.EXPAND_CONTAINER),
    CallCase(CONTAINER, "no-function-names", UNNAMED_CONTAINER, "{}",
             ToolCallOutcome.EXPAND_CONTAINER),
    CallCase(SCHEMA, "every-property-valid", READ_FILE, json.dumps(VALID_READ),
             ToolCallOutcome.INVOKE),
    CallCase(SCHEMA, "required-only", READ_FILE, '{"file_path": "a"}', ToolCallOutcome.INVOKE),
    CallCase(JSON_OBJECT, "object", READ_FILE, '{"file_path": "a"}', ToolCallOutcome.INVOKE),
    CallCase(JSON_OBJECT, "no-arguments-no-parameters", NO_PARAMETERS, "",
             ToolCallOutcome.INVOKE),
    CallCase(KNOWN, "advertised-tool", READ_FILE, '{"file_path": "a"}', ToolCallOutcome.INVOKE),
    CallCase(KNOWN, "advertised-container", MATH, "{}", ToolCallOutcome.EXPAND_CONTAINER),
]  # fmt: skip


def _check_case(case: CallCase) -> ToolCallVerdict:
    if case.tool is None:
        return check_tool_call(None, case.name or "", case.arguments_json)
    return check_tool_call(case.tool, case.name or case.tool.name, case.arguments_json)


@pytest.mark.parametrize("case", rule_params(BROKEN_CALLS, "broken"))
def test_broken_tool_call_rule_rejects_the_call(case: CallCase) -> None:
    verdict = _check_case(case)

    assert verdict.outcome is ToolCallOutcome.REJECTED
    assert not verdict.allowed
    assert verdict.rule_id == case.rule_id
    assert verdict.rejection is not None


@pytest.mark.parametrize("case", rule_params(HOLDING_CALLS, "holds"))
def test_holding_tool_call_rule_lets_the_call_through(case: CallCase) -> None:
    verdict = _check_case(case)

    assert verdict.outcome is case.outcome
    assert verdict.allowed
    assert verdict.rule_id is None
    assert verdict.rejection is None


def test_every_cpv_rule_has_a_holding_and_a_breaking_case() -> None:
    cpv_ids = {rule_id for rule_id in all_rules() if rule_id.startswith("CPV/")}

    assert cpv_ids == {CONTAINER, SCHEMA, JSON_OBJECT, KNOWN}
    assert cpv_ids == {case.rule_id for case in BROKEN_CALLS}
    assert cpv_ids == {case.rule_id for case in HOLDING_CALLS}


# --- containers ----------------------------------------------------------------------------


@pytest.mark.rule(CONTAINER, "broken")
def test_container_called_with_parameters_gets_the_design_example_error() -> None:
    verdict = check(MATH, MATH_CALL)

    assert isinstance(verdict.rejection, ContainerInvocationErrorResponse)
    assert json.loads(verdict.rejection_json()) == DESIGN_CONTAINER_ERROR


@pytest.mark.rule(CONTAINER, "broken")
def test_container_error_json_has_exactly_the_design_keys() -> None:
    verdict = check(MATH, MATH_CALL)

    wire = json.loads(verdict.rejection_json())

    assert list(wire) == [
        "error_type",
        "container_name",
        "attempted_parameters",
        "available_functions",
        "error_message",
        "retry_guidance",
    ]
    assert wire["error_type"] == "container_invocation_error"


@pytest.mark.decision("D18")
@pytest.mark.rule(CONTAINER, "broken")
def test_container_error_captures_the_attempted_parameters_and_every_function() -> None:
    verdict = check(MATH, '{"function": "Min", "values": [3, 1, 2]}')

    rejection = container_rejection(verdict)

    assert rejection.container_name == "Math"
    assert rejection.attempted_parameters == {"function": "Min", "values": [3, 1, 2]}
    assert verdict.arguments == {"function": "Min", "values": [3, 1, 2]}
    assert rejection.available_functions == list(MATH_FUNCTIONS)


@pytest.mark.decision("D18")
@pytest.mark.rule(CONTAINER, "broken")
def test_container_retry_guidance_lists_only_the_first_five_functions_then_ellipsis() -> None:
    verdict = check(MATH, MATH_CALL)

    guidance = container_rejection(verdict).retry_guidance

    assert guidance.endswith("Available functions: Add, Multiply, Abs, Square, Subtract, ...")
    assert "Min" not in guidance
    assert "SolveQuadratic" not in guidance
    assert "(1) First call 'Math' with NO arguments" in guidance


@pytest.mark.decision("D18")
@pytest.mark.rule(CONTAINER, "broken")
@pytest.mark.parametrize("count", [1, 5])
def test_container_with_five_or_fewer_functions_lists_them_all_without_ellipsis(
    count: int,
) -> None:
    names = MATH_FUNCTIONS[:count]
    small = ToolDefinition(
        name="Math",
        executes_on="server",
        is_container=True,
        function_names=names,
        function_count=count,
    )

    guidance = container_rejection(check(small, MATH_CALL)).retry_guidance

    assert guidance.endswith(f"Available functions: {', '.join(names)}")


@pytest.mark.rule(CONTAINER, "broken")
def test_container_without_function_names_gets_generic_guidance() -> None:
    verdict = check(UNNAMED_CONTAINER, '{"city": "Oslo"}')

    rejection = container_rejection(verdict)

    assert rejection.available_functions == []
    assert "Available functions" not in rejection.retry_guidance
    assert "..." not in rejection.retry_guidance
    assert "'Weather' with NO arguments" in rejection.retry_guidance


@pytest.mark.rule(CONTAINER, "broken")
def test_container_nested_parameters_are_detected() -> None:
    verdict = check(MATH, '{"options": {"function": "Add", "args": {"a": 5}}}')

    rejection = container_rejection(verdict)

    assert rejection.attempted_parameters == {"options": {"function": "Add", "args": {"a": 5}}}


@pytest.mark.decision("D19")
@pytest.mark.rule(CONTAINER, "broken")
def test_container_with_malformed_arguments_is_rejected_as_a_container_error() -> None:
    verdict = check(MATH, '{"function": "Add", ')

    rejection = container_rejection(verdict)

    assert rejection.error_type == "container_invocation_error"
    assert rejection.attempted_parameters == '{"function": "Add", '


@pytest.mark.rule(CONTAINER, "broken")
@given(
    arguments=st.dictionaries(
        st.text(min_size=1, max_size=8), st.integers() | st.text(max_size=8), min_size=1
    )
)
def test_container_called_with_any_object_is_rejected(arguments: dict[str, Any]) -> None:
    verdict = check(MATH, json.dumps(arguments))

    rejection = container_rejection(verdict)

    assert verdict.rule_id == CONTAINER
    assert rejection.attempted_parameters == arguments


@pytest.mark.decision("D19")
@pytest.mark.rule(CONTAINER, "holds")
@pytest.mark.parametrize("arguments_json", [None, "", "{}", "null", "[]", "  {}  "])
def test_container_called_without_arguments_expands(arguments_json: str | None) -> None:
    verdict = check(MATH, arguments_json)

    assert verdict.outcome is ToolCallOutcome.EXPAND_CONTAINER
    assert verdict.arguments == {}
    assert verdict.rejection is None


# --- regular tools -------------------------------------------------------------------------


@pytest.mark.rule(SCHEMA, "holds")
def test_valid_arguments_are_invoked_with_the_parsed_values() -> None:
    verdict = check(READ_FILE, json.dumps(VALID_READ))

    assert verdict.outcome is ToolCallOutcome.INVOKE
    assert verdict.arguments == VALID_READ


@pytest.mark.decision("D20")
@pytest.mark.rule(SCHEMA, "broken")
def test_missing_required_property_gets_the_design_example_error() -> None:
    verdict = check(READ_FILE, '{"max_lines": 3}')

    rejection = validation_rejection(verdict)

    assert json.loads(verdict.rejection_json()) == DESIGN_VALIDATION_ERROR
    assert rejection.retry_guidance == DESIGN_RETRY_GUIDANCE


@pytest.mark.decision("D20")
@pytest.mark.rule(SCHEMA, "broken")
@pytest.mark.parametrize(
    ("arguments", "prop", "attempted", "code"),
    [
        pytest.param({"file_path": 42}, "file_path", 42, "INVALID_TYPE", id="wrong-type"),
        pytest.param(
            {"file_path": "a", "max_lines": 0}, "max_lines", 0, "OUT_OF_RANGE", id="below-minimum"
        ),
        pytest.param(
            {"file_path": "a", "max_lines": 2.5},
            "max_lines",
            2.5,
            "INVALID_TYPE",
            id="float-for-integer",
        ),
        pytest.param(
            {"file_path": "a", "encoding": "ebcdic"},
            "encoding",
            "ebcdic",
            "INVALID_VALUE",
            id="not-in-enum",
        ),
        pytest.param(
            {"file_path": "a", "path": "b"}, "path", "b", "UNKNOWN_PROPERTY", id="unknown-property"
        ),
        pytest.param(
            {"file_path": "a", "modified_since": "2026-13-45"},
            "modified_since",
            "2026-13-45",
            "INVALID_FORMAT",
            id="bad-date",
        ),
        pytest.param(
            {"file_path": "a", "options": {"depth": -1}},
            "options.depth",
            -1,
            "OUT_OF_RANGE",
            id="nested-property",
        ),
        pytest.param(
            {"file_path": "a", "options": {"depth": "deep"}},
            "options.depth",
            "deep",
            "INVALID_TYPE",
            id="nested-wrong-type",
        ),
    ],
)
def test_schema_violation_names_property_attempted_value_and_code(
    arguments: dict[str, Any], prop: str, attempted: Any, code: str
) -> None:
    verdict = check(READ_FILE, json.dumps(arguments))

    rejection = validation_rejection(verdict)

    assert rejection.error_type == "validation_error"
    assert [(e.property, e.attempted_value, e.error_code) for e in rejection.errors] == [
        (prop, attempted, code)
    ]
    assert rejection.retry_guidance == DESIGN_RETRY_GUIDANCE


@pytest.mark.decision("D20")
@pytest.mark.rule(SCHEMA, "broken")
def test_every_violation_is_reported_at_once() -> None:
    verdict = check(READ_FILE, '{"max_lines": 0, "extra": true}')

    rejection = validation_rejection(verdict)

    assert sorted((e.property, e.error_code) for e in rejection.errors) == [
        ("extra", "UNKNOWN_PROPERTY"),
        ("file_path", "REQUIRED_FIELD"),
        ("max_lines", "OUT_OF_RANGE"),
    ]


@pytest.mark.decision("D20")
@pytest.mark.rule(SCHEMA, "broken")
def test_unknown_property_error_names_only_the_extra_property() -> None:
    # A name the schema admits through patternProperties is not an unknown property.
    tool = ToolDefinition(
        name="tag",
        executes_on="client",
        parameters={
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "patternProperties": {"^x_": {"type": "integer"}},
            "additionalProperties": False,
        },
    )

    verdict = check(tool, '{"name": "a", "x_priority": 1, "colour": "red"}')

    rejection = validation_rejection(verdict)
    assert [(e.property, e.attempted_value, e.error_code) for e in rejection.errors] == [
        ("colour", "red", "UNKNOWN_PROPERTY")
    ]


@pytest.mark.rule(SCHEMA, "broken")
def test_validation_error_json_has_exactly_the_design_keys() -> None:
    verdict = check(READ_FILE, '{"file_path": 1, "max_lines": 0}')

    wire = json.loads(verdict.rejection_json())

    assert list(wire) == ["error_type", "errors", "retry_guidance"]
    assert len(wire["errors"]) == 2
    for error in wire["errors"]:
        assert list(error) == ["property", "attempted_value", "error_message", "error_code"]


@pytest.mark.decision("D19")
@pytest.mark.rule(JSON_OBJECT, "broken")
@pytest.mark.parametrize(
    ("arguments_json", "attempted", "code"),
    [
        pytest.param('{"file_path": ', '{"file_path": ', "INVALID_JSON", id="malformed"),
        pytest.param("file_path=a.py", "file_path=a.py", "INVALID_JSON", id="not-json"),
        pytest.param('["a.py"]', ["a.py"], "INVALID_TYPE", id="array"),
        pytest.param("42", 42, "INVALID_TYPE", id="number"),
    ],
)
def test_arguments_that_are_not_one_json_object_are_rejected(
    arguments_json: str, attempted: Any, code: str
) -> None:
    verdict = check(READ_FILE, arguments_json)

    rejection = validation_rejection(verdict)

    assert [(e.attempted_value, e.error_code) for e in rejection.errors] == [(attempted, code)]
    assert rejection.retry_guidance == DESIGN_RETRY_GUIDANCE


@pytest.mark.decision("D19")
@pytest.mark.rule(KNOWN, "broken")
def test_unknown_tool_is_rejected_with_unknown_function() -> None:
    verdict = check_tool_call(None, "Add", '{"a": 5, "b": 10}')

    rejection = validation_rejection(verdict)

    assert verdict.rule_id == KNOWN
    assert [(e.property, e.attempted_value, e.error_code) for e in rejection.errors] == [
        ("name", "Add", "UNKNOWN_FUNCTION")
    ]


@pytest.mark.rule(KNOWN, "holds")
def test_advertised_tool_is_not_reported_unknown() -> None:
    verdict = check(READ_FILE, '{"file_path": "a"}')

    assert verdict.rule_id != KNOWN
    assert verdict.outcome is ToolCallOutcome.INVOKE


@given(arguments_json=st.none() | st.text())
def test_checking_any_arguments_text_never_raises(arguments_json: str | None) -> None:
    for tool in (MATH, READ_FILE, NO_PARAMETERS):
        verdict = check(tool, arguments_json)

        assert verdict.allowed == (verdict.rejection is None)
        assert verdict.allowed == (verdict.rule_id is None)


# --- the rejection as the LLM reads it ----------------------------------------------------


@pytest.mark.parametrize(
    "verdict",
    [
        pytest.param(check(MATH, MATH_CALL), id="container"),
        pytest.param(check(MATH, "{oops"), id="container-malformed"),
        pytest.param(check(READ_FILE, '{"file_path": 1, "x": [1, {"y": null}]}'), id="schema"),
        pytest.param(check_tool_call(None, "Add", "{}"), id="unknown-tool"),
    ],
)
def test_rejection_json_parses_back_to_the_same_error(verdict: ToolCallVerdict) -> None:
    assert verdict.rejection is not None

    text = verdict.rejection_json()

    assert json.loads(text) == verdict.rejection.model_dump(mode="json")
    assert type(verdict.rejection).model_validate_json(text) == verdict.rejection


@pytest.mark.parametrize(
    "verdict",
    [
        pytest.param(check(MATH, "{}"), id="expand-container"),
        pytest.param(check(READ_FILE, '{"file_path": "a"}'), id="invoke"),
    ],
)
def test_rejection_json_of_an_allowed_call_raises(verdict: ToolCallVerdict) -> None:
    with pytest.raises(ValueError, match="not rejected"):
        verdict.rejection_json()


# --- ToolDefinition construction (container metadata, "Metadata Structure") ---------------


def test_tool_with_an_invalid_json_schema_is_refused() -> None:
    with pytest.raises(ValidationError, match="Parameters is not a valid JSON Schema"):
        ToolDefinition(name="read_file", executes_on="client", parameters={"type": "nope"})


def test_function_count_that_does_not_match_function_names_is_refused() -> None:
    with pytest.raises(ValidationError, match="FunctionCount"):
        ToolDefinition(
            name="Math",
            executes_on="server",
            is_container=True,
            function_names=("Add", "Multiply"),
            function_count=3,
        )


def test_function_names_on_a_regular_tool_are_refused() -> None:
    with pytest.raises(ValidationError, match="FunctionNames"):
        ToolDefinition(name="Add", executes_on="server", function_names=("Add",))


@pytest.mark.parametrize("name", ["read file", "", "Math Add", "a" * 65])
def test_tool_name_that_is_not_a_plain_identifier_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ToolDefinition(name=name, executes_on="client")

    assert [error["loc"] for error in refused.value.errors()] == [("name",)]


@pytest.mark.decision("D25")
@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/missing"},
        {"$ref": "https://example.com/schema.json"},
        {"type": "object", "properties": {"a": {"$ref": "urn:example:x"}}},
    ],
    ids=["missing-local-definition", "remote-url", "nested-urn"],
)
def test_tool_whose_schema_refers_outside_itself_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match=r"\$ref"):
        ToolDefinition(name="t", executes_on="client", parameters=schema)


@pytest.mark.decision("D25")
def test_local_references_are_followed() -> None:
    tool = ToolDefinition(
        name="t",
        executes_on="client",
        parameters={
            "type": "object",
            "properties": {"depth": {"$ref": "#/$defs/positive"}},
            "$defs": {"positive": {"type": "integer", "minimum": 1}},
        },
    )

    verdict = check_tool_call(tool, "t", '{"depth": 0}')

    assert verdict.rejection is not None
    assert json.loads(verdict.rejection_json())["errors"][0]["error_code"] == "OUT_OF_RANGE"
    assert check_tool_call(tool, "t", '{"depth": 2}').outcome is ToolCallOutcome.INVOKE


@pytest.mark.decision("D25")
def test_a_schema_that_cannot_be_applied_is_a_rejection_not_an_exception() -> None:
    # model_construct skips the definition checks, as a hand-built definition could.
    tool = ToolDefinition.model_construct(
        name="t", executes_on="client", parameters={"$ref": "#/$defs/missing"}
    )

    verdict = check_tool_call(tool, "t", '{"a": 1}')

    assert verdict.outcome is ToolCallOutcome.REJECTED
    assert verdict.rule_id == "CPV/arguments-match-schema"
    assert json.loads(verdict.rejection_json())["errors"][0]["error_code"] == "SCHEMA_UNUSABLE"


@pytest.mark.decision("D25")
@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date-time", "2026-01-02T03:04:05Z", "yesterday"),
        ("time", "03:04:05Z", "3 o'clock"),
        ("uri", "https://example.com/a", "not a uri"),
        ("hostname", "example.com", "-bad-.com"),
        ("duration", "P3DT4H", "three days"),
        ("email", "a@example.com", "nobody"),
        ("uuid", "12345678-1234-5678-1234-567812345678", "1234"),
    ],
)
def test_string_formats_are_checked(fmt: str, good: str, bad: str) -> None:
    tool = ToolDefinition(
        name="t",
        executes_on="client",
        parameters={"type": "object", "properties": {"x": {"type": "string", "format": fmt}}},
    )

    rejected = check_tool_call(tool, "t", json.dumps({"x": bad}))

    assert check_tool_call(tool, "t", json.dumps({"x": good})).outcome is ToolCallOutcome.INVOKE
    assert rejected.rejection is not None
    assert json.loads(rejected.rejection_json())["errors"][0]["error_code"] == "INVALID_FORMAT"
