"""The PostgreSQL ``SessionStore``: many workers on many hosts share one database.

- psycopg 3, async, over a ``psycopg_pool.AsyncConnectionPool``. The constructor
  needs no event loop: the pool opens on first use inside the loop (or at
  ``await store.open()``), after the schema is migrated (``postgres_migrations``).
- One database transaction per turn: a turn's writes arrive together
  (``unit_of_work.BufferedTransaction``) and are applied at commit in one
  transaction, so a failed turn writes nothing and no lock is held while the
  model thinks.
- Optimistic versioning, as in the SQLite store: each session a turn writes must
  still have the version the turn read (``UPDATE … WHERE version = expected``);
  otherwise — another turn, or another continuation of the same turn, committed
  first — the commit raises ``StoreConflictError`` and nothing of it is stored.
- Stored outcomes (``StoredOutcome``, schema version 3) are written in the same
  transaction with ``INSERT … ON CONFLICT DO UPDATE … WHERE`` the stored one has
  expired: of two transactions storing one key at once, the second waits for the
  first and then finds the key taken (``StoreConflictError``). Each commit that
  stores outcomes deletes up to ``OUTCOME_SWEEP`` expired ones (skipping rows other
  transactions hold); ``purge_outcomes`` removes all of them.
- The tool ledger (``ToolLedger``, ``contracts/ledger.py``; schema version 4): each
  call is one autocommitted statement, outside any turn's transaction, so a
  reservation survives a crash of its turn; ``INSERT … ON CONFLICT DO NOTHING``
  lets exactly one of two racing reservations take a key. Recording a call done is
  awaited: pooled connections would not order it before the turn's commit (the
  SQLite store's single worker does). ``purge_tool_calls`` deletes the entries
  reserved before a given time, a batch of keys at a time.
- The usage ledger (``UsageLedger``, ``contracts/usage.py``; schema version 5,
  table ``aptix_usage_calls``): ``reserve_usage`` is one statement, one round trip,
  calling the function ``aptix_reserve_usage`` the migration installs. It takes an
  advisory lock keyed by the org (``pg_advisory_xact_lock``), settles, counts each
  budget and reserves when every one holds, in one transaction; each statement in
  it reads a snapshot of its own, taken after the lock, so two processes' racing
  reservations of one org are counted one after the other. Costs are ``numeric``.
- Forks (``SessionForks``, ``stores/forks.py``; schema version 6): a fork is one
  ``aptix_sessions`` row naming its parent (a foreign key ``ON DELETE RESTRICT``), its
  cut and its prefix length, plus its copied mode history, written in one
  transaction; a transcript is read with one recursive query over the ancestors.
- Turn traces (``TraceLog``, ``contracts/traces.py``; schema version 7, table
  ``aptix_turn_traces``): keeping one is one autocommitted statement that also
  deletes up to ``TRACE_SWEEP`` expired ones; ``seq`` orders them, newest first.
- Turn notices (``stores/turn_notices.py``): each turn's commit transaction sends a
  ``NOTIFY aptix_turns`` naming its org, user, session, turn and status (no content),
  delivered when it commits; ``turn_notices`` listens on a connection of its own.
- The session search (``SessionSearch``, ``stores/session_search.py``): one statement
  a page (``_SEARCH``), over each turn's creation time and tokens kept as columns
  beside its JSON (schema version 8).
- The URL's password never appears in an error message or a repr.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from decimal import Decimal
from types import TracebackType
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection, errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from aptix_pipeline.contracts import (
    AptixPipelineError,
    BudgetCheck,
    ChatMessage,
    KeptTrace,
    LedgerEntry,
    ReserveOutcome,
    Session,
    StoreConflictError,
    StoredOutcome,
    Transcript,
    Turn,
    TurnStatus,
    UsageCall,
    UsageQuery,
)

from .forks import check_forkable, forked_session, no_session
from .postgres_migrations import SCHEMA_VERSION, SchemaVersionError, migrate, read_schema_version
from .session_browser import (
    DEFAULT_PAGE,
    OwnerSummary,
    SessionSummary,
    TranscriptEntry,
    check_page,
    message_text,
    turn_order,
)
from .session_search import SessionFilter, SessionRow, SqlDialect, preview_of, search_where
from .transcript_cache import DEFAULT_BUDGET, TranscriptCache
from .turn_notices import TURNS_CHANNEL, TurnNotice, notice_payload, parse_notice
from .unit_of_work import BufferedTransaction, SessionWrite, TurnWrites, session_from_row
from .usage_ledger import (
    USAGE_FIELDS,
    check_reservation,
    usage_call_from_row,
    usage_filters,
    usage_row,
)

__all__ = [
    "OUTCOME_SWEEP",
    "SCHEMA_VERSION",
    "TRACE_SWEEP",
    "PostgresStore",
    "PostgresStoreError",
    "SchemaVersionError",
    "redact_url",
]

_Connection = AsyncConnection[tuple[Any, ...]]
_PASSWORD_IN_CONNINFO = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)", re.IGNORECASE)
OUTCOME_SWEEP: Final = 100
"""Expired outcomes a commit that stores outcomes deletes at most (module docstring)."""
TRACE_SWEEP: Final = 16
"""Expired traces keeping a trace deletes at most (module docstring)."""
_PURGE_BATCH: Final = 1000
_TRACE_FIELDS: Final = (
    "id, org, user_name, session_id, turn_id, at, outcome, trace, error_code, error_message, "
    "faulted_step, expires_at, steps"
)
_EXPIRED_TRACES: Final = (
    "DELETE FROM aptix_turn_traces WHERE seq IN (SELECT seq FROM aptix_turn_traces "
    "WHERE expires_at <= %s LIMIT %s FOR UPDATE SKIP LOCKED)"
)
"""Delete at most ``LIMIT`` traces expired by the time given, skipping rows others hold."""
_KEEP_TRACE: Final = (
    f"WITH swept AS ({_EXPIRED_TRACES}) INSERT INTO aptix_turn_traces ({_TRACE_FIELDS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
"""Keep a trace and sweep a few expired ones, in one statement."""
_DELETE_EXPIRED: Final = (
    "DELETE FROM aptix_outcomes o USING (SELECT org, user_name, key "
    "FROM aptix_outcomes WHERE expires_at <= %s LIMIT %s FOR UPDATE SKIP LOCKED) d "
    "WHERE o.org = d.org AND o.user_name = d.user_name AND o.key = d.key"
)
"""Delete at most ``LIMIT`` outcomes expired by the time given, skipping rows other
transactions hold (they are being replaced)."""
_TRANSCRIPT_AFTER: Final = (
    "WITH RECURSIVE chain (id, upto, off) AS ("
    "SELECT id, -1, prefix_len FROM aptix_sessions WHERE id = %s AND org = %s "
    "AND user_name = %s UNION ALL SELECT s.parent_id, s.parent_seq, s.prefix_len - s.parent_seq "
    "FROM chain c JOIN aptix_sessions s ON s.id = c.id WHERE s.parent_id IS NOT NULL) "
    "SELECT c.off + t.seq, t.message FROM chain c JOIN aptix_transcript t "
    "ON t.session_id = c.id WHERE t.seq > %s - c.off AND (c.upto < 0 OR t.seq <= c.upto) "
    "ORDER BY c.off + t.seq"
)
"""A session's messages after a place in its whole transcript (``stores/forks.py``)."""
_SESSION_SELECT: Final = (
    "SELECT s.id, s.org, s.user_name, s.mode, s.agent_context_id, "
    "s.conversation_context_id, s.solution_context_text, s.created_at, s.version, "
    "ARRAY(SELECT h.entry FROM aptix_mode_history h WHERE h.session_id = s.id "
    "ORDER BY h.seq), s.solution_context_json, s.parent_id, s.parent_turn_id, s.prefix_len "
    "FROM aptix_sessions s"
)
_USAGE_SELECT: Final = (
    "SELECT "
    + ", ".join("user_name" if field == "user" else field for field in USAGE_FIELDS)
    + " FROM aptix_usage_calls"
)
_DELETE_OLD_CALLS: Final = (
    "WITH batch AS (SELECT org, user_name, key FROM aptix_tool_ledger "
    "WHERE (org, user_name, key) > (%s, %s, %s) ORDER BY org, user_name, key LIMIT %s), "
    "gone AS (DELETE FROM aptix_tool_ledger l USING batch b WHERE l.org = b.org "
    "AND l.user_name = b.user_name AND l.key = b.key AND l.reserved_at < %s RETURNING 1) "
    "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM batch), org, user_name, key "
    "FROM batch ORDER BY org DESC, user_name DESC, key DESC LIMIT 1"
)
"""Of the next ``LIMIT`` ledger entries after a key (in key order: no index on the
age, which every reservation would pay for), delete those reserved before the time
given; how many went, how many were read, and the last key read."""


