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
    scrub_urls,
)
from aptix_pipeline.engine import (
    Listener,
    ListsModes,
    Pipeline,
    Runtime,
    Telemetry,
    TurnInterceptor,
)
from aptix_pipeline.steps import Hooks, PipelineOptions, Ports
from aptix_pipeline.validators import HostRule

from .config import ConfigCatalog
from .stores import DEFAULT_STORE_URL, open_store
from .system import RandomIds, SystemClock
from .tools import BUILTIN_TOOLS, DEMO_TOOLS

if TYPE_CHECKING:
    # Imported where they are used: a pipeline that records nothing and has no
    # [files] never loads the replay tooling or the file store, and one built
    # without a configuration file never loads its models (start-up, D474).
    from aptix_pipeline.engine.replay import RecordingOptions

    from .config import FilesConfig, ServiceConfig, TemporalConfig
    from .files import LocalFileStore
    from .temporal import BlobStore, DurablePipeline, DurableWorker
    from .tools import McpPool, McpServer

__all__ = [
    "DEFAULT_STORE_URL",
    "CatalogPorts",
    "build_pipeline",
    "durable_pipeline",
    "durable_worker",
    "embedded_pipeline",
    "open_file_store",
    "open_store",
]


class CatalogPorts(ModeCatalog, AgentCatalog, Protocol):
    """A catalog that is both ports: the Mode Catalog and the Agent Catalog
    (``contracts/ports.py``). ``ConfigCatalog`` is one; a host's own class is one
    when it has their four methods."""


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
    mcp: McpPool | Sequence[McpServer] | None = None,
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

    ``mcp`` is MCP servers whose tools are server tools (docs/MCP.md): an
    ``McpPool`` the host closes, or the servers (``StdioServer``, ``HttpServer``),
    whose pool closes at interpreter exit. It is started here when it is not yet
    (``ConfigError`` naming a server that cannot start); the catalog read from
    ``config`` or the built-in one gains their tools (offered in each server's
    ``modes``), and a host's ``catalog`` must declare the ones it offers.
    """
    pool = None
    if mcp is not None:
        from .config import ConfigError, McpConfigError, start_pool

        try:
            pool = start_pool(mcp, "mcp")
        except McpConfigError as error:
            raise ConfigError(str(error)) from None
    if catalog is None:
        catalog = _catalog_with(config, pool, tools or {})
    executors: dict[str, ToolExecutor] = (
        dict(catalog.tools) if isinstance(catalog, ConfigCatalog) else {}
    )
    if demo_tools:
        executors.update(_demo_executors(catalog))
    if pool is not None:
        from .config import ConfigError

        for name, executor in pool.executors().items():
            if name in (tools or {}):
                raise ConfigError(
                    f"mcp: MCP tool {name!r} of server {pool.server_of(name)!r} clashes with "
                    f"the host tool {name!r} (tools=): rename one, or leave it out of the "
                    "server's tools allow-list"
                )
            executors[name] = executor
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
    recorders: tuple[TurnInterceptor, ...] = ()
    if recording is not None:
        from aptix_pipeline.engine.replay import Recorder

        recorders = (Recorder(recording),)
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


def _catalog_with(
    config: str | Path | None, pool: McpPool | None, tools: Mapping[str, ToolExecutor]
) -> ConfigCatalog:
    """The catalog of ``config`` (else the built-in one) with ``pool``'s tools in it."""
    if pool is None:
        return ConfigCatalog.from_file(config) if config is not None else ConfigCatalog.default()
    import tomllib
    from importlib import resources

    from .config import ConfigError, McpConfigError, with_mcp_tools

    if config is not None:
        source, text = str(config), Path(config).read_text(encoding="utf-8")
    else:
        source = "default_config.toml"
        package = resources.files(ConfigCatalog.__module__.rpartition(".")[0])
        text = package.joinpath(source).read_text("utf-8")
    try:
        data = with_mcp_tools(tomllib.loads(text), pool, source, tuple(tools))
    except McpConfigError as error:
        raise ConfigError(str(error)) from None
    return ConfigCatalog(data, source=source, demo_tools=config is None)


