"""What a recording costs the event loop: made off it, written compact when indenting would
balloon, a large body kept as the text it was.

1. A ``Recorder`` makes, redacts and writes each turn's recording in a worker thread:
   the event loop serves other work meanwhile (docs/CONFORMANCE.md D420).
2. A recording whose indented JSON would be more than four times its compact JSON (and
   64 KiB more) is written compact, on one line, and reads back the same (D422).
3. A request body over 64 KiB is kept as its text (``bytes_text``), not read as JSON
   (``bytes_json``), and replays byte for byte (D423).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, text
from replay_kit import recording_pipeline

from aptix_pipeline import RecordingOptions, TurnRecording, replay
from aptix_pipeline.adapters.stores.memory import MemoryStore

# === 1. off the event loop ======================================================================


@pytest.mark.decision("D420")
async def test_a_recording_is_made_while_the_event_loop_serves_other_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    redacting, served = threading.Event(), threading.Event()
    waited: list[bool] = []
    redact = TurnRecording.redact

    def redact_once_served(self: TurnRecording) -> TurnRecording:
        redacting.set()
        waited.append(served.wait(timeout=5))  # on the loop's thread, nothing could serve
        return redact(self)

    async def other_work() -> None:
        while not redacting.is_set():
            await asyncio.sleep(0.001)
        served.set()

    monkeypatch.setattr(TurnRecording, "redact", redact_once_served)
    options = RecordingOptions(directory=tmp_path, redact=True, timer=None)
    pipeline = recording_pipeline(MemoryStore(), [text("Hi.")], recording=options)

    report, _ = await asyncio.gather(pipeline.run({"Instruction": "hello"}, CALLER), other_work())

    assert waited == [True]
    assert report.recording is not None
    assert report.recording.redacted
    [path] = tmp_path.iterdir()
    assert TurnRecording.load(path) == report.recording


# === 2. compact when indenting would balloon ====================================================


def branches(count: int, depth: int) -> list[Any]:
    """``count`` lists, each nested ``depth`` deep around a number."""
    branch: Any = 1
    for _ in range(depth):
        branch = [branch]
    return [branch] * count


@pytest.mark.decision("D422")
async def test_a_recording_deep_and_wide_is_written_compact_and_reads_back(
    tmp_path: Path,
) -> None:
    request = {"Instruction": "hi", "Extra": branches(2_000, 40)}  # refused: unknown field
    options = RecordingOptions(directory=tmp_path, timer=None)
    pipeline = recording_pipeline(MemoryStore(), [text("Hi.")], recording=options)

    report = await pipeline.run(request, CALLER)

    assert report.recording is not None
    written = report.recording.to_json()
    assert written.count("\n") == 1  # one line: indented, it would take about 6 MB
    assert len(written) < 250_000
    [path] = tmp_path.iterdir()
    assert path.read_text(encoding="utf-8") == written
    assert TurnRecording.load(path) == report.recording
    outcome = await replay(path)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


@pytest.mark.decision("D422")
async def test_a_recording_of_ordinary_data_stays_indented() -> None:
    pipeline = recording_pipeline(MemoryStore(), [text("Hi.")])
    request = {"Instruction": "hi", "InputArtifacts": [{"RelativePath": "a.py", "Contents": "x"}]}

    report = await pipeline.run(request, CALLER)

    assert report.recording is not None
    written = report.recording.to_json()
    assert written == json.dumps(report.recording.to_dict(), indent=2, ensure_ascii=False) + "\n"


# === 3. a large body stays text =================================================================


@pytest.mark.decision("D423")
@pytest.mark.parametrize(("size", "kind"), [(60_000, "bytes_json"), (70_000, "bytes_text")])
async def test_a_body_over_64_kib_is_recorded_as_its_text_and_replays(size: int, kind: str) -> None:
    body = json.dumps({"Instruction": "x" * size}).encode()
    pipeline = recording_pipeline(MemoryStore(), [text("Hi.")])

    report = await pipeline.run(body, CALLER)

    assert report.result.successful
    assert report.recording is not None
    assert list(report.recording.request) == [kind]
    assert report.recording.request_input() == body
    outcome = await replay(TurnRecording.from_dict(json.loads(report.recording.to_json())))
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
