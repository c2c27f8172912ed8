"""Whether a file a server tool returned can be kept and served (AGN-033 §6.3).

``tool_file_problem`` names what is wrong with one ``ToolFile``, or answers
``None``; ``file_name_problem`` and ``mime_type_problem`` check its name and its
MIME type alone (redaction keeps their verdicts, ``engine/replay/redaction.py``).
The name goes into a ``Content-Disposition`` header and the MIME type into a
``Content-Type`` header when the file is served, so each must be one line of
text a header can hold:

- the MIME type is RFC 6838 §4.2's ``type "/" subtype`` (each a restricted name:
  a letter or digit, then up to 126 of letters, digits and ``!#$&-^_.+``) with
  RFC 9110 §8.3.1's optional parameters (``; name=token`` or ``; name="quoted"``,
  spaces or tabs around the ``;``), visible ASCII only, at most
  ``MAX_MIME_TYPE_CHARS`` characters: no CR, LF, NUL or other control character,
  and nothing a ``latin-1`` header cannot hold;
- the name is a bare file name (no path) of at most ``MAX_FILE_NAME_CHARS``
  characters, without control characters (C0, DEL, C1), line or paragraph
  separators (U+2028, U+2029), lone surrogates, or blanks at either end.

The file must hold at least one byte, and its ``SizeBytes``/``ContentHash`` are a
size and a SHA-256 (DESIGN.md R12). A tool whose file has a problem fails as a tool
that raised (docs/FILES.md).
"""

from __future__ import annotations

import re

from aptix_pipeline.contracts import ToolFile

__all__ = [
    "MAX_FILE_NAME_CHARS",
    "MAX_MIME_TYPE_CHARS",
    "file_name_problem",
    "mime_type_problem",
    "tool_file_problem",
]

MAX_FILE_NAME_CHARS = 255
"""The longest file name (characters), as most file systems allow."""
MAX_MIME_TYPE_CHARS = 255
"""The longest MIME type with its parameters (characters): the type and subtype alone
may take 255 (RFC 6838 §4.2), and a file's type travels in its URL."""

_RESTRICTED_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+\-]{0,126}"  # RFC 6838 §4.2
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 §5.6.2
_QUOTED = r'"(?:[\t !#-\[\]-~]|\\[\t -~])*"'  # RFC 9110 §5.6.4, without obs-text
_MIME = re.compile(
    rf"{_RESTRICTED_NAME}/{_RESTRICTED_NAME}"
    rf"(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|{_QUOTED}))*"
)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_UNFIT_IN_NAME = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_SHOWN = 80  # characters of a bad value an error quotes


def file_name_problem(name: str) -> str | None:
    """What makes ``name`` unfit as a served file's name, naming the field; else ``None``."""
    if not name.strip():
        return "its Name is empty"
    if len(name) > MAX_FILE_NAME_CHARS:
        return f"its Name holds {len(name)} characters, at most {MAX_FILE_NAME_CHARS}"
    if "/" in name or "\\" in name or name in {".", ".."}:
        return f"its Name {name!r} is a path; give a bare file name"
    if _UNFIT_IN_NAME.search(name) or name != name.strip():
        return f"its Name {name!r} holds control characters or leading/trailing blanks"
    return None


def mime_type_problem(mime_type: str) -> str | None:
    """What makes ``mime_type`` unfit as a served file's MIME type (module docstring)."""
    shown = repr(mime_type[:_SHOWN]) + ("…" if len(mime_type) > _SHOWN else "")
    if len(mime_type) > MAX_MIME_TYPE_CHARS:
        return f"its MimeType holds {len(mime_type)} characters, at most {MAX_MIME_TYPE_CHARS}"
    if _MIME.fullmatch(mime_type):
        return None
    if any((c < " " and c != "\t") or c == "\x7f" for c in mime_type):
        return f"its MimeType {shown} holds control characters (CR, LF, NUL, ...)"
    return (
        f"its MimeType {shown} is not a MIME type (RFC 6838 type/subtype, "
        "optional ; name=value parameters, visible ASCII)"
    )


def tool_file_problem(file: ToolFile) -> str | None:
    """What makes ``file`` unfit to keep and serve, in words naming the field; else ``None``."""
    problem = file_name_problem(file.name) or mime_type_problem(file.mime_type)
    if problem is not None:
        return problem
    if file.size_bytes <= 0:
        return "it holds no bytes"
    if not _SHA256.fullmatch(file.content_hash):
        return f"its ContentHash {file.content_hash!r} is not a lowercase hex SHA-256"
    return None
