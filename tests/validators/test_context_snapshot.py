"""``snapshot_context``: the cheap PRE state for AGN-036 §4.10's "PRE == POST" rule.

The ResponseBuilder may change nothing but ``Response``. A ``ContextSnapshot``
passed as ``before=`` must catch what a deep copy of the context catches — a
field reassigned, a change in place inside a mutable nested object — and name
the changed fields by their wire names, exactly as the copy does.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from builders import EFFECTS, PATHS, context_before, continuation_response

from aptix_pipeline.contracts import (
    ContextType,
    PipelineContext,
    PipelineStep,
    RagOperator,
    RagScopeCondition,
    ToolDefinition,
    ToolResult,
)
from aptix_pipeline.validators import ContextSnapshot, snapshot_context, validate_post_step

RB = PipelineStep.RESPONSE_BUILDER
UNCHANGED = "AGN-036/4.10/POST/context-unchanged"
KINDS = list(PATHS)


@pytest.mark.decision("D12")
@pytest.mark.parametrize("kind", KINDS)
def test_a_snapshot_passes_when_only_the_response_changed(kind: ContextType) -> None:
    ctx = context_before(RB, kind)
    snapshot = snapshot_context(ctx)
    EFFECTS[RB](ctx)  # the ResponseBuilder of a correct turn: Response, nothing else

    result = validate_post_step(ctx, RB, before=snapshot)

    assert result.successful, result.errors


@pytest.mark.decision("D12")
def test_a_snapshot_names_reassigned_fields_by_their_wire_names() -> None:
    ctx = context_before(RB, ContextType.FOLLOW_ON)
    snapshot = snapshot_context(ctx)
    ctx.correlation_id, ctx.mode = "other", "research"

    result = validate_post_step(ctx, RB, before=snapshot)

    assert result.rule_ids[0] == UNCHANGED
    assert result.errors[0].field == "CorrelationId"
    assert "changed: CorrelationId, Mode" in result.errors[0].message


def _append_tool_result(ctx: PipelineContext) -> None:
    assert ctx.envelope.tool_results is not None
    ctx.envelope.tool_results.append(ToolResult(tool_call_id="c9", execution_ms=1))


def _nested_attribute(ctx: PipelineContext) -> None:
    ctx.envelope.instructions = "something else"


def _agent_prompt(ctx: PipelineContext) -> None:
    assert ctx.agent_context is not None
    ctx.agent_context.system_prompt = "be terse"


def _agent_tools(ctx: PipelineContext) -> None:
    assert ctx.agent_context is not None
    ctx.agent_context.client_tools.append(ToolDefinition(name="grep", executes_on="client"))


def _manifest_result(ctx: PipelineContext) -> None:
    assert ctx.tool_call_manifest is not None
    ctx.tool_call_manifest.tool_call_results[0].result_json = "{}"


def _payload_warnings(ctx: PipelineContext) -> None:
    assert ctx.response_payload is not None
    ctx.response_payload.user_warnings = ["careful"]


def _session_replaced(ctx: PipelineContext) -> None:
    assert ctx.session is not None
    ctx.session = ctx.session.model_copy(update={"mode": "review"})


IN_PLACE: list[tuple[ContextType, Callable[[PipelineContext], None], str]] = [
    (ContextType.CLIENT_TOOL_CALL_CONTINUATION, _append_tool_result, "Envelope"),
    (ContextType.FOLLOW_ON, _nested_attribute, "Envelope"),
    (ContextType.FOLLOW_ON, _agent_prompt, "AgentContext"),
    (ContextType.INITIAL, _agent_tools, "AgentContext"),
    (ContextType.CLIENT_TOOL_CALL_CONTINUATION, _manifest_result, "ToolCallManifest"),
    (ContextType.FOLLOW_ON, _payload_warnings, "ResponsePayload"),
    (ContextType.FOLLOW_ON, _session_replaced, "Session"),
]


@pytest.mark.decision("D12")
@pytest.mark.parametrize(
    ("kind", "change", "field"), IN_PLACE, ids=[change.__name__ for _, change, _ in IN_PLACE]
)
def test_a_snapshot_catches_a_change_in_place_inside_the_context(
    kind: ContextType, change: Callable[[PipelineContext], None], field: str
) -> None:
    ctx = context_before(RB, kind)
    snapshot, copy = snapshot_context(ctx), ctx.model_copy(deep=True)
    change(ctx)
    ctx.response = continuation_response(ctx)

    result = validate_post_step(ctx, RB, before=snapshot)

    assert result.rule_ids[0] == UNCHANGED
    assert result.errors[0].message.endswith(f"changed: {field}")
    assert result == validate_post_step(ctx, RB, before=copy)


def test_a_snapshot_catches_a_change_deep_inside_a_list_of_mutable_models() -> None:
    ctx = context_before(RB, ContextType.INITIAL)
    ctx.envelope.rag_scope = [
        RagScopeCondition(key="repo", operator=RagOperator.EQUALS, values=["aptix"])
    ]
    snapshot = snapshot_context(ctx)
    ctx.envelope.rag_scope[0].values.append("other")
    EFFECTS[RB](ctx)

    result = validate_post_step(ctx, RB, before=snapshot)

    assert result.rule_ids == (UNCHANGED,)
    assert result.errors[0].message.endswith("changed: Envelope")


def test_a_field_set_again_to_an_equal_value_is_no_change() -> None:
    ctx = context_before(RB, ContextType.FOLLOW_ON)
    snapshot = snapshot_context(ctx)
    assert ctx.session is not None
    ctx.session = ctx.session.model_copy()
    ctx.envelope = ctx.envelope.model_copy(deep=True)
    ctx.response = continuation_response(ctx)

    assert UNCHANGED not in validate_post_step(ctx, RB, before=snapshot).rule_ids


def test_taking_a_snapshot_changes_nothing() -> None:
    ctx = context_before(RB, ContextType.CLIENT_TOOL_CALL_CONTINUATION)
    before = ctx.model_dump()

    snapshot = snapshot_context(ctx)

    assert isinstance(snapshot, ContextSnapshot)
    assert ctx.model_dump() == before
    assert snapshot.changed_fields(ctx) == []
