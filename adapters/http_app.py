"""The HTTP front door: a FastAPI app that runs one agent turn per POST.

- ``POST /v1/agent/execute`` — the body is an ``AgentExecuteRequest`` (AGN-034) as
  JSON; the answer is the turn's ``InvokeResult`` JSON (AGN-033 §2.1). The raw body
  goes to ``Pipeline.run``, so the engine's own rule ids and messages answer a
  malformed request, never a framework's validation error. The status follows
  the result (``http_status``): 200 when Successful, else by the first error's code.
  An ``Idempotency-Key`` header goes to the engine as ``idempotency_key``: a retry
  whose first copy committed gets that answer again (``engine/idempotency.py``), as
  does a resubmitted continuation without a key; such an answer carries
  ``Idempotent-Replayed: true`` (docs/CONFORMANCE.md D181-D185).
- ``GET /healthz`` — ``{"status": "ok"}`` once the store is open.
- ``GET /openapi.json`` — the OpenAPI document, with the request and
  ``InvokeResult`` JSON Schemas of ``contracts/schemas.py``.

The caller's identity comes from an ``Authenticator`` (default
``ApiKeyAuthenticator``: the ``[[auth.keys]]`` of the configuration, read from
``Authorization: Bearer KEY`` or ``X-API-Key``). No key or a wrong one is a 401
and the pipeline never runs; a body over ``max_body_bytes`` is a 413, refused
from ``Content-Length`` before any of it is read and counted while it streams.
Failures the engine never saw (401, 413) answer ``{"error": ..., "message": ...}``.

``create_app(config)`` opens the configured store and model when the app starts
and closes them when it stops (lifespan). Slow clients are cut off by the
read timeout of ``adapters/http_protocol.py`` (``[server] read_timeout_seconds``),
which ``aptix serve`` runs uvicorn with. ``create_app()`` with no argument reads the file
named by ``APTIX_CONFIG``, so ``uvicorn --factory`` and every worker of
``aptix serve --workers N`` share one configuration.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from aptix_pipeline import __version__
from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    AgentExecuteResponse,
    Caller,
    ErrorCode,
    InvokeResult,
)
from aptix_pipeline.engine import Pipeline, Telemetry

from .http_protocol import DEFAULT_READ_TIMEOUT_SECONDS, READ_TIMEOUT_STATE
from .service_config import ApiKey, ConfigError, ServiceConfig, build_pipeline, load_service_config
from .telemetry_setup import configure_tracing

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
EXECUTE_PATH = "/v1/agent/execute"
HEALTH_PATH = "/healthz"
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
"""The request header naming a retryable request (Stripe's), scoped to the caller."""
REPLAYED_HEADER = "Idempotent-Replayed"
"""The response header (``true``) of an answer stored by an earlier copy of the request."""

_STATUS: Mapping[ErrorCode, int] = {
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.TOOL_CALL_MANIFEST_INVALID: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PORT_FAILED: 502,
    ErrorCode.DEADLINE_EXCEEDED: 504,
}


def http_status(result: InvokeResult[AgentExecuteResponse]) -> int:
    """The HTTP status of a turn's result (docs/CONFORMANCE.md D82).

    200 when Successful; otherwise by the first error's code: ``invalid_request``
    and ``tool_call_manifest_invalid`` 400, ``not_found`` 404, ``conflict`` 409,
    ``port_failed`` (the model or store failed) 502, ``deadline_exceeded`` (the turn
    ran past ``turn_deadline_seconds``) 504, anything else 500. The body
    is the ``InvokeResult`` either way.
    """
    if result.successful:
        return 200
    return _STATUS.get(result.errors[0].code, 500)


class Authenticator(Protocol):
    """Who is calling: the request's headers → the caller, or ``None`` to refuse (401).

    ``headers`` is case-insensitive (Starlette's ``Headers``). Implementations may
    be plain or ``async`` methods.
    """

    def authenticate(self, headers: Mapping[str, str]) -> Caller | Awaitable[Caller | None] | None:
        """The caller, or ``None`` when the request does not say who it is."""


class ApiKeyAuthenticator:
    """API keys mapped to an org and user (``[[auth.keys]]``); the default ``Authenticator``.

    The key is read from ``Authorization: Bearer KEY``, else from ``X-API-Key``. Only
    SHA-256 digests are kept; the presented key's digest is compared with every
    configured one in constant time, so timing tells nothing about which matched.
    """

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._keys = tuple(keys)

    @staticmethod
    def presented_key(headers: Mapping[str, str]) -> str | None:
        """The key a request presents, or ``None``."""
        scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        key = (headers.get("x-api-key") or "").strip()
        return key or None

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller whose key the request presents, else ``None``."""
        key = self.presented_key(headers)
        if key is None:
            return None
        digest = hashlib.sha256(key.encode()).digest()
        found: ApiKey | None = None
        for candidate in self._keys:  # no early exit: every key is compared
            if hmac.compare_digest(digest, candidate.sha256):
                found = candidate
        return None if found is None else Caller(org=found.org, user=found.user)


@dataclass(slots=True)
class _Service:
    pipeline: Pipeline | None
    authenticator: Authenticator
    max_body_bytes: int


class _TooLargeError(Exception):
    pass


def _problem(status: int, error: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": error, "message": message}, status_code=status, headers=headers)


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise _TooLargeError
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _TooLargeError
    return bytes(body)


def _idempotency_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header as sent; ``None`` when there is none.

    A key given twice is passed joined as HTTP joins repeated fields (``a, b``) and
    an empty one as it is: the engine refuses both with ``DESIGN/idempotency/key-format``
    (a key holds no spaces, and is never empty), so no copy is silently preferred.
    """
    values = request.headers.getlist(IDEMPOTENCY_KEY_HEADER)
    return ", ".join(values) if values else None


async def _execute(service: _Service, request: Request) -> Response:
    """``POST /v1/agent/execute``: authenticate, read the body, run the turn, answer."""
    outcome = service.authenticator.authenticate(request.headers)
    caller = await outcome if inspect.isawaitable(outcome) else outcome
    if not isinstance(caller, Caller):
        return _problem(
            401,
            "unauthorized",
            "send an API key: Authorization: Bearer KEY or X-API-Key: KEY",
            **{"WWW-Authenticate": "Bearer"},
        )
    try:
        body = await _read_body(request, service.max_body_bytes)
    except _TooLargeError:
        return _problem(
            413,
            "body_too_large",
            f"the request body may hold at most {service.max_body_bytes} bytes",
        )
    except ClientDisconnect:  # gone mid-body, or cut off by the read timeout: nobody to answer
        return Response(status_code=408)
    pipeline = service.pipeline
    if pipeline is None:
        return _problem(503, "not_ready", "the service is starting or stopping")
    # The raw body: parsed once, by the engine.
    report = await pipeline.run(body, caller, idempotency_key=_idempotency_key(request))
    result = report.result
    return Response(
        result.to_json(),
        status_code=http_status(result),
        media_type="application/json",
        headers={REPLAYED_HEADER: "true"} if report.replayed else None,
    )


class _ExecuteFastPath:
    """ASGI middleware: ``POST /v1/agent/execute`` answered by ``_execute`` directly.

    It sits inside FastAPI's error middleware and ahead of its routing, exception
    and dependency layers, which cost about 100 µs a request and do nothing for
    this route. Every other request (other paths, other methods) goes on to FastAPI,
    and the route stays declared there for the OpenAPI document: the same answers.
    """

    def __init__(self, app: ASGIApp, service: _Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            if path == EXECUTE_PATH:
                response = await _execute(self.service, Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _close(port: object) -> None:
    """Close a store or model client the app opened (``aclose`` preferred, else ``close``)."""
    for name in ("aclose", "close"):
        close = getattr(port, name, None)
        if close is not None:
            outcome = close()
            if inspect.isawaitable(outcome):
                await outcome
            return


def _schemas() -> dict[str, Any]:
    """The request and ``InvokeResult`` schemas (validation mode, wire names), as components."""
    components: dict[str, Any] = {}
    template = "#/components/schemas/{model}"
    for name, model in (
        ("AgentExecuteRequest", AgentExecuteRequest),
        ("InvokeResult", InvokeResult[AgentExecuteResponse]),
    ):
        schema = model.model_json_schema(by_alias=True, mode="validation", ref_template=template)
        components.update(schema.pop("$defs", {}))
        components[name] = schema
    return components


_RESULT = {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InvokeResult"}}}
}
_IDEMPOTENCY_KEY = {
    "name": IDEMPOTENCY_KEY_HEADER,
    "in": "header",
    "required": False,
    "description": (
        "Makes a retried Initial or FollowOn safe: while the first copy's answer is "
        "kept ([engine] idempotency_ttl_seconds, a day by default) the same request "
        "with the same key, from the same caller, gets that answer again without "
        "running another turn (header Idempotent-Replayed: true); another request "
        "with the key is a 409 (DESIGN/idempotency/key-reused). 1-255 visible ASCII "
        "characters; anything else, an empty value or the header twice is a 400 "
        "(DESIGN/idempotency/key-format). A continuation needs none: it is keyed by its "
        "SessionId, TurnId and ToolCallIds."
    ),
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
}
_REPLAYED = {
    REPLAYED_HEADER: {
        "description": "Present when the body is the answer an earlier copy of this "
        "request stored (an Idempotency-Key, or an identical continuation): no turn ran.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}
_PROBLEM = {
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["error", "message"],
                "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
            }
        }
    }
}


def create_app(
    source: ServiceConfig | Pipeline | str | Path | None = None,
    *,
    authenticator: Authenticator | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """The HTTP app (module docstring).

    ``source`` is a loaded ``ServiceConfig``, a configuration file, ``None`` (the
    file named by ``$APTIX_CONFIG``), or a ready ``Pipeline`` (which the app uses
    but does not close; give it an ``authenticator``). ``authenticator`` replaces
    the configuration's API keys; ``max_body_bytes`` its ``[server]`` limit.
    Raises ``ConfigError`` for a bad configuration.
    """
    if source is None:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise ConfigError(f"create_app(): set {CONFIG_ENV} to the configuration file")
        source = path
    if isinstance(source, str | Path):
        source = load_service_config(source)
    config = source if isinstance(source, ServiceConfig) else None
    if authenticator is None:
        if config is None:
            raise ConfigError("create_app(pipeline) needs an authenticator")
        authenticator = ApiKeyAuthenticator(config.api_keys)
    if max_body_bytes is not None and max_body_bytes < 1:
        raise ValueError("max_body_bytes must be 1 or more")
    limit = max_body_bytes or (config.server.max_body_bytes if config else 1_048_576)
    service = _Service(
        pipeline=source if isinstance(source, Pipeline) else None,
        authenticator=authenticator,
        max_body_bytes=limit,
    )

    # uvicorn hands the lifespan state to each connection: the read timeout of
    # adapters/http_protocol.py comes from here.
    state = {
        READ_TIMEOUT_STATE: config.server.read_timeout_seconds
        if config
        else DEFAULT_READ_TIMEOUT_SECONDS
    }

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        if config is None:  # the host's pipeline: the host closes it
            yield state
            return
        # Each worker is an OpenTelemetry host: OTEL_TRACES_EXPORTER etc. say where spans go.
        provider = configure_tracing()
        pipeline = build_pipeline(config, telemetry=Telemetry(tracer_provider=provider))
        service.pipeline = pipeline
        # What start-up built lives as long as the worker: move it out of the cyclic
        # garbage collector's sight, so that its full collections during turns walk
        # only the turns' own objects (bench/http_load.py at 50 concurrent: p99 about
        # 90 ms against 130 ms without).
        gc.collect()
        gc.freeze()
        try:
            yield state
        finally:
            gc.unfreeze()
            service.pipeline = None
            try:
                await _close(pipeline.ports.llm)
            finally:
                await _close(pipeline.ports.store)
                if provider is not None:
                    provider.shutdown()

    app = FastAPI(
        title="aptix-pipeline",
        version=__version__,
        summary="One Aptix agent turn per request (AGN-034 in, AGN-033 out).",
        lifespan=lifespan,
    )

    @app.post(
        EXECUTE_PATH,
        summary="Run one agent turn",
        description=(
            "The body is an AgentExecuteRequest (AGN-034). The answer is its InvokeResult "
            "(AGN-033 §2.1): 200 when Successful; 400 invalid_request or "
            "tool_call_manifest_invalid, 404 not_found, 409 conflict, 502 port_failed, "
            "504 deadline_exceeded, 500 otherwise — the InvokeResult body names the rule ids "
            "either way. A retry is answered from the answer its first copy stored: send an "
            "Idempotency-Key with an Initial or FollowOn; a continuation needs none."
        ),
        response_class=Response,
        openapi_extra={
            "parameters": [_IDEMPOTENCY_KEY],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/AgentExecuteRequest"}
                    }
                },
            },
        },
        responses={
            200: {"description": "The turn's response", "headers": _REPLAYED, **_RESULT},
            400: {
                "description": "The request broke AGN-034 / AGN-033 §3.3, or its "
                "Idempotency-Key is malformed",
                **_RESULT,
            },
            401: {"description": "No API key, or an unknown one: nothing ran", **_PROBLEM},
            404: {"description": "No such session or turn for this caller", **_RESULT},
            409: {
                "description": "Another turn of the session committed first; or the "
                "Idempotency-Key, or the continued tool calls, already answered another request",
                **_RESULT,
            },
            413: {"description": "The body is larger than max_body_bytes", **_PROBLEM},
            500: {"description": "An engine rule or internal failure", **_RESULT},
            502: {"description": "The model or store failed", **_RESULT},
            504: {"description": "The turn ran past its deadline: nothing stored", **_RESULT},
        },
    )
    async def execute(request: Request) -> Response:
        return await _execute(service, request)  # reached only when _ExecuteFastPath is not

    @app.get(HEALTH_PATH, summary="Liveness: the store is open")
    async def health() -> JSONResponse:
        ready = service.pipeline is not None
        return JSONResponse(
            {"status": "ok" if ready else "starting"}, status_code=200 if ready else 503
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=app.routes,
            )
            document.setdefault("components", {}).setdefault("schemas", {}).update(_schemas())
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(_ExecuteFastPath, service=service)
    return app
