"""The trace log: where each turn's state trace is kept, failed turns included
(issue 33 part 2, docs/UI.md "Every turn leaves its trace").

- ``KeptTrace`` — one turn's trace as a store keeps it: who ran it, where, when,
  how it ended (outcome, first error's code and message, faulted step), and the
  state trace itself as JSON text (``engine/trace.py``'s ``StateTrace.to_json``).
  A trace holds no user content unless the host captures content.
- ``TraceLog`` — the port: ``keep_trace``, ``list_traces`` (an owner's, or one
  session's, newest first) and ``purge_traces`` for those past their time.

Keeping a trace is committed on its own, after the turn: a failed turn wrote
nothing else, and its trace is what is left of it. The memory, SQLite and
PostgreSQL stores implement it beside ``SessionStore``; the pipeline keeps every
turn's trace in a store that has one while ``PipelineOptions.keep_traces`` holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["KeptTrace", "TraceLog"]


@dataclass(frozen=True, slots=True)
class KeptTrace:
    """One turn's trace in a ``TraceLog``.

    ``id`` is unique in the store (the pipeline's ``IdSource`` gives it).
    ``session_id``/``turn_id`` name the stored session and turn, ``None`` where the
    turn left none (a failed first turn, a refused request). ``outcome`` is ``done``
    or ``faulted``; ``error_code``/``error_message`` are the first error's, as the
    caller got it; ``faulted_step`` where it faulted. ``trace`` is the state trace's
    JSON text; ``steps`` what each step changed in the turn's context, as compact JSON
    (``engine/state_diff.py``; ``"[]"`` when not noted). ``expires_at``: when the
    store may delete it (``None``: never).
    """

    id: str
    org: str
    user: str
    session_id: str | None
    turn_id: str | None
    at: datetime
    outcome: str
    trace: str
    error_code: str | None = None
    error_message: str | None = None
    faulted_step: str | None = None
    expires_at: datetime | None = None
    steps: str = "[]"

    @property
    def failed(self) -> bool:
        """Whether the turn faulted."""
        return self.outcome == "faulted"


@runtime_checkable
class TraceLog(Protocol):
    """Turn traces, per org and user; see the module docstring."""

    async def keep_trace(self, trace: KeptTrace) -> None:
        """Keep ``trace``, committed on its own. A store may also delete some traces
        whose ``expires_at`` has passed (a bounded sweep)."""
        ...

    async def list_traces(
        self,
        org: str,
        user: str,
        session_id: str | None = None,
        *,
        limit: int = 50,
        offset: int = 0,
    ) -> list[KeptTrace]:
        """The caller's traces (of ``session_id`` only, when given), the last kept
        first; ``limit`` of them at most after ``offset``."""
        ...

    async def read_trace(self, org: str, user: str, trace_id: str) -> KeptTrace | None:
        """The caller's trace of this id, or ``None``."""
        ...

    async def purge_traces(self, now: datetime) -> int:
        """Delete every trace whose ``expires_at`` is at or before ``now``, of every
        org and user; how many there were."""
        ...
