"""JSON is RFC 8259 JSON everywhere: ``NaN`` and ``Infinity`` are refused.

Python's ``json`` accepts them by default; a client or model that sends them
would otherwise slip a non-JSON value past the "well-formed JSON" rules.
"""

from __future__ import annotations

import pytest
from builders import valid_manifest

from aptix_pipeline.contracts import AgentExecuteResponse, ToolCall, ToolDefinition
from aptix_pipeline.validators import (
    ToolCallOutcome,
    check_tool_call,
    parse_request,
    validate_response,
    validate_tool_call_manifest,
)

CONSTANTS = ["NaN", "Infinity", "-Infinity"]


@pytest.mark.decision("D22")
@pytest.mark.parametrize("constant", CONSTANTS)
def test_request_text_with_a_non_json_constant_is_refused(constant: str) -> None:
    result = parse_request('{"Instruction": "x", "Stream": %s}' % constant)  # noqa: UP031

    assert result.rule_ids == ("AGN-034/3/envelope-object",)


@pytest.mark.decision("D22")
@pytest.mark.parametrize("constant", CONSTANTS)
def test_tool_result_json_with_a_non_json_constant_is_refused(constant: str) -> None:
    data = {
        "SessionId": "s",
        "TurnId": "t",
        "ToolResults": [{"ToolCallId": "c", "ExecutionMs": 1, "ResultJson": constant}],
    }

    assert parse_request(data).rule_ids == ("AGN-034/5/result-json-valid",)


@pytest.mark.decision("D13", "D22")
def test_manifest_result_json_with_nan_is_refused() -> None:
    manifest = valid_manifest()
    manifest.tool_call_results[0].result_json = '{"score": NaN}'

    assert validate_tool_call_manifest(manifest).rule_ids == ("AGN-036/5/result-json-valid",)


@pytest.mark.decision("D22")
def test_response_tool_call_arguments_with_nan_are_refused() -> None:
    response = AgentExecuteResponse.client_tool_continuation(
        session_id="s",
        turn_id="t",
        mode_display_name="General",
        tool_calls=[ToolCall(tool_call_id="c", name="n", arguments_json='{"x": NaN}')],
    )

    assert validate_response(response).rule_ids == ("AGN-033/5.1/arguments-json-object",)


@pytest.mark.decision("D22")
def test_tool_call_arguments_with_infinity_are_malformed() -> None:
    tool = ToolDefinition(name="calc", executes_on="client", parameters={"type": "object"})

    verdict = check_tool_call(tool, "calc", '{"x": Infinity}')

    assert verdict.outcome is ToolCallOutcome.REJECTED
    assert verdict.rule_id == "CPV/arguments-json-object"


def test_a_deeply_nested_mapping_is_answered_not_raised() -> None:
    deep: dict[str, object] = {}
    cursor = deep
    for _ in range(50_000):
        cursor["a"] = {}
        cursor = cursor["a"]  # type: ignore[assignment]

    assert parse_request({"Instruction": "x", "WorkspaceHints": deep}).rule_ids == (
        "DESIGN/limits/json-depth",
    )
    result = parse_request({"Instruction": "x", "WorkspaceHints": deep}, max_json_depth=60_000)

    assert result.rule_ids == ("AGN-034/3/unknown-field",)
    assert result.errors[0].field == "WorkspaceHints.a"
