"""AGN-011 §5: the ``agent_change_mode`` tool (TUL-007), executed server-side.

The tool is always advertised (AGN-011 §4.2). When the model calls it the
Reasoner runs it on the server, parses its result (mode, branch, reason), answers
an unknown mode to the model as a tool error, and persists a valid change through
the store's ``set_session_mode`` with a ModeHistory entry (§3.2, §5.2). The
in-flight mode changes at once for later model calls of the turn (§5.3); the tool
list does not (§4.4). Several changes in one turn are each persisted in order and
the last one wins, with a warning (§5.1, DESIGN.md R8). ``branch`` is surfaced to
the host, never added to the response (R7).

A host may register its own executor under ``agent_change_mode``; it must return
JSON with ``mode`` and optionally ``branch`` and ``reason``. The default one
echoes the model's arguments.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from aptix_pipeline.contracts import (
    ErrorCode,
    InvokeError,
    InvokeWarning,
    ModeCatalog,
    ModeHistoryEntry,
    ToolCall,
    ToolDefinition,
    ToolInvocation,
    ToolOutput,
    ToolPause,
    scrubbed_logger,
)
from aptix_pipeline.validators import (
    MODE_KNOWN,
    MODE_RESULT_VALID,
    SEVERAL_MODE_CHANGES,
    strict_json_loads,
)

from .exception_text import PROPAGATED, error_text
from .faults import StepFaultError
from .scope import TurnScope
from .tool_records import ModeChange, ToolCallFate

logger = scrubbed_logger(__name__)

__all__ = [
    "AGENT_CHANGE_MODE",
    "change_mode",
    "change_mode_tool",
    "echo_mode_change",
]

AGENT_CHANGE_MODE = "agent_change_mode"


_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "minLength": 1, "description": "The mode to switch to."},
        "reason": {"type": "string", "description": "Why the switch helps the user."},
        "branch": {
            "type": "boolean",
            "description": "Whether the work should continue in a new session.",
        },
    },
    "required": ["mode"],
    "additionalProperties": False,
}


@lru_cache(maxsize=64)
def _change_mode_tool(names: tuple[str, ...]) -> ToolDefinition:
    # Built once per set of modes: checking the parameters' JSON Schema costs milliseconds.
    return ToolDefinition(
        name=AGENT_CHANGE_MODE,
        description=(
            "Switch this session to another mode. The new mode applies from now on; its "
            f"tools become available on the next turn. Modes: {', '.join(names)}."
        ),
        parameters=_PARAMETERS,
        executes_on="server",
    )


async def change_mode_tool(modes: ModeCatalog) -> ToolDefinition:
    """The ``agent_change_mode`` definition, naming the catalog's modes in its description."""
    return _change_mode_tool(tuple(spec.name for spec in await modes.list_modes()))


