"""The HTTP front door: a FastAPI app that runs one agent turn per POST.

- ``POST /v1/agent/execute`` — the body is an ``AgentExecuteRequest`` (AGN-034) as
  JSON; the answer is the turn's ``InvokeResult`` JSON (AGN-033 §2.1). The raw body
  goes to ``Pipeline.run``, so the engine's own rule ids and messages answer a
  malformed request, never a framework's validation error. The status follows
  the result (``http_status``): 200 when Successful, else by the first error's code.
  An ``Idempotency-Key`` header goes to the engine as ``idempotency_key``: a retry
  whose first copy committed gets that answer again (``engine/idempotency.py``), as
  does a resubmitted continuation without a key; such an answer carries
  ``Idempotent-Replayed: true`` (docs/CONFORMANCE.md D181-D185). With
  ``"Stream": true`` in the body, or ``Accept: text/event-stream`` (a continuation's
  way to ask), the answer is Server-Sent Events from ``Pipeline.stream``:
  ``progress``, ``delta`` and last ``result`` events, keep-alive comments every
  ``[server] sse_keepalive_seconds`` of silence, and a client that leaves cancels
  the turn (``http/sse.py``, AGN-034 §4.7).
- ``GET /healthz`` — ``{"status": "ok"}`` once the store is open.
- ``GET /v1/usage`` — the caller's org's usage, cost and budgets (``http/usage.py``,
  docs/BUDGETS.md); a turn a budget refuses is a 429 with ``Retry-After``.
- ``GET /openapi.json`` — the OpenAPI document, with the request and
  ``InvokeResult`` JSON Schemas of ``contracts/schemas.py``.
- ``/ui/…`` — with ``[ui] enabled = true``, the turn browser page behind the same
  API keys (``http/turn_browser.py``, docs/UI.md).

With ``[temporal]`` the turns run as Temporal workflows on ``aptix worker``s and
are answered alike (``http/durable.py``, docs/DURABLE.md).

The caller's identity comes from an ``Authenticator`` (default
``ApiKeyAuthenticator``: the ``[[auth.keys]]`` of the configuration, read from
``Authorization: Bearer KEY`` or ``X-API-Key``). No key or a wrong one is a 401
and the pipeline never runs; a body over ``max_body_bytes`` is a 413, refused
from ``Content-Length`` before any of it is read and counted while it streams.
Every other error — 401, 404, 405, 413, 415, 422, 500, 503 — answers the same
``InvokeResult`` envelope with its own ``Code`` (``http/errors.py``), never
FastAPI's ``{"detail": ...}``.

``create_app(config)`` opens the configured store and model when the app starts
and closes them when it stops (lifespan). Slow clients are cut off by the
read timeout of ``adapters/http/protocol.py`` (``[server] read_timeout_seconds``),
which ``aptix serve`` runs uvicorn with. ``create_app()`` with no argument reads the file
named by ``APTIX_CONFIG``, so ``uvicorn --factory`` and every worker of
``aptix serve --workers N`` share one configuration.

``create_app`` assembles the app from named pieces, as Starlette's ``Starlette``
does: the source (configuration or host pipeline), the authenticator and body
limit, the lifespan that opens and closes the pipeline, the routes
(``http/routes.py``, answered by ``http/execute.py`` and, streamed, ``http/sse.py``),
the OpenAPI document
(``http/openapi.py``) and the execute fast path in front of FastAPI.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import math
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
)
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from aptix_pipeline import __version__
from aptix_pipeline.adapters.config import ConfigError, ServiceConfig, load_service_config
from aptix_pipeline.adapters.embedded import build_pipeline, durable_pipeline
from aptix_pipeline.adapters.models import log_retry_notices
from aptix_pipeline.adapters.system import configure_tracing
from aptix_pipeline.engine import Pipeline, Telemetry

from .auth import ApiKeyAuthenticator, Authenticator
from .errors import install_error_handlers
from .execute import (
    EXECUTE_PATH,
    IDEMPOTENCY_KEY_HEADER,
    REPLAYED_HEADER,
    ServiceState,
    http_status,
    run_turn,
)
from .openapi import use_wire_schemas
from .protocol import DEFAULT_READ_TIMEOUT_SECONDS, READ_TIMEOUT_STATE
from .routes import HEALTH_PATH, add_routes
from .sse import DEFAULT_SSE_KEEPALIVE_SECONDS

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = [
    "CONFIG_ENV",
    "EXECUTE_PATH",
    "HEALTH_PATH",
    "IDEMPOTENCY_KEY_HEADER",
    "REPLAYED_HEADER",
    "ApiKeyAuthenticator",
    "Authenticator",
    "create_app",
    "http_status",
]

CONFIG_ENV = "APTIX_CONFIG"
"""The environment variable ``create_app()`` reads the configuration file's path from."""

