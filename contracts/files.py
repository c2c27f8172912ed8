"""Files a server tool makes, and the port that keeps them (AGN-033 §6, DESIGN.md R12).

- ``ToolFile`` — one file: its name, MIME type, bytes and an optional description.
  Its size and SHA-256 (lowercase hex; DESIGN.md R12 stands in for IDX-016's
  ``IContentHashService``) are read from the bytes when it is made.
- ``ToolOutput`` — what a server tool (``ToolExecutor``) returns when it makes
  files: its JSON result and the files. A tool that makes none returns the JSON
  text alone.
- ``ToolPause`` — what a server tool returns when it cannot finish without the
  client's answer (an MCP server's elicitation, docs/MCP.md): the turn pauses with
  a client-tool call, and the continuation's answer resumes the tool.
- ``StoredFile`` — where a ``FileStore`` keeps a file: a URL and when it expires.
- ``FileStore`` — the port that keeps a file by its content hash and gives back
  that URL (docs/FILES.md).

A ``ToolFile`` never serializes its bytes: its JSON (a recording's, a span's) is
its name, MIME type, description, size and hash. Read back from that JSON (a
replay), it has the size and hash and no bytes; made with bytes, the size and
hash are the bytes', never given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import Field, StrictBytes, StrictInt, StrictStr, model_validator

from .wire import FrozenWireModel

__all__ = ["FileStore", "StoredFile", "ToolFile", "ToolOutput", "ToolPause", "content_hash"]

_DERIVED = ("size_bytes", "SizeBytes", "content_hash", "ContentHash")


def content_hash(content: bytes) -> str:
    """The ``ContentHash`` of ``content``: its SHA-256 in lowercase hex (DESIGN.md R12)."""
    return hashlib.sha256(content).hexdigest()


class ToolFile(FrozenWireModel):
    """One file a server tool made (AGN-033 §6.4): name, MIME type, bytes, description.

    ``ToolFile(name="report.md", mime_type="text/markdown", content=b"# Report")``.
    ``size_bytes`` and ``content_hash`` come from ``content``. Whether the name and
    MIME type are fit to serve is checked when the tool returns the file
    (``validators.tool_file_problems``): a bad one fails the tool call.
    """

    name: StrictStr
    mime_type: StrictStr
    content: StrictBytes = Field(default=b"", exclude=True, repr=False)
    description: StrictStr | None = None
    size_bytes: StrictInt = 0
    content_hash: StrictStr = ""

    @model_validator(mode="before")
    @classmethod
    def _read_from_bytes(cls, data: Any) -> Any:
        # Made with bytes: the size and hash are theirs. Read back from JSON (no bytes):
        # the size and hash it holds stand.
        if not isinstance(data, dict):
            return data
        content = data.get("content", data.get("Content"))
        if not isinstance(content, bytes):
            return data
        given = [key for key in _DERIVED if key in data]
        if given:
            raise ValueError(f"{given[0]} is read from the content; do not give it")
        return {**data, "size_bytes": len(content), "content_hash": content_hash(content)}


class ToolOutput(FrozenWireModel):
    """A server tool's answer with files: its result (JSON text) and the files it made.

    The result is handled as a ``ToolExecutor``'s JSON text is; the files are kept
    by the pipeline's ``FileStore`` and reach the user as ``FileRef``s on the
    turn's final response (AGN-033 §6.2, §6.3). The model is told each file's
    name, MIME type, size and hash, never its bytes.
    """

    result_json: StrictStr
    files: Sequence[ToolFile] = ()


class StoredFile(FrozenWireModel):
    """Where a ``FileStore`` keeps a file: an absolute URL and when it stops working.

    ``url`` goes to the client as the ``FileRef``'s ``Url`` (absolute, never a
    ``data:`` URI: AGN-033 §6.1, §6.3); ``expires`` as its ``ContentExpires``
    (``None``: the URL does not expire).
    """

    url: StrictStr
    expires: datetime | None = None


@runtime_checkable
class FileStore(Protocol):
    """Keeps the files server tools make, by content hash, and gives back their URLs.

    ``put`` keeps ``file.content`` under ``file.content_hash`` (the same bytes are
    kept once) and answers where a client can fetch them, and until when.
    Raising fails the tool call that made the file: the model is told, the turn
    goes on. ``LocalFileStore`` (``adapters/files/local.py``) is the embedded one.
    """

    async def put(self, file: ToolFile) -> StoredFile:
        """Keep ``file``; its URL and expiry."""
        ...


class ToolPause(FrozenWireModel):
    """A server tool's answer "ask the client first" (docs/MCP.md "Elicitation").

    The engine sends the client a call of the client tool ``name`` with
    ``arguments_json``, under the paused call's own ``ToolCallId``, and the turn
    awaits it like any client tool call (AGN-033 §3.3). The continuation's
    result for that id is not shown to the model: the engine runs the same server
    tool again with ``ToolInvocation.client_answer`` holding it, and what the tool
    answers then is the call's result (it may pause again).
    """

    name: StrictStr
    arguments_json: StrictStr
