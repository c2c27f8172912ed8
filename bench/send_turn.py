"""The workload the ledger, budgets and traces benches share: an Initial turn whose
model calls one server tool, ``send``, and then answers (two model calls), tracing
off, with the system clock and random ids."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aptix_pipeline.adapters.config.catalog import ConfigCatalog
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

__all__ = ["CALLER", "CATALOG", "send_pipeline", "send_turn"]

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


def send_turn(pipeline: Pipeline) -> Callable[[], Awaitable[object]]:
    """One turn of the workload on ``pipeline``, to time."""
    return lambda: pipeline.run({"Instruction": "send"}, CALLER)
