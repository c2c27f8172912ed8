"""The engine: the turn state machine and the ``Pipeline`` entry point.

``Pipeline(ports).execute(request, caller)`` runs one agent turn through the
statechart of ``engine/machine.py`` — on a runner compiled from it
(``engine/runner.py``) — and returns an ``InvokeResult`` holding the AGN-033
response; ``Pipeline.run`` also returns what the turn did (a ``TurnReport``).
Every turn emits typed events (``engine/events.py``); the state trace and the
spans are built from them, and ``Pipeline(listeners=[...])`` hears them too.
``Pipeline.stream`` delivers a turn as it happens (``engine/streaming.py``).
``Pipeline(interceptors=[...])`` wraps each turn (``engine/interceptors.py``).
``pipeline_diagram`` draws the machine (``engine/diagram.py``).

This package is the runtime. The replay tooling — port taps, recordings,
redaction, the ``Recorder`` interceptor and ``replay`` — is the subpackage
``engine/replay/``, which builds on the runtime; the runtime never imports it.

The diagram's names are imported on first use: a turn does not need them, and they
bring in python-statemachine's renderers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

from .events import (
    CheckRan,
    Listener,
    ModeChanged,
    ModelCallFinished,
    ModelCallRetried,
    ModelCallStarted,
    ModelFirstChunk,
    ModelTextDelta,
    RetrievalFinished,
    RetrievalStarted,
    StepEnded,
    StepStarted,
    ToolCallHandled,
    ToolExecuted,
    ToolExecutionStarted,
    TransitionTaken,
    TurnEvent,
    TurnFaulted,
    TurnFinished,
    TurnIdentified,
    TurnStarted,
    WarningRaised,
)
from .idempotency import request_keys
from .interceptors import Proceed, TurnCall, TurnInterceptor
from .machine import TurnMachine
from .pipeline import Pipeline, caller_key, fork_session
from .report import RequestInput, ResponseResult, TurnReport, answered_report
from .runner import FAULT_RECORD, RUNTIMES, Runtime
from .state_diff import StepChange, StepChanges, changes_from_json, changes_to_json
from .streaming import (
    PROGRESS_EVENTS,
    StreamDelta,
    StreamItem,
    StreamProgress,
    StreamResult,
    TurnStream,
    asks_to_stream,
    progress_json,
)
from .telemetry import SpanMode, Telemetry, WhileReplayingQuiet
from .tool_routing import (
    ListsAgents,
    ListsModes,
    ToolRoutingError,
    ToolRoutingProblem,
    check_tool_routing,
)
from .trace import (
    CallUsage,
    CheckRecord,
    FaultRecord,
    LLMCallRecord,
    RetrievalRecord,
    StateTrace,
    TransitionRecord,
)
from .usage_reports import (
    BudgetStanding,
    UsageGroup,
    UsageGroupBy,
    UsageReport,
    UsageTotals,
    report_moment,
    report_window,
    usage_report,
)

if TYPE_CHECKING:
    from .diagram import (
        DiagramError,
        DiagramFormat,
        GraphvizMissingError,
        diagram_text,
        format_for,
        pipeline_diagram,
    )

_LAZY = {
    "DiagramError": "diagram",
    "DiagramFormat": "diagram",
    "GraphvizMissingError": "diagram",
    "diagram_text": "diagram",
    "format_for": "diagram",
    "pipeline_diagram": "diagram",
}

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "FAULT_RECORD",
    "PROGRESS_EVENTS",
    "RUNTIMES",
    "BudgetStanding",
    "CallUsage",
    "CheckRan",
    "CheckRecord",
    "DiagramError",
    "DiagramFormat",
    "FaultRecord",
    "GraphvizMissingError",
    "LLMCallRecord",
    "Listener",
    "ListsAgents",
    "ListsModes",
    "ModeChanged",
    "ModelCallFinished",
    "ModelCallRetried",
    "ModelCallStarted",
    "ModelFirstChunk",
    "ModelTextDelta",
    "Pipeline",
    "Proceed",
    "RequestInput",
    "ResponseResult",
    "RetrievalFinished",
    "RetrievalRecord",
    "RetrievalStarted",
    "Runtime",
    "SpanMode",
    "StateTrace",
    "StepChange",
    "StepChanges",
    "StepEnded",
    "StepStarted",
    "StreamDelta",
    "StreamItem",
    "StreamProgress",
    "StreamResult",
    "Telemetry",
    "ToolCallHandled",
    "ToolExecuted",
    "ToolExecutionStarted",
    "ToolRoutingError",
    "ToolRoutingProblem",
    "TransitionRecord",
    "TransitionTaken",
    "TurnCall",
    "TurnEvent",
    "TurnFaulted",
    "TurnFinished",
    "TurnIdentified",
    "TurnInterceptor",
    "TurnMachine",
    "TurnReport",
    "TurnStarted",
    "TurnStream",
    "UsageGroup",
    "UsageGroupBy",
    "UsageReport",
    "UsageTotals",
    "WarningRaised",
    "WhileReplayingQuiet",
    "answered_report",
    "asks_to_stream",
    "caller_key",
    "changes_from_json",
    "changes_to_json",
    "check_tool_routing",
    "diagram_text",
    "fork_session",
    "format_for",
    "pipeline_diagram",
    "progress_json",
    "report_moment",
    "report_window",
    "request_keys",
    "usage_report",
]
