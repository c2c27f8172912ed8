"""Id sources for the IdSource port: random, and sequential for repeatable runs."""

from __future__ import annotations

import uuid
from collections import Counter

__all__ = ["RandomIds", "SequentialIds"]


class RandomIds:
    """Random, unguessable ids: ``<kind>_<32 hex digits>``."""

    def new_id(self, kind: str) -> str:
        """A new id of this kind."""
        return f"{kind}_{uuid.uuid4().hex}"


class SequentialIds:
    """``<prefix><kind>-1``, ``<prefix><kind>-2``, … per kind: the same on every run."""

    def __init__(self, prefix: str = "") -> None:
        self._prefix = prefix
        self._counts: Counter[str] = Counter()

    def new_id(self, kind: str) -> str:
        """The next id of this kind."""
        self._counts[kind] += 1
        return f"{self._prefix}{kind}-{self._counts[kind]}"
