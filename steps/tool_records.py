"""What a turn keeps of the model's tool calls: one record per call, one per mode change.

The LLMClient (AGN-036 §4.9) settles each tool call of a reply — sends it to the
client, runs it here, expands a container or refuses it (container design) — and
``agent_change_mode`` (AGN-011 §5) may change the session's mode. These records
say what became of each; the observer reports them (``steps/observer.py``), the
``TurnScope`` keeps them (``steps/scope.py``), and the engine's state trace, spans
and ``TurnReport`` show them.

The enums' values are the words the trace, the spans and the JSON output use, so a
member compares equal to, and serializes as, its plain string.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["ModeChange", "RejectionKind", "ToolCallFate", "ToolCallRecord", "ToolCallSide"]


class ToolCallFate(StrEnum):
    """What became of one tool call of the model (``ToolCallRecord.outcome``).

    Not the container design's verdict (``validators.ToolCallOutcome``): a verdict
    says what the call may do, a fate what the engine did with it.
    """

    CLIENT = "client"
    """A valid call of a client tool: sent to the client (AGN-033 §5.1)."""
    EXECUTED = "executed"
    """A server tool ran and answered."""
    FAILED = "failed"
    """A server tool raised, or did not answer in time; the model is told so."""
    PAUSED = "paused"
    """A server tool asked the client first (``ToolPause``, docs/MCP.md): the turn
    awaits the client's answer, then runs the tool again."""
    EXPANDED = "expanded"
    """A container's members were revealed (DESIGN.md R9)."""
    REJECTED = "rejected"
    """The container design's checks refused the call (``RejectionKind`` says why)."""
    MODE_CHANGED = "mode_changed"
    """``agent_change_mode`` changed the session's mode (AGN-011 §5.2)."""
    MODE_UNCHANGED = "mode_unchanged"
    """``agent_change_mode`` named the mode the session is in: nothing to persist."""
    MODE_REFUSED = "mode_refused"
    """``agent_change_mode`` named an unknown mode, or its result was malformed."""


class ToolCallSide(StrEnum):
    """Where the tool a call names runs (``ToolDefinition.executes_on``)."""

    CLIENT = "client"
    SERVER = "server"
    UNKNOWN = "unknown"
    """The call names no advertised tool."""


class RejectionKind(StrEnum):
    """Why a call was refused (``ToolCallFate.REJECTED``): the container design's errors."""

    UNKNOWN_TOOL = "unknown_tool"
    """The call names no advertised tool."""
    CONTAINER_INVOCATION = "container_invocation"
    """A container was called with arguments (``ContainerInvocationErrorResponse``)."""
    ARGUMENT_VALIDATION = "argument_validation"
    """The arguments do not match the tool's parameters (``ValidationErrorResponse``)."""


@dataclass(frozen=True, slots=True)
class ModeChange:
    """One successful ``agent_change_mode`` call (AGN-011 §5, DESIGN.md R7, R8)."""

    tool_call_id: str
    previous_mode: str
    new_mode: str
    reason: str | None
    branch: bool


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """What became of one tool call the model made: its ``outcome`` (``ToolCallFate``),
    the ``side`` its tool runs on, and the id of the rule that refused it, if one did."""

    tool_call_id: str
    name: str
    side: ToolCallSide
    outcome: ToolCallFate
    rule_id: str | None = None
