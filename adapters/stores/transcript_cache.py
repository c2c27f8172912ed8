"""Decoded transcripts a SQL store keeps, so a long session's turn decodes only its new messages.

A session's transcript only grows: the SQLite and PostgreSQL stores append each
turn's messages as rows with a rising ``seq`` and never change or delete one. So
the messages a store has decoded for a session stay true, and the next read asks
the database only for the rows after the last one it holds (``seq > last_seq``)
and decodes those: a follow-on after 1,000 turns decodes two messages, not two
thousand (docs/PERFORMANCE.md "Long sessions").

An entry is keyed by org, user and session, and made only from rows the owner's
own read returned, so it never answers another caller (DESIGN.md "Isolation").
Messages are frozen values (``unit_of_work``): every read gets a new list of the
same objects, as from the memory store. The entries are bounded by ``budget``,
counted as each message's JSON size plus ``MESSAGE_OVERHEAD``; the least recently
read sessions are dropped first, and a session larger than the whole budget is not
kept (it is decoded whole each time, as without a cache). A budget of 0 keeps
nothing.

A read is two halves, so the database call between them may be on another thread
(SQLite) or awaited (PostgreSQL): ``start`` gives what is held and from where to
read; ``finish`` decodes the new rows and stores them if nobody extended the entry
meanwhile. A lock keeps each half atomic.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from aptix_pipeline.contracts import ChatMessage, Transcript, last_image_at

__all__ = ["DEFAULT_BUDGET", "MESSAGE_OVERHEAD", "TranscriptCache"]

DEFAULT_BUDGET: Final = 64 * 1024 * 1024
"""A store's default ``transcript_cache_bytes``: 64 MiB of messages' JSON."""
MESSAGE_OVERHEAD: Final = 512
"""What a decoded message counts for beyond its JSON text (the objects around it)."""

_Key = tuple[str, str, str]


@dataclass(slots=True)
class _Entry:
    messages: list[ChatMessage]
    last_seq: int
    weight: int
    last_image: int = -1


class TranscriptCache:
    """The decoded transcripts of the sessions read last, within ``budget``."""

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        if budget < 0:
            raise ValueError(f"transcript_cache_bytes must be 0 or more, not {budget}")
        self.budget = budget
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    @property
    def weight(self) -> int:
        """What the entries count for now, against ``budget``."""
        return self._weight

    def __len__(self) -> int:
        return len(self._entries)

    def start(self, key: _Key) -> tuple[Transcript, int]:
        """A copy of the messages held for ``key`` and the ``seq`` to read after (0: all)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return Transcript(), 0
            self._entries.move_to_end(key)
            return Transcript(entry.messages, entry.last_image), entry.last_seq

    def finish(
        self,
        key: _Key,
        held: Transcript,
        last_seq: int,
        rows: Iterable[tuple[int, str]],
    ) -> Transcript:
        """``held`` and the decoded ``rows`` (seq, message JSON, in seq order, all after
        ``last_seq``, as ``start`` gave them): the whole transcript, kept for the next
        read when it fits."""
        added: list[ChatMessage] = []
        weight, newest = 0, last_seq
        for seq, text in rows:
            added.append(ChatMessage.model_validate_json(text))
            weight += len(text) + MESSAGE_OVERHEAD
            newest = seq
        found = last_image_at(added)
        if found >= 0:
            held.last_image = len(held) + found
        held.extend(added)
        if not self.budget or not held:
            return held
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                if last_seq:  # dropped since ``start``: what it held is not counted here
                    return held
                entry = self._entries[key] = _Entry([], 0, 0)
            elif entry.last_seq != last_seq:  # another read moved it on meanwhile
                return held
            entry.messages.extend(added)
            entry.last_seq = newest
            entry.last_image = held.last_image
            entry.weight += weight
            self._weight += weight
            if entry.weight > self.budget:  # larger than the whole budget: not kept
                del self._entries[key]
                self._weight -= entry.weight
                return held
            self._entries.move_to_end(key)
            while self._weight > self.budget:  # the least recently read first; never ``key``
                _, dropped = self._entries.popitem(last=False)
                self._weight -= dropped.weight
        return held
