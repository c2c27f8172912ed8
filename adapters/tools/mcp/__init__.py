"""MCP servers as server tools (docs/MCP.md): their configuration, the pool of their
connections, results mapped to tool answers, elicitation as a client-tool call.

Needs the ``mcp`` extra. May import contracts; never another room of adapters.
"""

from __future__ import annotations

from .elicitation import (
    ELICITATION_ARGUMENTS_SCHEMA,
    ELICITATION_RESULT_SCHEMA,
    ELICITATION_TOOL,
)
from .pool import DEFAULT_MAX_SESSIONS, McpCatalogError, McpPool, McpStartError, McpTool
from .results import McpToolError
from .servers import DEFAULT_ELICITATION_TIMEOUT_SECONDS, HttpServer, McpServer, StdioServer

__all__ = [
    "DEFAULT_ELICITATION_TIMEOUT_SECONDS",
    "DEFAULT_MAX_SESSIONS",
    "ELICITATION_ARGUMENTS_SCHEMA",
    "ELICITATION_RESULT_SCHEMA",
    "ELICITATION_TOOL",
    "HttpServer",
    "McpCatalogError",
    "McpPool",
    "McpServer",
    "McpStartError",
    "McpTool",
    "McpToolError",
    "StdioServer",
]
