"""The engine: the turn state machine and the ``Pipeline`` entry point.

``Pipeline(ports).execute(request, caller)`` runs one agent turn through the
statechart of ``engine/machine.py`` and returns an ``InvokeResult`` holding the
AGN-033 response; ``Pipeline.run`` also returns what the turn did (a
``TurnReport``). ``pipeline_diagram`` draws the machine (``engine/diagram.py``).
"""

from aptix_pipeline.steps import ModeChange, PipelineOptions, Ports, ToolCallRecord

from .diagram import (
    DiagramError,
    DiagramFormat,
    GraphvizMissingError,
    diagram_text,
    format_for,
    pipeline_diagram,
)
from .machine import TurnMachine
from .pipeline import Pipeline, TurnReport
from .telemetry import GENAI_SEMCONV, Telemetry, TurnRecorder
from .trace import CheckRecord, FaultRecord, LLMCallRecord, StateTrace, TransitionRecord

__all__ = [
    "GENAI_SEMCONV",
    "CheckRecord",
    "DiagramError",
    "DiagramFormat",
    "FaultRecord",
    "GraphvizMissingError",
    "LLMCallRecord",
    "ModeChange",
    "Pipeline",
    "PipelineOptions",
    "Ports",
    "StateTrace",
    "Telemetry",
    "ToolCallRecord",
    "TransitionRecord",
    "TurnMachine",
    "TurnRecorder",
    "TurnReport",
    "diagram_text",
    "format_for",
    "pipeline_diagram",
]
