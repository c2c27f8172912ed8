"""The engine: the turn state machine and the ``Pipeline`` entry point.

``Pipeline(ports).execute(request, caller)`` runs one agent turn through the
statechart of ``engine/machine.py`` and returns an ``InvokeResult`` holding the
AGN-033 response; ``Pipeline.run`` also returns what the turn did (a
``TurnReport``).
"""

from aptix_pipeline.steps import ModeChange, PipelineOptions, Ports, ToolCallRecord

from .machine import TurnMachine
from .pipeline import Pipeline, TurnReport
from .telemetry import GENAI_SEMCONV, Telemetry, TurnRecorder
from .trace import CheckRecord, FaultRecord, LLMCallRecord, StateTrace, TransitionRecord

__all__ = [
    "GENAI_SEMCONV",
    "CheckRecord",
    "FaultRecord",
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
]
