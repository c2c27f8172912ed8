"""JSON of any depth, read and written without recursion.

``json`` and pydantic-core recurse: ``json.loads`` raises ``RecursionError`` a
few hundred levels deep, and pydantic-core refuses data nested deeper than about
255 levels. Recordings, their redaction and replay handle what a turn saw, and a
tool result, a model reply or a host's Python request can nest deeper than that,
and nothing after a turn's commit may fail on it. These walks keep their own
stacks, so any depth works, in time linear in the size of the data.
``encode_value`` turns any value a port or an event carries into JSON data (wire
models in their DDR PascalCase form), for recordings and span attributes alike.

Objects are read as ``Pairs`` (a list of ``[key, value]``), so duplicate keys
survive a read and a write; ``plain`` turns them into dicts again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from json import decoder
from typing import Any

from pydantic_core import to_jsonable_python

__all__ = [
    "Pairs",
    "as_pairs",
    "dump_json",
    "encode_value",
    "int_of",
    "int_text",
    "list_branch",
    "load_json",
    "parse_json",
    "plain",
    "rebuilt",
]


class Pairs(list[Any]):
    """A JSON object as its ``[key, value]`` pairs, so duplicate keys survive."""


# json's own string scanner (C, no recursion): the escapes and strictness ``json`` has.
_scanstring: Callable[[str, int, bool], tuple[str, int]] = decoder.scanstring  # type: ignore[attr-defined]
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


def _skip(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _key(text: str, at: int) -> tuple[str, int]:
    if text[at : at + 1] != '"':
        raise ValueError(f"expected a key at {at}")
    key, at = _scanstring(text, at + 1, True)
    at = _skip(text, at)
    if text[at : at + 1] != ":":
        raise ValueError(f"expected ':' at {at}")
    return key, _skip(text, at + 1)


_CHUNK = 1000  # decimal digits: well under Python's int/str conversion limit (4,300)


def int_text(number: int) -> str:
    """Decimal text of any ``int``, however long (``str`` refuses past 4,300 digits).

    A request made of Python values may hold such a number; its recording must
    still be written (docs/CONFORMANCE.md D161).
    """
    try:
        return str(number)
    except ValueError:
        sign, rest = ("-" if number < 0 else ""), abs(number)
        chunks: list[int] = []
        while rest:
            rest, chunk = divmod(rest, 10**_CHUNK)
            chunks.append(chunk)
        tail = "".join(f"{chunk:0{_CHUNK}d}" for chunk in reversed(chunks[:-1]))
        return f"{sign}{chunks[-1]}{tail}"


def int_of(word: str) -> int:
    """The ``int`` of decimal text, however long (``int`` refuses past 4,300 digits)."""
    try:
        return int(word)
    except ValueError:
        sign, digits = (-1, word[1:]) if word.startswith("-") else (1, word)
        number = 0
        for start in range(0, len(digits), _CHUNK):
            chunk = digits[start : start + _CHUNK]
            number = number * 10 ** len(chunk) + int(chunk)
        return sign * number


def _scalar(text: str, at: int) -> tuple[Any, int]:
    if text[at : at + 1] == '"':
        return _scanstring(text, at + 1, True)
    number = _NUMBER.match(text, at)
    if number is not None:
        word = number.group()
        return (float(word) if number.group(1) or number.group(2) else int_of(word)), number.end()
    for word, value in _LITERALS:
        if text.startswith(word, at):
            return value, at + len(word)
    raise ValueError(f"expected a value at {at}")


def parse_json(text: str) -> Any:
    """One RFC 8259 JSON value, objects as ``Pairs``; ``ValueError`` when it is not one.

    Iterative, so any depth parses (``json.loads`` raises ``RecursionError`` at a
    few hundred levels); ``NaN`` and ``Infinity`` are refused as the request
    rules refuse them (``AGN-034/5/result-json-valid``).
    """
    at = _skip(text, 0)
    open_: list[tuple[list[Any], str | None]] = []  # containers being read, an object's key
    while True:
        char = text[at : at + 1]
        value: Any
        if char == "{":
            at = _skip(text, at + 1)
            if text[at : at + 1] == "}":
                value, at = Pairs(), at + 1
            else:
                key, at = _key(text, at)
                open_.append((Pairs(), key))
                continue
        elif char == "[":
            at = _skip(text, at + 1)
            if text[at : at + 1] == "]":
                value, at = [], at + 1
            else:
                open_.append(([], None))
                continue
        else:
            value, at = _scalar(text, at)
        while True:  # hand the value to its container; close those that end here
            if not open_:
                if _skip(text, at) != len(text):
                    raise ValueError(f"extra data at {at}")
                return value
            container, waiting = open_[-1]
            container.append([waiting, value] if isinstance(container, Pairs) else value)
            at = _skip(text, at)
            char = text[at : at + 1]
            if char == ",":
                at = _skip(text, at + 1)
                if isinstance(container, Pairs):
                    key, at = _key(text, at)
                    open_[-1] = (container, key)
                break
            if char != ("}" if isinstance(container, Pairs) else "]"):
                raise ValueError(f"expected ',' or a closing bracket at {at}")
            at += 1
            open_.pop()
            value = container


def dump_json(value: Any) -> str:
    """Compact JSON text of data (objects as ``Pairs`` or mappings), without recursion."""
    out: list[str] = []
    pending: list[tuple[bool, Any]] = [(False, value)]  # (literal text?, item)
    while pending:
        literal, item = pending.pop()
        if literal:
            out.append(item)
        elif isinstance(item, Pairs | Mapping):
            pairs = list(item) if isinstance(item, Pairs) else list(item.items())
            pending.append((True, "}"))
            for index in range(len(pairs) - 1, -1, -1):
                key, inner = pairs[index]
                pending.append((False, inner))
                comma = "," if index else ""
                pending.append((True, f"{comma}{json.dumps(key, ensure_ascii=False)}:"))
            out.append("{")
        elif isinstance(item, list | tuple):
            pending.append((True, "]"))
            for index in range(len(item) - 1, -1, -1):
                pending.append((False, item[index]))
                if index:
                    pending.append((True, ","))
            out.append("[")
        elif type(item) is int:
            out.append(int_text(item))
        else:
            out.append(json.dumps(item, ensure_ascii=False, separators=(",", ":")))
    return "".join(out)


Branch = Callable[[Any], "tuple[Any, Iterable[tuple[Any, Any, Any]]] | None"]
"""What ``rebuilt`` asks of each value: ``None`` for a leaf, else the container to put
in its place and its children as ``(value, holder, slot)``, in the order to fill them."""


def rebuilt(value: Any, branch: Branch, leaf: Callable[[Any], Any] = lambda item: item) -> Any:
    """``value`` copied without recursion: ``branch`` makes each container, ``leaf`` the rest.

    The one walk behind ``as_pairs``, ``plain`` and the recording tap's deep encoder
    (``engine/replay/port_tap.py``): a stack of ``(value, holder, slot)``, each value written
    into ``holder[slot]``, so any depth costs heap, not stack.
    """
    root: list[Any] = [None]
    pending: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while pending:
        item, holder, slot = pending.pop()
        made = branch(item)
        if made is None:
            holder[slot] = leaf(item)
            continue
        holder[slot], children = made
        pending.extend(children)
    return root[0]


def list_branch(item: list[Any] | tuple[Any, ...]) -> tuple[Any, Iterable[tuple[Any, Any, Any]]]:
    """A list or tuple's ``rebuilt`` branch: a list of its length, filled item by item."""
    copied: list[Any] = [None] * len(item)
    return copied, ((inner, copied, index) for index, inner in enumerate(item))