def open_file_store(files: FilesConfig | None, clock: Clock | None) -> LocalFileStore | None:
    """The ``LocalFileStore`` ``[files]`` describes, on ``clock`` (the pipeline's: its URLs
    expire by it); ``None`` without ``[files]``. ``aptix serve`` and ``aptix run`` keep
    their tools' files alike (docs/FILES.md)."""
    if files is None or clock is None:
        return None
    from .files import LocalFileStore

    return LocalFileStore(
        files.directory,
        url_base=files.url_base,
        signing_key=files.signing_key,
        clock=clock,
        ttl_seconds=files.ttl_seconds,
    )


def build_pipeline(
    config: ServiceConfig,
    *,
    llm: LLM | None = None,
    store: SessionStore | str | None = None,
    tools: Mapping[str, ToolExecutor] | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    telemetry: Telemetry | None = None,
    retriever: Retriever | None = None,
    listeners: Sequence[Listener] = (),
) -> Pipeline:
    """A ``Pipeline`` on the configuration's catalog, store, model and engine options.

    With ``[retrieval]`` its turns retrieve from that index (``retriever`` overrides
    it); an index not built yet is a ``ConfigError`` that says to run ``aptix index``.

    ``telemetry`` says where spans go (default: the global OpenTelemetry provider);
    ``listeners`` hear every event of every turn (docs/EVENTS.md), after those of
    ``[host] extension`` (``HostExtension``), whose rules, hooks and server tools the
    pipeline runs too (``tools`` replace its tools of the same name).

    ``llm`` and ``store`` override the file's (``aptix run --llm-script`` /
    ``--store``); a store given as text is opened with ``open_store``; without either,
    the file's ``[store]``, else the data folder's file (``config/data_dir.py``). Raises
    ``ConfigError`` when there is no model at all, or the store cannot be opened.
    """
    from .config import ConfigError, build_llm, default_store_url, open_retriever

    if llm is None:
        if config.model is None:
            raise ConfigError(f"{config.source}: no [model] table and no model given")
        llm = build_llm(config.model)
    if config.files is not None:
        clock = clock or SystemClock()  # the store's URLs expire by the pipeline's clock
    if store is None or isinstance(store, str):
        try:
            url = store if isinstance(store, str) else config.store_url or default_store_url()
            store = open_store(url)
        except Exception as error:  # the driver's own errors: name the store, not a traceback
            raise ConfigError(
                scrub_urls(
                    f"{config.source}: [store]: cannot open the store: "
                    f"{type(error).__name__}: {error}"
                )
            ) from None
    if retriever is None and config.retrieval is not None:
        retriever = open_retriever(config)
    try:
        return _configured_pipeline(
            config, llm, store, retriever, tools, clock, ids, telemetry, listeners
        )
    except ConfigError:
        raise
    except ValueError as error:  # budgets on a store that keeps no usage (docs/BUDGETS.md)
        raise ConfigError(f"{config.source}: {error}") from None


def _configured_pipeline(
    config: ServiceConfig,
    llm: LLM,
    store: SessionStore,
    retriever: Retriever | None,
    tools: Mapping[str, ToolExecutor] | None,
    clock: Clock | None,
    ids: IdSource | None,
    telemetry: Telemetry | None,
    listeners: Sequence[Listener],
) -> Pipeline:
    """``build_pipeline``'s pipeline once its model, store and retriever are open."""
    from .models import TurnScript

    host = config.host
    return embedded_pipeline(
        interceptors=(llm,) if isinstance(llm, TurnScript) else (),  # it places each turn
        llm=llm,
        store=store,
        retriever=retriever,
        catalog=config.catalog,
        tools={**host.tools, **(tools or {})},
        files=open_file_store(config.files, clock),
        clock=clock,
        ids=ids,
        options=config.options,
        telemetry=telemetry,
        recording=config.recording,
        listeners=(*host.listeners, *listeners),
        hooks=host.hooks,
        rules=host.rules,
        mcp=config.mcp,
    )


# --- durable turns on Temporal (docs/DURABLE.md) -------------------------------------


