"""Cost per turn of a server tool that makes a 10 KB file, as a ratio to the same tool without.

The same Initial turn (the model calls one server tool, then answers: two model
calls) on the memory store with tracing off, its tool returning:

- **no file** — its JSON result alone (the baseline);
- **10 KB file, new bytes** — the result and a 10 KB file whose bytes differ on
  every turn, kept by a ``LocalFileStore`` in a temporary folder (hashed, written
  in a worker thread, signed);
- **10 KB file, same bytes** — the same file every turn: hashed and signed, but
  kept once (content-addressed).

Measured round-robin so machine noise hits them alike (best of the rounds).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rounds import best_of_rounds

from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.files.local import LocalFileStore
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds
from aptix_pipeline.contracts import (
    Caller,
    LLMReply,
    LLMRequest,
    ToolCall,
    ToolExecutor,
    ToolFile,
    ToolInvocation,
    ToolOutput,
)
from aptix_pipeline.engine import Pipeline, Telemetry
from aptix_pipeline.steps import Ports

__all__ = ["file_rows"]

CALLER = Caller(org="bench", user="bench")
FILE_BYTES = 10 * 1024
CATALOG: dict[str, Any] = {
    "modes": [{"name": "general", "display_name": "General", "server_tools": ["export"]}],
    "server_tools": [{"name": "export", "description": "Export.", "executes_on": "server"}],
    "agents": [{"id": "a", "name": "A", "default": True}],
    "conversations": [{"id": "c", "name": "C", "default": True}],
}
_CALL = LLMReply(tool_calls=[ToolCall(tool_call_id="x1", name="export", arguments_json="{}")])
_FINAL = LLMReply(text="Exported.")


class _TwoReplies:
    """A model that calls ``export`` and then answers, turn after turn."""

    async def complete(self, request: LLMRequest) -> LLMReply:
        return _FINAL if len(request.messages) > 2 else _CALL


def _exporter(kind: str) -> ToolExecutor:
    counter = itertools.count()
    same = b"x" * FILE_BYTES
    result = json.dumps({"rows": 128})

    async def export(arguments: dict[str, Any], invocation: ToolInvocation) -> str | ToolOutput:
        if kind == "no file":
            return result
        if kind == "same bytes":
            content = same
        else:
            content = f"{next(counter):016d}".encode().ljust(FILE_BYTES, b"x")
        made = ToolFile(name="export.csv", mime_type="text/csv", content=content)
        return ToolOutput(result_json=result, files=(made,))

    return export


def _pipeline(kind: str, folder: Path) -> Pipeline:
    catalog = ConfigCatalog(CATALOG, source="bench")
    clock = SystemClock()
    files = LocalFileStore(folder, url_base="http://bench.test", signing_key=b"k" * 32, clock=clock)
    ports = Ports(
        store=MemoryStore(),
        llm=_TwoReplies(),
        modes=catalog,
        agents=catalog,
        clock=clock,
        ids=RandomIds(),
        tools={"export": _exporter(kind)},
        files=files,
    )
    return Pipeline(ports, telemetry=Telemetry.off())


KINDS = {
    "no file": "no file",
    "10 KB file, new bytes": "new",
    "10 KB file, same bytes": "same bytes",
}


async def _measure(folder: Path, number: int, rounds: int) -> dict[str, float]:
    pipelines = {name: _pipeline(kind, folder / kind) for name, kind in KINDS.items()}
    for pipeline in pipelines.values():  # each must answer with its file (or none)
        report = await pipeline.run({"Instruction": "export"}, CALLER)
        assert report.successful, report.result.rule_ids

    def turn(pipeline: Pipeline) -> Callable[[], Awaitable[object]]:
        return lambda: pipeline.run({"Instruction": "export"}, CALLER)

    work = {name: turn(pipeline) for name, pipeline in pipelines.items()}
    return await best_of_rounds(work, number, rounds)


def file_rows(number: int = 40, rounds: int = 5) -> dict[str, float]:
    """µs per turn for each kind of tool answer (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_measure(Path(folder), number, rounds))
