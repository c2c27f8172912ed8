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


# The usage ledger's columns after its id (migration 5), with their types.
_USAGE_COLUMNS = (
    ("org", "text NOT NULL"),
    ("user_name", "text NOT NULL"),
    ("session_id", "text NOT NULL"),
    ("turn_id", "text NOT NULL"),
    ("mode", "text NOT NULL"),
    ("model", "text"),
    ("at", "timestamptz NOT NULL"),
    ("round", "integer NOT NULL"),
    ("step", "text NOT NULL"),
    ("settled", "boolean NOT NULL"),
    ("charge_tokens", "bigint NOT NULL"),
    ("charge_cost", "numeric NOT NULL"),
    ("charge_model_calls", "bigint NOT NULL"),
    ("charge_tool_calls", "bigint NOT NULL"),
    ("charge_server_tool_rounds", "bigint NOT NULL"),
    ("reported", "boolean NOT NULL"),
    ("input_tokens", "bigint NOT NULL"),
    ("output_tokens", "bigint NOT NULL"),
    ("cached_input_tokens", "bigint NOT NULL"),
    ("reasoning_tokens", "bigint NOT NULL"),
    ("priced", "boolean NOT NULL"),
    ("cost", "numeric"),
    ("currency", "text"),
    ("tool_calls", "bigint NOT NULL"),
    ("server_tool_round", "boolean NOT NULL"),
    ("failed", "boolean NOT NULL"),
)


def _json_key(column: str) -> str:
    """The key of ``column`` in the JSON ``aptix_keep_usage`` reads (``usage_row``'s names)."""
    return '"user"' if column == "user_name" else column


