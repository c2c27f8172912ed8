"""The SQLite ``SessionStore``: the embedded default (DESIGN.md "Embedding").

- stdlib ``sqlite3``, always off the event loop: every statement runs on one
  worker thread that owns the connection, and a turn's reads and its commit are
  one hop each to that thread (no pool, no ``concurrent.futures`` per call).
- WAL journal and a busy timeout, so several processes (separate ``aptix run``
  calls) can share one file.
- One transaction per turn: a turn's writes arrive together
  (``unit_of_work.BufferedTransaction``) and are applied in one ``BEGIN
  IMMEDIATE … COMMIT`` with optimistic version checks, so a failed turn writes
  nothing and a concurrent one loses cleanly (``StoreConflictError``).
- A versioned schema (``PRAGMA user_version``): a new file is created at the
  current version, an older one is migrated in place (version 2 added stored
  outcomes, version 3 the tool ledger, version 4 the usage ledger, version 5
  forks, version 6 turn traces), and a file written by a newer version is refused.
- Stored outcomes (``StoredOutcome``, docs/CONFORMANCE.md D181) are written in
  the turn's transaction; a key holding an unexpired one makes the whole commit a
  conflict. Each commit that stores outcomes also deletes up to
  ``OUTCOME_SWEEP`` expired ones, so the table does not grow without bound;
  ``purge_outcomes`` removes all of them.
- The tool ledger (``ToolLedger``, ``contracts/ledger.py``; schema version 3):
  each call is one statement committed on its own, outside any turn's
  transaction, so a reservation survives a crash of its turn; ``INSERT … ON
  CONFLICT DO NOTHING`` lets exactly one of two racing reservations (two
  processes included) take a key. A reservation is one job on the worker (its
  read of the entry held included); recording a call done is queued and not
  awaited, since the worker's order already puts it before the turn's commit.
  ``purge_tool_calls`` deletes the entries reserved before a given time, walking
  the table in key order a batch at a time: no index on the age, which would
  cost every reservation a second page written.
- The usage ledger (``UsageLedger``, ``contracts/usage.py``; schema version 4,
  table ``usage_calls``): ``reserve_usage`` is one job on the worker and one ``BEGIN
  IMMEDIATE`` transaction — the settlements, what each budget counts, and the
  reservation when every budget holds — so it is atomic across processes sharing
  the file. Costs are kept as decimal text and summed with ``Decimal`` inside that
  transaction (exact; SQLite's own ``SUM`` would go through REAL).
- Forks (``SessionForks``, ``stores/forks.py``; schema version 5): a fork is one
  ``sessions`` row naming its parent (``parent_id``, a foreign key, so a parent
  with forks cannot be deleted from under them), its cut (``parent_seq``) and its
  ``prefix_len``, plus its copied mode history; a transcript is read with one
  recursive query over the session's ancestors. ``transcript_turn`` finds a turn's
  last message without scanning the session's.
- Turn traces (``TraceLog``, ``contracts/traces.py``; schema version 6, table
  ``turn_traces``): keeping a trace queues a write on the worker, not awaited (as a
  tool-ledger completion); the traces kept until that write runs go with it, in one
  transaction (under load, many turns' traces share one commit, the most of a trace's
  cost; a batch that fails is written again trace by trace, so one bad trace loses
  no other). Reads queued after ``keep_trace`` returned see the trace: the worker
  runs jobs in order. The write then sweeps at most ``TRACE_SWEEP`` traces a trace,
  expired by the newest trace's time, when one may have expired: the store
  remembers the earliest end of the traces it knows (read after each sweep, lowered
  by each trace it keeps), and a trace kept before it sweeps nothing, so with the
  default thirty days keeping a trace is the one ``INSERT``. A file's traces another
  process kept are swept by that process, and all by ``purge_traces``. ``seq``
  (``AUTOINCREMENT``) is the order they are listed in, newest first.

Durability (``synchronous``, docs/STORES.md "SQLite durability"): ``"normal"`` (the default)
is WAL with ``PRAGMA synchronous = NORMAL``: a commit writes the turn to the WAL
file without waiting for the disk, so a turn the store acknowledged survives a
crash of the process (``kill -9`` included), but a power loss or an OS crash
may roll back the turns committed since the WAL was last synced to disk, which
SQLite does at each checkpoint (here: in the background, after every
``CHECKPOINT_EVERY`` commits of this store). The file itself is never corrupted.
``"full"`` (``PRAGMA synchronous = FULL``) syncs the WAL at every commit: an
acknowledged turn survives a power loss too, at the cost of one fsync a turn.

Checkpoints (copying the WAL back into the database file, with its fsyncs) run on
a second connection in a thread of their own, never in a turn's commit, so a
turn does not wait behind one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, cast, get_args

from aptix_pipeline.contracts import (
    BudgetCheck,
    BudgetMetric,
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
    scrubbed_logger,
)

from .forks import check_forkable, forked_session, no_session
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
from .unit_of_work import BufferedTransaction, TurnWrites, outcome_replaceable, session_from_row
from .usage_ledger import (
    USAGE_FIELDS,
    check_reservation,
    usage_call_from_row,
    usage_filters,
    usage_row,
)

__all__ = [
    "CHECKPOINT_EVERY",
    "OUTCOME_SWEEP",
    "SCHEMA_VERSION",
    "SYNCHRONOUS_MODES",
    "TRACE_SWEEP",
    "SQLiteStore",
    "Synchronous",
    "synchronous_mode",
]

SCHEMA_VERSION = 6
T = TypeVar("T")
logger = scrubbed_logger(__name__)

Synchronous = Literal["normal", "full"]
"""The durability settings: ``PRAGMA synchronous`` in WAL mode (module docstring)."""
SYNCHRONOUS_MODES: Final[tuple[Synchronous, ...]] = get_args(Synchronous)
CHECKPOINT_EVERY: Final = 200
"""Commits of one store between two background WAL checkpoints."""
OUTCOME_SWEEP: Final = 100
"""Expired outcomes a commit that stores outcomes deletes at most (module docstring)."""
TRACE_SWEEP: Final = 16
"""Expired traces keeping a trace deletes at most (module docstring)."""
_PURGE_BATCH: Final = 1000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_SEARCH: Final = (
    "WITH l AS (SELECT session_id, MAX(julianday(json_extract(data, '$.CreatedAt'))), "
    "json_extract(data, '$.CreatedAt') AS at, status, COUNT(*) AS n, "
    "SUM(COALESCE(json_extract(data, '$.Usage.TotalTokens'), 0)) AS tokens "
    "FROM turns GROUP BY session_id), "
    "r AS (SELECT s.id, s.org, s.user, s.mode, s.created_at, l.at, l.status, "
    "COALESCE(l.n, 0) AS n, COALESCE(l.tokens, 0) AS tokens, l.session_id AS has_turns, "
    "(SELECT k.seq FROM turn_traces k WHERE k.org = s.org AND k.user = s.user "
    "AND k.session_id = s.id ORDER BY k.seq DESC LIMIT 1) AS trace_seq "
    "FROM sessions s LEFT JOIN l ON l.session_id = s.id) "
    "SELECT r.id, r.org, r.user, r.mode, r.created_at, r.at, r.status, r.n, r.tokens, "
    "k.outcome, k.error_code, k.error_message FROM r "
    "LEFT JOIN turn_traces k ON k.seq = r.trace_seq WHERE {where} "
    "ORDER BY julianday(COALESCE(r.at, r.created_at)) DESC, r.id LIMIT ? OFFSET ?"
)
"""The session search (``search_sessions``): each session with its latest turn (SQLite
gives a bare column the values of the row ``MAX`` picked) and its last kept trace's
outcome and error, newest activity first."""
_SEARCH_SQL: Final = SqlDialect(
    p="?",
    org="r.org",
    user="r.user",
    mode="r.mode",
    session_id="r.id",
    turns="turns",
    prefix="substr(r.id, 1, ?) = ?",
    no_turns="r.has_turns IS NULL",
    status="r.status",
    not_faulted="(k.outcome IS NULL OR k.outcome <> ?)",
    activity="julianday(COALESCE(r.at, r.created_at)) {op} julianday(?)",
    moment=datetime.isoformat,
)
"""``_SEARCH``'s columns and functions, for ``search_where``."""
_SESSION_COST: Final = (
    "SELECT u.currency, u.cost FROM turns t JOIN usage_calls u ON u.org = ? "
    "AND u.turn_id = t.id AND u.session_id = t.session_id "
    "WHERE t.session_id = ? AND u.settled = 1 AND u.priced = 1 AND u.cost IS NOT NULL"
)
_LEDGER_BATCH: Final = (
    "SELECT org, user, key, julianday(reserved_at) < julianday(?) FROM tool_ledger "
    "WHERE (org, user, key) > (?, ?, ?) ORDER BY org, user, key LIMIT ?"
)
"""The next ``LIMIT`` ledger entries after a key, each with whether it was reserved
before the time given (``julianday`` reads the ISO text's offset)."""
_USAGE_SELECT: Final = f"SELECT {', '.join(USAGE_FIELDS)} FROM usage_calls"
_USAGE_INSERT: Final = (
    f"INSERT OR REPLACE INTO usage_calls ({', '.join(USAGE_FIELDS)}, at_us) "
    f"VALUES ({', '.join('?' for _ in USAGE_FIELDS)}, ?)"
)
"""Store a call, replacing the row of the same id (its reservation, when settled)."""
_DELETE_EXPIRED: Final = (
    "DELETE FROM outcomes WHERE rowid IN (SELECT rowid FROM outcomes "
    "WHERE expires_at_us <= ? LIMIT ?)"
)
"""Delete at most ``LIMIT`` outcomes expired by the instant given (in microseconds)."""
_TRACE_FIELDS: Final = (
    "id, org, user, session_id, turn_id, at, outcome, trace, error_code, error_message, "
    "faulted_step, expires_at, steps"
)
_DELETE_EXPIRED_TRACES: Final = (
    "DELETE FROM turn_traces WHERE seq IN (SELECT seq FROM turn_traces "
    "WHERE expires_at_us <= ? LIMIT ?)"
)
"""Delete at most ``LIMIT`` traces expired by the instant given (in microseconds)."""
_TRANSCRIPT_AFTER: Final = (
    "WITH RECURSIVE chain (id, upto, off) AS ("
    "SELECT id, -1, prefix_len FROM sessions WHERE id = ? AND org = ? AND user = ? "
    "UNION ALL SELECT s.parent_id, s.parent_seq, s.prefix_len - s.parent_seq "
    "FROM chain c JOIN sessions s ON s.id = c.id WHERE s.parent_id IS NOT NULL) "
    "SELECT c.off + t.seq, t.message FROM chain c JOIN transcript t ON t.session_id = c.id "
    "WHERE t.seq > ? - c.off AND (c.upto < 0 OR t.seq <= c.upto) ORDER BY c.off + t.seq"
)
"""A session's messages after a place in its whole transcript: its ancestors' up to
each cut, then its own, each numbered by its place (``prefix_len + seq``)."""
_SESSION_SELECT: Final = (
    "SELECT id, org, user, mode, agent_context_id, conversation_context_id, "
    "solution_context_text, created_at, version, parent_id, parent_turn_id, prefix_len "
    "FROM sessions"
)