_SEARCH: Final = (
    "WITH l AS (SELECT session_id, MAX(created_at) AS at, COUNT(*) AS n, "
    'SUM(tokens) AS tokens, (array_agg(status ORDER BY created_at DESC NULLS LAST, id COLLATE "C" '
    "DESC))[1] AS status FROM aptix_turns GROUP BY session_id), "
    "p AS (SELECT s.id, s.org, s.user_name, s.mode, s.created_at, l.at, l.status, "
    "COALESCE(l.n, 0) AS n, COALESCE(l.tokens, 0) AS tokens, k.outcome, k.error_code, "
    "k.error_message, COALESCE(l.at, s.created_at) AS last "
    "FROM aptix_sessions s LEFT JOIN l ON l.session_id = s.id "
    "LEFT JOIN LATERAL (SELECT k.outcome, k.error_code, k.error_message "
    "FROM aptix_turn_traces k WHERE k.org = s.org AND k.user_name = s.user_name "
    "AND k.session_id = s.id ORDER BY k.seq DESC LIMIT 1) k ON true WHERE {where} "
    'ORDER BY last DESC NULLS LAST, s.id COLLATE "C" LIMIT %s OFFSET %s) '
    "SELECT p.id, p.org, p.user_name, p.mode, p.created_at, p.at, p.status, p.n, p.tokens, "
    "p.outcome, p.error_code, p.error_message, (SELECT x.message FROM aptix_transcript x "
    "WHERE x.session_id = p.id ORDER BY x.seq LIMIT 1), "
    "(SELECT json_agg(json_build_array(c.currency, c.cost::text)) FROM (SELECT u.currency, "
    "SUM(u.cost) AS cost FROM aptix_turns v JOIN aptix_usage_calls u ON u.org = p.org "
    "AND u.turn_id = v.id AND u.session_id = v.session_id WHERE v.session_id = p.id "
    "AND u.settled AND u.priced AND u.cost IS NOT NULL GROUP BY u.currency) c) "
    'FROM p ORDER BY p.last DESC NULLS LAST, p.id COLLATE "C"'
)
"""The session search (``search_sessions``), one statement: each session's turns
counted and summed, its latest turn's status (the last by creation time, then id),
its last kept trace's outcome and error, filtered and ordered by last activity; then,
for the page's rows only, the first message and the priced cost by currency."""
_SEARCH_SQL: Final = SqlDialect(
    p="%s",
    org="s.org",
    user="s.user_name",
    mode="s.mode",
    session_id="s.id",
    turns="aptix_turns",
    prefix="left(s.id, %s) = %s",
    no_turns="l.session_id IS NULL",
    status="l.status",
    not_faulted="k.outcome IS DISTINCT FROM %s",
    activity="COALESCE(l.at, s.created_at) {op} %s",
)
"""``_SEARCH``'s columns and functions, for ``search_where``."""


