"""``parse_response``: a client's view of the wire response (AGN-033)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aptix_pipeline.contracts import AgentExecuteResponse, ToolCall
from aptix_pipeline.validators import parse_response

SHAPE = "AGN-033/3/response-shape"
NOT_NULL = "AGN-033/3.5/absent-not-null"
FILE = {
    "Name": "report.pdf", "MimeType": "application/pdf", "Url": "https://files.example/r.pdf",
    "SizeBytes": 1024, "ContentHash": "sha256:ab12",
}  # fmt: skip


def _final() -> dict[str, Any]:
    return AgentExecuteResponse.final(
        session_id="s", turn_id="t", mode_display_name="General", primary_output_text="Done."
    ).to_wire()


def _continuation() -> dict[str, Any]:
    return AgentExecuteResponse.client_tool_continuation(
        session_id="s",
        turn_id="t",
        mode_display_name="General",
        tool_calls=[ToolCall(tool_call_id="c1", name="run", arguments_json="{}")],
    ).to_wire()


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
        ({"Usage": {"InputTokens": "12"}}, "Usage.InputTokens"),
        ({"Files": [{"Name": "a"}]}, "Files[0].MimeType"),
        ({"Files": [{**FILE, "ContentExpires": 1767225600}]}, "Files[0].ContentExpires"),
        ({"Files": [{**FILE, "ContentExpires": "next week"}]}, "Files[0].ContentExpires"),
    ],
    ids=[
        "snake-case-key",
        "unknown-key",
        "string-tokens",
        "file-ref-missing-fields",
        "expiry-as-unix-number",
        "expiry-not-iso-8601",
    ],
)
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


@pytest.mark.parametrize(
    ("change", "rule_id", "field"),
    [
        ({"Kind": "partial"}, "AGN-033/3.2/kind-closed", "Kind"),
        ({"Kind": None}, "AGN-033/3.2/kind-closed", "Kind"),
        ({"SessionId": ...}, "AGN-033/3.1/session-id-present", "SessionId"),
        ({"TurnId": ...}, "AGN-033/3.1/turn-id-present", "TurnId"),
        ({"ModeDisplayName": ...}, "AGN-033/3.1/mode-display-name-present", "ModeDisplayName"),
    ],
    ids=["kind-outside-closed-set", "kind-null", "no-session-id", "no-turn-id", "no-mode-name"],
)
def test_a_parse_error_on_metadata_or_kind_names_the_agn033_rule(
    change: dict[str, Any], rule_id: str, field: str
) -> None:
    wire = {**_final(), **change}
    wire = {key: value for key, value in wire.items() if value is not ...}

    result = parse_response(wire)

    assert (rule_id, field) in [(e.rule_id, e.field) for e in result.errors]


@pytest.mark.decision("D15")
def test_content_expires_parses_from_iso_8601_text() -> None:
    wire = {**_final(), "Files": [{**FILE, "ContentExpires": "2026-01-01T00:00:00Z"}]}

    result = parse_response(json.dumps(wire))

    assert result.successful, result.errors
    assert result.result is not None
    assert result.result.files is not None
    assert result.result.files[0].content_expires is not None
    assert result.result.files[0].content_expires.year == 2026


@pytest.mark.decision("D24")
@pytest.mark.rule(NOT_NULL, "broken")
@pytest.mark.parametrize(
    ("wire", "field"),
    [
        ({**_final(), "ToolCalls": None}, "ToolCalls"),
        ({**_final(), "ToolContinuationMessage": None}, "ToolContinuationMessage"),
        ({**_final(), "Usage": None}, "Usage"),
        ({**_continuation(), "PrimaryOutputText": None}, "PrimaryOutputText"),
        ({**_continuation(), "Files": None}, "Files"),
        ({**_final(), "Files": [{**FILE, "Description": None}]}, "Files[0].Description"),
    ],
    ids=[
        "final-tool-calls",
        "final-message",
        "final-usage",
        "continuation-text",
        "continuation-files",
        "nested-file-description",
    ],
)
def test_a_null_bucket_is_refused_because_absent_means_omitted(
    wire: dict[str, Any], field: str
) -> None:
    result = parse_response(wire)

    assert (NOT_NULL, field) in [(e.rule_id, e.field) for e in result.errors]


@pytest.mark.decision("D24")
@pytest.mark.rule(NOT_NULL, "holds")
def test_a_response_omitting_its_absent_buckets_is_accepted() -> None:
    wire = {**_final(), "Files": [FILE]}

    result = parse_response(wire)

    assert result.successful, result.errors
    assert NOT_NULL not in result.rule_ids