def synchronous_mode(value: str, *, option: str = "synchronous") -> Synchronous:
    """``value`` as a durability setting (any case); ``ValueError`` naming ``option`` if not."""
    mode = value.strip().lower()
    if mode not in SYNCHRONOUS_MODES:
        raise ValueError(f"{option} must be one of {', '.join(SYNCHRONOUS_MODES)}, not {value!r}")
    return mode


class _Worker:
    """One thread that runs every call on the store's connection, in order.

    ``call`` hands a function to the thread and awaits its result; the answer comes
    back through ``call_soon_threadsafe``. ``call_sync`` blocks the calling thread
    (opening, closing). Cheaper per call than ``run_in_executor``.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether calls are still taken."""
        return not self._stopping

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def _put(self, job: Callable[[], None]) -> None:
        if self._stopping:
            raise RuntimeError("the SQLite store is closed")
        self._jobs.put(job)

    async def call(self, work: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, error: BaseException | None) -> None:
            if future.done():  # the awaiting task was cancelled
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(cast(T, result))

        def job() -> None:
            if future.cancelled():  # cancelled before it started: skip it, as an executor would
                return
            try:
                result, error = work(), None
            except BaseException as raised:
                result, error = None, raised
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, result, error)

        self._put(job)
        return await future

    def call_sync(self, work: Callable[[], T]) -> T:
        if threading.current_thread() is self._thread:
            return work()
        future: Future[T] = Future()

        def job() -> None:
            try:
                future.set_result(work())
            except BaseException as error:
                future.set_exception(error)

        self._put(job)
        return future.result()

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the thread; nobody waits for it."""
        self._put(work)

    def stop(self) -> None:
        """Take no more calls, finish the queued ones and end the thread."""
        if self._stopping:
            return
        self._stopping = True
        self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        while True:  # a call queued while stopping: it runs, and finds the store closed
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job()


_SCHEMA = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        org TEXT NOT NULL,
        user TEXT NOT NULL,
        mode TEXT,
        agent_context_id TEXT,
        conversation_context_id TEXT,
        solution_context_text TEXT,
        created_at TEXT,
        version INTEGER NOT NULL)""",
    "CREATE INDEX sessions_owner ON sessions (org, user)",
    """CREATE TABLE mode_history (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        seq INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (session_id, seq))""",
    """CREATE TABLE turns (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        id TEXT NOT NULL,
        status TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, id))""",
    "CREATE INDEX turns_status ON turns (session_id, status)",
    """CREATE TABLE transcript (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        seq INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        message TEXT NOT NULL,
        PRIMARY KEY (session_id, seq))""",
)
# Version 2: stored outcomes. Times are ISO 8601 text, as sessions' created_at, so a
# read gives back the very value written (its UTC offset included); expires_at_us is
# the same instant as microseconds since 1970 UTC, the order the expiry index keeps.
_SCHEMA_2 = (
    """CREATE TABLE outcomes (
        org TEXT NOT NULL,
        user TEXT NOT NULL,
        key TEXT NOT NULL,
        request_digest TEXT NOT NULL,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        turn_id TEXT NOT NULL,
        result_json TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        expires_at_us INTEGER,
        PRIMARY KEY (org, user, key))""",
    "CREATE INDEX outcomes_expiry ON outcomes (expires_at_us)",
)
# Version 3: the tool ledger. result is NULL while the call is reserved, not done.
_SCHEMA_3 = (
    """CREATE TABLE tool_ledger (
        org TEXT NOT NULL,
        user TEXT NOT NULL,
        key TEXT NOT NULL,
        result TEXT,
        reserved_at TEXT NOT NULL,
        done_at TEXT,
        PRIMARY KEY (org, user, key)) WITHOUT ROWID""",
)
# Version 4: the usage ledger (UsageLedger). at is ISO text, read back as written;
# at_us the same instant in microseconds since 1970 UTC, the order windows are read
# in. Costs are decimal text, summed with Decimal in Python, never REAL.
_SCHEMA_4 = (
    """CREATE TABLE usage_calls (
        id TEXT PRIMARY KEY,
        org TEXT NOT NULL,
        user TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        model TEXT,
        at TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        round INTEGER NOT NULL,
        step TEXT NOT NULL,
        settled INTEGER NOT NULL,
        charge_tokens INTEGER NOT NULL,
        charge_cost TEXT NOT NULL,
        charge_model_calls INTEGER NOT NULL,
        charge_tool_calls INTEGER NOT NULL,
        charge_server_tool_rounds INTEGER NOT NULL,
        reported INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cached_input_tokens INTEGER NOT NULL,
        reasoning_tokens INTEGER NOT NULL,
        priced INTEGER NOT NULL,
        cost TEXT,
        currency TEXT,
        tool_calls INTEGER NOT NULL,
        server_tool_round INTEGER NOT NULL,
        failed INTEGER NOT NULL)""",
    "CREATE INDEX usage_calls_time ON usage_calls (org, at_us)",
    "CREATE INDEX usage_calls_turn ON usage_calls (org, turn_id)",
)
# Version 5: forks. prefix_len is how many messages of its ancestors come before a
# session's own (0 for a session that is no fork); parent_seq the parent's own last
# message the fork shares.
_SCHEMA_5 = (
    "ALTER TABLE sessions ADD COLUMN parent_id TEXT REFERENCES sessions (id)",
    "ALTER TABLE sessions ADD COLUMN parent_turn_id TEXT",
    "ALTER TABLE sessions ADD COLUMN parent_seq INTEGER",
    "ALTER TABLE sessions ADD COLUMN prefix_len INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX sessions_parent ON sessions (parent_id)",
    "CREATE INDEX transcript_turn ON transcript (session_id, turn_id, seq)",
)
# Version 6: turn traces (TraceLog, issue 33). seq is the order they were kept in
# (AUTOINCREMENT: never reused, so it orders across processes and deletes); at and
# expires_at ISO text, read back as written; expires_at_us the expiry instant.
_SCHEMA_6 = (
    """CREATE TABLE turn_traces (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        user TEXT NOT NULL,
        session_id TEXT,
        turn_id TEXT,
        at TEXT NOT NULL,
        outcome TEXT NOT NULL,
        trace TEXT NOT NULL,
        error_code TEXT,
        error_message TEXT,
        faulted_step TEXT,
        expires_at TEXT,
        expires_at_us INTEGER,
        steps TEXT NOT NULL DEFAULT '[]')""",
    "CREATE INDEX turn_traces_owner ON turn_traces (org, user, seq)",
    "CREATE INDEX turn_traces_session ON turn_traces (org, user, session_id, seq)",
    "CREATE INDEX turn_traces_expiry ON turn_traces (expires_at_us)",
)
_MIGRATIONS = (_SCHEMA, _SCHEMA_2, _SCHEMA_3, _SCHEMA_4, _SCHEMA_5, _SCHEMA_6)
"""``_MIGRATIONS[n]`` takes a file from schema version ``n`` to ``n + 1``."""