def _temporal_of(source: ServiceConfig | TemporalConfig | str) -> TemporalConfig:
    """The ``[temporal]`` settings ``source`` gives: its table, or an address's defaults."""
    from .config import ConfigError, ServiceConfig, TemporalConfig

    if isinstance(source, TemporalConfig):
        return source
    if isinstance(source, ServiceConfig):
        if source.temporal is None:
            raise ConfigError(f"{source.source}: no [temporal] table: durable turns need one")
        return source.temporal
    if isinstance(source, str):
        return TemporalConfig(address=source)
    raise TypeError(
        "give a ServiceConfig, a TemporalConfig or a Temporal address (host:port), "
        f"not {type(source).__name__}"
    )


def _blobs(temporal: TemporalConfig, blobs: BlobStore | None) -> BlobStore | None:
    """The given blob store, else ``DirectoryBlobs`` on ``[temporal] blobs``, else none."""
    if blobs is not None or temporal.blobs is None:
        return blobs
    from .temporal import DirectoryBlobs

    return DirectoryBlobs(temporal.blobs)


async def durable_pipeline(
    temporal: ServiceConfig | TemporalConfig | str,
    *,
    options: PipelineOptions | None = None,
    blobs: BlobStore | None = None,
    lazy: bool = False,
) -> DurablePipeline:
    """A ``DurablePipeline``: a host's turns as Temporal workflows (docs/DURABLE.md).

    ``temporal`` is a loaded configuration (its ``[temporal]`` table and its
    ``[engine]`` options), a ``TemporalConfig``, or the address (``host:port``) of a
    Temporal with every default (namespace ``default``, task queue ``aptix-turns``).
    ``options`` are the workers' ``PipelineOptions`` (the request's JSON depth limit
    reads its answer keys here); ``blobs`` replaces ``[temporal] blobs``'s folder;
    with ``lazy`` the connection is made by the first turn (a Temporal that cannot
    be reached then is that turn's ``port_failed`` result), else here (a
    ``RuntimeError`` saying why). Needs the ``temporal`` extra.
    """
    from .config import ServiceConfig
    from .temporal import DurablePipeline, connect

    settings = _temporal_of(temporal)
    if options is None and isinstance(temporal, ServiceConfig):
        options = temporal.options
    client = await connect(
        settings.address,
        namespace=settings.namespace,
        blobs=_blobs(settings, blobs),
        lazy=lazy,
    )
    return DurablePipeline(
        client,
        task_queue=settings.task_queue,
        max_json_depth=(options or PipelineOptions()).max_json_depth,
        turn_timeout_seconds=settings.turn_timeout_seconds,
    )


async def durable_worker(
    temporal: ServiceConfig | TemporalConfig | str,
    pipeline: Pipeline,
    *,
    identity: str | None = None,
    max_concurrent_turns: int | None = None,
    blobs: BlobStore | None = None,
) -> DurableWorker:
    """A ``DurableWorker`` running ``pipeline``'s turns from ``temporal``'s task queue.

    ``temporal`` is as ``durable_pipeline``'s; ``identity`` and
    ``max_concurrent_turns`` replace ``[temporal]``'s, ``blobs`` its folder. The
    client connects here (a ``RuntimeError`` saying why when Temporal cannot be
    reached); serve with ``async with worker:`` or ``await worker.run()``.
    """
    from .temporal import DurableSettings, DurableWorker, connect

    settings = _temporal_of(temporal)
    client = await connect(
        settings.address, namespace=settings.namespace, blobs=_blobs(settings, blobs)
    )
    return DurableWorker(
        client,
        pipeline,
        task_queue=settings.task_queue,
        identity=identity or settings.identity,
        settings=DurableSettings(
            heartbeat_seconds=settings.heartbeat_seconds,
            model_timeout_seconds=settings.model_timeout_seconds,
            tool_timeout_seconds=settings.tool_timeout_seconds,
            read_timeout_seconds=settings.read_timeout_seconds,
            commit_attempts=settings.commit_attempts,
            tool_attempts=settings.tool_attempts,
            max_retry_wait_seconds=settings.max_retry_wait_seconds,
        ),
        max_concurrent_turns=max_concurrent_turns or settings.max_concurrent_turns,
    )
