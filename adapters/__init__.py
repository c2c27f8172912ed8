"""Concrete ports and front doors: stores, LLM clients, catalogs, the HTTP app, the CLI.

Adapters depend on everything above them; nothing in contracts, validators, steps
or engine imports an adapter (DESIGN.md "Layout and layers"). Each name below is
imported on first use, so an adapter's optional dependency (psycopg, openai,
FastAPI, typer) is needed only by a host that uses that adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .builtin_tools import BUILTIN_TOOLS
    from .catalog_config import CatalogError, ConfigCatalog
    from .clocks import SteppingClock, SystemClock
    from .embedded import DEFAULT_STORE_URL, embedded_pipeline, open_store
    from .file_store import LocalFileStore
    from .fts_retriever import FtsRetriever, RetrievalIndexError, build_index
    from .http_app import ApiKeyAuthenticator, Authenticator, create_app
    from .ids import RandomIds, SequentialIds
    from .memory_store import MemoryStore
    from .openai_llm import OpenAICompatibleLLM, StreamBrokenError
    from .postgres_migrations import SchemaVersionError
    from .postgres_store import PostgresStore, PostgresStoreError
    from .scripted_llm import ScriptedLLM, ScriptError, ScriptExhaustedError
    from .service_config import ConfigError, ServiceConfig
    from .sqlite_store import SQLiteStore
    from .store_contract import StoreContract
    from .telemetry_setup import TelemetrySetupError, configure_tracing
    from .unit_of_work import (
        BufferedTransaction,
        SessionWrite,
        StoreBackend,
        TurnWrite,
        TurnWrites,
        outcome_replaceable,
    )

_EXPORTS: dict[str, str] = {
    "BUILTIN_TOOLS": "builtin_tools",
    "CatalogError": "catalog_config",
    "ConfigCatalog": "catalog_config",
    "SteppingClock": "clocks",
    "SystemClock": "clocks",
    "DEFAULT_STORE_URL": "embedded",
    "embedded_pipeline": "embedded",
    "open_store": "embedded",
    "LocalFileStore": "file_store",
    "FtsRetriever": "fts_retriever",
    "RetrievalIndexError": "fts_retriever",
    "build_index": "fts_retriever",
    "ApiKeyAuthenticator": "http_app",
    "Authenticator": "http_app",
    "create_app": "http_app",
    "RandomIds": "ids",
    "SequentialIds": "ids",
    "MemoryStore": "memory_store",
    "OpenAICompatibleLLM": "openai_llm",
    "StreamBrokenError": "openai_llm",
    "PostgresStore": "postgres_store",
    "PostgresStoreError": "postgres_store",
    "SchemaVersionError": "postgres_migrations",
    "ScriptError": "scripted_llm",
    "ScriptExhaustedError": "scripted_llm",
    "ScriptedLLM": "scripted_llm",
    "ConfigError": "service_config",
    "ServiceConfig": "service_config",
    "SQLiteStore": "sqlite_store",
    "StoreContract": "store_contract",
    "TelemetrySetupError": "telemetry_setup",
    "configure_tracing": "telemetry_setup",
    "BufferedTransaction": "unit_of_work",
    "SessionWrite": "unit_of_work",
    "StoreBackend": "unit_of_work",
    "TurnWrite": "unit_of_work",
    "TurnWrites": "unit_of_work",
    "outcome_replaceable": "unit_of_work",
}
"""Each public name and the module it comes from."""

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_STORE_URL",
    "ApiKeyAuthenticator",
    "Authenticator",
    "BufferedTransaction",
    "CatalogError",
    "ConfigCatalog",
    "ConfigError",
    "FtsRetriever",
    "LocalFileStore",
    "MemoryStore",
    "OpenAICompatibleLLM",
    "PostgresStore",
    "PostgresStoreError",
    "RandomIds",
    "RetrievalIndexError",
    "SQLiteStore",
    "SchemaVersionError",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "SequentialIds",
    "ServiceConfig",
    "SessionWrite",
    "SteppingClock",
    "StoreBackend",
    "StoreContract",
    "StreamBrokenError",
    "SystemClock",
    "TelemetrySetupError",
    "TurnWrite",
    "TurnWrites",
    "build_index",
    "configure_tracing",
    "create_app",
    "embedded_pipeline",
    "open_store",
    "outcome_replaceable",
]


# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
