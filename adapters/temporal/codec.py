"""Large payloads by reference: a claim-check codec for durable turns (D538).

Temporal refuses a payload over 2 MB, and a request may carry 20 MiB of images
(``PipelineOptions.max_total_image_bytes``); a model request carries them again, a
tool's files may be as large. ``ClaimCheckCodec`` stores each payload larger than
``threshold`` bytes in a ``BlobStore`` under its SHA-256 and puts a small reference
in the history; the workers and the client, which share the codec, read it back.
The workflow's code sees the whole value, so nothing in the engine changes.

``DirectoryBlobs`` keeps them in a folder: one machine, or a folder every worker
and client mounts. A host with an object store implements ``BlobStore`` (two
methods). A blob is never deleted by the engine: its name is its content's hash,
so writing the same payload twice stores it once (docs/DURABLE.md "Large payloads").
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

__all__ = ["DEFAULT_CLAIM_THRESHOLD", "BlobStore", "ClaimCheckCodec", "DirectoryBlobs"]

DEFAULT_CLAIM_THRESHOLD = 256 * 1024
"""Payloads larger than this many bytes go to the blob store."""

_ENCODING = b"binary/aptix-claim-check"


@runtime_checkable
class BlobStore(Protocol):
    """Where large payloads wait: bytes by name (a SHA-256 hex digest)."""

    async def put(self, name: str, data: bytes) -> None:
        """Keep ``data`` under ``name`` (the same name always holds the same data)."""
        ...

    async def get(self, name: str) -> bytes:
        """The data under ``name``; ``KeyError`` when there is none."""
        ...


class DirectoryBlobs:
    """A ``BlobStore`` in a folder (created when missing)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, name: str) -> Path:
        if len(name) != 64 or not all(c in "0123456789abcdef" for c in name):
            raise KeyError(f"not a blob name: {name!r}")
        return self.directory / name[:2] / name

    async def put(self, name: str, data: bytes) -> None:
        """Write ``data`` to a temporary file, then move it in place (atomic)."""
        path = self._path(name)

        def write() -> None:
            if path.exists():
                return
            path.parent.mkdir(exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.part")
            partial.write_bytes(data)
            partial.replace(path)

        await asyncio.to_thread(write)

    async def get(self, name: str) -> bytes:
        """The blob's bytes; ``KeyError`` naming it when it is missing."""
        path = self._path(name)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise KeyError(f"blob {name} is not in {self.directory}") from None


class ClaimCheckCodec(PayloadCodec):
    """Payloads over ``threshold`` bytes go to ``blobs``; the history keeps their hash."""

    def __init__(self, blobs: BlobStore, threshold: int = DEFAULT_CLAIM_THRESHOLD) -> None:
        if threshold < 1:
            raise ValueError(f"threshold must be at least 1 byte, not {threshold}")
        self.blobs = blobs
        self.threshold = threshold

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each large payload stored and replaced by its reference."""
        encoded: list[Payload] = []
        for payload in payloads:
            data = payload.SerializeToString()
            if len(data) <= self.threshold:
                encoded.append(payload)
                continue
            name = hashlib.sha256(data).hexdigest()
            await self.blobs.put(name, data)
            encoded.append(Payload(metadata={"encoding": _ENCODING}, data=name.encode("ascii")))
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each reference replaced by the payload it names (its hash checked)."""
        decoded: list[Payload] = []
        for payload in payloads:
            if payload.metadata.get("encoding") != _ENCODING:
                decoded.append(payload)
                continue
            name = payload.data.decode("ascii")
            data = await self.blobs.get(name)
            if hashlib.sha256(data).hexdigest() != name:
                raise ValueError(f"blob {name} does not hold what was stored under its name")
            original = Payload()
            original.ParseFromString(data)
            decoded.append(original)
        return decoded
