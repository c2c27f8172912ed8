"""Helpers for the durable-turn tests: a Temporal client, pipelines, and trace comparison.

The dev server itself is ``temporal_kit.py``'s. ``normalised(trace)`` is a trace's
JSON form with the ids that a durable turn draws from its workflow (sessions,
turns) replaced by placeholders, so an in-process turn's trace and a durable
turn's compare entry by entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aptix_pipeline import (
    ConfigCatalog,
    MemoryStore,
    Pipeline,
    PipelineOptions,
    Ports,
    ScriptedLLM,
    SequentialIds,
    StateTrace,
    SteppingClock,
)
from aptix_pipeline.contracts import LLM, SessionStore, ToolExecutor

__all__ = ["CountingLLM", "durable_client", "normalised", "pipeline_on"]

_IDS = re.compile(r"\b(session|turn|correlation)(_[0-9a-f]{32}|-\d+)\b")


async def durable_client(address: str) -> Any:
    """A client with the durable turns' converter."""
    from aptix_pipeline.adapters.temporal import connect

    return await connect(address)


def pipeline_on(
    store: SessionStore | None = None,
    replies: Sequence[Mapping[str, Any]] | LLM = (),
    *,
    config: str | None = None,
    tools: Mapping[str, ToolExecutor] | None = None,
    options: PipelineOptions | None = None,
    **more: Any,
) -> Pipeline:
    """A pipeline on ``store`` (default: a new memory store) with ``replies`` scripted."""
    llm = ScriptedLLM(list(replies)) if isinstance(replies, Sequence) else replies
    catalog = ConfigCatalog.from_toml(config) if config else ConfigCatalog.default()
    ports = Ports(
        store=store if store is not None else MemoryStore(),
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=SteppingClock(),
        ids=SequentialIds(),
        tools={**catalog.tools, **(tools or {})},
    )
    return Pipeline(
        ports, options or PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0), **more
    )


def normalised(trace: StateTrace | None) -> Any:
    """``trace``'s JSON form, session and turn ids replaced by ``session-N``/``turn-N``."""
    assert trace is not None
    text = trace.to_json()
    seen: dict[str, str] = {}

    def placeholder(match: re.Match[str]) -> str:
        found = match.group(0)
        if found not in seen:
            kind = match.group(1)
            count = sum(1 for value in seen.values() if value.startswith(kind))
            seen[found] = f"{kind}-{count + 1}"
        return seen[found]

    import json

    return json.loads(_IDS.sub(placeholder, text))


class CountingLLM:
    """An LLM port that plays ``replies`` and counts its calls; ``fail_first`` calls raise
    ``failure`` first; ``delay`` seconds pass before each answer."""

    def __init__(
        self,
        replies: Sequence[Mapping[str, Any]],
        *,
        fail_first: int = 0,
        failure: Exception | None = None,
        delay: float = 0.0,
    ) -> None:
        self._script = ScriptedLLM(list(replies))
        self.calls = 0
        self._fail_first = fail_first
        self._failure = failure or ConnectionError("the model is away")
        self._delay = delay

    async def complete(self, request: Any) -> Any:
        import asyncio

        self.calls += 1
        if self._delay:
            await asyncio.sleep(self._delay)
        if self.calls <= self._fail_first:
            raise self._failure
        return await self._script.complete(request)
