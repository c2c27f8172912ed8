"""The tool ledger: where a server-tool call is reserved before it runs and recorded
once it is done, so a retried turn never runs a done call again (issue 29,
docs/TOOLS.md "Exactly once").

- ``LedgerEntry`` — one call's entry: its key, and its recorded answer once done.
- ``ToolLedger`` — the port: ``reserve_tool_call``, ``complete_tool_call``,
  ``release_tool_call``, and ``purge_tool_calls`` for entries past their time.
  Entries are scoped to an org and a user, like the turns they belong to.
  Unlike a turn's writes, each call is committed on its own, at once: a
  reservation must outlive a crash of the turn that made it. Two reservations of
  one key race safely: exactly one gets ``None``. A store that runs all its
  calls in order may return from ``complete_tool_call`` once the write is queued
  (the SQLite store does): it still lands before anything asked of the store
  later, and if it never lands the call reads as reserved, not done, which a
  retry treats safely (the policy, never a blind re-run).

The memory, SQLite and PostgreSQL stores implement it beside ``SessionStore``;
the pipeline uses the ledger of a store that has one (``steps/tool_ledger.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from .wire import FrozenWireModel

__all__ = ["LedgerEntry", "ToolLedger"]


class LedgerEntry(FrozenWireModel):
    """A server-tool call in the ledger: reserved, and done once ``result`` is recorded.

    ``result`` is the call's answer as ``steps/tool_ledger.py`` encodes it (JSON
    text); ``None`` while the call is reserved but not done.
    """

    key: str
    result: str | None = None
    reserved_at: datetime
    done_at: datetime | None = None

    @property
    def done(self) -> bool:
        """Whether the call finished and its answer is recorded."""
        return self.result is not None


@runtime_checkable
class ToolLedger(Protocol):
    """Reserve → done for server-tool calls, by idempotency key, per org and user.

    Every method commits on its own before it returns, except that
    ``complete_tool_call`` may return once its write is queued in a store that
    runs its calls in order; such a store logs a queued write that fails
    (module docstring).
    """

    async def reserve_tool_call(
        self, org: str, user: str, key: str, now: datetime
    ) -> LedgerEntry | None:
        """Reserve ``key``: ``None`` when this call took it, else the entry already there
        (reserved by an earlier attempt, or done). Of two racing calls, one gets ``None``."""
        ...

    async def complete_tool_call(
        self, org: str, user: str, key: str, result: str, now: datetime
    ) -> None:
        """Record ``key`` as done with ``result``; an entry already done keeps its first result."""
        ...

    async def release_tool_call(self, org: str, user: str, key: str) -> None:
        """Drop the reservation of ``key`` when it is not done (a done entry stays)."""
        ...

    async def purge_tool_calls(self, before: datetime) -> int:
        """Delete every entry reserved before ``before``, done or not, of every org and
        user; how many there were. A call retried after its entry went runs as new."""
        ...