_DEFAULT_MAX_BODY_BYTES = 1_048_576
"""The body limit of an app on a host's pipeline (a configuration has its own)."""

_Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[dict[str, Any]]]


def create_app(
    source: ServiceConfig | Pipeline | str | Path | None = None,
    *,
    authenticator: Authenticator | None = None,
    max_body_bytes: int | None = None,
    sse_keepalive_seconds: float | None = None,
) -> FastAPI:
    """The HTTP app (module docstring).

    ``source`` is a loaded ``ServiceConfig``, a configuration file, ``None`` (the
    file named by ``$APTIX_CONFIG``), or a ready ``Pipeline`` (which the app uses
    but does not close; give it an ``authenticator``). ``authenticator`` replaces
    the configuration's API keys; ``max_body_bytes`` its ``[server]`` limit, and
    ``sse_keepalive_seconds`` its keep-alive interval of streamed answers.
    Raises ``ConfigError`` for a bad configuration.
    """
    loaded = _config_or_pipeline(source)
    config = loaded if isinstance(loaded, ServiceConfig) else None
    service = ServiceState(
        pipeline=loaded if isinstance(loaded, Pipeline) else None,
        authenticator=_authenticator(config, authenticator),
        max_body_bytes=_body_limit(config, max_body_bytes),
        sse_keepalive_seconds=_keepalive(config, sse_keepalive_seconds),
    )
    app = FastAPI(
        title="aptix-pipeline",
        version=__version__,
        summary="One Aptix agent turn per request (AGN-034 in, AGN-033 out).",
        lifespan=_lifespan(config, service),
    )
    add_routes(app, service)
    install_error_handlers(app)
    if config is not None and config.ui.enabled:
        from aptix_pipeline.adapters.ui import LiveHub

        from .turn_browser import mount_ui  # the turn browser page (docs/UI.md), when asked for

        service.live = LiveHub()  # its live page follows the service's turns as they run
        mount_ui(app, service, config.ui)
    use_wire_schemas(app)
    app.add_middleware(_ExecuteFastPath, service=service)
    return app


def _config_or_pipeline(
    source: ServiceConfig | Pipeline | str | Path | None,
) -> ServiceConfig | Pipeline:
    """``create_app``'s source, loaded: a file (or ``$APTIX_CONFIG``'s) read as a configuration."""
    if source is None:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise ConfigError(f"create_app(): set {CONFIG_ENV} to the configuration file")
        source = path
    if isinstance(source, str | Path):
        return load_service_config(source)
    return source


def _authenticator(config: ServiceConfig | None, given: Authenticator | None) -> Authenticator:
    """The given authenticator, else the configuration's API keys; a host pipeline needs one."""
    if given is not None:
        return given
    if config is None:
        raise ConfigError("create_app(pipeline) needs an authenticator")
    return ApiKeyAuthenticator(config.api_keys)


def _body_limit(config: ServiceConfig | None, given: int | None) -> int:
    """The largest body accepted: the given one, else ``[server] max_body_bytes``, else 1 MiB."""
    if given is not None and given < 1:
        raise ValueError("max_body_bytes must be 1 or more")
    return given or (config.server.max_body_bytes if config else _DEFAULT_MAX_BODY_BYTES)


def _keepalive(config: ServiceConfig | None, given: float | None) -> float:
    """The longest a streamed answer stays silent: the given value, else ``[server]
    sse_keepalive_seconds``, else 15 seconds."""
    if given is not None and not 0 < given < math.inf:
        raise ValueError("sse_keepalive_seconds must be a number of seconds above 0")
    if given is not None:
        return given
    return config.server.sse_keepalive_seconds if config else DEFAULT_SSE_KEEPALIVE_SECONDS


