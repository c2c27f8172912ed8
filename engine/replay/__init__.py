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
- ``live.py``: ``LivePorts``, the host's own ports a replay runs live.
"""

from __future__ import annotations

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

__all__ = [
    "RECORDING_FORMAT",
    "Divergence",
    "LivePorts",
    "PortCall",
    "RecordedError",
    "Recorder",
    "RecordingOptions",
    "Redactor",
    "ReplayDivergenceError",
    "ReplayOutcome",
    "TurnRecording",
    "assert_replays",
    "config_digest",
    "recordings_in",
    "replay",
    "replay_sync",
    "write_recording",
]
