"""A real MCP server for the tests, written with the official SDK (docs/MCP.md).

``python mcp_demo_server.py stdio`` serves on stdin/stdout;
``python mcp_demo_server.py http PORT`` serves streamable HTTP on 127.0.0.1:PORT
(path ``/mcp``), and checks the ``Authorization`` header when ``DEMO_TOKEN`` is set.

Tools: ``remember``/``recall`` keep state in the process (it must persist across
calls; ``recall`` is marked read-only), ``crash`` exits mid-call, ``slow`` sleeps,
``picture`` returns a PNG, ``ask_name`` elicits the user's name, ``refuse``
answers ``isError``, ``whoami`` tells the process id, ``report`` embeds a text
resource and structured content.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

server = MCPServer("demo")
notes: dict[str, str] = {}


@server.tool()
def remember(key: str, value: str) -> str:
    """Keep a note under a key."""
    notes[key] = value
    return f"kept {key}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def recall(key: str) -> dict[str, str | None]:
    """The note kept under a key."""
    return {"key": key, "value": notes.get(key)}


@server.tool()
def crash() -> str:
    """Exit in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after some seconds."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def picture() -> CallToolResult:
    """A one-pixel PNG."""
    return CallToolResult(
        content=[
            TextContent(text="a red pixel"),
            ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png"),
        ]
    )


@server.tool()
def report(title: str) -> CallToolResult:
    """A report as an embedded text resource, with structured content."""
    return CallToolResult(
        content=[
            EmbeddedResource(
                resource=TextResourceContents(
                    uri="file:///reports/report.md", mime_type="text/markdown", text=f"# {title}\n"
                )
            )
        ],
        structured_content={"title": title, "lines": 1},
    )


class Name(BaseModel):
    name: str


@server.tool()
async def ask_name(ctx: Context) -> str:
    """Ask the user's name, then greet them."""
    answer = await ctx.elicit("What is your name?", Name)
    if answer.action == "accept":
        return f"hello {answer.data.name}"
    return f"no name ({answer.action})"


@server.tool()
def refuse(reason: str) -> CallToolResult:
    """Fail with the reason."""
    return CallToolResult(content=[TextContent(text=reason)], is_error=True)


@server.tool()
def whoami() -> int:
    """The server's process id."""
    return os.getpid()


def main() -> None:
    if sys.argv[1:2] == ["http"]:
        port = int(sys.argv[2])
        token = os.environ.get("DEMO_TOKEN")
        if token is None:
            server.run("streamable-http", host="127.0.0.1", port=port)
            return
        import uvicorn
        from starlette.types import ASGIApp, Receive, Scope, Send

        inner: ASGIApp = server.streamable_http_app()

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            headers = dict(scope.get("headers") or [])
            if (
                scope["type"] == "http"
                and headers.get(b"authorization") != f"Bearer {token}".encode()
            ):
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
            await inner(scope, receive, send)

        uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")
        return
    server.run("stdio")


if __name__ == "__main__":
    main()
