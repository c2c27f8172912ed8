"""``POST /v1/sessions/{id}/fork``: fork the caller's session after a settled turn
(``Pipeline.fork``, docs/FORKS.md).

The body is ``{"TurnId": "..."}`` (PascalCase, as the execute route's). The answer
is the ``InvokeResult`` of the fork, its ``Result`` the new ``Session`` (its
``Id``, ``Mode``, ``ModeHistory`` and ``ForkedFrom``: the parent's session id, the
turn and how many messages they share): 201 when forked. A refusal keeps the
engine's error: 404 ``not_found`` (no such session for this caller — another
org's or user's reads the same — or no such turn), 409 ``conflict`` (the turn is
still pending), 422 ``invalid_request`` (a body that is not a JSON object with a
non-empty ``TurnId`` string and nothing else), 501 (the service's store cannot
fork), 502 ``port_failed`` (the store failed). The caller is the API key's, as for
a turn.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from aptix_pipeline.adapters.ui import fork_status
from aptix_pipeline.contracts import ErrorCode, InvokeError, InvokeResult, Session

from .auth import authenticated_caller
from .errors import error_response, missing_key_response
from .execute import ServiceState
from .openapi import SECURITY

__all__ = ["FORK_OPERATION", "FORK_PATH", "add_fork_route"]

FORK_PATH = "/v1/sessions/{session_id}/fork"

_RESULT = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ForkResult"}}}}

FORK_OPERATION: dict[str, Any] = {
    "summary": "Fork a session after one of its settled turns",
    "description": (
        "A new session of the caller whose transcript, mode and mode history are the "
        "session's as they stood after `TurnId` (docs/FORKS.md). The transcript is "
        "shared, not copied. The new session's first turn is a FollowOn naming it "
        "(`SessionId`) and the turn it was forked after (`TurnId`)."
    ),
    "status_code": 201,
    "openapi_extra": {
        "security": SECURITY,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {"TurnId": {"type": "string", "minLength": 1}},
                        "required": ["TurnId"],
                        "additionalProperties": False,
                    },
                    "example": {"TurnId": "turn-2"},
                }
            },
        },
    },
    "responses": {
        201: {"description": "Forked: the new session", **_RESULT},
        401: {"description": "No API key, or an unknown one (unauthorized)", **_RESULT},
        404: {"description": "No such session for this caller, or no such turn", **_RESULT},
        409: {"description": "The turn is still pending (conflict)", **_RESULT},
        422: {"description": 'The body is not {"TurnId": "..."}', **_RESULT},
        501: {"description": "The service's session store cannot fork", **_RESULT},
        502: {"description": "The store failed (port_failed)", **_RESULT},
        503: {"description": "The service is starting or stopping (unavailable)", **_RESULT},
    },
}
"""The documentation of ``POST /v1/sessions/{id}/fork``: keyword arguments of its route."""


def _turn_id(body: bytes) -> str | InvokeError:
    """The body's ``TurnId``, or the error naming what is wrong with the body."""
    try:
        parsed = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if not isinstance(parsed, dict):
        return InvokeError(
            code=ErrorCode.INVALID_REQUEST,
            field="body",
            message='the body must be a JSON object: {"TurnId": "..."}',
        )
    for name in parsed:
        if name != "TurnId":
            return InvokeError(
                code=ErrorCode.INVALID_REQUEST,
                field=str(name),
                message=f"the field is not part of a fork request: {name!r} (only TurnId)",
            )
    turn_id = parsed.get("TurnId")
    if not isinstance(turn_id, str) or not turn_id.strip():
        return InvokeError(
            code=ErrorCode.INVALID_REQUEST,
            field="TurnId",
            message="TurnId must be a non-empty string: the settled turn to fork after",
        )
    return turn_id


def _answer(result: InvokeResult[Session]) -> Response:
    return Response(
        result.to_json(), status_code=fork_status(result), media_type="application/json"
    )


def add_fork_route(app: FastAPI, service: ServiceState) -> None:
    """Declare ``POST /v1/sessions/{session_id}/fork`` on ``app`` (module docstring)."""

    @app.post(FORK_PATH, response_class=Response, **FORK_OPERATION)
    async def fork(session_id: str, request: Request) -> Response:
        caller = await authenticated_caller(service.authenticator, request.headers)
        if caller is None:
            return missing_key_response()
        pipeline = service.pipeline
        if pipeline is None:
            return error_response(503, "the service is starting or stopping")
        turn_id = _turn_id(await request.body())
        if isinstance(turn_id, InvokeError):
            return _answer(InvokeResult[Session].failure([turn_id]))
        return _answer(await pipeline.fork(session_id, turn_id, caller))
