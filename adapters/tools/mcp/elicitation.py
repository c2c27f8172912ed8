"""Elicitation: an MCP server asking the user mid-call, as a client-tool call of the turn.

A server's ``elicitation/create`` request pauses the turn (``ToolPause``): the
client gets a call of the client tool ``mcp_elicitation`` (``ELICITATION_TOOL``)
under the paused call's ``ToolCallId``, with the arguments of
``ELICITATION_ARGUMENTS_SCHEMA``. Its result (``ELICITATION_RESULT_SCHEMA``) is the
user's answer: ``{"action": "accept", "content": {...}}``, ``{"action": "decline"}``
or ``{"action": "cancel"}``. A result the client reports as failed (an
``ErrorMessage``), or one that is not such an object, is ``cancel``.

The MCP request cannot outlive the pause on the wire with nothing waiting on it,
so the pool keeps it: the call stays in flight, its elicitation unanswered, in
the pool of the process that ran the turn, keyed by the session, the turn and the
call id, for ``elicitation_timeout_seconds``. The continuation hands the answer to
the waiting request; the call then ends, or asks again. After the timeout the
server is told ``cancel``; a continuation that comes later, or reaches another
process, fails the call with a clear message (docs/MCP.md "Elicitation").
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Final

from mcp_types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult

__all__ = [
    "ELICITATION_ARGUMENTS_SCHEMA",
    "ELICITATION_RESULT_SCHEMA",
    "ELICITATION_TOOL",
    "elicitation_arguments",
    "elicitation_result",
]

ELICITATION_TOOL: Final = "mcp_elicitation"
"""The client tool a paused MCP call asks the client through."""

ELICITATION_ARGUMENTS_SCHEMA: Final = MappingProxyType(
    {
        "type": "object",
        "properties": {
            "server": {"type": "string", "description": "the MCP server asking"},
            "tool": {"type": "string", "description": "the tool whose call asks"},
            "mode": {"enum": ["form", "url"]},
            "message": {"type": "string", "description": "what to show the user"},
            "requested_schema": {
                "type": "object",
                "description": "form mode: the flat JSON Schema the answer's content follows",
            },
            "url": {"type": "string", "description": "url mode: where to send the user"},
        },
        "required": ["server", "tool", "mode", "message"],
    }
)
"""The arguments of an ``mcp_elicitation`` call."""

ELICITATION_RESULT_SCHEMA: Final = MappingProxyType(
    {
        "type": "object",
        "properties": {
            "action": {"enum": ["accept", "decline", "cancel"]},
            "content": {"type": "object", "description": "accept in form mode: the answer"},
        },
        "required": ["action"],
    }
)
"""The result the client returns for an ``mcp_elicitation`` call."""


def elicitation_arguments(server: str, tool: str, params: ElicitRequestParams) -> str:
    """The ``mcp_elicitation`` call's arguments (JSON) for a server's request."""
    data: dict[str, Any] = {
        "server": server,
        "tool": tool,
        "mode": params.mode,
        "message": params.message,
    }
    if isinstance(params, ElicitRequestFormParams):
        data["requested_schema"] = params.requested_schema
    else:
        data["url"] = params.url
    return json.dumps(data, ensure_ascii=False)


def elicitation_result(answer: str) -> ElicitResult:
    """The client's result for an ``mcp_elicitation`` call as MCP's ``ElicitResult``."""
    try:
        data = json.loads(answer)
    except ValueError:
        return ElicitResult(action="cancel")
    if not isinstance(data, dict) or data.get("action") not in ("accept", "decline", "cancel"):
        return ElicitResult(action="cancel")
    content = data.get("content") if data["action"] == "accept" else None
    if content is not None and not isinstance(content, dict):
        return ElicitResult(action="cancel")
    try:
        return ElicitResult(action=data["action"], content=content)
    except ValueError:
        return ElicitResult(action="cancel")