async def echo_mode_change(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """The default executor: the requested change, as the result JSON (AGN-011 §5.2)."""
    return json.dumps(
        {
            "mode": arguments.get("mode"),
            "branch": bool(arguments.get("branch", False)),
            "reason": arguments.get("reason"),
        }
    )


def _parse_result(answer: str | ToolOutput | ToolPause) -> tuple[str, bool, str | None] | None:
    if isinstance(answer, ToolPause):  # a mode change asks the client nothing
        return None
    if isinstance(answer, ToolOutput):  # a mode change makes no files: its result alone
        if answer.files:
            return None
        answer = answer.result_json
    text = answer
    try:
        data = strict_json_loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    mode, branch, reason = data.get("mode"), data.get("branch", False), data.get("reason")
    if not isinstance(mode, str) or not mode.strip():
        return None
    if not isinstance(branch, bool) or not (reason is None or isinstance(reason, str)):
        return None
    return mode, branch, reason


def _error(rule_id: str, message: str, **detail: Any) -> str:
    return json.dumps(
        {"error_type": "mode_change_error", "rule_id": rule_id, "error_message": message, **detail}
    )


async def change_mode(
    scope: TurnScope, call: ToolCall, arguments: dict[str, Any]
) -> tuple[str, ToolCallFate, str | None]:
    """Run one ``agent_change_mode`` call.

    Returns the tool result the model will see, the outcome — ``MODE_CHANGED``,
    ``MODE_UNCHANGED`` (already in that mode: not a transition, nothing recorded)
    or ``MODE_REFUSED`` (an unknown mode or a malformed result) — and the id of the
    rule a refusal broke (for the trace and spans).

    An executor that raises propagates (the caller tells the model, like any failed
    tool); a store that fails to set the mode faults the turn (``port_failed``).
    """
    ctx = scope.ctx
    session, turn = ctx.session, ctx.turn
    if session is None or turn is None or ctx.mode is None:
        raise RuntimeError("agent_change_mode runs inside a session's turn")
    executor = scope.ports.tools.get(AGENT_CHANGE_MODE, echo_mode_change)
    parsed = _parse_result(await executor(arguments, scope.invocation(call)))
    if parsed is None:
        return (
            _error(MODE_RESULT_VALID.id, MODE_RESULT_VALID.message),
            ToolCallFate.MODE_REFUSED,
            MODE_RESULT_VALID.id,
        )
    mode, branch, reason = parsed
    spec = await scope.ports.modes.get_mode(mode)
    if spec is None:
        available = [known.name for known in await scope.ports.modes.list_modes()]
        return (
            _error(
                MODE_KNOWN.id,
                f"unknown mode {mode!r}; the mode stays {ctx.mode!r}",
                mode=mode,
                available_modes=available,
            ),
            ToolCallFate.MODE_REFUSED,
            MODE_KNOWN.id,
        )
    previous = ctx.mode
    scope.branch = branch  # surfaced even when the mode stays (AGN-011 §5.6)
    if mode != previous:
        entry = ModeHistoryEntry(
            previous_mode=previous,
            new_mode=mode,
            timestamp=scope.ports.clock.now(),
            reason=reason,
            org=scope.caller.org,
            user=scope.caller.user,
            branch=branch,
            turn_id=turn.id,
        )
        try:
            ctx.session = await scope.transaction.set_session_mode(session.id, entry)
        except PROPAGATED:
            raise
        except BaseException as error:
            detail = error_text(error, scope.options.error_detail)
            raise StepFaultError(
                [
                    InvokeError(
                        code=ErrorCode.PORT_FAILED,
                        field="SessionStore",
                        message=f"the session store could not set the mode: {detail}",
                    )
                ]
            ) from error
        ctx.mode = mode
        change = ModeChange(call.tool_call_id, previous, mode, reason, branch)
        scope.mode_changes.append(change)
        scope.observer.mode_changed(change)
        logger.info("session %s: mode %s -> %s (branch=%s)", session.id, previous, mode, branch)
        # R8 counts the turn's changes, across its continuations too (the session's history).
        of_turn = [e for e in ctx.session.mode_history if e.turn_id == turn.id]
        already_warned = any(w.rule_id == SEVERAL_MODE_CHANGES.id for w in scope.warnings)
        if len(of_turn) >= 2 and not already_warned:
            logger.warning("session %s: %s", session.id, SEVERAL_MODE_CHANGES.message)
            warning = InvokeWarning(
                code="several_mode_changes",
                message=SEVERAL_MODE_CHANGES.message,
                rule_id=SEVERAL_MODE_CHANGES.id,
            )
            scope.warn(warning)
    result = json.dumps(
        {
            "mode": mode,
            "display_name": spec.display_name,
            "previous_mode": previous,
            "changed": mode != previous,
            "branch": branch,
            "reason": reason,
        }
    )
    outcome = ToolCallFate.MODE_CHANGED if mode != previous else ToolCallFate.MODE_UNCHANGED
    return result, outcome, None
