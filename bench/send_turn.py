"""The workload the ledger, budgets and traces benches share: an Initial turn whose
model calls one server tool, ``send``, and then answers (two model calls), tracing
off, with the system clock and random ids."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rounds import cpu_rounds_of

from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds
from aptix_pipeline.contracts import (
    Caller,
    LLMReply,
    LLMRequest,
    SessionStore,
    ToolCall,
    ToolInvocation,
    Usage,
)
from aptix_pipeline.engine import Pipeline, Telemetry
from aptix_pipeline.steps import PipelineOptions, Ports

__all__ = ["CALLER", "CATALOG", "option_on_off", "send_pipeline", "send_turn"]

CALLER = Caller(org="bench", user="bench")
CATALOG: dict[str, Any] = {
    "modes": [{"name": "general", "display_name": "General", "server_tools": ["send"]}],
    "server_tools": [{"name": "send", "description": "Send.", "executes_on": "server"}],
    "agents": [{"id": "a", "name": "A", "default": True}],
    "conversations": [{"id": "c", "name": "C", "default": True}],
}
_RESULT = json.dumps({"sent": True, "id": "m-1"})


class _TwoReplies:
    """A model that calls ``send`` and then answers, turn after turn, each reply
    reporting ``usage`` when given."""

    def __init__(self, usage: Usage | None) -> None:
        call = ToolCall(tool_call_id="x1", name="send", arguments_json='{"to": "bo"}')
        self._call = LLMReply(tool_calls=[call], usage=usage)
        self._final = LLMReply(text="Sent.", usage=usage)

    async def complete(self, request: LLMRequest) -> LLMReply:
        return self._final if len(request.messages) > 2 else self._call


async def _send(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    return _RESULT


def send_pipeline(
    store: SessionStore, options: PipelineOptions, *, usage: Usage | None = None
) -> Pipeline:
    """A pipeline over ``store`` with ``options`` whose turns are the workload."""
    catalog = ConfigCatalog(CATALOG, source="bench")
    ports = Ports(
        store=store,
        llm=_TwoReplies(usage),
        modes=catalog,
        agents=catalog,
        clock=SystemClock(),
        ids=RandomIds(),
        tools={"send": _send},
    )
    return Pipeline(ports, options, telemetry=Telemetry.off())


def send_turn(pipeline: Pipeline, at_once: int = 1) -> Callable[[], Awaitable[object]]:
    """One turn of the workload on ``pipeline``, to time; ``at_once`` turns run
    together (each a new session) when more than one."""
    if at_once == 1:
        return lambda: pipeline.run({"Instruction": "send"}, CALLER)
    return lambda: asyncio.gather(
        *(pipeline.run({"Instruction": "send"}, CALLER) for _ in range(at_once))
    )


def _ratios(off: list[float], on: list[float], prefix: str = "") -> dict[str, float]:
    return {
        f"{prefix}off_min_us": min(off),
        f"{prefix}off_median_us": statistics.median(off),
        f"{prefix}on_min_us": min(on),
        f"{prefix}on_median_us": statistics.median(on),
        f"{prefix}ratio_min": min(on) / min(off),
        f"{prefix}ratio_median": statistics.median(on) / statistics.median(off),
    }


async def _on_off(
    folder: Path,
    options: Callable[[bool], PipelineOptions],
    number: int,
    rounds: int,
    cpu: bool,
    at_once: int,
) -> dict[str, Any]:
    stores: dict[str, SessionStore] = {
        "memory": MemoryStore(),
        "sqlite": SQLiteStore(folder / "bench.db"),
    }
    try:
        work: dict[str, Callable[[], Awaitable[object]]] = {}
        for name, store in stores.items():
            for on in (False, True):
                pipeline = send_pipeline(store, options(on))
                report = await pipeline.run({"Instruction": "send"}, CALLER)
                assert report.successful, report.result.rule_ids
                work[f"{name}, {'on' if on else 'off'}"] = send_turn(pipeline, at_once)
        wall, cpu_times = await cpu_rounds_of(work, number, rounds)
        for times in (*wall.values(), *cpu_times.values()):  # µs a turn
            times[:] = [value / at_once for value in times]
    finally:
        sqlite = stores["sqlite"]
        assert isinstance(sqlite, SQLiteStore)
        await sqlite.aclose()
    figures: dict[str, Any] = {}
    for name in stores:
        figures[name] = _ratios(wall[f"{name}, off"], wall[f"{name}, on"])
        if cpu:
            figures[name] |= _ratios(cpu_times[f"{name}, off"], cpu_times[f"{name}, on"], "cpu_")
    return figures


def option_on_off(
    options: Callable[[bool], PipelineOptions],
    number: int,
    rounds: int,
    *,
    cpu: bool = False,
    at_once: int = 1,
) -> dict[str, Any]:
    """µs per turn of the workload with a setting on and off (``options(on)``), on the
    memory store and a SQLite file, interleaved: per store, the off and on min and
    median and their ratios (and of CPU time too, ``cpu_``-prefixed); ``at_once``
    turns run together, ``number`` times a round."""
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_on_off(Path(folder), options, number, rounds, cpu, at_once))
