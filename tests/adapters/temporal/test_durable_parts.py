"""The durable adapter's parts without a server: the commit that landed before (D535),
and the claim-check codec (D538)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from durable_kit import pipeline_on
from engine_kit import CALLER, text
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ApplicationError

from aptix_pipeline import BufferedTransaction, SQLiteStore, TurnWrites
from aptix_pipeline.adapters.temporal import ClaimCheckCodec, DirectoryBlobs, TurnActivities


class Capturing:
    """A store that keeps the writes each commit applied (to apply them again)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.writes: list[TurnWrites] = []

    def begin(self, org: str, user: str) -> BufferedTransaction:
        return BufferedTransaction(self, org, user)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def apply(self, writes: TurnWrites) -> None:
        self.writes.append(writes)
        await self.store.apply(writes)


@pytest.mark.decision("D535")
async def test_a_commit_that_landed_before_is_answered_not_refused(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "aptix.db") as store:
        capturing = Capturing(store)
        host = pipeline_on(capturing, [text("hello")])
        report = await host.run({"Instruction": "hi"}, CALLER)
        assert report.successful
        [writes] = capturing.writes
        activities = TurnActivities(pipeline_on(store, [text("unused")]), identity="w")
        answer = await activities.apply(writes)  # the retry of a commit whose answer was lost
        assert (answer.applied, answer.worker) == ("before", "w")
        transcript = await store.read_transcript("acme", "ana", report.session_id or "")
        assert len(transcript) == 2  # the instruction and the answer, once


@pytest.mark.decision("D535")
async def test_a_commit_that_conflicts_with_another_turn_is_still_a_conflict(
    tmp_path: Path,
) -> None:
    with SQLiteStore(tmp_path / "aptix.db") as store:
        capturing = Capturing(store)
        host = pipeline_on(capturing, [text("hello")])
        await host.run({"Instruction": "hi"}, CALLER)
        [writes] = capturing.writes
        other = writes.turns[0].turn.model_copy(update={"mode": "someone-else"})
        changed = TurnWrites(
            org=writes.org,
            user=writes.user,
            sessions=writes.sessions,
            turns=[type(writes.turns[0])(turn=other, created=True)],
            transcript=writes.transcript,
        )
        activities = TurnActivities(pipeline_on(store, [text("unused")]))
        with pytest.raises(ApplicationError) as refused:
            await activities.apply(changed)
        assert refused.value.type == "StoreConflictError"
        assert refused.value.non_retryable


@pytest.mark.decision("D533")
def test_a_store_without_reads_and_apply_cannot_serve_durable_turns() -> None:
    class OnlyBegin:
        def begin(self, org: str, user: str) -> Any:
            raise NotImplementedError

    with pytest.raises(TypeError, match="StoreBackend"):
        TurnActivities(pipeline_on(OnlyBegin(), [text("x")]))


@pytest.mark.decision("D538")
async def test_the_codec_stores_large_payloads_by_hash_and_reads_them_back(
    tmp_path: Path,
) -> None:
    codec = ClaimCheckCodec(DirectoryBlobs(tmp_path), threshold=1024)
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'"small"')
    large = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 5000 + b'"')
    encoded = await codec.encode([small, large])
    assert encoded[0] == small
    assert len(encoded[1].SerializeToString()) < 200
    assert await codec.decode(encoded) == [small, large]
    assert await codec.encode([large]) == [encoded[1]]  # the same payload: one blob
    assert len(list(tmp_path.rglob("*"))) == 2  # its folder and the blob


@pytest.mark.decision("D538")
async def test_a_tampered_or_missing_blob_is_refused_by_name(tmp_path: Path) -> None:
    blobs = DirectoryBlobs(tmp_path)
    codec = ClaimCheckCodec(blobs, threshold=16)
    [reference] = await codec.encode([Payload(data=b"y" * 100)])
    name = reference.data.decode()
    [blob] = list(tmp_path.rglob(name))
    blob.write_bytes(b"something else")
    with pytest.raises(ValueError, match="does not hold"):
        await codec.decode([reference])
    blob.unlink()
    with pytest.raises(KeyError, match=name):
        await codec.decode([reference])
    with pytest.raises(KeyError, match="not a blob name"):
        await blobs.get("../../etc/passwd")
    with pytest.raises(ValueError, match="threshold"):
        ClaimCheckCodec(blobs, threshold=0)
