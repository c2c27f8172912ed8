"""The one check of a list of tool results, shared by AGN-034 §5 and AGN-033 §5.2.

Both DDRs state the same rule — each result names its call, reports how long it
ran, and holds exactly one of ``ResultJson`` / ``ErrorMessage`` — so one function
enforces it, reporting under the rule ids of whichever DDR the caller checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from aptix_pipeline.contracts import InvokeError, ToolResult

from .json_text import is_json
from .rules import Rule

__all__ = ["ToolResultRules", "tool_result_errors"]


@dataclass(frozen=True, slots=True)
class ToolResultRules:
    """The rule ids one DDR gives to the shared tool-result checks."""

    exactly_one_outcome: Rule
    tool_call_id_present: Rule
    tool_call_ids_unique: Rule
    execution_ms_non_negative: Rule
    result_json_valid: Rule
    error_message_not_blank: Rule

    @property
    def ids(self) -> tuple[str, ...]:
        """The ids of all these rules."""
        return tuple(getattr(self, f.name).id for f in fields(self))


def tool_result_errors(
    results: Sequence[ToolResult], rules: ToolResultRules, field: str
) -> list[InvokeError]:
    """Every broken tool-result rule in ``results``; ``field`` is the list's JSON name."""
    errors: list[InvokeError] = []
    seen: set[str] = set()
    for index, result in enumerate(results):
        at = f"{field}[{index}]"
        call_id = result.tool_call_id or None
        if not result.tool_call_id.strip():
            errors.append(rules.tool_call_id_present.error(field=f"{at}.ToolCallId"))
        elif result.tool_call_id in seen:
            errors.append(
                rules.tool_call_ids_unique.error(
                    repr(result.tool_call_id), field=f"{at}.ToolCallId", tool_call_id=call_id
                )
            )
        seen.add(result.tool_call_id)
        if result.execution_ms < 0:
            errors.append(
                rules.execution_ms_non_negative.error(
                    str(result.execution_ms), field=f"{at}.ExecutionMs", tool_call_id=call_id
                )
            )
        has_result = result.result_json is not None
        has_error = result.error_message is not None
        if has_result == has_error:
            which = "both are present" if has_result else "neither is present"
            errors.append(rules.exactly_one_outcome.error(which, field=at, tool_call_id=call_id))
            continue
        if result.result_json is not None and not is_json(result.result_json):
            errors.append(
                rules.result_json_valid.error(field=f"{at}.ResultJson", tool_call_id=call_id)
            )
        if result.error_message is not None and not result.error_message.strip():
            errors.append(
                rules.error_message_not_blank.error(
                    field=f"{at}.ErrorMessage", tool_call_id=call_id
                )
            )
    return errors
