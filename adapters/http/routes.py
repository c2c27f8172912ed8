"""The HTTP app's routes, declared on FastAPI so that its OpenAPI document lists them.

- ``POST /v1/agent/execute`` — one turn (``http_execute.run_turn``). The app's fast
  path usually answers it before FastAPI routes anything; the route answers alike
  when it does not.
- ``GET /healthz`` — ``{"status": "ok"}`` once the store is open, else 503
  ``unavailable`` in the errors' envelope (``http/errors.py``).
- ``GET /v1/files/{hash}`` — a file a turn made, by its signed URL (``http/files.py``).
- ``GET /v1/usage`` — the caller's org's usage report (``http/usage.py``).
- ``POST /v1/sessions/{id}/fork`` — fork a session after a settled turn (``http/forks.py``).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .errors import error_response
from .execute import EXECUTE_PATH, ServiceState, run_turn
from .files import add_file_route
from .forks import add_fork_route
from .openapi import EXECUTE_OPERATION
from .usage import add_usage_route

__all__ = ["HEALTH_PATH", "add_routes"]

HEALTH_PATH = "/healthz"


# The endpoints carry no docstring: FastAPI would publish it as the operation's
# description in the OpenAPI document.


def add_routes(app: FastAPI, service: ServiceState) -> None:
    """Declare the execute, health, file, usage and fork routes on ``app``, in that order."""
    _add_execute(app, service)
    _add_health(app, service)
    add_file_route(app, service)
    add_usage_route(app, service)
    add_fork_route(app, service)


def _add_execute(app: FastAPI, service: ServiceState) -> None:
    """``POST /v1/agent/execute``, documented by ``EXECUTE_OPERATION``."""

    @app.post(EXECUTE_PATH, response_class=Response, **EXECUTE_OPERATION)
    async def execute(request: Request) -> Response:
        return await run_turn(service, request)


def _add_health(app: FastAPI, service: ServiceState) -> None:
    """``GET /healthz``: ready once the app has started and opened its pipeline."""

    @app.get(HEALTH_PATH, summary="Liveness: the store is open")
    async def health() -> Response:
        if service.pipeline is None:
            return error_response(503, "the service is starting or stopping")
        return JSONResponse({"status": "ok"})
