"""The PostgreSQL store's versioned schema: numbered migrations, applied once, in order.

The database records each applied migration in ``aptix_schema_version``. ``migrate``
runs inside one transaction holding a transaction-level advisory lock, so when many
workers start at once exactly one applies what is missing and the others find it
done. A database whose version is newer than this code knows is refused before
anything is changed (the same rule as the SQLite store's ``PRAGMA user_version``).

To change the schema, append a ``Migration`` with the next version; never edit one
that has shipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from aptix_pipeline.contracts import AptixPipelineError

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "VERSION_TABLE",
    "Migration",
    "SchemaVersionError",
    "migrate",
    "read_schema_version",
]

VERSION_TABLE = "aptix_schema_version"
# pg_advisory_xact_lock key shared by every aptix-pipeline worker: b"aptix-mg" as a bigint.
_LOCK_KEY = int.from_bytes(b"aptix-mg", "big", signed=True)


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: ``version`` (1, 2, …), a short name, and its SQL statements."""

    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, mode history, turns, transcript",
        (
            """CREATE TABLE aptix_sessions (
                id text PRIMARY KEY,
                org text NOT NULL,
                user_name text NOT NULL,
                mode text,
                agent_context_id text,
                conversation_context_id text,
                solution_context_text text,
                created_at timestamptz,
                version bigint NOT NULL)""",
            "CREATE INDEX aptix_sessions_owner ON aptix_sessions (org, user_name)",
            # JSON documents are kept as text: byte-exact round trips of the pydantic
            # models, and no jsonb refusal of an escaped NUL (\\u0000) in a message.
            """CREATE TABLE aptix_mode_history (
                session_id text NOT NULL REFERENCES aptix_sessions (id) ON DELETE CASCADE,
                seq integer NOT NULL,
                entry text NOT NULL,
                PRIMARY KEY (session_id, seq))""",
            """CREATE TABLE aptix_turns (
                session_id text NOT NULL REFERENCES aptix_sessions (id) ON DELETE CASCADE,
                id text NOT NULL,
                status text NOT NULL,
                data text NOT NULL,
                PRIMARY KEY (session_id, id))""",
            "CREATE INDEX aptix_turns_status ON aptix_turns (session_id, status)",
            """CREATE TABLE aptix_transcript (
                session_id text NOT NULL REFERENCES aptix_sessions (id) ON DELETE CASCADE,
                seq integer NOT NULL,
                turn_id text NOT NULL,
                message text NOT NULL,
                PRIMARY KEY (session_id, seq))""",
        ),
    ),
    Migration(
        2,
        "solution context text holding NUL, kept as a JSON string literal",
        # PostgreSQL text cannot hold U+0000; such a value goes here, JSON-escaped, and
        # solution_context_text stays NULL. Rows written before keep reading as they were.
        ("ALTER TABLE aptix_sessions ADD COLUMN solution_context_json text",),
    ),
    Migration(
        3,
        "stored outcomes, by org, user and key",
        # A turn's answer kept for retries (StoredOutcome). Its result is text for the
        # reason the JSON documents above are; a result holding a raw NUL goes to
        # result_json_literal as a JSON string literal, as solution_context_json does.
        (
            """CREATE TABLE aptix_outcomes (
                org text NOT NULL,
                user_name text NOT NULL,
                key text NOT NULL,
                request_digest text NOT NULL,
                session_id text NOT NULL REFERENCES aptix_sessions (id) ON DELETE CASCADE,
                turn_id text NOT NULL,
                result_json text,
                result_json_literal text,
                created_at timestamptz NOT NULL,
                expires_at timestamptz,
                PRIMARY KEY (org, user_name, key),
                CHECK ((result_json IS NULL) <> (result_json_literal IS NULL)))""",
            "CREATE INDEX aptix_outcomes_expiry ON aptix_outcomes (expires_at)",
            "CREATE INDEX aptix_outcomes_session ON aptix_outcomes (session_id)",
        ),
    ),
    Migration(
        4,
        "the tool ledger: server-tool calls reserved and done, by org, user and key",
        # result is NULL while the call is reserved; it is ASCII JSON text (the ledger's
        # encoding escapes NUL), so it needs no literal column.
        (
            """CREATE TABLE aptix_tool_ledger (
                org text NOT NULL,
                user_name text NOT NULL,
                key text NOT NULL,
                result text,
                reserved_at timestamptz NOT NULL,
                done_at timestamptz,
                PRIMARY KEY (org, user_name, key))""",
        ),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The newest schema version this code knows."""


class SchemaVersionError(AptixPipelineError, RuntimeError):
    """The database's schema is newer than this code, or (without migrating) older."""


async def read_schema_version(connection: AsyncConnection[Any]) -> int:
    """The database's schema version; 0 when aptix-pipeline never migrated it."""
    cursor = await connection.execute("SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,))
    row = await cursor.fetchone()
    if row is None or not row[0]:
        return 0
    cursor = await connection.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}")
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


def _refuse_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the database has schema version {version}; this aptix-pipeline knows up to "
            f"{SCHEMA_VERSION} — upgrade aptix-pipeline, or use another database"
        )


async def migrate(connection: AsyncConnection[Any], *, apply: bool = True) -> list[int]:
    """Bring the schema to ``SCHEMA_VERSION``; returns the versions this call applied.

    ``connection`` must be in autocommit mode (the migration opens its own transaction).
    With ``apply=False`` nothing is changed: a database not at ``SCHEMA_VERSION`` is
    refused (for deployments that migrate in a separate step).
    """
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        current = await read_schema_version(connection)
        _refuse_newer(current)  # before anything is touched
        if current == SCHEMA_VERSION:
            return []
        if not apply:
            raise SchemaVersionError(
                f"the database has schema version {current}; this aptix-pipeline needs "
                f"{SCHEMA_VERSION} and was told not to migrate"
            )
        if current == 0:
            await connection.execute(
                f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
                "version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
        applied: list[int] = []
        for migration in MIGRATIONS:
            if migration.version <= current:
                continue
            for statement in migration.statements:
                await connection.execute(statement)
            await connection.execute(
                f"INSERT INTO {VERSION_TABLE} (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration.version)
        return applied
