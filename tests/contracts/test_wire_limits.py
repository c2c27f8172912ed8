"""Wire safety (D140-D143): depth refused first, results serialize, echo and counts bounded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aptix_pipeline.validators import parse_request, parse_response

DEPTH = "DESIGN/limits/json-depth"


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def _rule_ids(result: Any) -> list[str | None]:
    return [error.rule_id for error in result.errors]


@pytest.mark.decision("D140")
@pytest.mark.rule(DEPTH, "broken")
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_python_enum_field_is_refused_by_depth(depth: int) -> None:
    result = parse_request({"Instruction": "hi", "ArtifactEncoding": _nested(depth)})
    assert _rule_ids(result) == [DEPTH]
    result.to_json()


@pytest.mark.decision("D140")
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_python_response_type_is_refused(depth: int) -> None:
    result = parse_response({"ResponseType": _nested(depth)})
    assert not result.successful
    result.to_json()


@pytest.mark.decision("D140")
@pytest.mark.rule(DEPTH, "broken")
@pytest.mark.parametrize("as_bytes", [False, True])
def test_deep_text_is_refused_before_parsing(as_bytes: bool) -> None:
    text = '{"Instruction": "hi", "X": ' + "[" * 100_000 + "]" * 100_000 + "}"
    result = parse_request(text.encode() if as_bytes else text)
    assert _rule_ids(result) == [DEPTH]


@pytest.mark.decision("D140")
def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"Instruction": "[" * 1000 + '\\"{' * 100})
    assert DEPTH not in _rule_ids(parse_request(text))


@pytest.mark.decision("D140")
@pytest.mark.rule(DEPTH, "holds")
def test_depth_at_the_limit_is_not_refused_by_depth() -> None:
    assert parse_request({"Instruction": "hi"}, max_json_depth=1).successful
    result = parse_request({"Instruction": "hi", "X": {}}, max_json_depth=1)
    assert _rule_ids(result) == [DEPTH]


@pytest.mark.decision("D140")
def test_result_json_text_is_held_to_the_limit() -> None:
    deep = "[" * 400 + "]" * 400
    request = {
        "SessionId": "s",
        "TurnId": "t",
        "ToolResults": [{"ToolCallId": "c", "ResultJson": deep}],
    }
    assert _rule_ids(parse_request(request)) == [DEPTH]
    assert _rule_ids(parse_request(json.dumps(request))) == [DEPTH]


@pytest.mark.decision("D140")
def test_cycle_is_refused_not_looped() -> None:
    data: dict[str, Any] = {"Instruction": "hi"}
    data["X"] = data
    assert _rule_ids(parse_request(data)) == [DEPTH]


@pytest.mark.decision("D141")
def test_lone_surrogate_key_error_serializes() -> None:
    result = parse_request({"\ud800": 1, "Instruction": "hi"})
    assert not result.successful
    result.to_json().encode("utf-8")
    result = parse_request('{"\\ud800": 1, "Instruction": "hi"}')
    result.to_json().encode("utf-8")


@pytest.mark.decision("D142")
@pytest.mark.rule("DESIGN/limits/error-count", "broken")
def test_many_unknown_keys_are_capped_with_a_count() -> None:
    body = {"Instruction": "hi", **{f"k{i}" + "x" * 500: i for i in range(1_000)}}
    result = parse_request(body, max_errors=20)
    assert len(result.errors) == 21
    assert result.errors[-1].rule_id == "DESIGN/limits/error-count"
    assert "980 more" in result.errors[-1].message
    assert all(len(error.message) < 300 for error in result.errors)


@pytest.mark.decision("D142")
@pytest.mark.rule("DESIGN/limits/error-count", "holds")
def test_few_errors_are_not_capped() -> None:
    result = parse_request({"Instruction": "hi", "A": 1, "B": 2}, max_errors=2)
    assert "DESIGN/limits/error-count" not in _rule_ids(result)


@pytest.mark.decision("D143")
@pytest.mark.rule("DESIGN/limits/tool-results", "broken")
def test_too_many_tool_results_are_refused_naming_the_field() -> None:
    results = [{"ToolCallId": f"c{i}", "ResultJson": "{}"} for i in range(129)]
    result = parse_request({"SessionId": "s", "TurnId": "t", "ToolResults": results})
    assert _rule_ids(result) == ["DESIGN/limits/tool-results"]
    assert result.errors[0].field == "ToolResults"


@pytest.mark.decision("D143")
@pytest.mark.rule("DESIGN/limits/input-artifacts", "broken")
@pytest.mark.rule("DESIGN/limits/clipboard-images", "broken")
def test_count_caps_are_configurable() -> None:
    data = {"Instruction": "hi", "InputArtifacts": [{}, {}], "ClipboardImages": [{}, {}]}
    caps = {"InputArtifacts": 1, "ClipboardImages": 1}
    assert _rule_ids(parse_request(data, count_caps=caps)) == [
        "DESIGN/limits/input-artifacts",
        "DESIGN/limits/clipboard-images",
    ]


@pytest.mark.decision("D143")
@pytest.mark.rule("DESIGN/limits/tool-results", "holds")
@pytest.mark.rule("DESIGN/limits/input-artifacts", "holds")
@pytest.mark.rule("DESIGN/limits/clipboard-images", "holds")
def test_counts_within_caps_are_not_refused_by_count() -> None:
    assert parse_request({"Instruction": "hi", "InputArtifacts": []}).successful