class PostgresStoreError(AptixPipelineError, RuntimeError):
    """The PostgreSQL store cannot serve: unreachable, refused, or already closed."""


def _kept_trace(row: Sequence[Any]) -> KeptTrace:
    """An ``aptix_turn_traces`` row (``_TRACE_FIELDS``) as a ``KeptTrace``."""
    return KeptTrace(
        id=row[0],
        org=row[1],
        user=row[2],
        session_id=row[3],
        turn_id=row[4],
        at=row[5],
        outcome=row[6],
        trace=row[7],
        error_code=row[8],
        error_message=row[9],
        faulted_step=row[10],
        expires_at=row[11],
        steps=row[12],
    )


def _nul_safe_columns(text: str | None) -> tuple[str | None, str | None]:
    """``(text, literal)``: the two columns that keep ``text`` (solution context, result).

    PostgreSQL text cannot hold U+0000, which SQLite and memory keep (D221): such a
    text is stored as a JSON string literal in the second column
    (``solution_context_json``, schema version 2; ``result_json_literal``, version 3),
    every other text as itself in the first, so rows written before still read.
    """
    if text is not None and "\x00" in text:
        return None, json.dumps(text)
    return text, None


def _session(row: Sequence[Any]) -> Session:
    """A session read by ``_SESSION_SELECT``."""
    if row[10] is not None:  # a text holding NUL (_nul_safe_columns)
        row = (*row[:6], json.loads(row[10]), *row[7:])
    return session_from_row(row, row[9], row[11:14])


def _outcome_from_row(row: Sequence[Any]) -> StoredOutcome:
    """A stored outcome from its columns as ``read_outcome`` selects them."""
    return StoredOutcome(
        key=row[0],
        request_digest=row[1],
        session_id=row[2],
        turn_id=row[3],
        result_json=row[4] if row[5] is None else json.loads(row[5]),
        created_at=row[6],
        expires_at=row[7],
    )


def _json_value(value: object) -> object:
    """A value as JSON keeps it exactly: a ``Decimal`` as its text, a time as ISO 8601."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _usage_json(calls: Sequence[UsageCall]) -> str:
    """Calls as the JSON array ``aptix_keep_usage`` reads (postgres_migrations.py)."""
    return json.dumps(
        [
            {
                field: _json_value(value)
                for field, value in zip(USAGE_FIELDS, usage_row(call), strict=True)
            }
            for call in calls
        ]
    )


def _checks_json(checks: Sequence[BudgetCheck]) -> str:
    """Checks as the JSON array ``aptix_reserve_usage`` reads."""
    return json.dumps(
        [
            {
                "budget_id": check.budget_id,
                "metric": check.metric.value,
                "limit": str(check.limit),
                "amount": str(check.amount),
                "org": check.org,
                "user": check.user,
                "mode": check.mode,
                "turn_id": check.turn_id,
                "since": None if check.since is None else check.since.isoformat(),
                "currency": check.currency,
            }
            for check in checks
        ]
    )


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (URL or ``key=value`` form)."""
    if "://" in url:
        parts = urlsplit(url)
        if parts.password is not None:
            host = parts.netloc.rpartition("@")[2]
            user = parts.netloc.rpartition("@")[0].partition(":")[0]
            parts = parts._replace(netloc=f"{user}:***@{host}")
        url = urlunsplit(parts)
    return _PASSWORD_IN_CONNINFO.sub(r"\1***", url)


