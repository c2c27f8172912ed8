"""Large payloads of durable turns travel by reference (D538): the claim-check codec keeps
a payload over its threshold in a ``BlobStore`` and only its SHA-256 in the history."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from aptix_pipeline.adapters.temporal import ClaimCheckCodec, DirectoryBlobs


@pytest.mark.decision("D538")
async def test_a_large_payload_is_stored_aside_and_comes_back_whole(tmp_path: Path) -> None:
    codec = ClaimCheckCodec(DirectoryBlobs(tmp_path), threshold=1024)
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"')
    large = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 4096 + b'"')

    encoded = await codec.encode([small, large])

    assert encoded[0] == small
    assert len(encoded[1].SerializeToString()) < 200  # the reference, not the bytes
    assert len(list(tmp_path.rglob("*"))) >= 1
    assert await codec.decode(encoded) == [small, large]


@pytest.mark.decision("D538")
async def test_a_blob_changed_behind_its_name_is_refused(tmp_path: Path) -> None:
    codec = ClaimCheckCodec(DirectoryBlobs(tmp_path), threshold=16)
    encoded = await codec.encode([Payload(data=b"y" * 100)])
    for stored in (p for p in tmp_path.rglob("*") if p.is_file()):
        stored.write_bytes(b"something else")

    with pytest.raises(ValueError, match="does not hold"):
        await codec.decode(encoded)