def _instant_us(moment: datetime) -> int:
    """``moment`` as microseconds since 1970 UTC (a naive time counts as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _usage_values(call: UsageCall) -> tuple[Any, ...]:
    """``call``'s row of ``usage_calls``: its time as ISO text, costs as decimal text,
    then ``at_us``."""
    return (
        *(
            value.isoformat()
            if isinstance(value, datetime)
            else str(value)
            if isinstance(value, Decimal)
            else value
            for value in usage_row(call)
        ),
        _instant_us(call.at),
    )


@contextlib.contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE … COMMIT`` on ``db``, rolled back when the block raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _trace_row(trace: KeptTrace) -> tuple[Any, ...]:
    """A ``KeptTrace`` as the values of ``_TRACE_FIELDS`` and ``expires_at_us``."""
    expires = trace.expires_at
    return (
        trace.id,
        trace.org,
        trace.user,
        trace.session_id,
        trace.turn_id,
        trace.at.isoformat(),
        trace.outcome,
        trace.trace,
        trace.error_code,
        trace.error_message,
        trace.faulted_step,
        None if expires is None else expires.isoformat(),
        trace.steps,
        None if expires is None else _instant_us(expires),
    )


def _trace_not_kept(error: Exception, traces: int) -> None:
    logger.warning(
        "trace log: keeping the trace of %s failed (%s: %s)",
        "a turn" if traces == 1 else f"{traces} turns",
        type(error).__name__,
        error,
    )


def _kept_trace(row: Sequence[Any]) -> KeptTrace:
    """A ``turn_traces`` row (``_TRACE_FIELDS``) as a ``KeptTrace``."""
    return KeptTrace(
        id=row[0],
        org=row[1],
        user=row[2],
        session_id=row[3],
        turn_id=row[4],
        at=datetime.fromisoformat(row[5]),
        outcome=row[6],
        trace=row[7],
        error_code=row[8],
        error_message=row[9],
        faulted_step=row[10],
        expires_at=None if row[11] is None else datetime.fromisoformat(row[11]),
        steps=row[12],
    )


class SQLiteStore:
    """Sessions in a SQLite file; see the module docstring. Close it when done.

    ``synchronous`` is the durability setting, ``"normal"`` or ``"full"`` (module
    docstring); ``ValueError`` for anything else. ``transcript_cache_bytes`` bounds
    the decoded transcripts the store keeps between turns (``transcript_cache``; 0
    keeps none).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous | str = "normal",
        busy_timeout_ms: int = 10_000,
        transcript_cache_bytes: int = DEFAULT_BUDGET,
    ) -> None:
        self.path = Path(path)
        self.synchronous: Synchronous = synchronous_mode(synchronous)
        self._transcripts = TranscriptCache(transcript_cache_bytes)
        self._busy_timeout_ms = busy_timeout_ms
        self._connection: sqlite3.Connection | None = None
        self._commits = 0
        self._pending_traces: list[KeptTrace] = []
        """Traces kept and not yet written: the write queued for the first takes them all."""
        self._traces_lock = threading.Lock()
        self._sweep_traces_at: int | None = 0
        """The earliest end (µs) of a trace this store may hold; ``None`` when none
        ends; 0 until the first sweep."""
        self._checkpointing = False
        self._checkpoint_connection: sqlite3.Connection | None = None
        self._checkpointer: _Worker | None = None
        self._worker = _Worker("aptix-sqlite")
        try:
            self._worker.call_sync(self._connect)
        except BaseException:
            self.close()
            raise

    # --- lifecycle -------------------------------------------------------------------

    def _open_connection(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        connection.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        return connection

    def _connect(self) -> None:
        connection = self._open_connection()
        self._connection = connection
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:  # checked before anything changes the file
            raise RuntimeError(
                f"{self.path}: the database has schema version {version}; this "
                f"aptix-pipeline knows up to {SCHEMA_VERSION}"
            )
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        # Checkpoints run in the background (_checkpoint); this is only the safety net
        # for WAL growth this store's own commits do not account for (other processes).
        connection.execute("PRAGMA wal_autocheckpoint = 10000")
        self._migrate(connection)

    @staticmethod
    def _migrate(connection: sqlite3.Connection) -> None:
        with _immediate(connection):
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"the database has schema version {version}; this aptix-pipeline "
                    f"knows up to {SCHEMA_VERSION}"
                )
            # Every step from the file's version on, in this one transaction.
            for step in _MIGRATIONS[version:]:
                for statement in step:
                    connection.execute(statement)
            if version < SCHEMA_VERSION:
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file (``PASSIVE``: never waits for a turn)."""
        try:
            if self._checkpoint_connection is None:
                self._checkpoint_connection = self._open_connection()
                self._checkpoint_connection.execute(
                    f"PRAGMA synchronous = {self.synchronous.upper()}"
                )
            self._checkpoint_connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            pass  # the next one tries again; SQLite's own autocheckpoint is the safety net
        finally:
            self._checkpointing = False

    def _after_commit(self) -> None:
        self._commits += 1
        if self._commits % CHECKPOINT_EVERY or self._checkpointing:
            return
        if self._checkpointer is None:
            self._checkpointer = _Worker("aptix-sqlite-checkpoint")
        self._checkpointing = True
        self._checkpointer.submit(self._checkpoint)

    def _close_checkpoint_connection(self) -> None:  # on the checkpointer's thread
        if self._checkpoint_connection is not None:
            self._checkpoint_connection.close()
            self._checkpoint_connection = None

    def _close_connection(self) -> None:  # on the worker thread, after every queued call
        if self._checkpointer is not None:
            self._checkpointer.call_sync(self._close_checkpoint_connection)
            self._checkpointer.stop()
            self._checkpointer = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def close(self) -> None:
        """Close the connection and stop the worker thread (waits for a running commit).

        Closing twice is harmless. From async code prefer ``await store.aclose()``,
        which waits off the loop.
        """
        if self._worker.running:
            self._worker.call_sync(self._close_connection)
        self._worker.stop()

    async def aclose(self) -> None:
        """``close`` without blocking the event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        """The file's schema version."""
        return int(self._worker.call_sync(lambda: self._query_one("PRAGMA user_version", ()))[0])

    async def _run(self, work: Callable[[], T]) -> T:
        return await self._worker.call(work)

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            raise RuntimeError("the SQLite store is closed")
        return self._connection

    def _query_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self._db().execute(sql, params).fetchone()

    # --- the port --------------------------------------------------------------------

    def begin(self, org: str, user: str) -> BufferedTransaction:
        """Start one turn's transaction for this caller."""
        return BufferedTransaction(self, org, user)

    def _read_session(self, org: str, user: str, session_id: str) -> Session | None:
        db = self._db()
        row = db.execute(
            f"{_SESSION_SELECT} WHERE id = ? AND org = ? AND user = ?", (session_id, org, user)
        ).fetchone()
        if row is None:
            return None
        history = db.execute(
            "SELECT entry FROM mode_history WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return session_from_row(row, (entry for (entry,) in history), row[9:])

    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        """The session, if it belongs to this org and user."""
        return await self._run(lambda: self._read_session(org, user, session_id))

    def _read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        row = (
            self._db()
            .execute(
                "SELECT t.data FROM turns t JOIN sessions s ON s.id = t.session_id "
                "WHERE t.session_id = ? AND t.id = ? AND s.org = ? AND s.user = ?",
                (session_id, turn_id, org, user),
            )
            .fetchone()
        )
        return None if row is None else Turn.model_validate_json(row[0])

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        """The turn of the caller's session, or ``None``."""
        return await self._run(lambda: self._read_turn(org, user, session_id, turn_id))

    def _read_transcript(self, org: str, user: str, session_id: str) -> Transcript:
        # Only the rows after those decoded before (transcript_cache): rows are only appended.
        key = (org, user, session_id)
        held, last_seq = self._transcripts.start(key)
        rows = self._db().execute(_TRANSCRIPT_AFTER, (session_id, org, user, last_seq))
        return self._transcripts.finish(key, held, last_seq, rows)

    async def read_transcript(self, org: str, user: str, session_id: str) -> Transcript:
        """The session's messages, oldest first."""
        return await self._run(lambda: self._read_transcript(org, user, session_id))

    def _read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        row = (
            self._db()
            .execute(
                "SELECT t.data FROM turns t JOIN sessions s ON s.id = t.session_id "
                "WHERE t.session_id = ? AND t.status = ? AND s.org = ? AND s.user = ? LIMIT 1",
                (session_id, TurnStatus.AWAITING_CLIENT_TOOLS.value, org, user),
            )
            .fetchone()
        )
        return None if row is None else Turn.model_validate_json(row[0])

    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        """The session's turn that awaits client tool results, if any."""
        return await self._run(lambda: self._read_pending_turn(org, user, session_id))

    @staticmethod
    def _read_outcome(
        db: sqlite3.Connection, org: str, user: str, key: str
    ) -> StoredOutcome | None:
        row = db.execute(
            "SELECT key, request_digest, session_id, turn_id, result_json, created_at, "
            "expires_at FROM outcomes WHERE org = ? AND user = ? AND key = ?",
            (org, user, key),
        ).fetchone()
        if row is None:
            return None
        return StoredOutcome(
            key=row[0],
            request_digest=row[1],
            session_id=row[2],
            turn_id=row[3],
            result_json=row[4],
            created_at=row[5],  # the ISO text as written: the same instant and offset
            expires_at=row[6],
        )

    async def read_outcome(self, org: str, user: str, key: str) -> StoredOutcome | None:
        """This org and user's outcome under ``key``, expired or not."""
        return await self._run(lambda: self._read_outcome(self._db(), org, user, key))

    async def _purge_in_batches(self, statement: str, now: datetime) -> int:
        """Run ``statement`` (delete at most ``_PURGE_BATCH`` rows expired by the
        instant given in µs) until a batch deletes fewer; how many went. One statement
        a job, so one short transaction: queued turns run between batches."""
        now_us, purged = _instant_us(now), 0

        def batch() -> int:
            return self._db().execute(statement, (now_us, _PURGE_BATCH)).rowcount

        while (deleted := await self._run(batch)) > 0:
            purged += deleted
            if deleted < _PURGE_BATCH:
                break
        return purged

    async def purge_outcomes(self, now: datetime) -> int:
        """Delete every outcome expired by ``now``; how many there were.

        In batches of a short transaction each, so turns committing meanwhile wait
        for one batch at most (``MemoryStore.purge_outcomes``, here off the loop).
        """
        return await self._purge_in_batches(_DELETE_EXPIRED, now)

    # --- ToolLedger (contracts/ledger.py): each statement commits on its own -----------

    def _ledger_entry(self, org: str, user: str, key: str) -> LedgerEntry | None:
        row = self._query_one(
            "SELECT key, result, reserved_at, done_at FROM tool_ledger "
            "WHERE org = ? AND user = ? AND key = ?",
            (org, user, key),
        )
        if row is None:
            return None
        return LedgerEntry(key=row[0], result=row[1], reserved_at=row[2], done_at=row[3])

    def _reserve(self, org: str, user: str, key: str, now: datetime) -> LedgerEntry | None:
        while True:
            taken = self._db().execute(
                "INSERT INTO tool_ledger (org, user, key, reserved_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (org, user, key, now.isoformat()),
            )
            if taken.rowcount == 1:
                return None
            held = self._ledger_entry(org, user, key)
            if held is not None:  # else released by another process meanwhile: try again
                return held

    async def reserve_tool_call(
        self, org: str, user: str, key: str, now: datetime
    ) -> LedgerEntry | None:
        """See ``ToolLedger``."""
        return await self._run(lambda: self._reserve(org, user, key, now))

    def _complete(self, org: str, user: str, key: str, result: str, now: datetime) -> None:
        moment = now.isoformat()
        self._db().execute(
            "INSERT INTO tool_ledger (org, user, key, result, reserved_at, done_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (org, user, key) DO UPDATE SET "
            "result = excluded.result, done_at = excluded.done_at WHERE result IS NULL",
            (org, user, key, result, moment, moment),
        )

    def _complete_queued(self, org: str, user: str, key: str, result: str, now: datetime) -> None:
        try:
            self._complete(org, user, key, result, now)
        except Exception as error:  # nobody awaits this write: say so, the key stays reserved
            logger.warning(
                "tool ledger: recording call %s as done failed (%s: %s); a retry will find "
                "it reserved",
                key,
                type(error).__name__,
                error,
            )

    async def complete_tool_call(
        self, org: str, user: str, key: str, result: str, now: datetime
    ) -> None:
        """See ``ToolLedger``: here it returns once the write is queued, not done.

        The worker runs every call of this store in order, so the write lands
        before anything asked of the store after it (the turn's commit, a later
        reservation of the key). Not awaiting it spares the turn one hop to the
        worker (docs/PERFORMANCE.md "The tool ledger"). A write that fails is
        logged; the call then stays reserved, and a retry follows the policy.
        """
        self._worker.submit(lambda: self._complete_queued(org, user, key, result, now))

    async def release_tool_call(self, org: str, user: str, key: str) -> None:
        """See ``ToolLedger``."""
        await self._run(
            lambda: self._db().execute(
                "DELETE FROM tool_ledger WHERE org = ? AND user = ? AND key = ? AND result IS NULL",
                (org, user, key),
            )
        )

    def _purge_calls_batch(
        self, after: tuple[str, str, str], before: str
    ) -> tuple[int, tuple[str, str, str] | None]:
        db = self._db()
        with _immediate(db):
            rows = db.execute(_LEDGER_BATCH, (before, *after, _PURGE_BATCH)).fetchall()
            old = [(org, user, key) for org, user, key, is_old in rows if is_old]
            db.executemany("DELETE FROM tool_ledger WHERE org = ? AND user = ? AND key = ?", old)
        following = tuple(rows[-1][:3]) if len(rows) == _PURGE_BATCH else None
        return len(old), cast("tuple[str, str, str] | None", following)

    async def purge_tool_calls(self, before: datetime) -> int:
        """Delete every ledger entry reserved before ``before``, done or not; how many.

        A batch of entries in key order a short transaction (module docstring), so
        turns committing meanwhile wait for one batch at most, as in ``purge_outcomes``.
        """
        moment, purged = before.isoformat(), 0
        after: tuple[str, str, str] | None = ("", "", "")
        while after is not None:
            deleted, after = await self._run(partial(self._purge_calls_batch, after, moment))
            purged += deleted
        return purged

    # --- TraceLog (contracts/traces.py): the traces kept meanwhile, one queued transaction --

    def _keep_traces(self) -> None:
        """Write the traces kept since the last write (module docstring), on the worker."""
        with self._traces_lock:
            traces, self._pending_traces = self._pending_traces, []
        if not traces:
            return
        try:
            db = self._db()
            with _immediate(db):
                self._insert_traces(db, traces)
        except Exception as error:  # nobody awaits this write: say so, or try one by one
            if len(traces) == 1 or self._connection is None:
                _trace_not_kept(error, len(traces))
                return
            for trace in traces:  # one bad trace must not lose the others
                try:
                    with _immediate(db):
                        self._insert_traces(db, [trace])
                except Exception as one_error:
                    _trace_not_kept(one_error, 1)
        self._after_commit()

    def _insert_traces(self, db: sqlite3.Connection, traces: list[KeptTrace]) -> None:
        """Insert ``traces``, then sweep up to ``TRACE_SWEEP`` expired ones a trace by the
        newest trace's time, when one may have expired (module docstring)."""
        db.executemany(
            f"INSERT INTO turn_traces ({_TRACE_FIELDS}, expires_at_us) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [_trace_row(trace) for trace in traces],
        )
        now, sweep_at = max(_instant_us(trace.at) for trace in traces), self._sweep_traces_at
        if sweep_at is not None and now >= sweep_at:
            db.execute(_DELETE_EXPIRED_TRACES, (now, TRACE_SWEEP * len(traces)))
            (sweep_at,) = db.execute("SELECT MIN(expires_at_us) FROM turn_traces").fetchone()
        else:
            for trace in traces:
                if trace.expires_at is not None:
                    ends = _instant_us(trace.expires_at)
                    sweep_at = ends if sweep_at is None else min(sweep_at, ends)
        self._sweep_traces_at = sweep_at

    async def keep_trace(self, trace: KeptTrace) -> None:
        """See ``TraceLog``: returns once the write is queued, as ``complete_tool_call``
        does; the worker writes it, with the other traces kept meanwhile, before
        anything asked of the store later. It also deletes up to ``TRACE_SWEEP``
        traces expired by the trace's time. A write that fails is logged."""
        with self._traces_lock:
            self._pending_traces.append(trace)
            first = len(self._pending_traces) == 1
        if first:  # else the write queued for the first is still to take them
            self._worker.submit(self._keep_traces)

    def _list_traces(
        self, org: str, user: str, session_id: str | None, limit: int, offset: int
    ) -> list[KeptTrace]:
        where, params = "org = ? AND user = ?", [org, user]
        if session_id is not None:
            where += " AND session_id = ?"
            params.append(session_id)
        rows = self._db().execute(
            f"SELECT {_TRACE_FIELDS} FROM turn_traces WHERE {where} "
            "ORDER BY seq DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [_kept_trace(row) for row in rows]

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
        return await self._run(lambda: self._list_traces(org, user, session_id, limit, offset))

    async def read_trace(self, org: str, user: str, trace_id: str) -> KeptTrace | None:
        """See ``TraceLog``."""
        row = await self._run(
            lambda: self._query_one(
                f"SELECT {_TRACE_FIELDS} FROM turn_traces WHERE id = ? AND org = ? AND user = ?",
                (trace_id, org, user),
            )
        )
        return None if row is None else _kept_trace(row)

    async def purge_traces(self, now: datetime) -> int:
        """See ``TraceLog``: in batches of one short statement each, as ``purge_outcomes``."""
        return await self._purge_in_batches(_DELETE_EXPIRED_TRACES, now)

    # --- UsageLedger (contracts/usage.py): one BEGIN IMMEDIATE transaction a call ------

    @staticmethod
    def _keep_usage(db: sqlite3.Connection, calls: Sequence[UsageCall]) -> None:
        db.executemany(_USAGE_INSERT, [_usage_values(call) for call in calls])

    @staticmethod
    def _counted(db: sqlite3.Connection, check: BudgetCheck) -> tuple[Decimal, datetime | None]:
        """What ``check``'s calls count, and when the earliest of them was made."""
        where: list[str] = ["org = ?"]
        params: list[object] = [check.org]
        for column, value in (
            ("user", check.user),
            ("mode", check.mode),
            ("turn_id", check.turn_id),
            ("currency", check.currency),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if check.since is not None:
            where.append("at_us >= ?")
            params.append(_instant_us(check.since))
        condition = " AND ".join(where)
        if check.metric is BudgetMetric.COST:  # decimal text: summed exactly, here
            rows = db.execute(
                f"SELECT charge_cost, at FROM usage_calls WHERE {condition} ORDER BY at_us, rowid",
                params,
            ).fetchall()
            used = sum((Decimal(cost) for cost, _ in rows), Decimal(0))
            first = rows[0][1] if rows else None
        else:  # whole numbers: SQLite's integer SUM is exact
            # A bare column beside MIN() is read from the row holding the minimum.
            used_sum, _, first = db.execute(
                f"SELECT SUM(charge_{check.metric.value}), MIN(at_us), at FROM usage_calls "
                f"WHERE {condition}",
                params,
            ).fetchone()
            used = Decimal(used_sum or 0)
        return used, None if first is None else datetime.fromisoformat(first)

    def _reserve_usage(
        self, call: UsageCall, checks: Sequence[BudgetCheck], settle: Sequence[UsageCall]
    ) -> ReserveOutcome:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            self._keep_usage(db, settle)
            kept = db.execute("SELECT 1 FROM usage_calls WHERE id = ?", (call.id,)).fetchone()
            if kept is not None:  # an earlier try of this reservation took it: it stands
                db.execute("COMMIT")
                self._after_commit()
                return ReserveOutcome(reserved=True)
            used: dict[str, Decimal] = {}
            oldest: dict[str, datetime | None] = {}
            for check in checks:
                used[check.budget_id], oldest[check.budget_id] = self._counted(db, check)
            outcome = check_reservation(checks, used, oldest)
            if outcome.reserved:
                self._keep_usage(db, [call])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._after_commit()
        return outcome

    async def reserve_usage(
        self,
        call: UsageCall,
        checks: Sequence[BudgetCheck],
        settle: Sequence[UsageCall] = (),
    ) -> ReserveOutcome:
        """See ``UsageLedger``: one job on the worker, one ``BEGIN IMMEDIATE`` transaction."""
        return await self._run(lambda: self._reserve_usage(call, checks, settle))

    def _settle_usage(self, calls: Sequence[UsageCall]) -> None:
        db = self._db()
        with _immediate(db):
            self._keep_usage(db, calls)
        self._after_commit()

    async def settle_usage(self, calls: Sequence[UsageCall]) -> None:
        """See ``UsageLedger``."""
        if calls:
            await self._run(lambda: self._settle_usage(calls))

    def _usage_calls(self, query: UsageQuery) -> list[UsageCall]:
        where, params = usage_filters(query, "user", "?")
        if query.since is not None:
            where.append("at_us >= ?")
            params.append(_instant_us(query.since))
        if query.until is not None:
            where.append("at_us < ?")
            params.append(_instant_us(query.until))
        rows = self._db().execute(
            f"{_USAGE_SELECT} WHERE {' AND '.join(where)} ORDER BY at_us, rowid", params
        )
        return [usage_call_from_row(row) for row in rows]

    async def usage_calls(self, query: UsageQuery) -> list[UsageCall]:
        """See ``UsageLedger``: oldest first (calls made at one instant: as stored)."""
        return await self._run(lambda: self._usage_calls(query))

    # --- SessionForks (contracts/ports.py, stores/forks.py) ------------------------------

    def _last_seq(self, session_id: str, turn_id: str) -> int | None:
        """The seq of the last message ``turn_id`` appended to the session's own, if any."""
        row = self._query_one(
            "SELECT MAX(seq) FROM transcript WHERE session_id = ? AND turn_id = ?",
            (session_id, turn_id),
        )
        return None if row is None or row[0] is None else int(row[0])

    def _fork(
        self,
        org: str,
        user: str,
        session_id: str,
        turn_id: str,
        new_session_id: str,
        created_at: datetime,
    ) -> Session:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            source = self._read_session(org, user, session_id)
            if source is None:
                raise no_session(session_id)
            check_forkable(session_id, turn_id, self._read_turn(org, user, session_id, turn_id))
            cut = self._last_seq(session_id, turn_id) or 0

            def later(entry_turn: str) -> bool:
                if (
                    self._query_one(
                        "SELECT 1 FROM turns WHERE session_id = ? AND id = ?",
                        (session_id, entry_turn),
                    )
                    is None
                ):
                    return False
                last = self._last_seq(session_id, entry_turn)
                return last is None or last > cut

            prefix = 0 if source.forked_from is None else source.forked_from.messages
            fork = forked_session(source, turn_id, new_session_id, created_at, prefix + cut, later)
            try:
                db.execute(
                    "INSERT INTO sessions (id, org, user, mode, agent_context_id, "
                    "conversation_context_id, solution_context_text, created_at, version, "
                    "parent_id, parent_turn_id, parent_seq, prefix_len) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)",
                    (
                        fork.id,
                        org,
                        user,
                        fork.mode,
                        fork.agent_context_id,
                        fork.conversation_context_id,
                        fork.solution_context_text,
                        created_at.isoformat(),
                        session_id,
                        turn_id,
                        cut,
                        prefix + cut,
                    ),
                )
            except sqlite3.IntegrityError as error:
                raise StoreConflictError(f"session {new_session_id!r} already exists") from error
            db.executemany(
                "INSERT INTO mode_history (session_id, seq, entry) VALUES (?, ?, ?)",
                [
                    (fork.id, seq, entry.model_dump_json())
                    for seq, entry in enumerate(fork.mode_history, 1)
                ],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._after_commit()
        return fork

    async def fork_session(
        self,
        org: str,
        user: str,
        session_id: str,
        turn_id: str,
        new_session_id: str,
        created_at: datetime,
    ) -> Session:
        """See ``SessionForks``: one ``BEGIN IMMEDIATE`` transaction, O(1) in prior turns."""
        return await self._run(
            partial(self._fork, org, user, session_id, turn_id, new_session_id, created_at)
        )

    def _forks_of(self, org: str, user: str, session_id: str) -> list[Session] | None:
        if not self._owns(org, user, session_id):
            return None
        rows = self._db().execute(
            "SELECT id FROM sessions WHERE parent_id = ? AND org = ? AND user = ? "
            "ORDER BY created_at, id",
            (session_id, org, user),
        )
        found = (self._read_session(org, user, fork_id) for (fork_id,) in rows.fetchall())
        return [fork for fork in found if fork is not None]

    async def forks_of(self, org: str, user: str, session_id: str) -> list[Session] | None:
        """See ``SessionForks``."""
        return await self._run(lambda: self._forks_of(org, user, session_id))

    # --- SessionBrowser (stores/session_browser.py) ------------------------------------------

    def _list_owners(self, limit: int, offset: int) -> list[OwnerSummary]:
        rows = self._db().execute(
            "SELECT org, user, COUNT(*) FROM sessions GROUP BY org, user "
            "ORDER BY org, user LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [OwnerSummary(org, user, count) for org, user, count in rows]

    async def list_owners(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[OwnerSummary]:
        """The org and user pairs holding sessions, by org then user."""
        check_page(limit, offset)
        return await self._run(lambda: self._list_owners(limit, offset))

    def _list_sessions(self, org: str, user: str) -> list[SessionSummary]:
        db = self._db()
        turn_times: dict[str, list[datetime | None]] = {}
        for session_id, created in db.execute(
            "SELECT t.session_id, json_extract(t.data, '$.CreatedAt') FROM turns t "
            "JOIN sessions s ON s.id = t.session_id WHERE s.org = ? AND s.user = ?",
            (org, user),
        ):
            moment = None if created is None else datetime.fromisoformat(created)
            turn_times.setdefault(session_id, []).append(moment)
        summaries = []
        for session_id, mode, created_text in db.execute(
            "SELECT id, mode, created_at FROM sessions WHERE org = ? AND user = ?", (org, user)
        ):
            created_at = None if created_text is None else datetime.fromisoformat(created_text)
            times = turn_times.get(session_id, [])
            summaries.append(SessionSummary.of(session_id, org, user, mode, created_at, times))
        return sorted(summaries, key=SessionSummary.sort_key)

    async def list_sessions(
        self, org: str, user: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[SessionSummary]:
        """The caller's sessions, most recent activity first."""
        check_page(limit, offset)
        summaries = await self._run(lambda: self._list_sessions(org, user))
        return summaries[offset : offset + limit]

    def _owns(self, org: str, user: str, session_id: str) -> bool:
        return (
            self._query_one(
                "SELECT 1 FROM sessions WHERE id = ? AND org = ? AND user = ?",
                (session_id, org, user),
            )
            is not None
        )

    def _list_turns(self, org: str, user: str, session_id: str) -> list[Turn] | None:
        if not self._owns(org, user, session_id):
            return None
        rows = self._db().execute("SELECT data FROM turns WHERE session_id = ?", (session_id,))
        return sorted((Turn.model_validate_json(data) for (data,) in rows), key=turn_order)

    async def list_turns(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[Turn] | None:
        """The session's turns in creation order; ``None`` when the caller has no such session."""
        check_page(limit, offset)
        turns = await self._run(lambda: self._list_turns(org, user, session_id))
        return None if turns is None else turns[offset : offset + limit]

    def _transcript_page(
        self, org: str, user: str, session_id: str, limit: int, offset: int
    ) -> list[TranscriptEntry] | None:
        if not self._owns(org, user, session_id):
            return None
        rows = self._db().execute(
            "SELECT seq, turn_id, message FROM transcript WHERE session_id = ? "
            "ORDER BY seq LIMIT ? OFFSET ?",
            (session_id, limit, offset),
        )
        return [
            TranscriptEntry(seq, turn_id, ChatMessage.model_validate_json(text))
            for seq, turn_id, text in rows
        ]

    async def read_transcript_page(
        self, org: str, user: str, session_id: str, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[TranscriptEntry] | None:
        """The session's messages in order; ``None`` when the caller has no such session."""
        check_page(limit, offset)
        return await self._run(lambda: self._transcript_page(org, user, session_id, limit, offset))

    # --- SessionSearch (stores/session_search.py) ---------------------------------------------

    def _search_sessions(self, where: SessionFilter, limit: int, offset: int) -> list[SessionRow]:
        condition, params = search_where(where, _SEARCH_SQL)
        db = self._db()
        rows = db.execute(
            _SEARCH.format(where=condition or "1"), (*params, limit, offset)
        ).fetchall()
        found: list[SessionRow] = []
        for row in rows:
            session_id, org, user, mode, created, at, status, count, tokens = row[:9]
            outcome, error_code, error_message = row[9:]
            summary = SessionSummary(
                session_id,
                org,
                user,
                mode,
                count,
                None if created is None else datetime.fromisoformat(created),
                datetime.fromisoformat(at) if at else None,
            )
            if summary.last_activity is None:
                summary = dataclasses.replace(summary, last_activity=summary.created_at)
            first = self._transcript_page(org, user, session_id, 1, 0)
            costs: dict[str, Decimal] = {}
            for currency, cost in db.execute(_SESSION_COST, (org, session_id)):
                costs[currency] = costs.get(currency, Decimal(0)) + Decimal(cost)
            found.append(
                SessionRow(
                    summary,
                    status,
                    preview_of(message_text(first[0].message)) if first else None,
                    tokens,
                    tuple(sorted(costs.items())),
                    outcome,
                    error_code,
                    error_message,
                )
            )
        return found

    async def search_sessions(
        self, where: SessionFilter, *, limit: int = DEFAULT_PAGE, offset: int = 0
    ) -> list[SessionRow]:
        """The sessions ``where`` matches, most recent activity first (one query)."""
        check_page(limit, offset)
        return await self._run(lambda: self._search_sessions(where, limit, offset))

    def _apply(self, writes: TurnWrites) -> None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            self._write(db, writes)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._after_commit()

    @staticmethod
    def _write(db: sqlite3.Connection, writes: TurnWrites) -> None:
        for write in writes.sessions:
            s = write.session
            if write.created:
                try:
                    db.execute(
                        "INSERT INTO sessions (id, org, user, mode, agent_context_id, "
                        "conversation_context_id, solution_context_text, created_at, version) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
                        (
                            s.id,
                            s.org,
                            s.user,
                            s.mode,
                            s.agent_context_id,
                            s.conversation_context_id,
                            s.solution_context_text,
                            s.created_at.isoformat() if s.created_at else None,
                        ),
                    )
                except sqlite3.IntegrityError as error:
                    raise StoreConflictError(f"session {s.id!r} already exists") from error
            else:
                updated = db.execute(
                    "UPDATE sessions SET mode = ?, solution_context_text = ?, "
                    "version = version + 1 WHERE id = ? AND org = ? AND user = ? AND version = ?",
                    (
                        s.mode,
                        s.solution_context_text,
                        s.id,
                        writes.org,
                        writes.user,
                        write.expected_version,
                    ),
                )
                if updated.rowcount != 1:
                    raise StoreConflictError(f"session {s.id!r} changed since it was read")
            (next_seq,) = (
                (1,)  # a session this turn creates has no history yet
                if write.created
                else db.execute(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM mode_history WHERE session_id = ?",
                    (s.id,),
                ).fetchone()
            )
            # A new session's whole history is new; an existing one's only what this turn added.
            history = s.mode_history if write.created else write.new_history
            for offset, entry in enumerate(history):
                db.execute(
                    "INSERT INTO mode_history (session_id, seq, entry) VALUES (?, ?, ?)",
                    (s.id, next_seq + offset, entry.model_dump_json()),
                )
        for turn_write in writes.turns:
            turn = turn_write.turn
            row = (turn.status.value, turn.model_dump_json(), turn.session_id, turn.id)
            if turn_write.created:
                try:
                    db.execute(
                        "INSERT INTO turns (status, data, session_id, id) VALUES (?, ?, ?, ?)", row
                    )
                except sqlite3.IntegrityError as error:
                    raise StoreConflictError(f"turn {turn.id!r} already exists") from error
            else:
                db.execute(
                    "UPDATE turns SET status = ?, data = ? WHERE session_id = ? AND id = ?", row
                )
        # A session this turn creates has no transcript yet: its messages start at 1.
        next_seq_by_session = {write.session.id: 1 for write in writes.sessions if write.created}
        for session_id, turn_id, message in writes.transcript:
            if session_id not in next_seq_by_session:
                (next_seq_by_session[session_id],) = db.execute(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM transcript WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
            db.execute(
                "INSERT INTO transcript (session_id, seq, turn_id, message) VALUES (?, ?, ?, ?)",
                (session_id, next_seq_by_session[session_id], turn_id, message.model_dump_json()),
            )
            next_seq_by_session[session_id] += 1
        if writes.outcomes:
            SQLiteStore._write_outcomes(db, writes)

    @staticmethod
    def _write_outcomes(db: sqlite3.Connection, writes: TurnWrites) -> None:
        # After the sessions: an Initial turn's outcome names the session it creates.
        # The sweep: expired by the earliest new outcome's time, so expired for each of
        # them too, and deleting one changes no conflict decision below.
        earliest = min(_instant_us(outcome.created_at) for outcome in writes.outcomes)
        db.execute(_DELETE_EXPIRED, (earliest, OUTCOME_SWEEP))
        for outcome in writes.outcomes:
            # Inside BEGIN IMMEDIATE nobody else writes: read, decide, write.
            stored = SQLiteStore._read_outcome(db, writes.org, writes.user, outcome.key)
            if not outcome_replaceable(stored, outcome):
                raise StoreConflictError(f"outcome {outcome.key!r} is already stored")
            expires = outcome.expires_at
            db.execute(
                "INSERT OR REPLACE INTO outcomes (org, user, key, request_digest, session_id, "
                "turn_id, result_json, created_at, expires_at, expires_at_us) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    writes.org,
                    writes.user,
                    outcome.key,
                    outcome.request_digest,
                    outcome.session_id,
                    outcome.turn_id,
                    outcome.result_json,
                    outcome.created_at.isoformat(),
                    None if expires is None else expires.isoformat(),
                    None if expires is None else _instant_us(expires),
                ),
            )

    async def apply(self, writes: TurnWrites) -> None:
        """Write a turn in one transaction; ``StoreConflictError`` when another turn won."""
        await self._run(lambda: self._apply(writes))
