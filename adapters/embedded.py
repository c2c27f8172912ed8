"""The embedded defaults, assembled: a ``Pipeline`` on SQLite (or memory) in one call.

``embedded_pipeline(store="sqlite:aptix.db", llm=ScriptedLLM.from_file(...))``
gives a pipeline on the SQLite store, the built-in catalog with its demo server
tools (or a TOML file, or a host's own catalog), the system clock and random ids —
what ``aptix run`` and ``make demo`` use. Every part can be replaced.

The catalog is any object that is both a ``ModeCatalog`` and an ``AgentCatalog``
(``CatalogPorts``). The demo tools' executors (``BUILTIN_TOOLS``) come only with
the built-in catalog, a ``ConfigCatalog`` read with ``demo_tools=True``, or
``embedded_pipeline(demo_tools=True)``; a host's catalog brings none. The
pipeline is built by ``Pipeline``, which refuses executors that do not match the
catalog's tools (``engine/tool_routing.py``) when the catalog can be read at once;
a host's catalog is checked by ``await pipeline.verify()``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aptix_pipeline.contracts import (
    LLM,
    AgentCatalog,
    Clock,
    FileStore,
    IdSource,
    ModeCatalog,
    Retriever,
    SessionStore,
    ToolExecutor,
)
from aptix_pipeline.engine import (
    Listener,
    ListsModes,
    Pipeline,
    Runtime,
    Telemetry,
    TurnInterceptor,
)
from aptix_pipeline.engine.replay import Recorder, RecordingOptions
from aptix_pipeline.steps import Hooks, PipelineOptions, Ports
from aptix_pipeline.validators import HostRule

from .builtin_tools import BUILTIN_TOOLS, DEMO_TOOLS
from .catalog_config import ConfigCatalog
from .clocks import SystemClock
from .ids import RandomIds
from .memory_store import MemoryStore
from .sqlite_store import SQLiteStore, Synchronous, synchronous_mode

if TYPE_CHECKING:
    from .postgres_store import PostgresStore

__all__ = [
    "DEFAULT_STORE_URL",
    "CatalogPorts",
    "embedded_pipeline",
    "open_store",
    "sqlite_target",
    "unknown_store_scheme",
]


class CatalogPorts(ModeCatalog, AgentCatalog, Protocol):
    """A catalog that is both ports: the Mode Catalog and the Agent Catalog
    (``contracts/ports.py``). ``ConfigCatalog`` is one; a host's own class is one
    when it has their four methods."""


DEFAULT_STORE_URL = "sqlite:aptix.db"
"""A SQLite file in the working directory, for a host that wants its store beside its
process (also ``service_config.DEFAULT_STORE_URL``). ``aptix run`` and a configuration
without a ``[store]`` table use the data folder's file instead (``data_dir.py``)."""


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")
"""A URL scheme: two characters or more, so a Windows drive letter (``C:``) is none."""

_KNOWN_STORES = "memory, sqlite:PATH or postgresql://USER@HOST/DB"


def unknown_store_scheme(spec: str) -> str | None:
    """The scheme ``spec`` starts with when it is none a store knows (``sqllite:x.db``
    gives ``"sqllite"``), else ``None`` (D375)."""
    match = _SCHEME.match(spec)
    if match is None or match.group(1) in ("sqlite", "postgresql", "postgres"):
        return None
    return match.group(1)


def sqlite_target(spec: str) -> tuple[str, Synchronous]:
    """``sqlite:PATH[?synchronous=normal|full]`` → the path and the durability setting.

    ``synchronous`` (sqlite_store.py) defaults to ``normal``; an unknown option or a
    bad value is a ``ValueError`` naming the option.
    """
    path, _, query = spec.removeprefix("sqlite:").partition("?")
    if not path:
        raise ValueError("sqlite: needs a file path, e.g. sqlite:aptix.db")
    synchronous: Synchronous = "normal"
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        if key != "synchronous":
            raise ValueError(f"unknown sqlite: option {key!r}; known: synchronous")
        synchronous = synchronous_mode(value, option="sqlite: option synchronous")
    return path, synchronous


