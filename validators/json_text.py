"""JSON as the wire has it: strict parsing, UTF-8 text, and JSON paths for error fields.

- ``strict_json_loads`` / ``is_json``: RFC 8259 JSON — ``NaN`` and ``Infinity``,
  which Python's ``json`` accepts, are refused.
- ``non_utf8_fields``: strings with no UTF-8 encoding (lone surrogates), which
  could not be serialized again; ``null_fields``: explicit nulls.
- ``json_path``: ``InputArtifacts[0].RelativePath``, ``options.depth``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "is_json",
    "json_nodes",
    "json_path",
    "non_utf8_fields",
    "null_fields",
    "strict_json_loads",
    "utf8_text",
]


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def strict_json_loads(text: str | bytes | bytearray) -> Any:
    """``json.loads`` that refuses ``NaN`` and ``Infinity``, which RFC 8259 does not allow."""
    return json.loads(text, parse_constant=_no_constants)


def is_json(text: str) -> bool:
    """Whether ``text`` is one well-formed JSON value (RFC 8259)."""
    try:
        strict_json_loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def json_path(parts: Iterable[int | str]) -> str:
    """Join keys with ``.`` and list indexes as ``[i]``; the root is ``""``."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def json_nodes(data: object) -> Iterator[tuple[str, object]]:
    """Every (JSON path, value) in ``data``, object keys included as values of their path.

    Iterative, so a deeply nested mapping cannot exhaust the stack.
    """
    pending: list[tuple[object, str]] = [(data, "")]
    while pending:
        value, path = pending.pop()
        yield path, value
        if isinstance(value, Mapping):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                pending.append((item, child))
                pending.append((key, child))
        elif isinstance(value, list | tuple):
            pending.extend((item, f"{path}[{i}]") for i, item in enumerate(value))


def _not_utf8(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def utf8_text(text: str) -> str:
    """``text`` with every lone surrogate written out as ``\\udXXX``, so it has a UTF-8 form.

    For text the engine did not write — exception messages, a model's reply, a tool's
    result — that it must still put into a response or a store (AGN-033 §4.1 UTF-8).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def non_utf8_fields(data: object) -> list[str]:
    """JSON paths of strings (keys included) that have no UTF-8 encoding, each once."""
    try:  # fast path: the C encoder finds nothing to report in almost every input
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        pass
    except (TypeError, ValueError, RecursionError):
        pass  # not plain JSON data, or too deep for the encoder: walk it
    else:
        return []
    return list(dict.fromkeys(path for path, value in json_nodes(data) if _not_utf8(value)))


def null_fields(data: object) -> list[str]:
    """JSON paths whose value is ``null``."""
    return [path for path, value in json_nodes(data) if value is None]
