"""JSON paths for error fields: ``InputArtifacts[0].RelativePath``, ``options.depth``."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["json_path"]


def json_path(parts: Iterable[int | str]) -> str:
    """Join keys with ``.`` and list indexes as ``[i]``; the root is ``""``."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
