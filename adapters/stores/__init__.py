"""The session stores: memory, SQLite and PostgreSQL (with its migrations), the unit of
work they share (``StoreBackend``, ``BufferedTransaction``), what their forks share
(``forks``), the browse reads of
``aptix sessions`` and the turn browser, and ``open_store`` for a store's URL.

May import contracts, validators, steps and engine; never another room of adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .browse import (
        BrowsableStore,
        BrowseStoreError,
        SessionDetail,
        close_browse_store,
        detail_json,
        message_text,
        open_browse_store,
        read_session_detail,
        summary_json,
        trace_json,
    )
    from .memory import MemoryStore
    from .postgres import PostgresStore, PostgresStoreError
    from .postgres_migrations import SchemaVersionError
    from .session_browser import MAX_PAGE, OwnerSummary, SessionBrowser, SessionSummary
    from .session_search import (
        STATUSES,
        SessionFilter,
        SessionRow,
        SessionSearch,
        parse_filter,
        search_sessions,
    )
    from .sqlite import SQLiteStore, Synchronous, synchronous_mode
    from .turn_notices import TURNS_CHANNEL, TurnNotice, TurnNotifier, parse_notice
    from .unit_of_work import (
        BufferedTransaction,
        SessionWrite,
        StoreBackend,
        TurnWrite,
        TurnWrites,
        outcome_replaceable,
    )
    from .urls import DEFAULT_STORE_URL, open_store, sqlite_target, unknown_store_scheme

_EXPORTS: dict[str, str] = {
    "BrowsableStore": "browse",
    "BrowseStoreError": "browse",
    "close_browse_store": "browse",
    "detail_json": "browse",
    "message_text": "browse",
    "open_browse_store": "browse",
    "read_session_detail": "browse",
    "SessionDetail": "browse",
    "summary_json": "browse",
    "trace_json": "browse",
    "MemoryStore": "memory",
    "PostgresStore": "postgres",
    "PostgresStoreError": "postgres",
    "SchemaVersionError": "postgres_migrations",
    "MAX_PAGE": "session_browser",
    "OwnerSummary": "session_browser",
    "SessionBrowser": "session_browser",
    "SessionSummary": "session_browser",
    "SessionFilter": "session_search",
    "SessionRow": "session_search",
    "SessionSearch": "session_search",
    "STATUSES": "session_search",
    "parse_filter": "session_search",
    "search_sessions": "session_search",
    "SQLiteStore": "sqlite",
    "Synchronous": "sqlite",
    "synchronous_mode": "sqlite",
    "TURNS_CHANNEL": "turn_notices",
    "TurnNotice": "turn_notices",
    "TurnNotifier": "turn_notices",
    "parse_notice": "turn_notices",
    "BufferedTransaction": "unit_of_work",
    "outcome_replaceable": "unit_of_work",
    "SessionWrite": "unit_of_work",
    "StoreBackend": "unit_of_work",
    "TurnWrite": "unit_of_work",
    "TurnWrites": "unit_of_work",
    "DEFAULT_STORE_URL": "urls",
    "open_store": "urls",
    "sqlite_target": "urls",
    "unknown_store_scheme": "urls",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "DEFAULT_STORE_URL",
    "MAX_PAGE",
    "STATUSES",
    "TURNS_CHANNEL",
    "BrowsableStore",
    "BrowseStoreError",
    "BufferedTransaction",
    "MemoryStore",
    "OwnerSummary",
    "PostgresStore",
    "PostgresStoreError",
    "SQLiteStore",
    "SchemaVersionError",
    "SessionBrowser",
    "SessionDetail",
    "SessionFilter",
    "SessionRow",
    "SessionSearch",
    "SessionSummary",
    "SessionWrite",
    "StoreBackend",
    "Synchronous",
    "TurnNotice",
    "TurnNotifier",
    "TurnWrite",
    "TurnWrites",
    "close_browse_store",
    "detail_json",
    "message_text",
    "open_browse_store",
    "open_store",
    "outcome_replaceable",
    "parse_filter",
    "parse_notice",
    "read_session_detail",
    "search_sessions",
    "sqlite_target",
    "summary_json",
    "synchronous_mode",
    "trace_json",
    "unknown_store_scheme",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
