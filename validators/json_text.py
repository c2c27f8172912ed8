"""JSON as the wire has it: strict parsing, UTF-8 text, and JSON paths for error fields.

- ``strict_json_loads`` / ``is_json``: RFC 8259 JSON — ``NaN`` and ``Infinity``,
  which Python's ``json`` accepts, are refused.
- ``non_utf8_fields``: strings with no UTF-8 encoding (lone surrogates), which
  could not be serialized again; ``null_fields``: explicit nulls.
- ``json_path``: ``InputArtifacts[0].RelativePath``, ``options.depth``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from typing import Any

__all__ = [
    "is_json",
    "json_loads_with_deep_text",
    "json_nodes",
    "json_path",
    "non_utf8_fields",
    "null_fields",
    "strict_json_loads",
    "text_depth_exceeds",
    "text_too_deep_at",
    "utf8_text",
    "value_depth_exceeds",
]


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def strict_json_loads(text: str | bytes | bytearray) -> Any:
    """``json.loads`` that refuses ``NaN`` and ``Infinity``, which RFC 8259 does not allow."""
    return json.loads(text, parse_constant=_no_constants)


def json_loads_with_deep_text(text: str | bytes | bytearray, limit: int) -> tuple[Any, bool]:
    """``strict_json_loads``, and whether a ``ResultJson`` or ``ArgumentsJson`` string of
    one of its objects nests JSON deeper than ``limit`` (``DESIGN/limits/json-depth``).

    Each object is looked at as ``json`` makes it, so the value is not walked again:
    a megabyte of nested arrays costs its parse and nothing more (D424).
    """
    deep = False

    def looked_at(made: dict[str, Any]) -> dict[str, Any]:
        nonlocal deep
        if not deep and ("ResultJson" in made or "ArgumentsJson" in made):
            deep = any(
                isinstance(inner, str) and text_depth_exceeds(inner, limit)
                for key, inner in made.items()
                if key in _EMBEDDED_JSON_KEYS
            )
        return made

    return json.loads(text, parse_constant=_no_constants, object_hook=looked_at), deep


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


_EMBEDDED_JSON_KEYS = frozenset({"ResultJson", "ArgumentsJson"})
# A quote, or a run of opening or of closing brackets: a run is one step of the scan,
# cut at 64 brackets so a megabyte of them is not matched whole to read 65.
_STRUCTURE = re.compile(r'"|[\[{]{1,64}|[\]}]{1,64}')
_STRUCTURE_BYTES = re.compile(rb'"|[\[{]{1,64}|[\]}]{1,64}')


def text_depth_exceeds(text: str | bytes | bytearray, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays/objects deeper than ``limit``.

    One linear pass over the brackets outside strings (escapes honoured); no
    recursion and no parsing, so it is safe to run before anything else
    (DESIGN.md limits, ``DESIGN/limits/json-depth``). See ``text_too_deep_at``.
    """
    return text_too_deep_at(text, limit) is not None


def text_too_deep_at(text: str | bytes | bytearray, limit: int) -> int | None:
    """Where JSON ``text`` first nests deeper than ``limit``: the index just past the
    opening bracket that does; ``None`` when none does.

    ``text[:index]`` is all the engine reads of a request it refuses for its depth
    (``DESIGN/limits/json-depth``), which is what its redacted recording keeps
    (``engine/replay/redaction.py``). A run of brackets is one step and a string is
    skipped with ``find`` to its closing quote, so a long one (an image's base64) costs a
    memory scan, not a step per character. A closing bracket with nothing open is
    ignored; an unterminated string runs to the end.
    """
    if isinstance(text, str):
        return _too_deep_at(text, limit, _STRUCTURE, '"', "\\", "[{")
    return _too_deep_at(bytes(text), limit, _STRUCTURE_BYTES, b'"', b"\\", b"[{")


def _too_deep_at(
    text: Any, limit: int, structure: re.Pattern[Any], quote: Any, escape: Any, opening: Any
) -> int | None:
    """``text_too_deep_at`` for one kind of text (``str`` or ``bytes``)."""
    depth = 0
    position = 0
    search, find = structure.search, text.find
    while (found := search(text, position)) is not None:
        mark = found.group()
        position = found.end()
        if mark == quote:  # to the first quote not escaped by an odd run of backslashes
            while (end := find(quote, position)) != -1:
                escaped = text[end - 1 : end] == escape and (
                    (end - len(text[position:end].rstrip(escape)) - position) % 2 == 1
                )
                position = end + 1
                if not escaped:
                    break
            else:
                return None  # an unterminated string runs to the end: no more brackets
        elif mark[:1] in opening:
            if depth + len(mark) > limit:
                return found.start() + (limit - depth) + 1
            depth += len(mark)
        else:
            depth = max(depth - len(mark), 0)
    return None


def value_depth_exceeds(data: object, limit: int) -> bool:
    """Whether a JSON-like Python value nests mappings/lists deeper than ``limit``.

    Iterative, linear in the size of ``data``; a cycle counts as unbounded depth.
    Values that are not JSON are left for the model to refuse. The JSON text of a
    ``ResultJson`` or ``ArgumentsJson`` field is held to the same limit. What
    ``json`` makes (dicts, lists, strings, numbers) is told apart by its type
    first, and children are stacked without a Python frame per item (D424).
    """
    pending: list[tuple[object, int]] = [(data, 0)]
    pop, extend = pending.pop, pending.extend
    while pending:
        value, depth = pop()
        kind = type(value)
        if kind in _SCALARS:
            continue
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            if depth + 1 > limit:
                return True
            mapping: Mapping[Any, Any] = value  # type: ignore[assignment]
            for key in _EMBEDDED_JSON_KEYS & mapping.keys():
                text = mapping[key]
                if isinstance(text, str | bytes) and text_depth_exceeds(text, limit):
                    return True
            extend(zip(mapping.values(), repeat(depth + 1)))
        elif kind is list or isinstance(value, list | tuple):
            if depth + 1 > limit:
                return True
            extend(zip(value, repeat(depth + 1)))  # type: ignore[call-overload]
    return False


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
