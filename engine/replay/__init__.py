"""The replay tooling: record turns, redact recordings, replay them against today's code.

It builds on the engine's runtime and the runtime never imports it (DESIGN.md
"Layout and layers"), as Temporal keeps its replayer apart from its workers:

- ``port_tap.py``: ports whose every call goes through a tap first;
- ``records.py``: the port calls and exceptions a recording is made of;
- ``recording.py``: ``TurnRecording``, its versioned JSON form and its files;
- ``redaction.py``: a recording without user content, that still replays;
- ``depth_cut.py``: a request nested past the depth limit, cut to what the engine read;
- ``recorder.py``: the ``Recorder`` interceptor that records a pipeline's turns;
- ``replayer.py``: ``replay``, which re-runs a recording and names the first divergence;
- ``live.py``: ``LivePorts``, the host's own ports a replay runs live;
- ``evaluation.py``: ``evaluate``, a recorded request run on a candidate's live ports;
- ``expectations.py``: ``Expectations``, what an eval case expects of a turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .evaluation import Evaluation, ModelCallSeen, evaluate, usage_of
    from .expectations import Expectations, ToolCallSeen, TurnFacts
    from .live import LivePorts
    from .recorder import Recorder, RecordingOptions, config_digest
    from .recording import RECORDING_FORMAT, TurnRecording, write_recording
    from .records import PortCall, RecordedError
    from .redaction import Redactor
    from .replayer import (
        Divergence,
        ReplayDivergenceError,
        ReplayOutcome,
        assert_replays,
        recordings_in,
        replay,
        replay_sync,
    )

_EXPORTS: dict[str, str] = {
    "Evaluation": "evaluation",
    "ModelCallSeen": "evaluation",
    "evaluate": "evaluation",
    "usage_of": "evaluation",
    "Expectations": "expectations",
    "ToolCallSeen": "expectations",
    "TurnFacts": "expectations",
    "LivePorts": "live",
    "Recorder": "recorder",
    "RecordingOptions": "recorder",
    "config_digest": "recorder",
    "RECORDING_FORMAT": "recording",
    "TurnRecording": "recording",
    "write_recording": "recording",
    "PortCall": "records",
    "RecordedError": "records",
    "Redactor": "redaction",
    "Divergence": "replayer",
    "ReplayDivergenceError": "replayer",
    "ReplayOutcome": "replayer",
    "assert_replays": "replayer",
    "recordings_in": "replayer",
    "replay": "replayer",
    "replay_sync": "replayer",
}
"""Each name and the module it comes from, imported on first use: a pipeline that
records nothing, and ``aptix run`` without ``--record``, load none of them."""

__all__ = [
    "RECORDING_FORMAT",
    "Divergence",
    "Evaluation",
    "Expectations",
    "LivePorts",
    "ModelCallSeen",
    "PortCall",
    "RecordedError",
    "Recorder",
    "RecordingOptions",
    "Redactor",
    "ReplayDivergenceError",
    "ReplayOutcome",
    "ToolCallSeen",
    "TurnFacts",
    "TurnRecording",
    "assert_replays",
    "config_digest",
    "evaluate",
    "recordings_in",
    "replay",
    "replay_sync",
    "usage_of",
    "write_recording",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
