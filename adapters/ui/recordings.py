"""The recordings folder the turn browser page shows, and which recordings a stored turn has.

``RecordingShelf`` lists the recording files under one folder (``*.json``,
recursively, as ``aptix replay DIR`` does), each by its path relative to the folder,
and loads each once (again when its size or modification time changes). A file
that is not a recording is listed with the reason, not hidden.

A stored turn's recordings (docs/UI.md "Which recordings a turn has") are those
whose caller is the session's org and user and whose trace names the session and
the turn (``StateTrace.session_id``/``turn_id``): one per request of the turn — its
Initial or FollowOn request, then each continuation, a faulted one included — in
file-name order. Ids alone are not enough, as two stores may both hold a
``session-1``; the caller narrows them, and the page says which folder it read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aptix_pipeline.engine.replay import TurnRecording, recordings_in

__all__ = ["RecordingEntry", "RecordingShelf"]


@dataclass(frozen=True, slots=True)
class RecordingEntry:
    """One file of the folder: its name (relative, with ``/``), and the recording or why not."""

    name: str
    path: Path
    recording: TurnRecording | None
    problem: str | None = None

    def belongs_to(self, org: str, user: str) -> bool:
        """Whether the recorded turn was this org and user's."""
        caller = self.recording.caller if self.recording is not None else {}
        return caller.get("org") == org and caller.get("user") == user

    def records_turn(self, org: str, user: str, session_id: str, turn_id: str) -> bool:
        """Whether this is a recording of that caller's stored turn (module docstring)."""
        if self.recording is None or not self.belongs_to(org, user):
            return False
        trace = self.recording.trace
        return (trace.session_id, trace.turn_id) == (session_id, turn_id)


class RecordingShelf:
    """The recordings under ``folder`` (module docstring); ``None`` folder: there are none."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._loaded: dict[Path, tuple[tuple[int, int], RecordingEntry]] = {}

    def entries(self) -> list[RecordingEntry]:
        """Every recording file of the folder, by name."""
        if self.folder is None or not self.folder.is_dir():
            return []
        return [self._entry(path) for path in recordings_in(self.folder)]

    def find(self, name: str) -> RecordingEntry | None:
        """The file listed under ``name``; ``None`` for any name the folder does not list."""
        return next((entry for entry in self.entries() if entry.name == name), None)

    def for_turn(self, org: str, user: str, session_id: str, turn_id: str) -> list[RecordingEntry]:
        """The recordings of that caller's stored turn, by name."""
        return [e for e in self.entries() if e.records_turn(org, user, session_id, turn_id)]

    def _entry(self, path: Path) -> RecordingEntry:
        assert self.folder is not None
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._loaded.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        name = path.relative_to(self.folder).as_posix()
        try:
            entry = RecordingEntry(name, path, TurnRecording.load(path))
        except (ValueError, OSError) as error:
            entry = RecordingEntry(name, path, None, str(error))
        self._loaded[path] = (stamp, entry)
        return entry
