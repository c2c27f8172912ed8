"""Shared pieces of the store tests: the caller and time the store contract cases use,
and a look at a SQLite store's own connection.

``ORG`` and ``USER`` are the caller whose sessions the cases write (``acme`` /
``ana``), ``T0`` the fixed instant their records are stamped from, and
``sqlite_pragma`` reads a PRAGMA as the store's connection sees it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from aptix_pipeline.adapters.stores.sqlite import SQLiteStore

__all__ = ["ORG", "T0", "USER", "sqlite_pragma"]

ORG, USER = "acme", "ana"
T0 = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


def sqlite_pragma(store: SQLiteStore, name: str) -> object:
    """A PRAGMA as the store's own connection sees it (on its worker thread)."""
    return store._worker.call_sync(lambda: store._db().execute(f"PRAGMA {name}").fetchone()[0])
