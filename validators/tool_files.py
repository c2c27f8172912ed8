"""Whether a file a server tool returned can be kept and served (AGN-033 §6.3).

``tool_file_problem`` names what is wrong with one ``ToolFile``, or answers
``None``. The name goes into a ``Content-Disposition`` header and the MIME type
into a ``Content-Type`` header when the file is served, so each must be one
line of text a header can hold; the file must hold at least one byte, and its
``SizeBytes``/``ContentHash`` are a size and a SHA-256 (DESIGN.md R12). A tool
whose file has a problem fails as a tool that raised (docs/FILES.md).
"""

from __future__ import annotations

import re

from aptix_pipeline.contracts import ToolFile

__all__ = ["MAX_FILE_NAME_CHARS", "tool_file_problem"]

MAX_FILE_NAME_CHARS = 255
"""The longest file name (characters), as most file systems allow."""

_TOKEN = r"[A-Za-z0-9!#$&^_.+\-]{1,127}"
_MIME = re.compile(rf"{_TOKEN}/{_TOKEN}(?:\s*;\s*{_TOKEN}=(?:{_TOKEN}|\"[^\"\\\r\n]*\"))*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def tool_file_problem(file: ToolFile) -> str | None:
    """What makes ``file`` unfit to keep and serve, in words naming the field; else ``None``."""
    name = file.name
    if not name.strip():
        return "its Name is empty"
    if len(name) > MAX_FILE_NAME_CHARS:
        return f"its Name holds {len(name)} characters, at most {MAX_FILE_NAME_CHARS}"
    if "/" in name or "\\" in name or name in {".", ".."}:
        return f"its Name {name!r} is a path; give a bare file name"
    if _CONTROL.search(name) or name != name.strip():
        return f"its Name {name!r} holds control characters or leading/trailing blanks"
    if not _MIME.fullmatch(file.mime_type):
        return f"its MimeType {file.mime_type!r} is not a MIME type (type/subtype)"
    if file.size_bytes <= 0:
        return "it holds no bytes"
    if not _SHA256.fullmatch(file.content_hash):
        return f"its ContentHash {file.content_hash!r} is not a lowercase hex SHA-256"
    return None
