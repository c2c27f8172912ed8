"""Shared pieces of the store tests: the caller and time the store contract cases use,
and a look at a SQLite store's own connection.

``ORG`` and ``USER`` are the caller whose sessions the cases write (``acme`` /
``ana``), ``T0`` the fixed instant their records are stamped from,
``sqlite_pragma`` reads a PRAGMA as the store's connection sees it, and
``postgres_at_version`` gives an empty PostgreSQL database the schema an older
release left (for the migration tests).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aptix_pipeline.adapters.stores.postgres_migrations import MIGRATIONS, VERSION_TABLE
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore

__all__ = ["ORG", "T0", "USER", "postgres_at_version", "sqlite_pragma"]

ORG, USER = "acme", "ana"
T0 = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


def sqlite_pragma(store: SQLiteStore, name: str) -> object:
    """A PRAGMA as the store's own connection sees it (on its worker thread)."""
    return store._worker.call_sync(lambda: store._db().execute(f"PRAGMA {name}").fetchone()[0])


def postgres_at_version(connection: Any, version: int) -> None:
    """Bring the empty database of ``connection`` (a psycopg connection, autocommit) to
    schema ``version`` as that release left it: the version table and the first
    ``version`` migrations, each recorded there as the store's migrator records it."""
    connection.execute(
        f"CREATE TABLE {VERSION_TABLE} (version integer PRIMARY KEY, name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in MIGRATIONS[:version]:
        for statement in migration.statements:
            connection.execute(statement)
        connection.execute(
            f"INSERT INTO {VERSION_TABLE} (version, name) VALUES (%s, %s)",
            (migration.version, migration.name),
        )
