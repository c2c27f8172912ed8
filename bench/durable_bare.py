"""A bare Temporal workflow of a durable turn's shape, for ``bench/durable.py``.

``BareTurn`` makes the calls a one-round Initial turn makes (``durable.py``'s
breakdown lists them): four local activities (the catalog reads), then the model and
the commit as activities, and answers. Each activity returns its argument: no engine,
no ports. A worker running it with the durable worker's sandbox runner and converter
costs what Temporal's Python SDK costs for a workflow of that shape, the floor under
a durable turn's worker CPU.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

__all__ = ["BARE_WORKFLOW", "BareTurn", "echo"]

BARE_WORKFLOW = "aptix.bench.bare-turn"
LOCAL_READS = 4


@activity.defn(name="aptix.bench.echo")
async def echo(value: dict[str, Any]) -> dict[str, Any]:
    """Its argument."""
    return value


@workflow.defn(name=BARE_WORKFLOW, sandboxed=True)
class BareTurn:
    """Four local activities, two activities, an answer (the module docstring)."""

    @workflow.run
    async def run(self, turn: dict[str, Any]) -> dict[str, Any]:
        """The calls of a one-round Initial turn, each echoing ``turn``."""
        timeout = timedelta(seconds=30)
        for _ in range(LOCAL_READS):
            await workflow.execute_local_activity(echo, turn, start_to_close_timeout=timeout)
        for _ in range(2):  # the model, the commit
            await workflow.execute_activity(echo, turn, start_to_close_timeout=timeout)
        return turn