def _pairs_branch(item: Any) -> tuple[Any, Iterable[tuple[Any, Any, Any]]] | None:
    if isinstance(item, Mapping):
        pairs = Pairs([key, None] for key in item)
        return pairs, ((inner, pair, 1) for pair, inner in zip(pairs, item.values(), strict=True))
    if isinstance(item, list | tuple):
        return list_branch(item)
    return None


def _plain_branch(item: Any) -> tuple[Any, Iterable[tuple[Any, Any, Any]]] | None:
    if isinstance(item, Pairs):
        made: dict[str, Any] = {}
        made.update((key, None) for key, _ in item)  # keys in order, as ``json`` has them
        # filled first to last (a stack): a duplicate key's last value wins
        return made, ((inner, made, key) for key, inner in reversed(item))
    if isinstance(item, list):
        return list_branch(item)
    return None


def as_pairs(value: Any) -> Any:
    """JSON data with every mapping as ``Pairs`` (tuples as lists), without recursion."""
    return rebuilt(value, _pairs_branch)


def plain(value: Any) -> Any:
    """``Pairs`` as dicts again (the last of duplicate keys wins, as in ``json``)."""
    return rebuilt(value, _plain_branch)


def load_json(text: str) -> Any:
    """``parse_json`` with objects as dicts (the last of duplicate keys wins, as in ``json``)."""
    return plain(parse_json(text))


def encode_value(value: Any) -> Any:
    """A port argument or answer as JSON data: wire models in their DDR (PascalCase) form.

    What JSON cannot hold (a host's odd object) is kept as its ``repr``: the
    recording stays writable, and a replay then names the call as a divergence.
    """
    try:
        return to_jsonable_python(value, fallback=repr)
    except (ValueError, RecursionError):  # nested deeper than pydantic-core goes (~255 levels),
        return _encoded_deep(value)  # or bytes that are not UTF-8 (UnicodeDecodeError)


def _encoded_deep(value: Any) -> Any:
    """``encode_value`` without recursion: mappings and lists walked, the rest encoded alone."""
    return rebuilt(value, _encoded_branch, _encoded_leaf)


def _encoded_branch(item: Any) -> tuple[Any, Iterable[tuple[Any, Any, Any]]] | None:
    if isinstance(item, Mapping):
        made: dict[str, Any] = {}
        children = []
        for key, inner in item.items():
            name = key if isinstance(key, str) else str(encode_value(key))
            made[name] = None
            children.append((inner, made, name))
        return made, children
    if isinstance(item, list | tuple):
        return list_branch(item)
    return None


def _encoded_leaf(item: Any) -> Any:
    try:
        return to_jsonable_python(item, fallback=repr)
    except ValueError:  # bytes that are not UTF-8: kept as their repr
        return repr(item)