def _connection_state(config: ServiceConfig | None) -> dict[str, Any]:
    """The lifespan state uvicorn hands to each connection: the read timeout of
    ``adapters/http/protocol.py`` comes from here."""
    timeout = config.server.read_timeout_seconds if config else DEFAULT_READ_TIMEOUT_SECONDS
    return {READ_TIMEOUT_STATE: timeout}


def _lifespan(config: ServiceConfig | None, service: ServiceState) -> _Lifespan:
    """The app's lifespan: on a configuration, the pipeline is open while the app runs.

    On a host's pipeline nothing is opened or closed: the host owns it.
    """
    state = _connection_state(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        if config is None:  # the host's pipeline: the host closes it
            yield state
            return
        async with _serving(config, service):
            yield state

    return lifespan


@asynccontextmanager
async def _serving(config: ServiceConfig, service: ServiceState) -> AsyncIterator[None]:
    """The configured pipeline, open and in ``service`` for as long as the app runs."""
    # Each worker is an OpenTelemetry host: OTEL_TRACES_EXPORTER etc. say where spans go.
    provider = configure_tracing()
    # Each model retry is told in the service's log (models/retry_notices.py).
    notices = log_retry_notices(config.options)
    # The turn browser's live page hears every turn (ui/live_hub.py), when mounted.
    live = () if service.live is None else (service.live.listener,)
    pipeline = build_pipeline(
        config,
        telemetry=Telemetry(tracer_provider=provider, span_mode=config.span_mode),
        listeners=(notices, *live),
    )
    if config.temporal is not None:  # turns run as workflows on `aptix worker`s (http/durable.py)
        # Lazy: the service starts while Temporal is away, and answers its turns 502.
        service.durable = await durable_pipeline(config, lazy=True)
    service.pipeline = pipeline
    try:
        with _start_up_frozen():
            yield
    finally:
        service.pipeline = None
        service.durable = None
        try:
            await _close_pipeline(pipeline, provider)
        finally:  # the MCP servers the configuration started (docs/MCP.md)
            await asyncio.to_thread(config.close)


_YOUNG_COLLECTION_THRESHOLD = 10_000
"""How many new container objects a worker allocates between collections of the young
generation while it serves (Python's default: 700)."""


@contextmanager
def _start_up_frozen() -> Iterator[None]:
    """What start-up built, kept out of the cyclic garbage collector's sight while it lives,
    and the collector run less often.

    It lives as long as the worker, so the collector's full collections during turns
    walk only the turns' own objects (bench/http_load.py at 50 concurrent: p99 about
    90 ms against 130 ms without). A turn allocates a few hundred container objects and
    frees nearly all of them itself, so at Python's default threshold (700) the young
    generation is collected every few turns, and the older ones in proportion:
    ``_YOUNG_COLLECTION_THRESHOLD`` cuts the collector's CPU from about 60 to under
    10 µs a turn. The thresholds are put back when the app stops.
    """
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(_YOUNG_COLLECTION_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


async def _close_pipeline(pipeline: Pipeline, provider: TracerProvider | None) -> None:
    """Close what ``_serving`` opened: the model client, the retriever's index, the store,
    then the spans' provider — each of them, whichever fails (callbacks run last first)."""
    async with AsyncExitStack() as closing:
        if provider is not None:
            closing.callback(provider.shutdown)
        closing.push_async_callback(_close, pipeline.ports.store)
        if pipeline.ports.retriever is not None:
            closing.push_async_callback(_close, pipeline.ports.retriever)
        closing.push_async_callback(_close, pipeline.ports.llm)


async def _close(port: object) -> None:
    """Close a port the app opened (``aclose`` preferred, else ``close``; neither: nothing)."""
    for name in ("aclose", "close"):
        close = getattr(port, name, None)
        if close is not None:
            outcome = close()
            if inspect.isawaitable(outcome):
                await outcome
            return


class _ExecuteFastPath:
    """ASGI middleware: ``POST /v1/agent/execute`` answered by ``run_turn`` directly.

    It sits inside FastAPI's error middleware and ahead of its routing, exception
    and dependency layers, which cost about 100 µs a request and do nothing for
    this route. Every other request (other paths, other methods) goes on to FastAPI,
    and the route stays declared there for the OpenAPI document: the same answers.
    """

    def __init__(self, app: ASGIApp, service: ServiceState) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            if path == EXECUTE_PATH:
                response = await run_turn(self.service, Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
