"""The HTTP service's OpenAPI document (``GET /openapi.json``).

``EXECUTE_OPERATION`` documents ``POST /v1/agent/execute``: the ``Idempotency-Key``
header, the request body, and every status the route answers. ``use_wire_schemas``
makes the app's document carry the request and ``InvokeResult`` JSON Schemas of
``contracts/schemas.py`` as components, which those references point at.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from aptix_pipeline.contracts import AgentExecuteRequest, AgentExecuteResponse, InvokeResult

from .http_execute import IDEMPOTENCY_KEY_HEADER, REPLAYED_HEADER

__all__ = ["EXECUTE_OPERATION", "use_wire_schemas"]

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

EXECUTE_OPERATION: dict[str, Any] = {
    "summary": "Run one agent turn",
    "description": (
        "The body is an AgentExecuteRequest (AGN-034). The answer is its InvokeResult "
        "(AGN-033 §2.1): 200 when Successful; 400 invalid_request or "
        "tool_call_manifest_invalid, 404 not_found, 409 conflict, 502 port_failed, "
        "504 deadline_exceeded, 500 otherwise — the InvokeResult body names the rule ids "
        "either way. A retry is answered from the answer its first copy stored: send an "
        "Idempotency-Key with an Initial or FollowOn; a continuation needs none."
    ),
    "openapi_extra": {
        "parameters": [_IDEMPOTENCY_KEY],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/AgentExecuteRequest"}}
            },
        },
    },
    "responses": {
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
}
"""The documentation of ``POST /v1/agent/execute``: keyword arguments of its route."""


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


def use_wire_schemas(app: FastAPI) -> None:
    """Make ``app.openapi()`` the document of its routes plus the wire schemas, built once."""

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