def open_store(spec: str | Path) -> MemoryStore | SQLiteStore | PostgresStore:
    """A store from its spec: ``memory``, ``sqlite:PATH`` (with options:
    ``sqlite:PATH?synchronous=full``, see ``sqlite_target``), a ``.db``/``.sqlite`` path,
    or a PostgreSQL URL (``postgresql://user:password@host:5432/db``, also ``postgres://``).

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
        path, synchronous = sqlite_target(text)
        return SQLiteStore(path, synchronous=synchronous)
    scheme = unknown_store_scheme(text)
    if scheme is not None:  # a misspelt scheme, not a file name to create
        raise ValueError(f"unknown store scheme {scheme + ':'!r}: use {_KNOWN_STORES}")
    if text.endswith((".db", ".sqlite", ".sqlite3")):
        return SQLiteStore(text)
    shown = f"{text.partition('://')[0]}://..." if "://" in text else text  # no credentials
    raise ValueError(f"unknown store {shown!r}: use {_KNOWN_STORES}")


def _demo_executors(catalog: CatalogPorts) -> dict[str, ToolExecutor]:
    """The demo tools' executors for the demo tools ``catalog`` offers; all of them when
    it cannot be read at once (``Pipeline.verify`` then names any it does not offer)."""
    if not isinstance(catalog, ListsModes):
        return dict(BUILTIN_TOOLS)
    offered = {tool.name for mode in catalog.all_modes() for tool in mode.server_tools}
    return {name: run for name, run in DEMO_TOOLS.items() if name in offered}


def embedded_pipeline(
    *,
    llm: LLM,
    store: SessionStore | str | Path = "memory",
    config: str | Path | None = None,
    catalog: CatalogPorts | None = None,
    tools: Mapping[str, ToolExecutor] | None = None,
    demo_tools: bool = False,
    files: FileStore | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    options: PipelineOptions | None = None,
    telemetry: Telemetry | None = None,
    recording: RecordingOptions | None = None,
    listeners: Sequence[Listener] = (),
    interceptors: Sequence[TurnInterceptor] = (),
    runtime: Runtime = "compiled",
    hooks: Hooks | None = None,
    rules: Iterable[HostRule] = (),
    retriever: Retriever | None = None,
) -> Pipeline:
    """A pipeline on the embedded defaults; see the module docstring.

    The catalog is ``catalog`` (any ``CatalogPorts``: a loaded ``ConfigCatalog``
    such as ``ServiceConfig.catalog``, or a host's own), else the TOML file
    ``config``, else the built-in catalog. The server tools' executors are the
    catalog's own (``ConfigCatalog.tools``: the built-in catalog's demo tools), then
    with ``demo_tools`` those of the demo tools the catalog offers, then ``tools``,
    each replacing the one before under the same name. Building raises
    ``ToolRoutingError`` naming each tool when they do not match a catalog that
    can be read at once; ``await pipeline.verify()`` checks a host's catalog.
    ``files`` keeps the files server tools return (``Ports.files``, docs/FILES.md).

    ``telemetry`` says where spans go (default: the global OpenTelemetry provider);
    ``recording`` records every turn for replay: a ``Recorder`` composed outside
    ``interceptors`` (``engine/replay/recorder.py``); ``interceptors`` wrap every
    turn (``engine/interceptors.py``);
    ``listeners`` hear every event of every turn (docs/EVENTS.md); ``runtime`` is
    the turn runner (``Pipeline``); ``hooks`` and ``rules`` are the host's hooks and
    guard rules (``Pipeline``, docs/EXTENDING.md "Hooks and host rules");
    ``retriever`` finds passages for each turn's instruction (``FtsRetriever``,
    docs/RETRIEVAL.md).
    """
    if catalog is None:
        catalog = ConfigCatalog.from_file(config) if config is not None else ConfigCatalog.default()
    executors: dict[str, ToolExecutor] = (
        dict(catalog.tools) if isinstance(catalog, ConfigCatalog) else {}
    )
    if demo_tools:
        executors.update(_demo_executors(catalog))
    executors.update(tools or {})
    session_store = open_store(store) if isinstance(store, str | Path) else store
    ports = Ports(
        store=session_store,
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=clock or SystemClock(),
        ids=ids or RandomIds(),
        tools=executors,
        files=files,
        retriever=retriever,
    )
    recorders = (Recorder(recording),) if recording is not None else ()
    return Pipeline(
        ports,
        options,
        telemetry=telemetry,
        listeners=listeners,
        interceptors=(*recorders, *interceptors),
        runtime=runtime,
        hooks=hooks,
        rules=rules,
    )
