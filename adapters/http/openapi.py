"""The HTTP service's OpenAPI document (``GET /openapi.json``).

``EXECUTE_OPERATION`` documents ``POST /v1/agent/execute``: the ``Idempotency-Key``
header, the request body, every status the route answers, and its two forms of a 200:
the ``InvokeResult`` as JSON, or the turn as Server-Sent Events (``http/sse.py``,
AGN-034 §4.7). ``use_wire_schemas`` makes the app's document carry the request and
``InvokeResult`` JSON Schemas of ``contracts/schemas.py`` as components, and the
schemas of the events' data, which those references point at.

The document declares how a caller authenticates (``http/auth.py``): two security
schemes, ``bearerAuth`` (``Authorization: Bearer KEY``) and ``apiKeyHeader``
(``X-API-Key: KEY``), either of which ``SECURITY`` accepts on the routes that need
a key, so ``/docs`` can authorize. Every error status answers the ``InvokeResult``
envelope (``http/errors.py``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    AgentExecuteResponse,
    InvokeResult,
    Session,
)
from aptix_pipeline.engine import UsageReport

from .auth import API_KEY_HEADER
from .execute import IDEMPOTENCY_KEY_HEADER, REPLAYED_HEADER
from .sse import EVENT_STREAM

__all__ = ["EXECUTE_OPERATION", "SECURITY", "SECURITY_SCHEMES", "use_wire_schemas"]

SECURITY_SCHEMES: dict[str, Any] = {
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key of the configuration's [[auth.keys]]: "
        "`Authorization: Bearer KEY`. It names the caller's org and user.",
    },
    "apiKeyHeader": {
        "type": "apiKey",
        "in": "header",
        "name": API_KEY_HEADER,
        "description": f"The same API key in `{API_KEY_HEADER}: KEY`, "
        "read when Authorization has no Bearer key.",
    },
}
"""How a caller authenticates: the components' ``securitySchemes``."""
SECURITY: list[dict[str, list[str]]] = [{name: []} for name in SECURITY_SCHEMES]
"""The ``security`` of an operation that needs an API key: either scheme will do."""

