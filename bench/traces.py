"""Keeping every turn's trace: an in-process turn with one server tool, traces kept against not.

The same Initial turn (the model calls one server tool, then answers: two model
calls), tracing off, on the memory store and on a SQLite file, with
``PipelineOptions.keep_traces`` on (the state trace and each step's changes noted,
then kept in the store after the turn: one statement, queued on SQLite) and off.
Settings run interleaved, round by round; a figure is µs per turn, the minimum and
the median over the rounds, of wall time and of the process's CPU time (all its
threads: the SQLite store's worker too). Target (D657; the issue sets none): keeping
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


def trace_rows(number: int = 40, rounds: int = 15) -> dict[str, Any]:
    """µs per turn with traces kept and not, per store (see the module docstring)."""
    return option_on_off(lambda on: PipelineOptions(keep_traces=on), number, rounds, cpu=True)
