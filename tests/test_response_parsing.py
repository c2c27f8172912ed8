"""``parse_response``: a client's view of the wire response (AGN-033)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aptix_pipeline.contracts import AgentExecuteResponse, ToolCall
from aptix_pipeline.validators import parse_response

SHAPE = "AGN-033/3/response-shape"


def _final() -> dict[str, Any]:
    return AgentExecuteResponse.final(
        session_id="s", turn_id="t", mode_display_name="General", primary_output_text="Done."
    ).to_wire()


def _continuation() -> dict[str, Any]:
    return AgentExecuteResponse.client_tool_continuation(
        session_id="s", turn_id="t", mode_display_name="General",
        tool_calls=[ToolCall(tool_call_id="c1", name="run", arguments_json="{}")],
    ).to_wire()  # fmt: skip


@pytest.mark.rule(SHAPE, "holds")
@pytest.mark.parametrize("wire", [_final(), _continuation()], ids=["final", "continuation"])
def test_a_conforming_response_parses_from_text_bytes_and_mapping(wire: dict[str, Any]) -> None:
    text = json.dumps(wire)

    results = [parse_response(text), parse_response(text.encode()), parse_response(wire)]

    assert all(r.successful for r in results)
    assert results[0].result is not None
    assert results[0].result.to_wire() == wire


@pytest.mark.rule(SHAPE, "broken")
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"session_id": "s"}, "session_id"),
        ({"Extra": 1}, "Extra"),
        ({"Kind": "partial"}, "Kind"),
        ({"Usage": {"InputTokens": "12"}}, "Usage.InputTokens"),
        ({"Files": [{"Name": "a"}]}, "Files[0].MimeType"),
    ],
    ids=["snake-case-key", "unknown-key", "kind-outside-closed-set", "string-tokens",
         "file-ref-missing-fields"],
)  # fmt: skip
def test_a_response_outside_the_contract_names_the_field(
    change: dict[str, Any], field: str
) -> None:
    result = parse_response({**_final(), **change})

    assert not result.successful
    assert result.result is None
    assert (SHAPE, field) in [(e.rule_id, e.field) for e in result.errors]


@pytest.mark.rule(SHAPE, "broken")
@pytest.mark.parametrize("text", ["", "nope", "[]", "null", '{"SessionId": NaN}'])
def test_a_response_that_is_not_one_json_object_is_refused(text: str) -> None:
    result = parse_response(text)

    assert result.rule_ids == (SHAPE,)


def test_bucket_rules_apply_to_parsed_responses() -> None:
    wire = {**_final(), "ToolCalls": []}

    result = parse_response(wire)

    assert result.rule_ids == ("AGN-033/3.4/final-tool-calls-forbidden",)
