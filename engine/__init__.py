"""The engine: the turn state machine and the ``Pipeline`` entry point.

``Pipeline(ports).execute(request, caller)`` runs one agent turn through the
statechart of ``engine/machine.py`` — on a runner compiled from it
(``engine/runner.py``) — and returns an ``InvokeResult`` holding the AGN-033
response; ``Pipeline.run`` also returns what the turn did (a ``TurnReport``).
Every turn emits typed events (``engine/events.py``); the state trace and the
spans are built from them, and ``Pipeline(listeners=[...])`` hears them too.
``pipeline_diagram`` draws the machine (``engine/diagram.py``).
``RecordingOptions`` records each turn (``engine/recording.py``) and ``replay``
re-runs a recording against today's code (``engine/replay.py``).

The diagram's names are imported on first use: a turn does not need them, and they
bring in python-statemachine's renderers.
"""

from __future__ import annotations

import logging
from importlib import import_module
from typing import TYPE_CHECKING, Any

from aptix_pipeline.contracts.url_secrets import scrub_logger
from aptix_pipeline.steps import (
    ModeChange,
    PipelineOptions,
    Ports,
    RejectionKind,
    ToolCallFate,
    ToolCallRecord,
    ToolCallSide,
)

from .events import (
    CheckRan,
    Listener,
    ModeChanged,
    ModelCallFinished,
    ModelCallRetried,
    ModelCallStarted,
    StepEnded,
    StepStarted,
    ToolCallHandled,
    ToolExecuted,
    ToolExecutionStarted,
    TransitionTaken,
    TurnEvent,
    TurnFaulted,
    TurnFinished,
    TurnStarted,
    WarningRaised,
)
from .machine import TurnMachine
from .pipeline import Pipeline, TurnReport
from .recording import (
    RECORDING_FORMAT,
    PortCall,
    RecordedError,
    RecordingOptions,
    TurnRecording,
    write_recording,
)
from .replay import (
    Divergence,
    ReplayDivergenceError,
    ReplayOutcome,
    assert_replays,
    recordings_in,
    replay,
    replay_sync,
)
from .runner import RUNTIMES, MachineCompileError, Runtime, compile_machine
from .telemetry import GENAI_SEMCONV, Telemetry
from .trace import CheckRecord, FaultRecord, LLMCallRecord, StateTrace, TransitionRecord

if TYPE_CHECKING:
    from .diagram import (
        DiagramError,
        DiagramFormat,
        GraphvizMissingError,
        diagram_text,
        format_for,
        pipeline_diagram,
    )

_LAZY = dict.fromkeys(
    ["DiagramError", "DiagramFormat", "GraphvizMissingError", "diagram_text", "format_for",
     "pipeline_diagram"],
    "diagram",
)  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


# The engine's log carries the traceback of a step that raised, which may quote a port's
# URL, so every logger of the package scrubs it (D220): a module logs through
# scrubbed_logger(__name__), and the package logger itself, which engine/pipeline.py and
# engine/recording.py still log to, gets its ScrubbingFilter here.
scrub_logger(logging.getLogger("aptix_pipeline"))

__all__ = [
    "GENAI_SEMCONV",
    "RECORDING_FORMAT",
    "RUNTIMES",
    "CheckRan",
    "CheckRecord",
    "DiagramError",
    "DiagramFormat",
    "Divergence",
    "FaultRecord",
    "GraphvizMissingError",
    "LLMCallRecord",
    "Listener",
    "MachineCompileError",
    "ModeChange",
    "ModeChanged",
    "ModelCallFinished",
    "ModelCallRetried",
    "ModelCallStarted",
    "Pipeline",
    "PipelineOptions",
    "PortCall",
    "Ports",
    "RecordedError",
    "RecordingOptions",
    "RejectionKind",
    "ReplayDivergenceError",
    "ReplayOutcome",
    "Runtime",
    "StateTrace",
    "StepEnded",
    "StepStarted",
    "Telemetry",
    "ToolCallFate",
    "ToolCallHandled",
    "ToolCallRecord",
    "ToolCallSide",
    "ToolExecuted",
    "ToolExecutionStarted",
    "TransitionRecord",
    "TransitionTaken",
    "TurnEvent",
    "TurnFaulted",
    "TurnFinished",
    "TurnMachine",
    "TurnRecording",
    "TurnReport",
    "TurnStarted",
    "WarningRaised",
    "assert_replays",
    "compile_machine",
    "diagram_text",
    "format_for",
    "pipeline_diagram",
    "recordings_in",
    "replay",
    "replay_sync",
    "write_recording",
]
