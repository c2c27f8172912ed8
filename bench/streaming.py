"""What streaming a turn costs (AGN-034 §4.7), as ratios within one run.

- **CPU** — the same Initial turn (memory store, tracing off, a model whose reply
  is ``REPLY_CHARS`` characters) run by ``Pipeline.execute`` and by
  ``Pipeline.stream`` read to its end, the model streaming ``CHUNK``-character
  chunks. Two models: one that yields its chunks back to back (the consumer wakes
  once and takes them joined), and one that gives the event loop a turn before
  each chunk, as a network stream does (the consumer takes about one delta per
  chunk); that model's ``complete`` gives the loop as many turns before its reply,
  so both columns do the same model-side work. CPU time per turn
  (``time.process_time``), interleaved rounds, min and median; target: streamed
  ≤ 1.2 x not streamed, on the median.
- **time to first delta, in process** — from ``Pipeline.stream``'s first
  ``__anext__`` to the consumer holding the first ``StreamDelta``, less the model's
  own first-token time (from its ``stream()`` call to its first chunk, which
  sleeps ``FIRST_TOKEN_SECONDS``); target ≤ 0.5 ms at the median. What is left is
  the steps before the model call and the delivery of the chunk to the consumer.
- **time to first delta, over HTTP** — the same from a real ``aptix serve`` on
  loopback read by a lean client (``bench/streaming_http.py``); target ≤ 5 ms.
- **server CPU, SSE vs JSON** — the same server's own CPU time per turn, streamed
  and not (``streaming_http.server_cpu_per_turn``); target ≤ 1.3 x, on the median.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from tracing import CALLER

from aptix_pipeline import (
    ConfigCatalog,
    LLMReply,
    LLMRequest,
    MemoryStore,
    Pipeline,
    PipelineOptions,
    Ports,
    RandomIds,
    ReplyChunk,
    StreamDelta,
    SystemClock,
    Telemetry,
    Usage,
    split_reply,
)

__all__ = ["REPLY_CHARS", "first_delta_row", "streaming_cpu_row"]

REPLY_CHARS = 2000
SHORT_CHARS = 200
CHUNK = 16
FIRST_TOKEN_SECONDS = 0.005
TEXT = ("All the tests pass and the diff is small. " * 60)[:REPLY_CHARS]
REPLY = LLMReply(text=TEXT, usage=Usage(input_tokens=10, output_tokens=400), model="m")


class ChunkedModel:
    """A model that answers ``REPLY`` whole or in ``CHUNK``-character chunks.

    ``first_token_seconds`` is slept before the first chunk; ``first_token`` keeps
    the last call's time from ``stream()`` to its first chunk.
    """

    def __init__(
        self, first_token_seconds: float = 0.0, *, paced: bool = False, chars: int = REPLY_CHARS
    ) -> None:
        self.reply = REPLY.model_copy(update={"text": TEXT[:chars]})
        self.chunks = split_reply(self.reply, CHUNK)
        self.first_token_seconds = first_token_seconds
        self.paced = paced
        """Give the event loop a turn before each chunk (and as often in ``complete``)."""
        self.first_token = 0.0

    async def complete(self, request: LLMRequest) -> LLMReply:
        if self.paced:
            for _ in self.chunks:
                await asyncio.sleep(0)
        return self.reply

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        started = time.perf_counter()
        if self.first_token_seconds:
            await asyncio.sleep(self.first_token_seconds)
        self.first_token = time.perf_counter() - started
        paced = self.paced
        for chunk in self.chunks:
            if paced:
                await asyncio.sleep(0)
            yield chunk


def _pipeline(model: ChunkedModel) -> Pipeline:
    catalog = ConfigCatalog.default()
    ports = Ports(
        store=MemoryStore(),
        llm=model,
        modes=catalog,
        agents=catalog,
        clock=SystemClock(),
        ids=RandomIds(),
        tools=catalog.tools,  # the built-in catalog's demo tools
    )
    return Pipeline(ports, PipelineOptions(), telemetry=Telemetry.off())


async def _plain(pipeline: Pipeline) -> None:
    result = await pipeline.execute({"Instruction": "Review it."}, CALLER)
    assert result.successful, result.errors


async def _streamed(pipeline: Pipeline) -> None:
    text: list[str] = []
    async with pipeline.stream({"Instruction": "Review it."}, CALLER) as stream:
        async for item in stream:
            if isinstance(item, StreamDelta):
                text.append(item.text)
    assert stream.report is not None
    assert stream.report.result.successful, stream.report.result.errors
    response = stream.report.result.result
    assert response is not None
    assert "".join(text) == response.primary_output_text


async def _cpu(number: int, rounds: int) -> dict[str, list[float]]:
    models = {
        f"{SHORT_CHARS} chars, back to back": _pipeline(ChunkedModel(chars=SHORT_CHARS)),
        f"{REPLY_CHARS} chars, back to back": _pipeline(ChunkedModel()),
        f"{REPLY_CHARS} chars, paced": _pipeline(ChunkedModel(paced=True)),
    }
    work: dict[str, Callable[[], Awaitable[None]]] = {}
    for model, pipeline in models.items():
        work[f"{model}: not streamed"] = functools.partial(_plain, pipeline)
        work[f"{model}: streamed"] = functools.partial(_streamed, pipeline)
    seen: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(20):  # warm up
        for run in work.values():
            await run()
    names = list(work)
    for index in range(rounds):
        turn = index % len(names)
        for name in names[turn:] + names[:turn]:  # rotate which goes first
            started = time.process_time()
            for _ in range(number):
                await work[name]()
            seen[name].append((time.process_time() - started) / number * 1e6)
    return seen


def streaming_cpu_row(number: int = 60, rounds: int = 12) -> dict[str, dict[str, float]]:
    """CPU µs per turn, min and median, streamed and not, per model (module docstring)."""
    seen = asyncio.run(_cpu(number, rounds))
    rows: dict[str, dict[str, float]] = {}
    for model in dict.fromkeys(name.rpartition(":")[0] for name in seen):
        plain, streamed = seen[f"{model}: not streamed"], seen[f"{model}: streamed"]
        rows[model] = {
            "not streamed min": min(plain),
            "not streamed median": statistics.median(plain),
            "streamed min": min(streamed),
            "streamed median": statistics.median(streamed),
            "ratio min": min(streamed) / min(plain),
            "ratio median": statistics.median(streamed) / statistics.median(plain),
        }
    return rows


async def _first_deltas(count: int) -> list[float]:
    model = ChunkedModel(FIRST_TOKEN_SECONDS, paced=True)
    pipeline = _pipeline(model)
    overheads: list[float] = []
    for index in range(count + 5):
        stream = pipeline.stream({"Instruction": "Review it."}, CALLER, progress=())
        started = time.perf_counter()
        async with stream:
            async for item in stream:
                if isinstance(item, StreamDelta):
                    waited = time.perf_counter() - started
                    if index >= 5:  # the first turns warm up
                        overheads.append((waited - model.first_token) * 1e3)
                    break
    return overheads


def first_delta_row(count: int = 200) -> dict[str, float]:
    """Time to first delta less the model's first-token time, ms: min, median, p95."""
    overheads: Sequence[float] = sorted(asyncio.run(_first_deltas(count)))
    return {
        "min ms": overheads[0],
        "median ms": statistics.median(overheads),
        "p95 ms": overheads[int(len(overheads) * 0.95) - 1],
    }
