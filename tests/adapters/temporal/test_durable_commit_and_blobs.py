"""The commit activity is idempotent per turn (D535), and large payloads travel by
reference through the claim-check codec (D538)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from durable_kit import pipeline_on
from engine_kit import CALLER, text
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ApplicationError

from aptix_pipeline import DirectoryBlobs, MemoryStore
from aptix_pipeline.adapters.temporal import ClaimCheckCodec
from aptix_pipeline.adapters.temporal.activities import TurnActivities


class _Capturing(MemoryStore):
    """A memory store that keeps each ``TurnWrites`` it applied."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[Any] = []

    async def apply(self, writes: Any) -> None:
        self.applied.append(writes)
        await super().apply(writes)


@pytest.mark.decision("D535")
async def test_a_commit_applied_again_answers_applied_before_and_other_writes_still_conflict() -> (
    None
):
    store = _Capturing()
    pipeline = pipeline_on(store=store, replies=[text("hello")])
    assert (await pipeline.run({"Instruction": "hi"}, CALLER)).successful
    [writes] = store.applied
    activities = TurnActivities(pipeline, identity="worker-a")

    again = await activities.apply(writes)

    assert (again.applied, again.worker) == ("before", "worker-a")
    changed_turn = dataclasses.replace(
        writes.turns[0], turn=writes.turns[0].turn.model_copy(update={"status": "failed"})
    )
    with pytest.raises(ApplicationError) as raised:
        await activities.apply(dataclasses.replace(writes, turns=[changed_turn]))
    assert raised.value.type == "StoreConflictError"
    assert raised.value.non_retryable


@pytest.mark.decision("D538")
async def test_a_large_payload_waits_in_the_blob_folder_and_comes_back_whole(
    tmp_path: Path,
) -> None:
    codec = ClaimCheckCodec(DirectoryBlobs(tmp_path / "blobs"), threshold=1024)
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"')
    large = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 4096 + b'"')

    encoded = await codec.encode([small, large])

    assert encoded[0] == small
    assert len(encoded[1].data) == 64  # its SHA-256, not its bytes
    assert len(list((tmp_path / "blobs").rglob("*"))) == 2  # a folder and the blob
    assert await codec.decode(encoded) == [small, large]
