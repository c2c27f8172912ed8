"""Server tools that ship with the package: the demo tools of the built-in catalog,
and MCP servers as server tools (``mcp/``, the ``mcp`` extra; docs/MCP.md).

May import contracts, validators, steps and engine; never another room of adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .builtin import BUILTIN_TOOLS, DEMO_TOOLS
    from .mcp import HttpServer, McpCatalogError, McpPool, McpServer, McpStartError, StdioServer

_EXPORTS: dict[str, str] = {
    "BUILTIN_TOOLS": "builtin",
    "DEMO_TOOLS": "builtin",
    "HttpServer": "mcp",
    "McpCatalogError": "mcp",
    "McpPool": "mcp",
    "McpServer": "mcp",
    "McpStartError": "mcp",
    "StdioServer": "mcp",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "BUILTIN_TOOLS",
    "DEMO_TOOLS",
    "HttpServer",
    "McpCatalogError",
    "McpPool",
    "McpServer",
    "McpStartError",
    "StdioServer",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
