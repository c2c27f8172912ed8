"""What a call of ``Pipeline.run`` answers: the ``TurnReport``.

A report holds the turn's ``InvokeResult`` and the path the turn took: the states
it entered, the rules each guard and exit hook checked, its tool calls and mode
changes, the ``branch`` flag (DESIGN.md R7) and its ``StateTrace``.
``answered_report`` is the report of a call answered without a turn (a stored
answer, its conflict, or a malformed idempotency key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    AgentExecuteResponse,
    ContextType,
    InvokeResult,
    InvokeWarning,
    StoredOutcome,
)
from aptix_pipeline.steps import ModeChange, ToolCallRecord

from .records import quick_init
from .trace import CheckRecord, StateTrace, TransitionRecord

if TYPE_CHECKING:  # named for type checkers only: the runtime never imports the tooling
    from .replay import TurnRecording

__all__ = ["RequestInput", "ResponseResult", "TurnReport", "answered_report"]

RequestInput = AgentExecuteRequest | Mapping[str, Any] | str | bytes
"""A request as a model, a JSON-like mapping with the wire names, or JSON text."""

# Parametrized once and kept: pydantic rebuilds a generic whose class was collected.
ResponseResult = InvokeResult[AgentExecuteResponse]


@quick_init
@dataclass(frozen=True, slots=True)
class TurnReport:
    """What one turn did, for the host: its result and the path it took.

    ``states`` are the machine states in the order the turn entered them;
    ``session_id`` and ``turn_id`` name what exists in the store afterwards (a
    failed Initial turn created nothing);
    ``mode_changes`` are the changes the turn persisted (none when it failed: a
    failed turn writes nothing); ``branch`` is the flag of the turn's last
    successful ``agent_change_mode`` call, even one that kept the mode (AGN-011
    §5.6, DESIGN.md R7), ``None`` when there was none.
    """

    result: InvokeResult[AgentExecuteResponse]
    context_type: ContextType | None
    states: tuple[str, ...]
    transitions: tuple[TransitionRecord, ...]
    checks: tuple[CheckRecord, ...]
    tool_calls: tuple[ToolCallRecord, ...]
    mode: str | None
    mode_changes: tuple[ModeChange, ...]
    llm_calls: int
    session_id: str | None
    turn_id: str | None
    faulted_step: str | None = None
    warnings: tuple[InvokeWarning, ...] = field(default=())
    branch: bool | None = None
    trace: StateTrace | None = None
    """The turn's ordered, deterministic record (``StateTrace``)."""
    recording: TurnRecording | None = None
    """The turn's recording, when a ``Recorder`` records the pipeline's turns
    (``engine/replay/recorder.py``); the pipeline itself never sets it."""
    replayed: bool = False
    """Whether the result is a stored answer to an earlier copy of this request
    (an identical continuation or idempotency key, ``engine/idempotency.py``):
    this call ran no turn, called no model and wrote nothing."""

    @property
    def successful(self) -> bool:
        """Whether the turn produced a response."""
        return self.result.successful

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnReport:
        """The report ``to_dict(content=True)`` gave (a durable turn's, sent by its
        workflow); ``ValueError`` naming what is wrong when it is not one.

        The transitions, checks, tool calls and mode changes are read from the trace,
        which holds them all; ``recording`` is not carried.
        """
        try:
            result = ResponseResult.model_validate(data["result"])
            trace_data = data.get("trace")
            trace = StateTrace.from_dict(trace_data) if trace_data is not None else None
            context_type = data.get("context_type")
            entries = trace.entries if trace is not None else ()
            changes = [
                {(m["previous_mode"], m["new_mode"]): m for m in data.get("mode_changes", ())}
            ][0]
            return cls(
                result=result,
                context_type=ContextType(context_type) if context_type is not None else None,
                states=tuple(data["states"]),
                transitions=tuple([e for e in entries if type(e) is TransitionRecord]),
                checks=tuple([e for e in entries if type(e) is CheckRecord]),
                tool_calls=trace.tool_calls if trace is not None else (),
                mode=data.get("mode"),
                mode_changes=tuple(
                    change
                    for change in (trace.mode_changes if trace is not None else ())
                    if (change.previous_mode, change.new_mode) in changes
                ),
                llm_calls=int(data.get("llm_calls", 0)),
                session_id=data.get("session_id"),
                turn_id=data.get("turn_id"),
                faulted_step=data.get("faulted_step"),
                warnings=tuple(result.warnings),
                branch=data.get("branch"),
                trace=trace,
                replayed=bool(data.get("replayed", False)),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not a turn report: {error}") from None

    def to_dict(self, *, content: bool = False) -> dict[str, Any]:
        """A JSON-ready summary (the response itself is under ``result``).

        A mode change's ``reason`` is the model's words about the user's request:
        user content, shown only with ``content=True`` (``null`` otherwise), as
        spans show it only with content capture (DESIGN.md "Observability without
        leaks", docs/CONFORMANCE.md D163).
        """
        return {
            "result": self.result.to_wire(),
            "context_type": self.context_type.value if self.context_type else None,
            "states": list(self.states),
            "transitions": [[t.event, t.source, t.target] for t in self.transitions],
            "tool_calls": [
                {
                    "id": c.tool_call_id,
                    "name": c.name,
                    "side": c.side,
                    "outcome": c.outcome,
                    "rule_id": c.rule_id,
                }
                for c in self.tool_calls
            ],
            "mode": self.mode,
            "mode_changes": [
                {
                    "previous_mode": m.previous_mode,
                    "new_mode": m.new_mode,
                    "reason": m.reason if content else None,
                    "branch": m.branch,
                }
                for m in self.mode_changes
            ],
            "branch": self.branch,
            "checks": [
                {
                    "step": c.step,
                    "phase": c.phase,
                    "rule_ids": list(c.rule_ids),
                    "failed": list(c.failed),
                    "deferred": c.deferred,
                }
                for c in self.checks
            ],
            "warnings": [warning.to_wire() for warning in self.warnings],
            "llm_calls": self.llm_calls,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "faulted_step": self.faulted_step,
            "replayed": self.replayed,
            "trace": self.trace.to_dict() if self.trace is not None else None,
        }


def answered_report(
    result: InvokeResult[AgentExecuteResponse],
    context_type: ContextType | None,
    stored: StoredOutcome | None,
) -> TurnReport:
    """The report of a call that ran no turn: a stored answer, its conflict, or a bad key.

    Its trace walked no state: outcome ``replayed`` for a stored answer,
    ``refused`` otherwise, with the error codes.
    """
    replayed = stored is not None and result.successful
    session_id = stored.session_id if stored is not None else None
    turn_id = stored.turn_id if stored is not None else None
    trace = StateTrace(
        context_type=str(context_type) if context_type is not None else None,
        outcome="replayed" if replayed else "refused",
        states=(),
        entries=(),
        session_id=session_id,
        turn_id=turn_id,
        mode=None,
        response_type=None,
        error_codes=tuple(str(error.code) for error in result.errors),
        faulted_step=None,
        warnings=tuple(warning.code for warning in result.warnings),
    )
    return TurnReport(
        result=result,
        context_type=context_type,
        states=(),
        transitions=(),
        checks=(),
        tool_calls=(),
        mode=None,
        mode_changes=(),
        llm_calls=0,
        session_id=session_id,
        turn_id=turn_id,
        warnings=result.warnings,
        trace=trace,
        replayed=replayed,
    )
