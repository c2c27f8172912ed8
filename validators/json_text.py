"""JSON as the wire has it: strict parsing, UTF-8 text, and JSON paths for error fields.

- ``strict_json_loads`` / ``is_json``: RFC 8259 JSON — ``NaN`` and ``Infinity``,
  which Python's ``json`` accepts, are refused.
- ``non_utf8_fields``: strings with no UTF-8 encoding (lone surrogates), which
  could not be serialized again.
- ``json_path``: ``InputArtifacts[0].RelativePath``, ``options.depth``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["is_json", "json_path", "non_utf8_fields", "strict_json_loads"]


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


def non_utf8_fields(data: object) -> Iterator[str]:
    """JSON paths of strings (keys included) that have no UTF-8 encoding.

    Iterative, so a deeply nested mapping cannot exhaust the stack.
    """
    pending: list[tuple[object, str]] = [(data, "")]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                yield path
        elif isinstance(value, Mapping):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                pending.append((item, child))
                pending.append((key, child))
        elif isinstance(value, list | tuple):
            pending.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
