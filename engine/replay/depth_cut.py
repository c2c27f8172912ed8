"""JSON nested past the engine's depth limit, cut to what the engine read of it.

The engine refuses a request nested deeper than ``max_json_depth`` before any other
work (``DESIGN/limits/json-depth``): its text is read up to the first bracket past
the limit, and no further. Whatever follows — a megabyte of brackets, say — never
mattered to the turn, so a redacted recording keeps only the part read, closed so it
stays JSON (``redaction.py``). The cut is still nested past the limit, so a replay
refuses it by the same rule; and redacting it costs what reading it cost, not what
the whole body would.

Both walks are linear in the part read, without recursion.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from aptix_pipeline.validators import text_too_deep_at

__all__ = ["read_part_of_text", "read_part_of_value"]

# A whole string (skipped), or a run of brackets.
_BRACKET_RUNS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]+', re.DOTALL)
_CLOSING = {"[": "]", "{": "}"}


def read_part_of_text(text: str, max_depth: int) -> str | None:
    """The part of JSON ``text`` the engine reads before refusing it as nested deeper
    than ``max_depth``, closed (``_closers``); ``None`` when it is not that deep.

    The part ends with the first opening bracket past the limit (``text_too_deep_at``),
    so the closed text nests exactly one level past the limit.
    """
    end = text_too_deep_at(text, max_depth)
    if end is None:
        return None
    part = text[:end]
    return part + _closers(part)


def _closers(part: str) -> str:
    """The brackets that close every container ``part`` leaves open, innermost first.

    A closing bracket with nothing open is ignored, as the depth scan ignores it;
    one of the other kind closes all the same (the text is then not JSON, and is
    redacted as such).
    """
    opened: list[str] = []
    for found in _BRACKET_RUNS.finditer(part):
        run = found.group()
        if run[0] == '"':
            continue
        for bracket in run:
            if bracket in _CLOSING:
                opened.append(bracket)
            elif opened:
                opened.pop()
    return "".join(_CLOSING[bracket] for bracket in reversed(opened))


def read_part_of_value(value: Any, max_depth: int) -> Any | None:
    """A request value (mappings and lists) with containers nested deeper than
    ``max_depth``, cut as its JSON text would be; ``None`` when it has none.

    Everything before the first container past the limit, in document order (what the
    engine reads of the value's text), is kept; that container is kept empty; what
    comes after it is left out. Tuples become lists.
    """
    if not _nests_past(value, max_depth):
        return None
    root: list[Any] = []
    # Each frame: the children still to copy (slot, child), where they go, their depth.
    frames: list[tuple[Iterator[tuple[Any, Any]], Any, int]] = [(iter([(None, value)]), root, 1)]
    while frames:
        children, made, depth = frames[-1]
        step = next(children, None)
        if step is None:
            frames.pop()
            continue
        slot, child = step
        copy, inner = _emptied(child)
        if isinstance(made, list):
            made.append(copy)
        else:
            made[slot] = copy
        if inner is None:
            continue
        if depth > max_depth:  # the first container past the limit: nothing after it
            break
        frames.append((inner, copy, depth + 1))
    return root[0]


def _nests_past(value: Any, max_depth: int) -> bool:
    """Whether ``value`` holds a container nested deeper than ``max_depth``."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def _emptied(value: Any) -> tuple[Any, Iterator[tuple[Any, Any]] | None]:
    """An empty container like ``value`` and its children as ``(slot, child)``; a scalar
    as itself, with no children."""
    if isinstance(value, Mapping):
        return {}, iter(value.items())
    if isinstance(value, list | tuple):
        return [], ((None, inner) for inner in value)
    return value, None
