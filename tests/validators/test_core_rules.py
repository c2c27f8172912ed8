"""AGN-036 §3 and §3.1: every core invariant, holding and broken (``validate_core``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from builders import new_context
from rulecases import rule_params

from aptix_pipeline.contracts import ContextType, PipelineContext, ToolResult
from aptix_pipeline.validators import all_rules, validate_core

INITIAL = ContextType.INITIAL
FOLLOW_ON = ContextType.FOLLOW_ON
CONTINUATION = ContextType.CLIENT_TOOL_CALL_CONTINUATION
RESULT = ToolResult(tool_call_id="call-1", execution_ms=1, result_json="{}")


@dataclass(frozen=True)
class CoreCase:
    """A context of ``kind`` as the RequestHandler made it, changed by ``change``."""

    rule_id: str
    variant: str
    kind: ContextType
    change: Callable[[PipelineContext], None]
    field: str | None = None
    decisions: tuple[str, ...] = ()


def _set(path: str, value: object) -> Callable[[PipelineContext], None]:
    def change(ctx: PipelineContext) -> None:
        *parents, last = path.split(".")
        target: object = ctx
        for name in parents:
            target = getattr(target, name)
        setattr(target, last, value)

    return change


def _only_empty_inputs(ctx: PipelineContext) -> None:
    ctx.envelope.instructions = None
    ctx.envelope.input_artifacts = []
    ctx.envelope.clip_board_images = []


def _keep(ctx: PipelineContext) -> None:
    del ctx


BROKEN = [
    CoreCase("AGN-036/3/type-valid", "unknown-type", INITIAL, _set("type", "Bogus"), "Type"),
    CoreCase("AGN-036/3/time-stamp-present", "none", FOLLOW_ON, _set("time_stamp", None)),
    CoreCase("AGN-036/3/correlation-id-present", "empty", INITIAL, _set("correlation_id", "")),
    CoreCase("AGN-036/3/correlation-id-present", "blank", CONTINUATION,
             _set("correlation_id", "  "), decisions=("D1",)),
    CoreCase("AGN-036/3/org-present", "none", INITIAL, _set("envelope.org", None),
             "Envelope.Org"),
    CoreCase("AGN-036/3/org-present", "empty", FOLLOW_ON, _set("envelope.org", ""),
             decisions=("D1",)),
    CoreCase("AGN-036/3/user-present", "none", CONTINUATION, _set("envelope.user", None),
             "Envelope.User"),
    CoreCase("AGN-036/3.1/input-present", "initial-nothing", INITIAL,
             _set("envelope.instructions", None), "Envelope.Instructions"),
    CoreCase("AGN-036/3.1/input-present", "follow-on-blank", FOLLOW_ON,
             _set("envelope.instructions", "   "), decisions=("D2",)),
    CoreCase("AGN-036/3.1/input-present", "empty-lists", INITIAL,
             _only_empty_inputs),
    CoreCase("AGN-036/3.1/initial-session-id-empty", "set", INITIAL,
             _set("envelope.session_id", "s"), "Envelope.SessionId"),
    CoreCase("AGN-036/3.1/initial-turn-id-empty", "set", INITIAL,
             _set("envelope.turn_id", "t"), "Envelope.TurnId"),
    CoreCase("AGN-036/3.1/initial-tool-results-empty", "one", INITIAL,
             _set("envelope.tool_results", [RESULT]), "Envelope.ToolResults"),
    CoreCase("AGN-036/3.1/follow-on-session-id-present", "none", FOLLOW_ON,
             _set("envelope.session_id", None), "Envelope.SessionId"),
    CoreCase("AGN-036/3.1/follow-on-session-id-present", "empty", FOLLOW_ON,
             _set("envelope.session_id", ""), decisions=("D1",)),
    CoreCase("AGN-036/3.1/follow-on-turn-id-present", "none", FOLLOW_ON,
             _set("envelope.turn_id", None), "Envelope.TurnId"),
    CoreCase("AGN-036/3.1/follow-on-tool-results-empty", "one", FOLLOW_ON,
             _set("envelope.tool_results", [RESULT]), "Envelope.ToolResults"),
    CoreCase("AGN-036/3.1/continuation-session-id-present", "none", CONTINUATION,
             _set("envelope.session_id", None), "Envelope.SessionId"),
    CoreCase("AGN-036/3.1/continuation-turn-id-present", "none", CONTINUATION,
             _set("envelope.turn_id", None), "Envelope.TurnId"),
    CoreCase("AGN-036/3.1/continuation-tool-results-present", "empty", CONTINUATION,
             _set("envelope.tool_results", []), "Envelope.ToolResults"),
    CoreCase("AGN-036/3.1/continuation-tool-results-present", "none", CONTINUATION,
             _set("envelope.tool_results", None)),
]  # fmt: skip

HOLDS = [CoreCase("AGN-036/3/type-valid", "each-type", kind, _keep) for kind in ContextType] + [
    CoreCase("AGN-036/3/time-stamp-present", "set", INITIAL, _keep),
    CoreCase("AGN-036/3/correlation-id-present", "set", FOLLOW_ON, _keep),
    CoreCase("AGN-036/3/org-present", "set", CONTINUATION, _keep),
    CoreCase("AGN-036/3/user-present", "set", INITIAL, _keep),
    CoreCase("AGN-036/3.1/input-present", "instruction", INITIAL, _keep),
    CoreCase("AGN-036/3.1/input-present", "not-needed-on-continuation", CONTINUATION, _keep),
    CoreCase("AGN-036/3.1/initial-session-id-empty", "absent", INITIAL, _keep),
    CoreCase(
        "AGN-036/3.1/initial-session-id-empty",
        "empty-string",
        INITIAL,
        _set("envelope.session_id", ""),
        decisions=("D1",),
    ),
    CoreCase("AGN-036/3.1/initial-turn-id-empty", "absent", INITIAL, _keep),
    CoreCase("AGN-036/3.1/initial-tool-results-empty", "absent", INITIAL, _keep),
    CoreCase(
        "AGN-036/3.1/initial-tool-results-empty",
        "empty-list",
        INITIAL,
        _set("envelope.tool_results", []),
        decisions=("D4",),
    ),
    CoreCase("AGN-036/3.1/follow-on-session-id-present", "set", FOLLOW_ON, _keep),
    CoreCase("AGN-036/3.1/follow-on-turn-id-present", "set", FOLLOW_ON, _keep),
    CoreCase("AGN-036/3.1/follow-on-tool-results-empty", "absent", FOLLOW_ON, _keep),
    CoreCase("AGN-036/3.1/continuation-session-id-present", "set", CONTINUATION, _keep),
    CoreCase("AGN-036/3.1/continuation-turn-id-present", "set", CONTINUATION, _keep),
    CoreCase("AGN-036/3.1/continuation-tool-results-present", "two", CONTINUATION, _keep),
]


def _context(case: CoreCase) -> PipelineContext:
    ctx = new_context(case.kind)
    case.change(ctx)
    return ctx


@pytest.mark.parametrize("case", rule_params(BROKEN, "broken", "kind"))
def test_core_rule_broken_is_reported(case: CoreCase) -> None:
    result = validate_core(_context(case))

    assert not result.successful
    assert result.result is None
    assert case.rule_id in result.rule_ids
    if case.field is not None:
        error = next(e for e in result.errors if e.rule_id == case.rule_id)
        assert error.field == case.field


@pytest.mark.parametrize("case", rule_params(HOLDS, "holds", "kind"))
def test_core_rule_holding_is_not_reported(case: CoreCase) -> None:
    result = validate_core(_context(case))

    assert result.successful, result.errors
    assert case.rule_id not in result.rule_ids


def test_every_core_rule_has_a_holding_and_a_breaking_case() -> None:
    core_ids = {i for i in all_rules() if i.startswith(("AGN-036/3/", "AGN-036/3.1/"))}

    assert core_ids == {c.rule_id for c in BROKEN}
    assert core_ids == {c.rule_id for c in HOLDS}


def test_type_rules_of_another_type_do_not_apply() -> None:
    # An Initial context with ids set breaks the Initial rules, never the FollowOn ones.
    ctx = new_context(INITIAL)
    ctx.envelope.session_id, ctx.envelope.turn_id = "s", "t"

    ids = validate_core(ctx).rule_ids

    assert "AGN-036/3.1/initial-session-id-empty" in ids
    assert not [i for i in ids if "follow-on" in i or "continuation" in i]


def test_every_broken_rule_is_reported_at_once() -> None:
    ctx = new_context(FOLLOW_ON)
    ctx.correlation_id = ""
    ctx.envelope.org = None
    ctx.envelope.turn_id = None

    ids = validate_core(ctx).rule_ids

    assert ids == (
        "AGN-036/3/correlation-id-present",
        "AGN-036/3/org-present",
        "AGN-036/3.1/follow-on-turn-id-present",
    )


@pytest.mark.decision("R2")
def test_r2_a_new_session_defaults_to_the_general_mode() -> None:
    # AGN-011 §3.1, DESIGN R2: the mode lives on the context, never on the wire request.
    from aptix_pipeline.contracts import DEFAULT_MODE, AgentExecuteRequest

    assert DEFAULT_MODE == "general"
    assert "mode" not in AgentExecuteRequest.model_fields
    assert new_context(INITIAL).mode is None  # set by the engine, not by the request