_KEEP_USAGE = (
    "CREATE FUNCTION aptix_keep_usage(calls jsonb) RETURNS void LANGUAGE plpgsql VOLATILE AS "
    "$body$ BEGIN INSERT INTO aptix_usage_calls (id, "
    + ", ".join(column for column, _ in _USAGE_COLUMNS)
    + ") SELECT c.id, "
    + ", ".join(f"c.{_json_key(column)}" for column, _ in _USAGE_COLUMNS)
    + " FROM jsonb_to_recordset(calls) AS c(id text, "
    + ", ".join(f"{_json_key(column)} {kind.split()[0]}" for column, kind in _USAGE_COLUMNS)
    + ") ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{column} = EXCLUDED.{column}" for column, _ in _USAGE_COLUMNS)
    + ", seq = EXCLUDED.seq; END $body$"
)
"""Store calls, each replacing the row of its id (its reservation, when settled) and
taking a new ``seq``, so it orders among calls made at its instant as stored last.
PL/pgSQL, whose plans a connection keeps, where a SQL function is planned at each call."""


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
    Migration(
        5,
        "the usage ledger: model calls reserved and settled against budgets",
        # Costs are numeric (exact). seq orders calls made at one instant as stored (a
        # settlement takes a new one, as the memory store moves it). The functions are
        # the store's one round trip per call (postgres.py, D578): aptix_reserve_usage
        # takes the org's advisory lock in one statement and counts in later ones, each
        # with a snapshot of its own (READ COMMITTED), so it counts every reservation
        # committed before it got the lock.
        (
            "CREATE TABLE aptix_usage_calls (id text PRIMARY KEY, seq bigserial NOT NULL, "
            + ", ".join(f"{column} {kind}" for column, kind in _USAGE_COLUMNS)
            + ")",
            "CREATE INDEX aptix_usage_calls_time ON aptix_usage_calls (org, at)",
            "CREATE INDEX aptix_usage_calls_turn ON aptix_usage_calls (org, turn_id)",
            _KEEP_USAGE,
            """CREATE FUNCTION aptix_reserve_usage(settle jsonb, call jsonb, checks jsonb)
            RETURNS TABLE (budget_id text, used numeric, oldest timestamptz, reserved boolean)
            LANGUAGE plpgsql VOLATILE AS $body$
            DECLARE
                c record;
                fits boolean := true;
            BEGIN
                PERFORM pg_advisory_xact_lock(
                    hashtextextended('aptix-usage:' || (call->>'org'), 0));
                PERFORM aptix_keep_usage(settle);
                IF EXISTS (SELECT 1 FROM aptix_usage_calls u WHERE u.id = call->>'id') THEN
                    -- an earlier try of this reservation took it: it stands
                    budget_id := NULL;
                    used := NULL;
                    oldest := NULL;
                    reserved := true;
                    RETURN NEXT;
                    RETURN;
                END IF;
                FOR c IN SELECT * FROM jsonb_to_recordset(checks) AS x(
                    budget_id text, metric text, "limit" numeric, amount numeric, org text,
                    "user" text, mode text, turn_id text, since timestamptz, currency text)
                LOOP
                    -- One query per shape, each planned once for its index: a turn's
                    -- calls by (org, turn_id), a window's by (org, at).
                    IF c.turn_id IS NOT NULL THEN
                        SELECT COALESCE(SUM(CASE c.metric
                            WHEN 'tokens' THEN u.charge_tokens::numeric
                            WHEN 'cost' THEN u.charge_cost
                            WHEN 'model_calls' THEN u.charge_model_calls::numeric
                            WHEN 'tool_calls' THEN u.charge_tool_calls::numeric
                            ELSE u.charge_server_tool_rounds::numeric END), 0), MIN(u.at)
                        INTO used, oldest
                        FROM aptix_usage_calls u
                        WHERE u.org = c.org AND u.turn_id = c.turn_id
                            AND (c."user" IS NULL OR u.user_name = c."user")
                            AND (c.mode IS NULL OR u.mode = c.mode)
                            AND (c.turn_id IS NULL OR u.turn_id = c.turn_id)
                            AND (c.since IS NULL OR u.at >= c.since)
                            AND (c.currency IS NULL OR u.currency = c.currency);
                    ELSIF c.since IS NOT NULL THEN
                        SELECT COALESCE(SUM(CASE c.metric
                            WHEN 'tokens' THEN u.charge_tokens::numeric
                            WHEN 'cost' THEN u.charge_cost
                            WHEN 'model_calls' THEN u.charge_model_calls::numeric
                            WHEN 'tool_calls' THEN u.charge_tool_calls::numeric
                            ELSE u.charge_server_tool_rounds::numeric END), 0), MIN(u.at)
                        INTO used, oldest
                        FROM aptix_usage_calls u
                        WHERE u.org = c.org AND u.at >= c.since
                            AND (c."user" IS NULL OR u.user_name = c."user")
                            AND (c.mode IS NULL OR u.mode = c.mode)
                            AND (c.turn_id IS NULL OR u.turn_id = c.turn_id)
                            AND (c.since IS NULL OR u.at >= c.since)
                            AND (c.currency IS NULL OR u.currency = c.currency);
                    ELSE
                        SELECT COALESCE(SUM(CASE c.metric
                            WHEN 'tokens' THEN u.charge_tokens::numeric
                            WHEN 'cost' THEN u.charge_cost
                            WHEN 'model_calls' THEN u.charge_model_calls::numeric
                            WHEN 'tool_calls' THEN u.charge_tool_calls::numeric
                            ELSE u.charge_server_tool_rounds::numeric END), 0), MIN(u.at)
                        INTO used, oldest
                        FROM aptix_usage_calls u
                        WHERE u.org = c.org AND true
                            AND (c."user" IS NULL OR u.user_name = c."user")
                            AND (c.mode IS NULL OR u.mode = c.mode)
                            AND (c.turn_id IS NULL OR u.turn_id = c.turn_id)
                            AND (c.since IS NULL OR u.at >= c.since)
                            AND (c.currency IS NULL OR u.currency = c.currency);
                    END IF;
                    budget_id := c.budget_id;
                    reserved := NULL;
                    fits := fits AND used + c.amount <= c."limit";
                    RETURN NEXT;
                END LOOP;
                IF fits THEN
                    PERFORM aptix_keep_usage(jsonb_build_array(call));
                END IF;
                budget_id := NULL;
                used := NULL;
                oldest := NULL;
                reserved := fits;
                RETURN NEXT;
            END
            $body$""",
        ),
    ),
    Migration(
        6,
        "forks: a session's parent, its cut and its prefix length",
        # A fork shares its parent's transcript up to parent_seq (stores/forks.py);
        # RESTRICT: a session with forks cannot be deleted from under them.
        (
            "ALTER TABLE aptix_sessions "
            "ADD COLUMN parent_id text REFERENCES aptix_sessions (id) ON DELETE RESTRICT, "
            "ADD COLUMN parent_turn_id text, ADD COLUMN parent_seq integer, "
            "ADD COLUMN prefix_len integer NOT NULL DEFAULT 0",
            "CREATE INDEX aptix_sessions_parent ON aptix_sessions (parent_id)",
            "CREATE INDEX aptix_transcript_turn ON aptix_transcript (session_id, turn_id, seq)",
        ),
    ),
    Migration(
        7,
        "turn traces: every turn's state trace, failed turns included",
        # TraceLog (contracts/traces.py, issue 33): seq is the order traces are listed
        # in, newest first; no foreign key, a failed first turn has no session.
        (
            """CREATE TABLE aptix_turn_traces (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id text NOT NULL UNIQUE,
                org text NOT NULL,
                user_name text NOT NULL,
                session_id text,
                turn_id text,
                at timestamptz NOT NULL,
                outcome text NOT NULL,
                trace text NOT NULL,
                error_code text,
                error_message text,
                faulted_step text,
                expires_at timestamptz,
                steps text NOT NULL DEFAULT '[]')""",
            "CREATE INDEX aptix_turn_traces_owner ON aptix_turn_traces (org, user_name, seq)",
            "CREATE INDEX aptix_turn_traces_session "
            "ON aptix_turn_traces (org, user_name, session_id, seq)",
            "CREATE INDEX aptix_turn_traces_expiry ON aptix_turn_traces (expires_at)",
        ),
    ),
    Migration(
        8,
        "turns: their creation time and tokens as columns, for the session search",
        # The session search (postgres.py _SEARCH) orders every session by its last
        # turn's time and sums its tokens: reading them from each turn's JSON text cost
        # a parse per turn per search. The store writes both with the turn; rows kept
        # before are filled here from their JSON (a time without a zone is UTC).
        (
            "ALTER TABLE aptix_turns ADD COLUMN created_at timestamptz, "
            "ADD COLUMN tokens bigint NOT NULL DEFAULT 0",
            "SET LOCAL TIME ZONE 'UTC'",
            "UPDATE aptix_turns SET created_at = (data::json->>'CreatedAt')::timestamptz, "
            "tokens = COALESCE((data::json->'Usage'->>'TotalTokens')::bigint, 0)",
            "CREATE INDEX aptix_turns_created ON aptix_turns (session_id, created_at)",
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