class PostgresStore:
    """Sessions in PostgreSQL; see the module docstring.

    ``url`` is a libpq URL (``postgresql://user:password@host:5432/db``) or a
    ``key=value`` connection string. ``min_size``/``max_size`` bound the pool
    (one connection serves one read or one commit at a time, so a worker needs far
    fewer connections than concurrent turns); ``timeout`` is how long a call waits
    for a connection. ``migrate=False`` refuses a database not already at
    ``SCHEMA_VERSION`` instead of migrating it. ``transcript_cache_bytes`` bounds the
    decoded transcripts the store keeps between turns (``transcript_cache``; 0 keeps
    none). Close with ``await store.aclose()`` (or ``async with PostgresStore(url) as
    store``).
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        migrate: bool = True,
        transcript_cache_bytes: int = DEFAULT_BUDGET,
    ) -> None:
        self.url = redact_url(url)
        """The URL with its password masked: safe to log."""
        try:
            conninfo_to_dict(url)
        except psycopg.Error:
            # psycopg's message quotes the connection string, password included.
            raise ValueError(f"store url {self.url!r} is not a valid PostgreSQL URL") from None
        if min_size < 0:
            raise ValueError(f"min_size must be 0 or more, not {min_size}")
        if max_size < max(min_size, 1):
            raise ValueError(f"max_size must be at least min_size and 1, not {max_size}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout}")
        self._conninfo = url
        self.min_size, self.max_size, self.timeout = min_size, max_size, timeout
        self._migrate = migrate
        self._pool: AsyncConnectionPool[_Connection] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._migrated = False
        self._closed = False
        self._transcripts = TranscriptCache(transcript_cache_bytes)

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r}, min_size={self.min_size}, max_size={self.max_size})"

    # --- lifecycle -------------------------------------------------------------------

    async def open(self) -> None:
        """Migrate the schema if needed and open the pool (first use does this too)."""
        await self._ready()

    async def _connect(self) -> _Connection:
        try:
            return await AsyncConnection.connect(
                self._conninfo, autocommit=True, connect_timeout=max(2, int(self.timeout))
            )
        except psycopg.OperationalError as error:
            raise PostgresStoreError(f"{self.url}: cannot connect: {error}") from error

    async def _configure(self, connection: _Connection) -> None:
        # Timestamps come back in UTC whatever the server's or role's time zone.
        await connection.execute("SET TIME ZONE 'UTC'")
        self._connections.add(connection)

    async def _ready(self) -> AsyncConnectionPool[_Connection]:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        if self._closed:
            raise PostgresStoreError(f"{self.url}: the store is closed")
        if self._opening is None or self._opening[0] is not loop:
            self._opening = (loop, asyncio.Lock())
        async with self._opening[1]:
            if self._pool is not None and self._loop is loop:
                return self._pool
            if self._closed:
                raise PostgresStoreError(f"{self.url}: the store is closed")
            if self._pool is not None:
                if self._loop is not None and not self._loop.is_closed():
                    raise PostgresStoreError(
                        f"{self.url}: this store's pool belongs to another running event "
                        "loop; give each event loop its own PostgresStore"
                    )
                self._abandon_pool()  # e.g. execute_sync: each call runs its own loop
            if not self._migrated:
                connection = await self._connect()
                try:
                    await migrate(connection, apply=self._migrate)
                finally:
                    await connection.close()
                self._migrated = True
            pool: AsyncConnectionPool[_Connection] = AsyncConnectionPool(
                self._conninfo,
                min_size=self.min_size,
                max_size=self.max_size,
                timeout=self.timeout,
                open=False,
                kwargs={"autocommit": True},
                configure=self._configure,
                check=AsyncConnectionPool.check_connection,
                name="aptix-postgres",
            )
            try:
                await pool.open(wait=True, timeout=self.timeout)
            except PoolTimeout:
                await pool.close()
                raise PostgresStoreError(
                    f"{self.url}: the connection pool did not open within {self.timeout} s"
                ) from None
            self._pool, self._loop = pool, loop
            return pool

    def _abandon_pool(self) -> None:
        """Drop a pool whose event loop has ended: its connections are closed directly."""
        for connection in list(self._connections):
            if not connection.closed:
                connection.pgconn.finish()
        self._connections = weakref.WeakSet()
        self._pool, self._loop = None, None

    async def aclose(self) -> None:
        """Close the pool; the store cannot be used afterwards."""
        self._closed = True
        pool, loop = self._pool, self._loop
        if pool is None:
            return
        if loop is asyncio.get_running_loop():
            self._pool, self._loop = None, None
            await pool.close()
        elif loop is None or loop.is_closed():
            self._abandon_pool()
        else:
            raise PostgresStoreError(f"{self.url}: close the store from the loop that used it")

    def close(self) -> None:
        """Close from synchronous code (not inside a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("PostgresStore.close() inside a running event loop: await aclose()")
        self._closed = True
        if self._pool is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.aclose())
        else:
            self._abandon_pool()

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def schema_version(self) -> int:
        """The database's schema version (0 before the first migration)."""
        connection = await self._connect()
        try:
            return await read_schema_version(connection)
        finally:
            await connection.close()

    # --- the port --------------------------------------------------------------------

    def begin(self, org: str, user: str) -> BufferedTransaction:
        """Start one turn's transaction for this caller."""
        return BufferedTransaction(self, org, user)

    async def _fetchone(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        pool = await self._ready()
        async with pool.connection() as connection:
            cursor = await connection.execute(sql, params)
            return await cursor.fetchone()

    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        """The session, if it belongs to this org and user (one statement, one snapshot)."""
        row = await self._fetchone(
            f"{_SESSION_SELECT} WHERE s.id = %s AND s.org = %s AND s.user_name = %s",
            (session_id, org, user),
        )
        return None if row is None else _session(row)

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        """The turn of the caller's session, or ``None``."""
        row = await self._fetchone(
            "SELECT t.data FROM aptix_turns t JOIN aptix_sessions s ON s.id = t.session_id "
            "WHERE t.session_id = %s AND t.id = %s AND s.org = %s AND s.user_name = %s",
            (session_id, turn_id, org, user),
        )
        return None if row is None else Turn.model_validate_json(row[0])

    async def read_transcript(self, org: str, user: str, session_id: str) -> Transcript:
        """The session's messages, oldest first.

        Only the rows after those decoded before are read (``transcript_cache``): a
        session's rows are only appended, in ``seq`` order, one committed turn at a time.
        """
        key = (org, user, session_id)
        held, last_seq = self._transcripts.start(key)
        rows = await self._fetchall(_TRANSCRIPT_AFTER, (session_id, org, user, last_seq))
        return self._transcripts.finish(key, held, last_seq, rows)

    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        """The session's turn that awaits client tool results, if any."""
        row = await self._fetchone(
            "SELECT t.data FROM aptix_turns t JOIN aptix_sessions s ON s.id = t.session_id "
            "WHERE t.session_id = %s AND t.status = %s AND s.org = %s AND s.user_name = %s "
            "LIMIT 1",
            (session_id, TurnStatus.AWAITING_CLIENT_TOOLS.value, org, user),
        )
        return None if row is None else Turn.model_validate_json(row[0])

    async def read_outcome(self, org: str, user: str, key: str) -> StoredOutcome | None:
        """This org and user's outcome under ``key``, expired or not."""
        row = await self._fetchone(
            "SELECT key, request_digest, session_id, turn_id, result_json, result_json_literal, "
            "created_at, expires_at FROM aptix_outcomes "
            "WHERE org = %s AND user_name = %s AND key = %s",
            (org, user, key),
        )
        return None if row is None else _outcome_from_row(row)

    # --- ToolLedger (contracts/ledger.py): each statement commits on its own -----------

    async def reserve_tool_call(
        self, org: str, user: str, key: str, now: datetime
    ) -> LedgerEntry | None:
        """See ``ToolLedger``."""
        while True:
            taken = await self._fetchone(
                "INSERT INTO aptix_tool_ledger (org, user_name, key, reserved_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (org, user, key, now),
            )
            if taken is not None:
                return None
            row = await self._fetchone(
                "SELECT key, result, reserved_at, done_at FROM aptix_tool_ledger "
                "WHERE org = %s AND user_name = %s AND key = %s",
                (org, user, key),
            )
            if row is not None:  # else released meanwhile: try again
                return LedgerEntry(key=row[0], result=row[1], reserved_at=row[2], done_at=row[3])

    async def complete_tool_call(
        self, org: str, user: str, key: str, result: str, now: datetime
    ) -> None:
        """See ``ToolLedger``."""
        await self._fetchone(
            "INSERT INTO aptix_tool_ledger (org, user_name, key, result, reserved_at, done_at) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (org, user_name, key) DO UPDATE SET "
            "result = excluded.result, done_at = excluded.done_at "
            "WHERE aptix_tool_ledger.result IS NULL RETURNING 1",
            (org, user, key, result, now, now),
        )

    async def release_tool_call(self, org: str, user: str, key: str) -> None:
        """See ``ToolLedger``."""
        await self._fetchone(
            "DELETE FROM aptix_tool_ledger WHERE org = %s AND user_name = %s AND key = %s "
            "AND result IS NULL RETURNING 1",
            (org, user, key),
        )

    async def purge_tool_calls(self, before: datetime) -> int:
        """Delete every ledger entry reserved before ``before``, done or not; how many.

        A batch of entries in key order one short statement, like ``purge_outcomes``.
        """
        pool = await self._ready()
        purged, after = 0, ("", "", "")
        while True:
            async with pool.connection() as connection:
                cursor = await connection.execute(_DELETE_OLD_CALLS, (*after, _PURGE_BATCH, before))
                row = await cursor.fetchone()
            if row is None:  # no entry after the last key read
                return purged
            purged += int(row[0])
            if int(row[1]) < _PURGE_BATCH:
                return purged
            after = (row[2], row[3], row[4])

    # --- TraceLog (contracts/traces.py): one autocommitted statement a call -----------

    async def keep_trace(self, trace: KeptTrace) -> None:
        """See ``TraceLog``: one statement that keeps the trace and deletes up to
        ``TRACE_SWEEP`` traces expired by its time. A NUL in the error message (which
        PostgreSQL text cannot hold) is kept as U+FFFD."""
        message = trace.error_message
        pool = await self._ready()
        async with pool.connection() as connection:
            await connection.execute(
                _KEEP_TRACE,
                (
                    trace.at,
                    TRACE_SWEEP,
                    trace.id,
                    trace.org,
                    trace.user,
                    trace.session_id,
                    trace.turn_id,
                    trace.at,
                    trace.outcome,
                    trace.trace,
                    trace.error_code,
                    None if message is None else message.replace("\x00", "\ufffd"),
                    trace.faulted_step,
                    trace.expires_at,
                    trace.steps,
                ),
            )

    async def list_traces(
        self,
        org: str,
        user: str,
        session_id: str | None = None,
        *,
        limit: int = DEFAULT_PAGE,
        offset: int = 0,
    ) -> list[KeptTrace]:
        """See ``TraceLog``."""
        check_page(limit, offset)
        where, params = "org = %s AND user_name = %s", [org, user]
        if session_id is not None:
            where += " AND session_id = %s"
            params.append(session_id)
        rows = await self._fetchall(
            f"SELECT {_TRACE_FIELDS} FROM aptix_turn_traces WHERE {where} "
            "ORDER BY seq DESC LIMIT %s OFFSET %s",
            (*params, limit, offset),
        )
        return [_kept_trace(row) for row in rows]

    async def read_trace(self, org: str, user: str, trace_id: str) -> KeptTrace | None:
        """See ``TraceLog``."""
        row = await self._fetchone(
            f"SELECT {_TRACE_FIELDS} FROM aptix_turn_traces "
            "WHERE id = %s AND org = %s AND user_name = %s",
            (trace_id, org, user),
        )
        return None if row is None else _kept_trace(row)

    async def purge_traces(self, now: datetime) -> int:
        """See ``TraceLog``: in batches of one short statement each, as ``purge_outcomes``."""
        return await self._purge_in_batches(_EXPIRED_TRACES, now)

    # --- UsageLedger (contracts/usage.py): one statement, one round trip, a call --------

    async def reserve_usage(
        self,
        call: UsageCall,
        checks: Sequence[BudgetCheck],
        settle: Sequence[UsageCall] = (),
    ) -> ReserveOutcome:
        """See ``UsageLedger``: one statement (module docstring).

        The function answers what each budget counted and whether it reserved; the
        verdict is ``check_reservation``'s, which the function's own (the same rule:
        counted plus amount within the limit) must agree with.
        """
        rows = await self._fetchall(
            "SELECT budget_id, used, oldest, reserved FROM "
            "aptix_reserve_usage(%s::jsonb, %s::jsonb, %s::jsonb)",
            (_usage_json(settle), _usage_json([call])[1:-1], _checks_json(checks)),
        )
        if len(rows) == 1 and rows[0][3]:  # the call was kept already: it stands
            return ReserveOutcome(reserved=True)
        used = {budget_id: Decimal(value) for budget_id, value, _, _ in rows[:-1]}
        oldest = {budget_id: first for budget_id, _, first, _ in rows[:-1]}
        outcome = check_reservation(checks, used, oldest)
        if outcome.reserved is not rows[-1][3]:  # pragma: no cover - the two rules are one
            raise PostgresStoreError(
                f"{self.url}: aptix_reserve_usage disagrees with check_reservation on "
                f"call {call.id!r}"
            )
        return outcome

    async def settle_usage(self, calls: Sequence[UsageCall]) -> None:
        """See ``UsageLedger``: one statement."""
        if calls:
            await self._fetchone("SELECT aptix_keep_usage(%s::jsonb)", (_usage_json(calls),))

    async def usage_calls(self, query: UsageQuery) -> list[UsageCall]:
        """See ``UsageLedger``: oldest first (calls made at one instant: as stored)."""
        where, params = usage_filters(query, "user_name", "%s")
        moments: list[datetime] = []
        if query.since is not None:
            where.append("at >= %s")
            moments.append(query.since)
        if query.until is not None:
            where.append("at < %s")
            moments.append(query.until)
        rows = await self._fetchall(
            f"{_USAGE_SELECT} WHERE {' AND '.join(where)} ORDER BY at, seq", [*params, *moments]
        )
        return [usage_call_from_row(row) for row in rows]

    # --- SessionSearch (stores/session_search.py): one statement a page ------------------

    async def search_sessions(
        self, where: SessionFilter, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[SessionRow]:
        """The sessions ``where`` matches, most recent activity first (``_SEARCH``)."""
        check_page(limit, offset)
        condition, params = search_where(where, _SEARCH_SQL)
        rows = await self._fetchall(
            _SEARCH.format(where=condition or "true"), (*params, limit, offset)
        )
        found: list[SessionRow] = []
        for row in rows:
            session_id, org, user, mode, created, at, status, count, tokens = row[:9]
            outcome, error_code, error_message, first, costs = row[9:]
            summary = SessionSummary(
                session_id, org, user, mode, int(count), created, at or created
            )
            found.append(
                SessionRow(
                    summary,
                    status,
                    None
                    if first is None
                    else preview_of(message_text(ChatMessage.model_validate_json(first))),
                    int(tokens),
                    tuple(sorted((currency, Decimal(cost)) for currency, cost in costs or ())),
                    outcome,
                    error_code,
                    error_message,
                )
            )
        return found

    # --- SessionBrowser (stores/session_browser.py) ------------------------------------------

    @asynccontextmanager
    async def turn_notices(self) -> AsyncIterator[AsyncIterator[TurnNotice]]:
        """Each turn committed by any process while the block runs (``TurnNotifier``):
        ``LISTEN`` on a connection of its own, done when the block begins, closed when
        it ends."""
        await self._ready()  # the schema is there: the commits that notify can run
        connection = await self._connect()
        try:
            await connection.execute(f"LISTEN {TURNS_CHANNEL}")

            async def notices() -> AsyncIterator[TurnNotice]:
                async for notify in connection.notifies():
                    yield parse_notice(notify.payload)

            yield notices()
        finally:
            await connection.close()

    async def _fetchall(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        pool = await self._ready()
        async with pool.connection() as connection:
            cursor = await connection.execute(sql, params)
            return await cursor.fetchall()

    async def list_owners(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[OwnerSummary]:
        """The org and user pairs holding sessions, by org then user (code point order)."""
        check_page(limit, offset)
        rows = await self._fetchall(
            "SELECT org, user_name, COUNT(*) FROM aptix_sessions GROUP BY org, user_name "
            'ORDER BY org COLLATE "C", user_name COLLATE "C" LIMIT %s OFFSET %s',
            (limit, offset),
        )
        return [OwnerSummary(org, user, int(count)) for org, user, count in rows]

    async def list_sessions(
        self, org: str, user: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[SessionSummary]:
        """The caller's sessions, most recent activity first (one statement, one snapshot)."""
        check_page(limit, offset)
        rows = await self._fetchall(
            "SELECT s.id, s.mode, s.created_at, ARRAY(SELECT t.data::json->>'CreatedAt' "
            "FROM aptix_turns t WHERE t.session_id = s.id) FROM aptix_sessions s "
            "WHERE s.org = %s AND s.user_name = %s",
            (org, user),
        )
        summaries = []
        for session_id, mode, created_at, turn_times in rows:
            times = [None if t is None else datetime.fromisoformat(t) for t in turn_times]
            summaries.append(SessionSummary.of(session_id, org, user, mode, created_at, times))
        summaries.sort(key=SessionSummary.sort_key)
        return summaries[offset : offset + limit]

    async def list_turns(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[Turn] | None:
        """The session's turns in creation order; ``None`` when the caller has no such session."""
        check_page(limit, offset)
        row = await self._fetchone(
            "SELECT ARRAY(SELECT t.data FROM aptix_turns t WHERE t.session_id = s.id) "
            "FROM aptix_sessions s WHERE s.id = %s AND s.org = %s AND s.user_name = %s",
            (session_id, org, user),
        )
        if row is None:
            return None
        turns = sorted((Turn.model_validate_json(data) for data in row[0]), key=turn_order)
        return turns[offset : offset + limit]

    async def read_transcript_page(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[TranscriptEntry] | None:
        """The session's messages in order; ``None`` when the caller has no such session."""
        check_page(limit, offset)
        pool = await self._ready()
        async with pool.connection() as connection:
            # Two statements: an owner is never changed and messages are only appended,
            # so reading them apart cannot show another caller's messages.
            cursor = await connection.execute(
                "SELECT 1 FROM aptix_sessions WHERE id = %s AND org = %s AND user_name = %s",
                (session_id, org, user),
            )
            if await cursor.fetchone() is None:
                return None
            cursor = await connection.execute(
                "SELECT seq, turn_id, message FROM aptix_transcript WHERE session_id = %s "
                "ORDER BY seq LIMIT %s OFFSET %s",
                (session_id, limit, offset),
            )
            rows = await cursor.fetchall()
        return [
            TranscriptEntry(int(seq), turn_id, ChatMessage.model_validate_json(text))
            for seq, turn_id, text in rows
        ]

    # --- SessionForks (contracts/ports.py, stores/forks.py) ------------------------------

    async def fork_session(
        self,
        org: str,
        user: str,
        session_id: str,
        turn_id: str,
        new_session_id: str,
        created_at: datetime,
    ) -> Session:
        """See ``SessionForks``: one transaction, O(1) in prior turns."""
        pool = await self._ready()
        async with pool.connection() as connection, connection.transaction():
            cursor = await connection.execute(
                f"{_SESSION_SELECT} WHERE s.id = %s AND s.org = %s AND s.user_name = %s",
                (session_id, org, user),
            )
            row = await cursor.fetchone()
            if row is None:
                raise no_session(session_id)
            source = _session(row)
            cursor = await connection.execute(
                "SELECT data FROM aptix_turns WHERE session_id = %s AND id = %s",
                (session_id, turn_id),
            )
            found = await cursor.fetchone()
            turn = None if found is None else Turn.model_validate_json(found[0])
            check_forkable(session_id, turn_id, turn)
            # Each mode-history entry's turn: whether it is the session's, and its last message.
            entry_turns = sorted(
                {e.turn_id for e in source.mode_history if e.turn_id is not None} | {turn_id}
            )
            cursor = await connection.execute(
                "SELECT u.id, (SELECT MAX(t.seq) FROM aptix_transcript t "
                "WHERE t.session_id = %s AND t.turn_id = u.id) FROM aptix_turns u "
                "WHERE u.session_id = %s AND u.id = ANY(%s)",
                (session_id, session_id, entry_turns),
            )
            last: dict[str, int | None] = dict(await cursor.fetchall())
            cut = int(last.get(turn_id) or 0)

            def later(entry_turn: str) -> bool:
                if entry_turn not in last:
                    return False
                seq = last[entry_turn]
                return seq is None or seq > cut

            prefix = 0 if source.forked_from is None else source.forked_from.messages
            fork = forked_session(source, turn_id, new_session_id, created_at, prefix + cut, later)
            cursor = await connection.execute(
                "INSERT INTO aptix_sessions (id, org, user_name, mode, agent_context_id, "
                "conversation_context_id, solution_context_text, solution_context_json, "
                "created_at, version, parent_id, parent_turn_id, parent_seq, prefix_len) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (
                    fork.id,
                    org,
                    user,
                    fork.mode,
                    fork.agent_context_id,
                    fork.conversation_context_id,
                    *_nul_safe_columns(fork.solution_context_text),
                    created_at,
                    session_id,
                    turn_id,
                    cut,
                    prefix + cut,
                ),
            )
            if cursor.rowcount != 1:
                raise StoreConflictError(f"session {new_session_id!r} already exists")
            if fork.mode_history:
                await cursor.executemany(
                    "INSERT INTO aptix_mode_history (session_id, seq, entry) VALUES (%s, %s, %s)",
                    [
                        (fork.id, seq, entry.model_dump_json())
                        for seq, entry in enumerate(fork.mode_history, 1)
                    ],
                )
        return fork

    async def forks_of(self, org: str, user: str, session_id: str) -> list[Session] | None:
        """See ``SessionForks``."""
        pool = await self._ready()
        async with pool.connection() as connection:
            cursor = await connection.execute(
                "SELECT 1 FROM aptix_sessions WHERE id = %s AND org = %s AND user_name = %s",
                (session_id, org, user),
            )
            if await cursor.fetchone() is None:
                return None
            cursor = await connection.execute(
                f"{_SESSION_SELECT} WHERE s.parent_id = %s AND s.org = %s AND s.user_name = %s "
                "ORDER BY s.created_at, s.id",
                (session_id, org, user),
            )
            return [_session(row) for row in await cursor.fetchall()]

    async def purge_outcomes(self, now: datetime) -> int:
        """Delete every outcome expired by ``now``; how many there were.

        In batches of one short statement each (``MemoryStore.purge_outcomes``, async
        here); a row another transaction holds is left to it (it is being replaced).
        """
        return await self._purge_in_batches(_DELETE_EXPIRED, now)

    async def _purge_in_batches(self, statement: str, now: datetime) -> int:
        """Run ``statement`` (delete at most ``_PURGE_BATCH`` rows expired by ``now``,
        skipping rows others hold), each time autocommitted, until a batch deletes
        fewer; how many went."""
        pool = await self._ready()
        purged = 0
        while True:
            async with pool.connection() as connection:
                cursor = await connection.execute(statement, (now, _PURGE_BATCH))
            purged += cursor.rowcount
            if cursor.rowcount < _PURGE_BATCH:
                return purged

    async def apply(self, writes: TurnWrites) -> None:
        """Write a turn in one transaction; ``StoreConflictError`` when another turn won."""
        pool = await self._ready()
        async with pool.connection() as connection:
            try:
                async with connection.transaction():
                    await self._write(connection, writes)
            except (errors.UniqueViolation, errors.SerializationFailure) as error:
                raise StoreConflictError(f"a concurrent turn won: {error}") from error
            except errors.DeadlockDetected as error:
                raise StoreConflictError("a concurrent turn won (deadlock)") from error

    @staticmethod
    async def _write_session(
        connection: _Connection, write: SessionWrite, org: str, user: str
    ) -> None:
        s = write.session
        if write.created:
            cursor = await connection.execute(
                "INSERT INTO aptix_sessions (id, org, user_name, mode, agent_context_id, "
                "conversation_context_id, solution_context_text, solution_context_json, "
                "created_at, version) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1) ON CONFLICT (id) DO NOTHING",
                (
                    s.id,
                    s.org,
                    s.user,
                    s.mode,
                    s.agent_context_id,
                    s.conversation_context_id,
                    *_nul_safe_columns(s.solution_context_text),
                    s.created_at,
                ),
            )
            if cursor.rowcount != 1:
                raise StoreConflictError(f"session {s.id!r} already exists")
        else:
            # The row lock this takes serializes every later write of this session
            # until commit, so the seq numbers read below cannot race.
            cursor = await connection.execute(
                "UPDATE aptix_sessions SET mode = %s, solution_context_text = %s, "
                "solution_context_json = %s, version = version + 1 "
                "WHERE id = %s AND org = %s AND user_name = %s AND version = %s",
                (
                    s.mode,
                    *_nul_safe_columns(s.solution_context_text),
                    s.id,
                    org,
                    user,
                    write.expected_version,
                ),
            )
            if cursor.rowcount != 1:
                raise StoreConflictError(f"session {s.id!r} changed since it was read")
        # A new session's whole history is new; an existing one's only what this turn added.
        history = s.mode_history if write.created else write.new_history
        if history:
            cursor = await connection.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM aptix_mode_history WHERE session_id = %s",
                (s.id,),
            )
            row = await cursor.fetchone()
            first = int(row[0]) if row is not None else 1
            await cursor.executemany(
                "INSERT INTO aptix_mode_history (session_id, seq, entry) VALUES (%s, %s, %s)",
                [(s.id, first + n, entry.model_dump_json()) for n, entry in enumerate(history)],
            )

    async def _write(self, connection: _Connection, writes: TurnWrites) -> None:
        # Sessions in id order, so two turns touching the same sessions lock them alike.
        for write in sorted(writes.sessions, key=lambda w: w.session.id):
            await self._write_session(connection, write, writes.org, writes.user)
        for turn_write in writes.turns:
            turn = turn_write.turn
            created = turn.created_at
            if created is not None and created.tzinfo is None:  # a time without a zone is UTC
                created = created.replace(tzinfo=UTC)
            tokens = 0 if turn.usage is None else turn.usage.total_tokens
            row = (turn.status.value, turn.model_dump_json(), created, tokens, turn.session_id)
            if turn_write.created:
                cursor = await connection.execute(
                    "INSERT INTO aptix_turns (status, data, created_at, tokens, session_id, id) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (session_id, id) DO NOTHING",
                    (*row, turn.id),
                )
                if cursor.rowcount != 1:
                    raise StoreConflictError(f"turn {turn.id!r} already exists")
            else:
                await connection.execute(
                    "UPDATE aptix_turns SET status = %s, data = %s, created_at = %s, "
                    "tokens = %s WHERE session_id = %s AND id = %s",
                    (*row, turn.id),
                )
        by_session: dict[str, list[tuple[str, ChatMessage]]] = {}
        for session_id, turn_id, message in writes.transcript:
            by_session.setdefault(session_id, []).append((turn_id, message))
        for session_id, messages in by_session.items():
            cursor = await connection.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM aptix_transcript WHERE session_id = %s",
                (session_id,),
            )
            row_ = await cursor.fetchone()
            first = int(row_[0]) if row_ is not None else 1
            await cursor.executemany(
                "INSERT INTO aptix_transcript (session_id, seq, turn_id, message) "
                "VALUES (%s, %s, %s, %s)",
                [
                    (session_id, first + n, turn_id, message.model_dump_json())
                    for n, (turn_id, message) in enumerate(messages)
                ],
            )
        if writes.outcomes:
            # After the sessions: an Initial turn's outcome names the session it creates.
            await self._write_outcomes(connection, writes)
        for turn_write in writes.turns:  # sent at commit, and only if it commits
            turn = turn_write.turn
            payload = notice_payload(
                writes.org, writes.user, turn.session_id, turn.id, turn.status.value
            )
            await connection.execute("SELECT pg_notify(%s, %s)", (TURNS_CHANNEL, payload))

    @staticmethod
    async def _write_outcomes(connection: _Connection, writes: TurnWrites) -> None:
        # The sweep: expired by the earliest new outcome's time, so expired for each of
        # them too, and deleting one changes no conflict decision below. SKIP LOCKED: a
        # row another transaction holds is not waited for.
        earliest = min(outcome.created_at for outcome in writes.outcomes)
        await connection.execute(_DELETE_EXPIRED, (earliest, OUTCOME_SWEEP))
        # In key order, so two turns storing the same keys lock them alike. A key held
        # by a concurrent uncommitted insert makes this wait for it; once it commits,
        # the WHERE sees its row (unexpired): no row written, a conflict (the rule of
        # unit_of_work.outcome_replaceable, decided by the database).
        for outcome in sorted(writes.outcomes, key=lambda o: o.key):
            cursor = await connection.execute(
                "INSERT INTO aptix_outcomes (org, user_name, key, request_digest, session_id, "
                "turn_id, result_json, result_json_literal, created_at, expires_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (org, user_name, key) DO UPDATE SET "
                "request_digest = EXCLUDED.request_digest, session_id = EXCLUDED.session_id, "
                "turn_id = EXCLUDED.turn_id, result_json = EXCLUDED.result_json, "
                "result_json_literal = EXCLUDED.result_json_literal, "
                "created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at "
                "WHERE aptix_outcomes.expires_at <= EXCLUDED.created_at",
                (
                    writes.org,
                    writes.user,
                    outcome.key,
                    outcome.request_digest,
                    outcome.session_id,
                    outcome.turn_id,
                    *_nul_safe_columns(outcome.result_json),
                    outcome.created_at,
                    outcome.expires_at,
                ),
            )
            if cursor.rowcount != 1:
                raise StoreConflictError(f"outcome {outcome.key!r} is already stored")
