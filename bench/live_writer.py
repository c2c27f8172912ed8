"""The other process of ``bench/live.py``: commits one turn to a store per line it reads.

``python bench/live_writer.py STORE_URL``: for each line on stdin, one Initial turn
(a scripted reply) as acme/ana, then one line on stdout: the turn's id and the wall
clock (``time.time()``) just after its commit returned, as JSON. Ends at end of input.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores import open_store
from aptix_pipeline.contracts import Caller
from aptix_pipeline.engine import Telemetry


async def main(url: str) -> None:
    store = open_store(url)
    pipeline = embedded_pipeline(
        llm=ScriptedLLM([{"text": "committed"}] * 10_000), store=store, telemetry=Telemetry.off()
    )
    caller = Caller(org="acme", user="ana")
    loop = asyncio.get_running_loop()
    try:
        print(json.dumps({"ready": True}), flush=True)
        while await loop.run_in_executor(None, sys.stdin.readline):
            result = await pipeline.execute({"Instruction": "Anything new?"}, caller)
            at = time.time()
            assert result.result is not None, result.rule_ids
            print(json.dumps({"turn": result.result.turn_id, "at": at}), flush=True)
    finally:
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()
        else:
            store.close()  # type: ignore[union-attr]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