_RESULT = {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InvokeResult"}}}
}
_REF = "#/components/schemas/{name}"
_EVENT_STREAM = {
    EVENT_STREAM: {
        "schema": {
            "type": "string",
            "description": (
                "Server-Sent Events, each an ExecuteStreamEvent (components): `id: N` "
                "(1, 2, 3… within the response), `event: progress|delta|result`, one "
                "`data:` line of JSON, then a blank line; `: keep-alive` comment lines "
                "while nothing else is sent for [server] sse_keepalive_seconds. "
                "`result` comes last, once."
            ),
        },
        "example": (
            'id: 1\nevent: progress\ndata: {"kind":"turn_started"}\n\n'
            'id: 15\nevent: delta\ndata: {"text":"app.py l","round":1}\n\n'
            ": keep-alive\n\n"
            'id: 27\nevent: result\ndata: {"Successful":true,"Result":{…},"Errors":[],'
            '"Warnings":[]}\n\n'
        ),
    }
}
_EVENT_DATA: dict[str, Any] = {
    "progress": "StreamProgress",
    "delta": "StreamDelta",
    "result": "InvokeResult",
}
_STREAM_SCHEMAS: dict[str, Any] = {
    "ExecuteStreamEvent": {
        "title": "ExecuteStreamEvent",
        "description": "One event of a streamed answer, by its fields: `id`, `event`, and "
        "`data` (JSON text of the schema named for the event).",
        "oneOf": [
            {
                "type": "object",
                "required": ["id", "event", "data"],
                "properties": {
                    "id": {"type": "integer", "minimum": 1},
                    "event": {"const": event},
                    "data": {"$ref": _REF.format(name=name)},
                },
            }
            for event, name in _EVENT_DATA.items()
        ],
    },
    "StreamProgress": {
        "title": "StreamProgress",
        "description": "What the turn is doing (AGN-033 §1.3: progress is out-of-band): "
        "`kind` is turn_started, step_started, step_ended, model_call_started, "
        "model_call_retried, model_first_chunk, llm_call, tool_started, "
        "tool_finished, tool_call, mode_change, warning or fault; the other "
        "fields depend on it (step, state, taken, round, …). No user content unless "
        "the service captures content.",
        "type": "object",
        "required": ["kind"],
        "properties": {"kind": {"type": "string"}},
        "additionalProperties": True,
    },
    "StreamDelta": {
        "title": "StreamDelta",
        "description": "The next piece of the model's text in model call `round`. "
        "Provisional: the `result` holds the text the response rules accepted.",
        "type": "object",
        "required": ["text", "round"],
        "properties": {
            "text": {"type": "string"},
            "round": {"type": "integer", "minimum": 1},
        },
    },
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
_PROBLEM = _RESULT  # the service's own refusals: the same envelope (http/errors.py)

EXECUTE_OPERATION: dict[str, Any] = {
    "summary": "Run one agent turn",
    "description": (
        "The body is an AgentExecuteRequest (AGN-034). The answer is its InvokeResult "
        "(AGN-033 §2.1): 200 when Successful; 400 invalid_request or "
        "tool_call_manifest_invalid, 404 not_found, 409 conflict, 429 budget_exceeded "
        "(with Retry-After for a windowed budget), 502 port_failed, "
        "504 deadline_exceeded, 500 otherwise — the InvokeResult body names the rule ids "
        "either way. A retry is answered from the answer its first copy stored: send an "
        "Idempotency-Key with an Initial or FollowOn; a continuation needs none.\n\n"
        'Streaming (AGN-034 §4.7): a body with `"Stream": true`, or a request with '
        "`Accept: text/event-stream` (q above 0; the way a continuation, which may not "
        "carry the flag, asks), is answered with `text/event-stream`: `progress` and "
        "`delta` events, then one `result` event whose data is the InvokeResult JSON. A "
        "request the engine refuses before the turn's model call gets the JSON answer "
        "and status above; from the model call on the status is 200 and the `result` "
        "event says how the turn ended. A client that disconnects cancels the turn: "
        "nothing is stored."
    ),
    "openapi_extra": {
        "security": SECURITY,
        "parameters": [_IDEMPOTENCY_KEY],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/AgentExecuteRequest"}}
            },
        },
    },
    "responses": {
        200: {
            "description": "The turn's response: its InvokeResult as JSON, or the turn "
            "as Server-Sent Events when the request asked to stream",
            "headers": _REPLAYED,
            "content": {**_RESULT["content"], **_EVENT_STREAM},
        },
        400: {
            "description": "The request broke AGN-034 / AGN-033 §3.3, or its "
            "Idempotency-Key is malformed",
            **_RESULT,
        },
        401: {
            "description": "No API key, or an unknown one (unauthorized): nothing ran",
            "headers": {"WWW-Authenticate": {"schema": {"type": "string", "enum": ["Bearer"]}}},
            **_PROBLEM,
        },
        404: {"description": "No such session or turn for this caller", **_RESULT},
        409: {
            "description": "Another turn of the session committed first; or the "
            "Idempotency-Key, or the continued tool calls, already answered another request",
            **_RESULT,
        },
        413: {
            "description": "The body is larger than max_body_bytes (body_too_large)",
            **_PROBLEM,
        },
        415: {
            "description": "The body is declared as something other than JSON "
            "(unsupported_media_type)",
            **_PROBLEM,
        },
        429: {
            "description": "A model call would exceed a budget (budget_exceeded): it was "
            "not made and nothing was stored; the error's Budget names the budget, its "
            "window and what remains (docs/BUDGETS.md)",
            "headers": {
                "Retry-After": {
                    "description": "Seconds until the budget's window has room again; "
                    "absent for a per-turn budget",
                    "schema": {"type": "integer", "minimum": 1},
                }
            },
            **_RESULT,
        },
        500: {"description": "An engine rule or internal failure", **_RESULT},
        502: {"description": "The model or store failed", **_RESULT},
        503: {"description": "The service is starting or stopping (unavailable)", **_PROBLEM},
        504: {"description": "The turn ran past its deadline: nothing stored", **_RESULT},
    },
}
"""The documentation of ``POST /v1/agent/execute``: keyword arguments of its route."""


def _schemas() -> dict[str, Any]:
    """The request and ``InvokeResult`` schemas (validation mode, wire names), and the
    streamed events' schemas, as components."""
    components: dict[str, Any] = dict(_STREAM_SCHEMAS)
    template = "#/components/schemas/{model}"
    for name, model in (
        ("AgentExecuteRequest", AgentExecuteRequest),
        ("InvokeResult", InvokeResult[AgentExecuteResponse]),
        ("ForkResult", InvokeResult[Session]),  # POST /v1/sessions/{id}/fork's answer
    ):
        schema = model.model_json_schema(by_alias=True, mode="validation", ref_template=template)
        components.update(schema.pop("$defs", {}))
        components[name] = schema
    # GET /v1/usage's answer, as it is sent: amounts as exact decimal strings
    schema = UsageReport.model_json_schema(
        by_alias=True, mode="serialization", ref_template=template
    )
    components.update(schema.pop("$defs", {}))
    components["UsageReport"] = schema
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
            components = document.setdefault("components", {})
            components.setdefault("schemas", {}).update(_schemas())
            components["securitySchemes"] = SECURITY_SCHEMES
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
