"""Concrete ports and front doors, one room (subpackage) per concern.

- the front doors: ``cli/`` (the ``aptix`` command), ``http/`` (the service),
  ``ui/`` (the turn browser page);
- ``embedded.py``, the composition root: ``embedded_pipeline``, ``build_pipeline``,
  and for durable turns ``durable_pipeline``, ``durable_worker``;
- ``config/``: the service's TOML file, the catalog, the data folder;
- ``evals/``: evals from recordings (``aptix eval``, docs/EVALS.md);
- ``temporal/``: durable turns on Temporal (the ``temporal`` extra);
- the ports' rooms: ``stores/``, ``models/``, ``retrieval/``, ``files/``, ``tools/``,
  ``system/`` (clock, ids, tracing).

Adapters may import everything above them; nothing in contracts, validators, steps
or engine imports an adapter (DESIGN.md "Layout and layers", docs/DEVELOPMENT.md).
Within, the front doors sit above the composition root and config, which sit above
the ports' rooms; a room is imported only through its ``__init__``. Each name below
is imported on first use, so an adapter's optional dependency (psycopg, openai,
FastAPI, typer) is needed only by a host that uses that adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .config import (
        CatalogError,
        ConfigCatalog,
        ConfigError,
        HostExtension,
        ServiceConfig,
        TemporalConfig,
    )
    from .embedded import (
        DEFAULT_STORE_URL,
        build_pipeline,
        durable_pipeline,
        durable_worker,
        embedded_pipeline,
        open_store,
    )
    from .evals import (
        Candidate,
        CaptureError,
        EvalReport,
        RecordedStore,
        capture_cases,
        load_cases,
        report_html,
        report_json,
        report_junit,
        report_table,
        run_evals,
    )
    from .files import LocalFileStore
    from .http import ApiKeyAuthenticator, Authenticator, create_app
    from .models import (
        OpenAICompatibleLLM,
        ScriptedLLM,
        ScriptError,
        ScriptExhaustedError,
        StreamBrokenError,
        TurnScript,
    )
    from .retrieval import FtsRetriever, RetrievalIndexError, build_index
    from .stores import (
        BufferedTransaction,
        MemoryStore,
        PostgresStore,
        PostgresStoreError,
        SchemaVersionError,
        SessionWrite,
        SQLiteStore,
        StoreBackend,
        TurnWrite,
        TurnWrites,
        outcome_replaceable,
    )
    from .system import (
        RandomIds,
        SequentialIds,
        SteppingClock,
        SystemClock,
        TelemetrySetupError,
        configure_tracing,
    )
    from .temporal import (
        BlobStore,
        DirectoryBlobs,
        DurablePipeline,
        DurableProgress,
        DurableSettings,
        DurableStream,
        DurableWorker,
    )
    from .tools import BUILTIN_TOOLS, HttpServer, McpPool, StdioServer

_EXPORTS: dict[str, str] = {
    "BUILTIN_TOOLS": "tools",
    "HttpServer": "tools",
    "McpPool": "tools",
    "StdioServer": "tools",
    "CatalogError": "config",
    "ConfigCatalog": "config",
    "SteppingClock": "system",
    "SystemClock": "system",
    "DEFAULT_STORE_URL": "stores",
    "embedded_pipeline": "embedded",
    "build_pipeline": "embedded",
    "open_store": "stores",
    "LocalFileStore": "files",
    "FtsRetriever": "retrieval",
    "RetrievalIndexError": "retrieval",
    "build_index": "retrieval",
    "ApiKeyAuthenticator": "http",
    "Authenticator": "http",
    "create_app": "http",
    "RandomIds": "system",
    "SequentialIds": "system",
    "MemoryStore": "stores",
    "OpenAICompatibleLLM": "models",
    "StreamBrokenError": "models",
    "PostgresStore": "stores",
    "PostgresStoreError": "stores",
    "SchemaVersionError": "stores",
    "ScriptError": "models",
    "ScriptExhaustedError": "models",
    "ScriptedLLM": "models",
    "TurnScript": "models",
    "ConfigError": "config",
    "ServiceConfig": "config",
    "HostExtension": "config",
    "SQLiteStore": "stores",
    "TelemetrySetupError": "system",
    "configure_tracing": "system",
    "BufferedTransaction": "stores",
    "SessionWrite": "stores",
    "StoreBackend": "stores",
    "TurnWrite": "stores",
    "TurnWrites": "stores",
    "outcome_replaceable": "stores",
    "TemporalConfig": "config",
    "durable_pipeline": "embedded",
    "durable_worker": "embedded",
    "BlobStore": "temporal",
    "DirectoryBlobs": "temporal",
    "DurablePipeline": "temporal",
    "DurableProgress": "temporal",
    "DurableSettings": "temporal",
    "DurableStream": "temporal",
    "DurableWorker": "temporal",
    "Candidate": "evals",
    "CaptureError": "evals",
    "EvalReport": "evals",
    "RecordedStore": "evals",
    "capture_cases": "evals",
    "load_cases": "evals",
    "report_html": "evals",
    "report_json": "evals",
    "report_junit": "evals",
    "report_table": "evals",
    "run_evals": "evals",
}
"""Each public name and the module it comes from."""

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_STORE_URL",
    "ApiKeyAuthenticator",
    "Authenticator",
    "BlobStore",
    "BufferedTransaction",
    "Candidate",
    "CaptureError",
    "CatalogError",
    "ConfigCatalog",
    "ConfigError",
    "DirectoryBlobs",
    "DurablePipeline",
    "DurableProgress",
    "DurableSettings",
    "DurableStream",
    "DurableWorker",
    "EvalReport",
    "FtsRetriever",
    "HostExtension",
    "HttpServer",
    "LocalFileStore",
    "McpPool",
    "MemoryStore",
    "OpenAICompatibleLLM",
    "PostgresStore",
    "PostgresStoreError",
    "RandomIds",
    "RecordedStore",
    "RetrievalIndexError",
    "SQLiteStore",
    "SchemaVersionError",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "SequentialIds",
    "ServiceConfig",
    "SessionWrite",
    "StdioServer",
    "SteppingClock",
    "StoreBackend",
    "StreamBrokenError",
    "SystemClock",
    "TelemetrySetupError",
    "TemporalConfig",
    "TurnScript",
    "TurnWrite",
    "TurnWrites",
    "build_index",
    "build_pipeline",
    "capture_cases",
    "configure_tracing",
    "create_app",
    "durable_pipeline",
    "durable_worker",
    "embedded_pipeline",
    "load_cases",
    "open_store",
    "outcome_replaceable",
    "report_html",
    "report_json",
    "report_junit",
    "report_table",
    "run_evals",
]


# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
