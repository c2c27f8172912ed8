"""The engine: the turn state machine and the ``Pipeline`` entry point.

``Pipeline(ports).execute(request, caller)`` runs one agent turn through the
statechart of ``engine/machine.py`` and returns an ``InvokeResult`` holding the
AGN-033 response; ``Pipeline.run`` also returns what the turn did (a
``TurnReport``). ``pipeline_diagram`` draws the machine (``engine/diagram.py``).
``RecordingOptions`` records each turn (``engine/recording.py``) and ``replay``
re-runs a recording against today's code (``engine/replay.py``).
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
from .telemetry import GENAI_SEMCONV, Telemetry, TurnRecorder
from .trace import CheckRecord, FaultRecord, LLMCallRecord, StateTrace, TransitionRecord

__all__ = [
    "GENAI_SEMCONV",
    "RECORDING_FORMAT",
    "CheckRecord",
    "DiagramError",
    "DiagramFormat",
    "Divergence",
    "FaultRecord",
    "GraphvizMissingError",
    "LLMCallRecord",
    "ModeChange",
    "Pipeline",
    "PipelineOptions",
    "PortCall",
    "Ports",
    "RecordedError",
    "RecordingOptions",
    "ReplayDivergenceError",
    "ReplayOutcome",
    "StateTrace",
    "Telemetry",
    "ToolCallRecord",
    "TransitionRecord",
    "TurnMachine",
    "TurnRecorder",
    "TurnRecording",
    "TurnReport",
    "assert_replays",
    "diagram_text",
    "format_for",
    "pipeline_diagram",
    "recordings_in",
    "replay",
    "replay_sync",
    "write_recording",
]
