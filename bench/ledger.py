"""The tool ledger's cost: an in-process turn with one server tool, ledger on against off.

The same Initial turn (the model calls one server tool, then answers: two model
calls), tracing off, on the memory store and on a SQLite file, with
``PipelineOptions.tool_ledger`` on (a reserve and a done per call, each committed
on its own) and off. Settings run interleaved, round by round; a figure is µs per
turn, the minimum and the median over the rounds. Target (issue 29): the ledger
costs at most 5 % of the turn.
"""

from __future__ import annotations

from typing import Any

from send_turn import option_on_off

from aptix_pipeline.steps import PipelineOptions

__all__ = ["TARGET", "ledger_rows"]

TARGET = 1.05
"""At most 5 % more per turn with the ledger on."""


def ledger_rows(number: int = 40, rounds: int = 9) -> dict[str, Any]:
    """µs per turn with the ledger on and off, per store (see the module docstring)."""
    return option_on_off(lambda on: PipelineOptions(tool_ledger=on), number, rounds)
