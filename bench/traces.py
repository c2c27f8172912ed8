"""Keeping every turn's trace: an in-process turn with one server tool, traces kept against not.

The same Initial turn (the model calls one server tool, then answers: two model
calls), tracing off, on the memory store and on a SQLite file, with
``PipelineOptions.keep_traces`` on (the state trace and each step's changes noted,
then kept in the store after the turn: a write queued on SQLite) and off; then the
same with 16 turns run together, as a service runs them (on SQLite the traces kept
while the store's worker is busy share one commit, D646). Settings run interleaved,
round by round; a figure is µs per turn, the minimum and the median over the rounds,
of wall time and of the process's CPU time (all its threads: the SQLite store's
worker too). Target (D657; the issue sets none): keeping
traces, on by default, costs at most 10 % of the turn, judged on the CPU medians
(D647: on a shared machine the wall time also counts other processes' load).
"""

from __future__ import annotations

from typing import Any

from send_turn import option_on_off

from aptix_pipeline.steps import PipelineOptions

__all__ = ["TARGET", "trace_rows"]

TARGET = 1.10
"""At most 10 % more per turn with traces kept."""


AT_ONCE = 16
"""Turns run together in the rows that show the load case (a service's)."""


def trace_rows(number: int = 40, rounds: int = 15) -> dict[str, Any]:
    """µs per turn with traces kept and not, per store (see the module docstring): one
    turn at a time, and ``AT_ONCE`` together (``"<store>, 16 at once"``)."""
    kept = lambda on: PipelineOptions(keep_traces=on)  # noqa: E731
    alone = option_on_off(kept, number, rounds, cpu=True)
    together = option_on_off(kept, max(1, number // AT_ONCE * 2), rounds, cpu=True, at_once=AT_ONCE)
    return alone | {f"{store}, {AT_ONCE} at once": row for store, row in together.items()}
