"""AGN-036 §5 (ToolCallManifest validity), DESIGN R3 (``manifest_for``) and R10."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from builders import PENDING_CALLS, valid_manifest
from rulecases import rule_params

from aptix_pipeline.contracts import (
    ContextType,
    ErrorCode,
    ManifestToolResult,
    ToolCallManifest,
    ToolResult,
    Turn,
    TurnStatus,
)
from aptix_pipeline.validators import (
    all_rules,
    manifest_for,
    validate_tool_call_manifest,
    validate_turn_protocol,
)

Change = Callable[[ToolCallManifest], None]


@dataclass(frozen=True)
class ManifestCase:
    rule_id: str
    variant: str
    change: Change
    tool_call_id: str | None = None
    tool_name: str | None = None
    decisions: tuple[str, ...] = ()


def _drop_last_result(m: ToolCallManifest) -> None:
    m.tool_call_results.pop()


def _add_result(m: ToolCallManifest) -> None:
    m.tool_call_results.append(ManifestToolResult(tool_call_id="call-9", name="x", result_json="1"))


def _swap(m: ToolCallManifest) -> None:
    m.tool_call_results.reverse()


def _rename_id(m: ToolCallManifest) -> None:
    m.tool_call_results[0].tool_call_id = "call-unknown"


def _repeat_result(m: ToolCallManifest) -> None:
    m.tool_call_results[1] = m.tool_call_results[0].model_copy()


def _repeat_call(m: ToolCallManifest) -> None:
    m.tool_calls[1] = m.tool_calls[0].model_copy()
    m.tool_call_results[1] = m.tool_call_results[0].model_copy()


def _rename_tool(m: ToolCallManifest) -> None:
    m.tool_call_results[1].name = "delete_everything"


def _no_name(m: ToolCallManifest) -> None:
    m.tool_call_results[1].name = None


def _result_json(value: str | None) -> Change:
    def change(m: ToolCallManifest) -> None:
        m.tool_call_results[1].result_json = value

    return change


def _keep(m: ToolCallManifest) -> None:
    del m


def _empty(m: ToolCallManifest) -> None:
    m.tool_calls.clear()
    m.tool_call_results.clear()


BROKEN = [
    ManifestCase("AGN-036/5/count-match", "missing-result", _drop_last_result),
    ManifestCase("AGN-036/5/count-match", "extra-result", _add_result),
    ManifestCase("AGN-036/5/order-match", "swapped", _swap, "call-2", "list_dir"),
    ManifestCase("AGN-036/5/ids-unique", "repeated-result", _repeat_result, "call-1", None,
                 decisions=("D13",)),
    ManifestCase("AGN-036/5/ids-unique", "repeated-call", _repeat_call, "call-1", None,
                 decisions=("D13",)),
    ManifestCase("AGN-036/5/id-match", "unknown-id", _rename_id, "call-unknown", "read_file"),
    ManifestCase("AGN-036/5/name-match", "other-name", _rename_tool, "call-2", "list_dir"),
    ManifestCase("AGN-036/5/name-match", "no-name", _no_name, "call-2", "list_dir"),
    ManifestCase("AGN-036/5/result-json-present", "none", _result_json(None), "call-2",
                 "list_dir"),
    ManifestCase("AGN-036/5/result-json-present", "blank", _result_json("  "), "call-2",
                 "list_dir"),
    ManifestCase("AGN-036/5/result-json-valid", "malformed", _result_json("{oops"), "call-2",
                 "list_dir", decisions=("D13",)),
]  # fmt: skip

HOLDS = [
    ManifestCase(rule_id, variant, change)
    for rule_id in sorted({c.rule_id for c in BROKEN})
    for variant, change in (("valid", _keep), ("empty", _empty))
]


@pytest.mark.decision("D13")
@pytest.mark.parametrize("case", rule_params(BROKEN, "broken"))
def test_manifest_mismatch_is_a_hard_fault_naming_the_tool(case: ManifestCase) -> None:
    manifest = valid_manifest()
    case.change(manifest)

    result = validate_tool_call_manifest(manifest)

    assert not result.successful
    assert case.rule_id in result.rule_ids
    assert all(e.code is ErrorCode.TOOL_CALL_MANIFEST_INVALID for e in result.errors)
    if case.tool_call_id is not None:
        error = next(e for e in result.errors if e.rule_id == case.rule_id)
        assert (error.tool_call_id, error.tool_name) == (case.tool_call_id, case.tool_name)
        assert case.tool_call_id in error.message  # the reason names the tool


@pytest.mark.parametrize("case", rule_params(HOLDS, "holds"))
def test_matching_manifest_is_valid(case: ManifestCase) -> None:
    manifest = valid_manifest()
    case.change(manifest)

    result = validate_tool_call_manifest(manifest)

    assert result.successful
    assert case.rule_id not in result.rule_ids


def test_every_manifest_rule_has_both_cases() -> None:
    ids = {i for i in all_rules() if i.startswith("AGN-036/5/")}

    assert ids == {c.rule_id for c in BROKEN} == {c.rule_id for c in HOLDS}


def test_validation_does_not_change_the_manifest() -> None:
    manifest = valid_manifest()
    _swap(manifest)
    before = manifest.model_copy(deep=True)

    validate_tool_call_manifest(manifest)

    assert manifest == before


# --- DESIGN R3: the continuation's results become a manifest ----------------------------


def _results(*results: ToolResult) -> list[ToolResult]:
    return list(results)


@pytest.mark.decision("R3")
def test_r3_error_message_becomes_an_error_payload_in_result_json() -> None:
    results = _results(
        ToolResult(tool_call_id="call-1", execution_ms=5, result_json='{"text": "x"}'),
        ToolResult(tool_call_id="call-2", execution_ms=1, error_message="permission denied"),
    )

    manifest = manifest_for(PENDING_CALLS, results)

    assert validate_tool_call_manifest(manifest).successful
    assert manifest.tool_call_results[0].result_json == '{"text": "x"}'
    assert manifest.tool_call_results[1].result_json == '{"error": "permission denied"}'
    assert [r.name for r in manifest.tool_call_results] == ["read_file", "list_dir"]
    assert [r.execution_ms for r in manifest.tool_call_results] == [5, 1]


def test_r3_results_keep_the_client_order_so_a_swap_is_caught() -> None:
    results = _results(
        ToolResult(tool_call_id="call-2", execution_ms=1, result_json="{}"),
        ToolResult(tool_call_id="call-1", execution_ms=1, result_json="{}"),
    )

    result = validate_tool_call_manifest(manifest_for(PENDING_CALLS, results))

    assert set(result.rule_ids) == {"AGN-036/5/order-match"}


def test_r3_unknown_result_id_has_no_name_and_fails_id_match() -> None:
    results = _results(
        ToolResult(tool_call_id="call-1", execution_ms=1, result_json="{}"),
        ToolResult(tool_call_id="call-x", execution_ms=1, result_json="{}"),
    )

    manifest = manifest_for(PENDING_CALLS, results)

    assert manifest.tool_call_results[1].name is None
    assert validate_tool_call_manifest(manifest).rule_ids == ("AGN-036/5/id-match",)


@pytest.mark.decision("R3")
@pytest.mark.parametrize(
    ("result_json", "error_message"), [(None, None), ("{}", "boom")], ids=["neither", "both"]
)
def test_r3_result_with_neither_or_both_outcomes_is_a_hard_fault(
    result_json: str | None, error_message: str | None
) -> None:
    results = _results(
        ToolResult(tool_call_id="call-1", execution_ms=1, result_json="{}"),
        ToolResult(
            tool_call_id="call-2",
            execution_ms=1,
            result_json=result_json,
            error_message=error_message,
        ),
    )

    result = validate_tool_call_manifest(manifest_for(PENDING_CALLS, results))

    assert result.rule_ids == ("AGN-036/5/result-json-present",)
    assert (result.errors[0].tool_call_id, result.errors[0].tool_name) == ("call-2", "list_dir")


# --- DESIGN R10: the pending-turn protocol ---------------------------------------------

PENDING = Turn(
    id="t1",
    session_id="s",
    status=TurnStatus.AWAITING_CLIENT_TOOLS,
    pending_tool_calls=list(PENDING_CALLS),
)
COMPLETED = Turn(id="t1", session_id="s", status=TurnStatus.COMPLETED)
FOLLOW_ON = ContextType.FOLLOW_ON
CONTINUATION = ContextType.CLIENT_TOOL_CALL_CONTINUATION


@pytest.mark.decision("R10")
@pytest.mark.rule("DESIGN/R10/follow-on-turn-settled", "broken")
def test_r10_follow_on_naming_a_pending_turn_is_rejected() -> None:
    result = validate_turn_protocol(FOLLOW_ON, PENDING)

    assert result.rule_ids == ("DESIGN/R10/follow-on-turn-settled",)
    assert result.errors[0].code is ErrorCode.INVALID_REQUEST
    assert result.errors[0].field == "TurnId"


@pytest.mark.rule("DESIGN/R10/follow-on-turn-settled", "holds")
def test_r10_follow_on_naming_a_completed_turn_is_accepted() -> None:
    assert validate_turn_protocol(FOLLOW_ON, COMPLETED).successful


@pytest.mark.decision("R10")
@pytest.mark.rule("DESIGN/R10/continuation-turn-pending", "broken")
@pytest.mark.parametrize(
    "turn",
    [
        COMPLETED,
        Turn(id="t1", session_id="s", status=TurnStatus.OPEN),
        Turn(id="t1", session_id="s", status=TurnStatus.AWAITING_CLIENT_TOOLS),
    ],
    ids=["completed", "open", "awaiting-nothing"],
)
def test_r10_continuation_naming_a_turn_that_awaits_nothing_is_rejected(turn: Turn) -> None:
    result = validate_turn_protocol(CONTINUATION, turn)

    assert result.rule_ids == ("DESIGN/R10/continuation-turn-pending",)


@pytest.mark.rule("DESIGN/R10/continuation-turn-pending", "holds")
def test_r10_continuation_naming_the_pending_turn_is_accepted() -> None:
    assert validate_turn_protocol(CONTINUATION, PENDING).successful


@pytest.mark.parametrize(
    ("kind", "turn", "rule_id"),
    [
        ("FollowOn", PENDING, "DESIGN/R10/follow-on-turn-settled"),
        ("ClientToolCallContinuation", COMPLETED, "DESIGN/R10/continuation-turn-pending"),
        ("Bogus", PENDING, "AGN-036/3/type-valid"),
    ],
    ids=["follow-on-text", "continuation-text", "unknown-kind"],
)
def test_r10_accepts_the_context_type_as_text(kind: str, turn: Turn, rule_id: str) -> None:
    assert validate_turn_protocol(kind, turn).rule_ids == (rule_id,)
