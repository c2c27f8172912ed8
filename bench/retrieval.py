"""Cost per turn of a retrieval (AGN-034 §4.4), as a ratio to the same turn without one.

The same Initial turn (an instruction and one RAG scope condition, a model that
answers at once) on the memory store with tracing off:

- **plain** — no retriever: the scope reaches the model as text;
- **retrieval** — the SQLite FTS5 retriever (``FtsRetriever``) over ``DOCUMENTS``
  small Markdown documents with front matter, limit 5: the query in a worker
  thread, the scope filter, the context message;
- **retrieval, no scope** — the same without the condition.

Measured round-robin so machine noise hits them alike (best of the rounds). Also
the time ``build_index`` takes over the folder, then to find it unchanged.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rounds import best_of_rounds
from tracing import CALLER, FINAL, ReplayingLLM

from aptix_pipeline import FtsRetriever, PipelineOptions, Ports, build_index
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds
from aptix_pipeline.contracts import Retriever
from aptix_pipeline.engine import Pipeline, Telemetry

__all__ = ["DOCUMENTS", "retrieval_row"]

DOCUMENTS = 200
_TOPICS = ("deploy", "rollback", "docker", "review", "python", "incident", "oncall", "release")
_TEAMS = ("platform", "ops", "web", "data")
INSTRUCTION = "How do I roll back a docker deploy after an incident?"
SCOPE = [{"Key": "team", "Operator": "!=", "Values": ["data"]}]


def write_documents(folder: Path, count: int = DOCUMENTS) -> None:
    """``count`` small Markdown documents with front matter, a few paragraphs each."""
    for number in range(count):
        topic = _TOPICS[number % len(_TOPICS)]
        other = _TOPICS[(number * 3 + 1) % len(_TOPICS)]
        team = _TEAMS[number % len(_TEAMS)]
        body = "\n\n".join(
            f"Step {step}: for {topic} work, check the {other} notes and tell the {team} team."
            for step in range(1, 5)
        )
        (folder / f"doc-{number:03}.md").write_text(
            f"---\ntitle: {topic.title()} note {number}\nteam: {team}\n"
            f"tags: [{topic}, {other}]\n---\n# {topic.title()} {number}\n\n{body}\n",
            encoding="utf-8",
        )


def _pipeline(retriever: Retriever | None) -> Pipeline:
    catalog = ConfigCatalog.default()
    ports = Ports(
        store=MemoryStore(),
        llm=ReplayingLLM([FINAL]),
        modes=catalog,
        agents=catalog,
        clock=SystemClock(),
        ids=RandomIds(),
        tools=catalog.tools,
        retriever=retriever,
    )
    return Pipeline(ports, PipelineOptions(), telemetry=Telemetry.off())


async def _measure(retriever: FtsRetriever, number: int, rounds: int) -> dict[str, float]:
    plain, retrieving = _pipeline(None), _pipeline(retriever)
    scoped = {"Instruction": INSTRUCTION, "RagScope": SCOPE}
    report = await retrieving.run(scoped, CALLER)
    assert report.trace is not None
    assert report.trace.retrievals[0].hits == 5, report.trace.retrievals

    def turn(pipeline: Pipeline, request: dict[str, Any]) -> Callable[[], Awaitable[object]]:
        return lambda: pipeline.run(request, CALLER)

    work = {
        "plain": turn(plain, scoped),
        "retrieval": turn(retrieving, scoped),
        "retrieval, no scope": turn(retrieving, {"Instruction": INSTRUCTION}),
    }
    return await best_of_rounds(work, number, rounds)


def retrieval_row(number: int = 40, rounds: int = 5) -> dict[str, float]:
    """µs per turn for each setting, and ms to index (see the module docstring)."""
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory) / "docs"
        folder.mkdir()
        write_documents(folder)
        index = Path(directory) / "index.db"
        started = time.perf_counter()
        build_index(folder, index)
        built = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        build_index(folder, index)
        unchanged = (time.perf_counter() - started) * 1e3
        retriever = FtsRetriever(index, collection="bench")
        try:
            costs = asyncio.run(_measure(retriever, number, rounds))
        finally:
            retriever.close()
    return {**costs, "index ms": built, "reindex unchanged ms": unchanged}
