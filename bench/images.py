"""Cost per turn of one image, as a ratio to the same turn without it, from one run.

The same Initial turn (instruction "look at this", a fixed-reply model, tracing
off) with and without one 50 KB PNG pasted as a clipboard image (AGN-034 §4.3),
on the memory store and on a SQLite file:

- **text** — the instruction alone (the baseline of its store);
- **image** — plus the image: parsed and capped (``DESIGN/limits/image-…``),
  decoded into an image part, shown to the model, kept in the stored transcript
  (its base64 written with the message);
- **image, no vision** — the same, the agent without vision: the image becomes
  its described reference and a ``UserWarnings`` entry.

Measured round-robin so machine noise hits them alike (best of the rounds).
"""

from __future__ import annotations

import asyncio
import base64
import random
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rounds import best_of_rounds
from turns import CALLER, FixedLLM, bench_ports

from aptix_pipeline import PipelineOptions
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.engine import Pipeline, Telemetry

__all__ = ["IMAGE_BYTES", "image_rows"]

IMAGE_BYTES = 50 * 1024
"""The size of the benchmark's image: a PNG header and random (incompressible) bytes."""

_NO_VISION = """
[[modes]]
name = "general"
display_name = "General"
[[agents]]
id = "assistant"
name = "Assistant"
vision = false
[[conversations]]
id = "workspace"
"""


def _image_base64() -> str:
    body = random.Random(16).randbytes(IMAGE_BYTES - 8)
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + body).decode("ascii")


def _pipeline(store: Any, *, vision: bool = True) -> Pipeline:
    ports = bench_ports(FixedLLM(), store)
    if not vision:
        blind = ConfigCatalog.from_toml(_NO_VISION)
        ports = type(ports)(
            store=ports.store,
            llm=ports.llm,
            modes=blind,
            agents=blind,
            clock=ports.clock,
            ids=ports.ids,
        )
    return Pipeline(ports, PipelineOptions(), telemetry=Telemetry.off())


def _turn(pipeline: Pipeline, request: dict[str, Any]) -> Callable[[], Awaitable[object]]:
    return lambda: pipeline.run(request, CALLER)


async def _measure(folder: Path, number: int, rounds: int) -> dict[str, float]:
    image = _image_base64()
    text = {"Instruction": "look at this"}
    pasted = {
        **text,
        "ClipboardImages": [{"Id": "img1", "MimeType": "image/png", "DataBase64": image}],
    }
    stores = {"memory": None, "sqlite": SQLiteStore(folder / "bench.db")}
    work: dict[str, Callable[[], Awaitable[object]]] = {}
    for store_name, store in stores.items():
        seeing = _pipeline(store)
        blind = _pipeline(store, vision=False)
        work[f"{store_name}: text"] = _turn(seeing, text)
        work[f"{store_name}: image"] = _turn(seeing, pasted)
        work[f"{store_name}: image, no vision"] = _turn(blind, pasted)
    try:
        for run in work.values():  # warm up, and check every turn succeeds
            report: Any = await run()
            assert report.successful, report.result.rule_ids
        best = await best_of_rounds(work, number, rounds)
    finally:
        sqlite = stores["sqlite"]
        if sqlite is not None:
            await sqlite.aclose()
    return best


def image_rows(number: int = 30, rounds: int = 5) -> dict[str, float]:
    """µs per turn for each setting (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_measure(Path(folder), number, rounds))
