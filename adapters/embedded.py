"""The embedded defaults, assembled: a ``Pipeline`` on SQLite (or memory) in one call.

``embedded_pipeline(store="sqlite:aptix.db", llm=ScriptedLLM.from_file(...))``
gives a pipeline on the SQLite store, the built-in catalog (or a TOML file), the
built-in server tools, the system clock and random ids — what ``aptix run`` and
``make demo`` use. Every part can be replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from aptix_pipeline.contracts import LLM, Clock, IdSource, SessionStore, ToolExecutor
from aptix_pipeline.engine import Pipeline, PipelineOptions, Ports, RecordingOptions, Telemetry

from .builtin_tools import BUILTIN_TOOLS
from .catalog_config import ConfigCatalog
from .clocks import SystemClock
from .ids import RandomIds
from .memory_store import MemoryStore
from .sqlite_store import SQLiteStore

if TYPE_CHECKING:
    from .postgres_store import PostgresStore

__all__ = ["embedded_pipeline", "open_store"]


def open_store(spec: str | Path) -> MemoryStore | SQLiteStore | PostgresStore:
    """A store from its spec: ``memory``, ``sqlite:PATH``, a ``.db``/``.sqlite`` path, or a
    PostgreSQL URL (``postgresql://user:password@host:5432/db``, also ``postgres://``).

    The PostgreSQL store needs the ``postgres`` extra; it is imported only when asked for.
    """
    text = str(spec)
    if text == "memory":
        return MemoryStore()
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres_store import PostgresStore
        except ImportError as error:
            raise RuntimeError(
                "a postgresql:// store needs psycopg: pip install 'aptix-pipeline[postgres]' "
                f"({error})"
            ) from None
        return PostgresStore(text)
    if text.startswith("sqlite:"):
        path = text.removeprefix("sqlite:")
        if not path:
            raise ValueError("sqlite: needs a file path, e.g. sqlite:aptix.db")
        return SQLiteStore(path)
    if text.endswith((".db", ".sqlite", ".sqlite3")):
        return SQLiteStore(text)
    shown = f"{text.partition('://')[0]}://..." if "://" in text else text  # no credentials
    raise ValueError(
        f"unknown store {shown!r}: use memory, sqlite:PATH or postgresql://USER@HOST/DB"
    )


def embedded_pipeline(
    *,
    llm: LLM,
    store: SessionStore | str | Path = "memory",
    config: str | Path | None = None,
    catalog: ConfigCatalog | None = None,
    tools: Mapping[str, ToolExecutor] | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    options: PipelineOptions | None = None,
    telemetry: Telemetry | None = None,
    recording: RecordingOptions | None = None,
) -> Pipeline:
    """A pipeline on the embedded defaults; ``tools`` adds to (or replaces) the built-ins.

    ``telemetry`` says where spans go (default: the global OpenTelemetry provider);
    ``recording`` records every turn for replay (``engine/recording.py``).

    ``catalog`` is an already loaded catalog (e.g. ``ServiceConfig.catalog``); it
    takes the place of ``config``.
    """
    if catalog is None:
        catalog = ConfigCatalog.from_file(config) if config is not None else ConfigCatalog.default()
    session_store = open_store(store) if isinstance(store, str | Path) else store
    ports = Ports(
        store=session_store,
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=clock or SystemClock(),
        ids=ids or RandomIds(),
        tools={**BUILTIN_TOOLS, **(tools or {})},
    )
    return Pipeline(ports, options, telemetry=telemetry, recording=recording)
