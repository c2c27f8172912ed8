"""The embedded defaults, assembled: a ``Pipeline`` on SQLite (or memory) in one call.

``embedded_pipeline(store="sqlite:aptix.db", llm=ScriptedLLM.from_file(...))``
gives a pipeline on the SQLite store, the built-in catalog (or a TOML file), the
built-in server tools, the system clock and random ids — what ``aptix run`` and
``make demo`` use. Every part can be replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aptix_pipeline.contracts import LLM, Clock, IdSource, SessionStore, ToolExecutor
from aptix_pipeline.engine import Pipeline, PipelineOptions, Ports

from .builtin_tools import BUILTIN_TOOLS
from .catalog_config import ConfigCatalog
from .clocks import SystemClock
from .ids import RandomIds
from .memory_store import MemoryStore
from .sqlite_store import SQLiteStore

__all__ = ["embedded_pipeline", "open_store"]


def open_store(spec: str | Path) -> MemoryStore | SQLiteStore:
    """A store from its spec: ``memory``, ``sqlite:PATH``, or a ``.db``/``.sqlite`` path."""
    text = str(spec)
    if text == "memory":
        return MemoryStore()
    if text.startswith("sqlite:"):
        path = text.removeprefix("sqlite:")
        if not path:
            raise ValueError("sqlite: needs a file path, e.g. sqlite:aptix.db")
        return SQLiteStore(path)
    if text.endswith((".db", ".sqlite", ".sqlite3")):
        return SQLiteStore(text)
    raise ValueError(f"unknown store {text!r}: use memory or sqlite:PATH")


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
) -> Pipeline:
    """A pipeline on the embedded defaults; ``tools`` adds to (or replaces) the built-ins.

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
    return Pipeline(ports, options)
