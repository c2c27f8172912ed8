"""The published JSON Schemas (docs/schemas/) are current and describe the wire."""

from __future__ import annotations

import json

import pytest
from builders import request_data
from jsonschema import Draft202012Validator
from repo import ROOT

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    ContextType,
    ErrorCode,
    InvokeError,
    InvokeResult,
)
from aptix_pipeline.contracts.schemas import SCHEMAS, render_schemas

SCHEMA_DIR = ROOT / "docs" / "schemas"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_is_current(name: str) -> None:
    committed = (SCHEMA_DIR / name).read_text(encoding="utf-8")

    assert committed == render_schemas()[name], f"run `make schemas` to refresh {name}"


def _schema(name: str) -> Draft202012Validator:
    schema = json.loads(render_schemas()[name])
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.mark.parametrize("kind", list(ContextType))
def test_request_schema_accepts_valid_requests(kind: ContextType) -> None:
    assert _schema("agent-execute-request.schema.json").is_valid(request_data(kind))


@pytest.mark.parametrize("field", ["Mode", "CorrelationId", "session_id"])
def test_request_schema_refuses_fields_outside_the_contract(field: str) -> None:
    data = {**request_data(ContextType.INITIAL), field: "x"}

    assert not _schema("agent-execute-request.schema.json").is_valid(data)


def test_invoke_result_schema_accepts_both_outcomes() -> None:
    response = AgentExecuteResponse.final(
        session_id="s", turn_id="t", mode_display_name="General", primary_output_text="hi"
    )
    ok = InvokeResult[AgentExecuteResponse].success(response).to_wire()
    error = InvokeError(code=ErrorCode.INTERNAL, message="x")
    failed = InvokeResult[AgentExecuteResponse].failure([error]).to_wire()
    validator = _schema("invoke-result.schema.json")

    assert validator.is_valid(ok)
    assert validator.is_valid(failed)
    assert failed["Result"] is None
