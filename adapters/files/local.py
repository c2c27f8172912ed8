"""The embedded ``FileStore``: a local directory of files named by their SHA-256 (AGN-033 §6).

``LocalFileStore(directory, url_base=..., signing_key=..., ttl_seconds=..., clock=...)``
keeps each file at ``directory/<hash[:2]>/<hash>`` (the same bytes once, whoever
made them) and answers a signed URL that stops working ``ttl_seconds`` after the
file was kept::

    {url_base}/v1/files/{hash}?expires={unix seconds}&type={MIME}&name={name}&sig={hex}

``sig`` is HMAC-SHA256, under the signing key, of the hash, the expiry, the MIME
type and the name: the URL is the credential, so ``aptix serve`` serves it with no
API key (``http/files.py``), and nothing in it can be changed without breaking
the signature. ``check`` is that verification, in constant time
(``hmac.compare_digest``). Time comes from the ``Clock`` port, so expiries repeat
exactly in tests. File system work runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import re
import tempfile
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from aptix_pipeline.contracts import Clock, StoredFile, ToolFile, content_hash
from aptix_pipeline.validators import tool_file_problem

__all__ = ["FILES_PATH", "MIN_SIGNING_KEY_BYTES", "FileAccess", "LocalFileStore"]

FILES_PATH = "/v1/files"
"""Where ``aptix serve`` serves the files of a ``LocalFileStore``: ``GET /v1/files/{hash}``."""
MIN_SIGNING_KEY_BYTES = 16
"""The shortest signing key accepted: shorter keys are guessable."""

_SHA256 = re.compile(r"[0-9a-f]{64}")
_DIGITS = re.compile(r"[0-9]{1,12}")


class FileAccess(StrEnum):
    """What a signed file URL gets (``LocalFileStore.check``)."""

    GRANTED = "granted"
    FORBIDDEN = "forbidden"
    """The signature does not match: a changed hash, expiry, type or name, or a forged URL."""
    EXPIRED = "expired"
    """Signed, but past its expiry."""
    MISSING = "missing"
    """Signed and current, but the store no longer holds the file."""


class LocalFileStore:
    """A ``FileStore`` on a local directory; see the module docstring."""

    def __init__(
        self,
        directory: str | Path,
        *,
        url_base: str,
        signing_key: bytes,
        clock: Clock,
        ttl_seconds: int = 3600,
    ) -> None:
        parts = urlsplit(url_base)
        if parts.scheme not in {"http", "https"} or not parts.netloc or parts.query:
            raise ValueError(f"url_base must be an absolute http(s) URL, not {url_base!r}")
        if len(signing_key) < MIN_SIGNING_KEY_BYTES:
            raise ValueError(f"signing_key must hold {MIN_SIGNING_KEY_BYTES} bytes or more")
        if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds < 1:
            raise ValueError("ttl_seconds must be a whole number of seconds, 1 or more")
        self.directory = Path(directory)
        self.url_base = url_base.rstrip("/")
        self.ttl_seconds = ttl_seconds
        self._key = signing_key
        self._clock = clock

    def path(self, hash_hex: str) -> Path:
        """Where the file with this content hash is (or would be) kept."""
        if not _SHA256.fullmatch(hash_hex):
            raise ValueError("not a lowercase hex SHA-256")
        return self.directory / hash_hex[:2] / hash_hex

    async def put(self, file: ToolFile) -> StoredFile:
        """See ``FileStore``: keep the bytes once under their hash; a signed, expiring URL.

        Raises ``ValueError`` when the bytes are not the ones the file's size and
        hash describe, or when its name or MIME type is unfit to serve
        (``validators.tool_file_problem``): no URL is signed that could not be answered.
        """
        problem = tool_file_problem(file)
        if problem is not None:
            raise ValueError(f"file {file.name[:80]!r}: {problem}")
        content = file.content
        if len(content) != file.size_bytes or content_hash(content) != file.content_hash:
            raise ValueError(f"the bytes of {file.name!r} do not match its SizeBytes/ContentHash")
        await asyncio.to_thread(self._write, self.path(file.content_hash), content)
        expires = int(self._clock.now().timestamp()) + self.ttl_seconds
        return StoredFile(
            url=self.url(file.content_hash, expires, file.mime_type, file.name),
            expires=datetime.fromtimestamp(expires, UTC),
        )

    @staticmethod
    def _write(target: Path, content: bytes) -> None:
        """Write ``content`` to ``target`` whole or not at all; an existing file is kept."""
        if target.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".incoming-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(content)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _signature(self, hash_hex: str, expires: str, mime_type: str, name: str) -> str:
        message = "\n".join(("v1", hash_hex, expires, mime_type, name)).encode("utf-8", "replace")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def url(self, hash_hex: str, expires: int, mime_type: str, name: str) -> str:
        """The signed URL of a kept file, working until ``expires`` (Unix seconds)."""
        query = urlencode(
            {
                "expires": str(expires),
                "type": mime_type,
                "name": name,
                "sig": self._signature(hash_hex, str(expires), mime_type, name),
            }
        )
        return f"{self.url_base}{FILES_PATH}/{hash_hex}?{query}"

    def check(self, hash_hex: str, expires: str, mime_type: str, name: str, sig: str) -> FileAccess:
        """Whether a URL's parts get the file: the signature first, in constant time, then
        the expiry (by the clock), then whether the file is held."""
        expected = self._signature(hash_hex, expires, mime_type, name)
        signed = hmac.compare_digest(expected.encode("utf-8"), sig.encode("utf-8", "replace"))
        if not signed or not _SHA256.fullmatch(hash_hex) or not _DIGITS.fullmatch(expires):
            return FileAccess.FORBIDDEN
        if self._clock.now().timestamp() >= int(expires):
            return FileAccess.EXPIRED
        if not self.path(hash_hex).is_file():
            return FileAccess.MISSING
        return FileAccess.GRANTED
