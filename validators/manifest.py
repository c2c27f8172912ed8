"""AGN-036 §5: ToolCallManifest validity (``ValidateToolCallManifest``).

A manifest is valid iff its calls and results have the same count, the same
order, matching ``ToolCallId`` and matching ``Name``, and every result holds
``ResultJson``. Each failure is a hard gate and names the tool id, the tool name
and the reason (§5). AGN-033 §3.3 calls any mismatch a hard-fault programming bug.

Decision: a ``ResultJson`` that is present but not well-formed JSON also fails
(``AGN-036/5/result-json-valid``); the LLM could not read it as a result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from aptix_pipeline.contracts import (
    ErrorCode,
    InvokeError,
    InvokeResult,
    ManifestToolResult,
    ToolCall,
    ToolCallManifest,
    ToolResult,
)

from .json_text import is_json
from .rules import outcome, rule

__all__ = [
    "MANIFEST_RULE_IDS",
    "manifest_errors",
    "manifest_for",
    "validate_tool_call_manifest",
]

_MANIFEST = ErrorCode.TOOL_CALL_MANIFEST_INVALID

COUNT_MATCH = rule(
    "AGN-036/5/count-match",
    "AGN-036 §5, AGN-033 §3.3",
    "ToolCalls and ToolCallResults must have the same count",
    _MANIFEST,
    module=__name__,
)
ORDER_MATCH = rule(
    "AGN-036/5/order-match",
    "AGN-036 §5, AGN-033 §3.3",
    "ToolCallResults must be in the same order as ToolCalls",
    _MANIFEST,
    module=__name__,
)
ID_MATCH = rule(
    "AGN-036/5/id-match",
    "AGN-036 §5, AGN-033 §3.3",
    "each ToolCallResult must carry the ToolCallId of its ToolCall",
    _MANIFEST,
    module=__name__,
)
NAME_MATCH = rule(
    "AGN-036/5/name-match",
    "AGN-036 §5",
    "each ToolCallResult must carry the Name of its ToolCall",
    _MANIFEST,
    module=__name__,
)
IDS_UNIQUE = rule(
    "AGN-036/5/ids-unique",
    "AGN-036 §5, AGN-033 §3.3 (decision)",
    "each ToolCallId appears once among the ToolCalls and once among the ToolCallResults",
    _MANIFEST,
    module=__name__,
)
RESULT_JSON_PRESENT = rule(
    "AGN-036/5/result-json-present",
    "AGN-036 §5",
    "every ToolCallResult must contain ResultJson",
    _MANIFEST,
    module=__name__,
)
RESULT_JSON_VALID = rule(
    "AGN-036/5/result-json-valid",
    "AGN-036 §5 (decision)",
    "ResultJson must be well-formed JSON",
    _MANIFEST,
    module=__name__,
)

MANIFEST_RULE_IDS: tuple[str, ...] = tuple(
    r.id
    for r in (
        COUNT_MATCH,
        ORDER_MATCH,
        ID_MATCH,
        NAME_MATCH,
        RESULT_JSON_PRESENT,
        RESULT_JSON_VALID,
    )
)


def _names_by_id(calls: Sequence[ToolCall]) -> dict[str, str]:
    """Tool name of each call, by its ToolCallId."""
    return {call.tool_call_id: call.name for call in calls}


def _pairing_errors(
    calls: list[ToolCall], results: list[ManifestToolResult], names: dict[str, str]
) -> list[InvokeError]:
    errors: list[InvokeError] = []
    call_ids = [call.tool_call_id for call in calls]
    result_ids = [result.tool_call_id for result in results]
    if len(calls) != len(results):
        # AGN-036 §5: bubbled with tool id, name and reason — one error per tool at fault.
        summary = f"{len(calls)} tool call(s), {len(results)} result(s)"
        unanswered = [call for call in calls if call.tool_call_id not in result_ids]
        unknown = [result for result in results if result.tool_call_id not in call_ids]
        errors.extend(
            COUNT_MATCH.error(
                f"{summary}; no result for {call.tool_call_id!r} ({call.name})",
                field="ToolCallResults",
                tool_call_id=call.tool_call_id,
                tool_name=call.name,
            )
            for call in unanswered
        )
        errors.extend(
            COUNT_MATCH.error(
                f"{summary}; the result {result.tool_call_id!r} answers no call",
                field="ToolCallResults",
                tool_call_id=result.tool_call_id,
                tool_name=result.name,
            )
            for result in unknown
        )
        if not unanswered and not unknown:
            errors.append(COUNT_MATCH.error(summary, field="ToolCallResults"))
    for index, (call, result) in enumerate(zip(calls, results, strict=False)):
        at = f"ToolCallResults[{index}]"
        if result.tool_call_id != call.tool_call_id:
            misplaced = result.tool_call_id in call_ids and call.tool_call_id in result_ids
            chosen = ORDER_MATCH if misplaced else ID_MATCH
            errors.append(
                chosen.error(
                    f"position {index} expects {call.tool_call_id!r} ({call.name}), "
                    f"got {result.tool_call_id!r}",
                    field=f"{at}.ToolCallId",
                    tool_call_id=result.tool_call_id,
                    tool_name=names.get(result.tool_call_id, result.name),
                )
            )
        elif result.name != call.name:
            errors.append(
                NAME_MATCH.error(
                    f"{call.tool_call_id!r} was a call to {call.name!r}, the result names "
                    f"{result.name!r}",
                    field=f"{at}.Name",
                    tool_call_id=call.tool_call_id,
                    tool_name=call.name,
                )
            )
    return errors


def _unique_id_errors(
    calls: list[ToolCall], results: list[ManifestToolResult]
) -> list[InvokeError]:
    errors: list[InvokeError] = []
    for field, ids in (
        ("ToolCalls", [call.tool_call_id for call in calls]),
        ("ToolCallResults", [result.tool_call_id for result in results]),
    ):
        seen: set[str] = set()
        for index, tool_call_id in enumerate(ids):
            if tool_call_id in seen:
                errors.append(
                    IDS_UNIQUE.error(
                        f"{tool_call_id!r} repeats",
                        field=f"{field}[{index}].ToolCallId",
                        tool_call_id=tool_call_id,
                    )
                )
            seen.add(tool_call_id)
    return errors


def _result_json_errors(
    results: list[ManifestToolResult], names: dict[str, str]
) -> list[InvokeError]:
    errors: list[InvokeError] = []
    for index, result in enumerate(results):
        at = f"ToolCallResults[{index}].ResultJson"
        name = result.name or names.get(result.tool_call_id)
        if result.result_json is None or not result.result_json.strip():
            errors.append(
                RESULT_JSON_PRESENT.error(
                    f"{result.tool_call_id!r} ({name}) has no ResultJson",
                    field=at,
                    tool_call_id=result.tool_call_id,
                    tool_name=name,
                )
            )
        elif not is_json(result.result_json):
            errors.append(
                RESULT_JSON_VALID.error(
                    f"{result.tool_call_id!r} ({name}) holds malformed JSON",
                    field=at,
                    tool_call_id=result.tool_call_id,
                    tool_name=name,
                )
            )
    return errors


def manifest_errors(manifest: ToolCallManifest) -> list[InvokeError]:
    """Every §5 rule the manifest breaks, each naming tool id, name and reason."""
    calls, results = manifest.tool_calls, manifest.tool_call_results
    names = _names_by_id(calls)
    return (
        _pairing_errors(calls, results, names)
        + _unique_id_errors(calls, results)
        + _result_json_errors(results, names)
    )


def validate_tool_call_manifest(manifest: ToolCallManifest) -> InvokeResult[None]:
    """``ValidateToolCallManifest(manifest)`` (AGN-036 §2.1, §5): never raises, never mutates."""
    return outcome(manifest_errors(manifest))


def _manifest_result_json(result: ToolResult) -> str | None:
    if result.result_json is not None and result.error_message is None:
        return result.result_json
    if result.error_message is not None and result.result_json is None:
        return json.dumps({"error": result.error_message})
    return None  # neither or both: no ResultJson, so §5 fails naming the tool


def manifest_for(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> ToolCallManifest:
    """Pair the pending calls of a turn with the results a client returned (DESIGN R3).

    Results keep the client's order, so §5 can see a count, order or id mismatch.
    Each result takes the name of the call with its id (none when no call has it).
    A failed tool's ``ErrorMessage`` becomes ``ResultJson`` holding
    ``{"error": message}``, so the AGN-036 §5 invariant holds and the LLM sees the
    failure; a result with neither or both outcomes gets no ``ResultJson``.
    """
    names = _names_by_id(calls)
    return ToolCallManifest(
        tool_calls=list(calls),  # frozen values: shared, not copied
        tool_call_results=[
            ManifestToolResult(
                tool_call_id=result.tool_call_id,
                name=names.get(result.tool_call_id),
                result_json=_manifest_result_json(result),
                execution_ms=result.execution_ms,
            )
            for result in results
        ],
    )
