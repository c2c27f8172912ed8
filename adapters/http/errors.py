"""One shape for every error the HTTP service answers: the engine's ``InvokeResult``.

A turn the engine refuses is answered with its ``InvokeResult`` (AGN-033 §2.1).
Everything the service refuses before, beside or instead of the engine answers
the same envelope — ``{"Successful": false, "Result": null, "Errors": [{"Code",
"Message", "Field"?, "RuleId"?}], "Warnings": []}`` — so a client reads one shape
for every status (docs/HTTP.md "Errors"):

- no key or an unknown one: 401 ``unauthorized`` (``Field``: ``Authorization``),
  a route that refuses its caller 403 ``forbidden``;
- a path the service does not have: 404 ``not_found``; a method it does not take
  there: 405 ``method_not_allowed`` (with ``Allow``);
- a body over ``max_body_bytes``: 413 ``body_too_large``; a body declared as
  something other than JSON: 415 ``unsupported_media_type`` (``Field``:
  ``Content-Type``);
- a route's parameters that do not validate: 422 ``invalid_request``, one error per
  problem, ``Field`` the parameter's path (``query.limit``);
- the service starting or stopping: 503 ``unavailable``; an unexpected exception:
  500 ``internal``, which names no detail of the exception (the log has it).

``install_error_handlers(app)`` puts this in front of FastAPI's and Starlette's own
``{"detail": ...}`` answers; ``error_response`` is the answer a route builds itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from aptix_pipeline.contracts import AgentExecuteResponse, ErrorCode, InvokeError, InvokeResult

__all__ = [
    "ERROR_CODES",
    "error_code",
    "error_response",
    "install_error_handlers",
    "missing_key_response",
]

ERROR_CODES: Mapping[int, ErrorCode] = {
    400: ErrorCode.INVALID_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    408: ErrorCode.REQUEST_TIMEOUT,
    409: ErrorCode.CONFLICT,
    410: ErrorCode.EXPIRED,
    413: ErrorCode.BODY_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    429: ErrorCode.BUDGET_EXCEEDED,
    422: ErrorCode.INVALID_REQUEST,
    500: ErrorCode.INTERNAL,
    502: ErrorCode.PORT_FAILED,
    503: ErrorCode.UNAVAILABLE,
    504: ErrorCode.DEADLINE_EXCEEDED,
}
"""The ``Code`` of an error the service answers with this status itself."""

_MEDIA_TYPE = "application/json"


def error_code(status: int) -> ErrorCode:
    """The ``Code`` for ``status``: ``ERROR_CODES``, else ``invalid_request`` for any
    other 4xx and ``internal`` for anything else."""
    return ERROR_CODES.get(status) or (
        ErrorCode.INVALID_REQUEST if 400 <= status < 500 else ErrorCode.INTERNAL
    )


def error_body(errors: list[InvokeError]) -> bytes:
    """The ``InvokeResult`` JSON of a refusal with these errors."""
    return InvokeResult[AgentExecuteResponse].failure(errors).to_json().encode()


def error_response(
    status: int,
    message: str,
    *,
    code: ErrorCode | None = None,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An ``InvokeResult`` answer with one error: ``code`` (default ``error_code(status)``),
    ``message`` and, where one field is at fault, ``field``."""
    error = InvokeError(code=code or error_code(status), message=message, field=field)
    return _json(status, [error], headers)


def missing_key_response() -> Response:
    """The 401 a request without a valid API key gets (docs/HTTP.md "API keys")."""
    return error_response(
        401,
        "send an API key: Authorization: Bearer KEY or X-API-Key: KEY",
        field="Authorization",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _json(status: int, errors: list[InvokeError], headers: Mapping[str, str] | None) -> Response:
    return Response(error_body(errors), status_code=status, media_type=_MEDIA_TYPE, headers=headers)


def _message(request: Request, status: int, detail: object) -> str:
    """The route's own ``detail`` when it gave one, else what the status means here."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    if isinstance(detail, str) and detail and detail != phrase:
        return detail
    if status == 404:
        return f"no such path: {request.url.path} (the routes: /openapi.json)"
    if status == 405:
        return f"{request.url.path} does not take {request.method}"
    return phrase.lower()


async def _http_exception(request: Request, exc: Exception) -> Response:
    """A Starlette or FastAPI ``HTTPException`` (an unknown path, a method, a route's own)."""
    assert isinstance(exc, HTTPException)
    message = _message(request, exc.status_code, exc.detail)
    return error_response(exc.status_code, message, headers=exc.headers)


def _field(location: object) -> str | None:
    """A validation error's location as a dotted path (``query.limit``, ``path.hash``)."""
    if not isinstance(location, list | tuple) or not location:
        return None
    return ".".join(str(part) for part in location)


async def _validation_error(request: Request, exc: Exception) -> Response:
    """A route's parameters or body that do not validate: 422, one error per problem."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        InvokeError(
            code=ErrorCode.INVALID_REQUEST,
            message=str(problem.get("msg", "invalid value")),
            field=_field(problem.get("loc")),
        )
        for problem in exc.errors()
    ] or [InvokeError(code=ErrorCode.INVALID_REQUEST, message="the request does not validate")]
    return _json(422, errors, None)


async def _unexpected(request: Request, exc: Exception) -> Response:
    """An exception no route handled: 500 ``internal``; the server's log has the traceback."""
    return error_response(500, "internal error: the service's log has the details")


def install_error_handlers(app: FastAPI) -> None:
    """Answer ``HTTPException``, request validation errors and unexpected exceptions
    with the ``InvokeResult`` envelope instead of FastAPI's ``{"detail": ...}``."""
    app.add_exception_handler(HTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
