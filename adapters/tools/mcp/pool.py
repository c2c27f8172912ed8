"""The MCP connections of a process: started once, shared by every turn (docs/MCP.md).

``McpPool(servers).start()`` connects to each server, lists its tools and keeps
their JSON Schemas: ``definitions()`` are the server tools they become and
``executors()`` the ``ToolExecutor`` of each, which the catalog and the pipeline
take like any other (``adapters/config``, ``embedded_pipeline(mcp=...)``).

The pool runs on its own thread and event loop, so its connections outlive the
event loop of any one turn (``aptix run``, ``aptix chat`` and the tests each run
turns on loops of their own) and a call is awaited from any loop. The engine's
deadline and cancellation reach a call through that await: cancelling it cancels
the MCP request (the SDK sends ``notifications/cancelled``).

Sessions: one MCP session per server and per Aptix session, made on the first call
and kept across turns (at most ``max_sessions`` per server, the least recently
used closed first), so a stateful server keeps its state for the conversation and
one conversation never sees another's. A connection that drops (the server exits,
the HTTP endpoint goes away) fails the calls in flight with a message naming the
server, and the next call connects again. ``close()`` ends every connection and
stops the subprocesses; the pipeline's owner calls it (``Pipeline.aclose`` when
the pipeline was built with ``mcp=``), and it runs at interpreter exit too.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, Implementation, Tool
from mcp_types.jsonrpc import CONNECTION_CLOSED

from aptix_pipeline.contracts import (
    AptixPipelineError,
    Idempotence,
    ToolDefinition,
    ToolExecutor,
    ToolInvocation,
    ToolOutput,
    ToolPause,
    scrubbed_logger,
)

from .elicitation import ELICITATION_TOOL, elicitation_arguments, elicitation_result
from .results import McpToolError, tool_answer
from .servers import HttpServer, McpServer, StdioServer

__all__ = ["DEFAULT_MAX_SESSIONS", "McpCatalogError", "McpPool", "McpStartError", "McpTool"]

logger = scrubbed_logger(__name__)

DEFAULT_MAX_SESSIONS: Final = 32
"""MCP sessions kept per server (one per Aptix session)."""

START_TIMEOUT_SECONDS: Final = 30.0
"""How long ``start`` waits for every server to answer its tool list."""

_CLIENT_INFO = Implementation(name="aptix-pipeline", version="1")


class McpStartError(AptixPipelineError):
    """A configured MCP server could not be started or listed; the message names it."""


class McpCatalogError(AptixPipelineError, ValueError):
    """The servers' tools cannot join the catalog (a clash, an allow-list naming no tool)."""


def _idempotence(tool: Tool) -> Idempotence | None:
    """``"naturally"`` for a tool its server marks read-only or idempotent (MCP's
    ``readOnlyHint``/``idempotentHint``): a call the tool ledger found started and not
    finished runs again (docs/TOOLS.md). The hints are trusted: the servers are the
    operator's own configuration."""
    hints = tool.annotations
    if hints is not None and (hints.read_only_hint or hints.idempotent_hint):
        return "naturally"
    return None


def _describe(server: McpServer) -> str:
    if isinstance(server, StdioServer):
        return f"MCP server {server.name!r} (stdio: {server.command})"
    return f"MCP server {server.name!r} ({server.url})"


def _first_line(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _is_transport_error(error: BaseException) -> bool:
    """Whether ``error`` says the connection is gone (not that the server refused the call)."""
    if isinstance(error, BaseExceptionGroup):
        return any(_is_transport_error(inner) for inner in error.exceptions)
    if isinstance(error, MCPError):
        return error.code == CONNECTION_CLOSED
    return isinstance(
        error,
        anyio.ClosedResourceError
        | anyio.BrokenResourceError
        | anyio.EndOfStream
        | OSError
        | httpx2.TransportError,
    )


class _Call:
    """One ``tools/call`` in flight, with the elicitations it asks."""

    def __init__(self, connection: _Connection, tool: str) -> None:
        self.connection, self.tool = connection, tool
        self.task: asyncio.Task[CallToolResult] | None = None
        self.asked: asyncio.Queue[tuple[ElicitRequestParams, asyncio.Future[ElicitResult]]] = (
            asyncio.Queue()
        )
        self.waiting: asyncio.Future[ElicitResult] | None = None
        self.expiry: asyncio.TimerHandle | None = None

    async def next(self) -> CallToolResult | ElicitRequestParams:
        """The call's result, or the next question it asks (the call then waits)."""
        assert self.task is not None
        asked = asyncio.ensure_future(self.asked.get())
        try:
            done, _ = await asyncio.wait({self.task, asked}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            asked.cancel()
            self.task.cancel()
            raise
        if self.task in done:
            asked.cancel()
            return self.task.result()
        params, self.waiting = asked.result()
        return params


class _Connection:
    """One MCP session with one server, kept open by its own task."""

    def __init__(self, server: McpServer, key: str) -> None:
        self.server, self.key = server, key
        self.client: Client | None = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.error: BaseException | None = None
        self.calls: set[_Call] = set()
        self.used = time.monotonic()
        self.task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.stop.is_set()

    async def run(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                target: Any
                if isinstance(self.server, StdioServer):
                    target = StdioServerParameters(
                        command=self.server.command,
                        args=list(self.server.args),
                        env=dict(self.server.env) or None,
                        cwd=self.server.cwd,
                    )
                else:
                    http = await stack.enter_async_context(
                        create_mcp_http_client(headers=dict(self.server.headers) or None)
                    )
                    target = streamable_http_client(self.server.url, http_client=http)
                client = Client(
                    target,
                    mode="legacy",
                    elicitation_callback=self._elicit,
                    client_info=_CLIENT_INFO,
                    cache=None,
                )
                self.client = await stack.enter_async_context(client)
                self.ready.set()
                await self.stop.wait()
        except BaseException as error:
            self.error = error
        finally:
            self.stop.set()
            self.ready.set()
            self.client = None

    async def _elicit(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        """A server's question: handed to the one call of this session running now."""
        running = [
            call
            for call in self.calls
            if call.task is not None and not call.task.done() and call.waiting is None
        ]
        if len(running) != 1:
            logger.warning(
                "%s asked for user input with %d calls running in its session; answered cancel",
                _describe(self.server),
                len(running),
            )
            return ElicitResult(action="cancel")
        answered: asyncio.Future[ElicitResult] = asyncio.get_running_loop().create_future()
        running[0].asked.put_nowait((params, answered))
        return await answered


@dataclass(frozen=True, slots=True)
class _Listed:
    server: McpServer
    tool: Tool


class McpPool:
    """The process's MCP connections; see the module docstring."""

    def __init__(
        self, servers: Sequence[McpServer], *, max_sessions: int = DEFAULT_MAX_SESSIONS
    ) -> None:
        seen: dict[str, McpServer] = {}
        for server in servers:
            if not isinstance(server, StdioServer | HttpServer):
                raise TypeError(f"mcp: {server!r} is not a StdioServer or an HttpServer")
            if server.name in seen:
                raise ValueError(f"mcp: two servers are named {server.name!r}")
            seen[server.name] = server
        if max_sessions < 1:
            raise ValueError("McpPool.max_sessions: 1 or more")
        self.servers: Mapping[str, McpServer] = dict(seen)
        self.max_sessions = max_sessions
        self._listed: dict[str, _Listed] = {}
        self._connections: dict[tuple[str, str], _Connection] = {}
        self._paused: dict[tuple[str, str, str], _Call] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="aptix-mcp", daemon=True
        )
        self._thread.start()
        self._closed = False
        self._started = False
        self._finalizer = weakref.finalize(self, _shut, self._loop, self._thread)
        atexit.register(self.close)

    # --- start-up ------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether ``start`` listed the servers' tools."""
        return self._started

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> McpPool:
        """Connect to every server and list its tools; ``McpStartError`` naming the first
        that fails, ``McpCatalogError`` for a clash between two servers' tool names."""
        future = asyncio.run_coroutine_threadsafe(self._list_all(), self._loop)
        try:
            future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self.close()
            raise McpStartError(
                f"MCP servers did not list their tools within {timeout:g} s"
            ) from None
        except BaseException:
            self.close()
            raise
        self._started = True
        return self

    async def _list_all(self) -> None:
        for server in self.servers.values():
            try:
                connection = await self._connection(server.name, "")
                assert connection.client is not None
                tools: list[Tool] = []
                cursor: str | None = None
                while True:
                    page = await connection.client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            except McpStartError:
                raise
            except Exception as error:
                raise McpStartError(
                    f"{_describe(server)}: cannot list its tools: {_first_line(error)}"
                ) from None
            finally:  # the listing's session ends here; turns open their own
                dropped = self._connections.pop((server.name, ""), None)
                if dropped is not None:
                    await self._end(dropped)
            offered = {tool.name: tool for tool in tools}
            if server.tools is not None:
                missing = [name for name in server.tools if name not in offered]
                if missing:
                    raise McpCatalogError(
                        f"{_describe(server)}: tools names {missing}, which it does not offer "
                        f"(it offers {sorted(offered)})"
                    )
                offered = {name: offered[name] for name in server.tools}
            for name, tool in offered.items():
                other = self._listed.get(name)
                if other is not None:
                    raise McpCatalogError(
                        f"MCP tool {name!r} is offered by both {_describe(other.server)} and "
                        f"{_describe(server)}: keep it in one (an allow-list: tools = [...])"
                    )
                self._listed[name] = _Listed(server, tool)

    def definitions(self) -> list[ToolDefinition]:
        """The server tools the listed MCP tools become, in server and list order."""
        return [
            ToolDefinition(
                name=name,
                description=listed.tool.description or listed.tool.title or "",
                executes_on="server",
                parameters=dict(listed.tool.input_schema),
                idempotent=_idempotence(listed.tool),
            )
            for name, listed in self._listed.items()
        ]

    def offered_in(self) -> dict[str, list[str]]:
        """Each mode that servers offer all their tools in (``modes``), with those tools."""
        offered: dict[str, list[str]] = {}
        for name, listed in self._listed.items():
            for mode in listed.server.modes:
                offered.setdefault(mode, []).append(name)
        return offered

    def server_of(self, tool: str) -> str:
        """The name of the server offering ``tool``."""
        return self._listed[tool].server.name

    def executors(self) -> dict[str, ToolExecutor]:
        """A ``ToolExecutor`` for each listed MCP tool, by name."""
        return {name: McpTool(self, listed.server, name) for name, listed in self._listed.items()}

    # --- connections ---------------------------------------------------------------

    async def _connection(self, server_name: str, key: str) -> _Connection:
        connection = self._connections.get((server_name, key))
        if connection is not None and not connection.ready.is_set():
            await connection.ready.wait()  # connecting for an earlier call (maybe cancelled)
        if connection is not None and connection.alive:
            connection.used = time.monotonic()
            return connection
        if connection is not None:
            await self._end(connection)
        server = self.servers[server_name]
        connection = _Connection(server, key)
        self._connections[(server_name, key)] = connection
        connection.task = asyncio.get_running_loop().create_task(connection.run())
        await connection.ready.wait()
        if not connection.alive:
            self._connections.pop((server_name, key), None)
            error = connection.error
            told = _first_line(error) if error is not None else "it closed the connection"
            raise McpStartError(f"{_describe(server)}: cannot connect: {told}")
        await self._trim(server_name)
        return connection

    async def _trim(self, server_name: str) -> None:
        kept = [c for (name, _), c in self._connections.items() if name == server_name]
        idle = sorted((c for c in kept if not c.calls), key=lambda c: c.used)
        while len(kept) > self.max_sessions and idle:
            oldest = idle.pop(0)
            kept.remove(oldest)
            self._connections.pop((server_name, oldest.key), None)
            await self._end(oldest)

    async def _end(self, connection: _Connection) -> None:
        connection.stop.set()
        if connection.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(connection.task), 5.0)
            except (TimeoutError, asyncio.CancelledError):
                connection.task.cancel()

    # --- calls ---------------------------------------------------------------------

    async def _call(
        self,
        server: McpServer,
        tool: str,
        arguments: dict[str, Any],
        invocation: ToolInvocation,
    ) -> tuple[str | ToolOutput | ToolPause, dict[str, Any]]:
        paused_key = (invocation.session_id, invocation.turn_id, invocation.tool_call_id)
        if invocation.client_answer is not None:
            call = self._paused.pop(paused_key, None)
            if call is None or call.waiting is None:
                raise McpToolError(
                    f"no call of MCP tool {tool!r} waits for this answer: it waited longer than "
                    f"{server.elicitation_timeout_seconds:g} s, or another process ran it; "
                    "call the tool again"
                )
            if call.expiry is not None:
                call.expiry.cancel()
            call.waiting.set_result(elicitation_result(invocation.client_answer))
            call.waiting = None
            connection = call.connection
        else:
            connection = await self._connection(server.name, invocation.session_id)
            assert connection.client is not None
            call = _Call(connection, tool)
            connection.calls.add(call)
            call.task = asyncio.get_running_loop().create_task(
                connection.client.call_tool(tool, arguments)
            )
            call.task.add_done_callback(functools.partial(_settled, call))
        attributes = self._attributes(connection)
        try:
            outcome = await call.next()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if _is_transport_error(error):
                connection.stop.set()  # the next call connects again
                raise McpToolError(
                    f"{_describe(server)}: the connection dropped during the call of {tool!r} "
                    f"({_first_line(error)}); it reconnects on the next call"
                ) from None
            if isinstance(error, MCPError):
                raise McpToolError(
                    f"{_describe(server)}: {tool!r} failed: {error.message}"
                ) from None
            raise
        if isinstance(outcome, CallToolResult):
            return tool_answer(tool, outcome), attributes
        self._paused[paused_key] = call
        call.expiry = asyncio.get_running_loop().call_later(
            server.elicitation_timeout_seconds, self._expire, paused_key
        )
        pause = ToolPause(
            name=ELICITATION_TOOL, arguments_json=elicitation_arguments(server.name, tool, outcome)
        )
        return pause, attributes

    def _expire(self, key: tuple[str, str, str]) -> None:
        call = self._paused.pop(key, None)
        if call is not None and call.waiting is not None and not call.waiting.done():
            logger.warning(
                "an MCP call of %r waited too long for the user's answer: cancel", call.tool
            )
            call.waiting.set_result(ElicitResult(action="cancel"))

    @staticmethod
    def _attributes(connection: _Connection) -> dict[str, Any]:
        """The OpenTelemetry MCP attributes of a call on ``connection``."""
        server = connection.server
        attributes: dict[str, Any] = {
            "mcp.method.name": "tools/call",
            "network.transport": server.transport,
            "aptix.mcp.server": server.name,
        }
        client = connection.client
        if client is not None:
            with contextlib.suppress(RuntimeError):  # not connected after all
                attributes["mcp.protocol.version"] = client.protocol_version
        if isinstance(server, HttpServer):
            parts = httpx2.URL(server.url)
            attributes["server.address"] = parts.host
            if parts.port is not None:
                attributes["server.port"] = parts.port
        return attributes

    def call(
        self, server: McpServer, tool: str, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> concurrent.futures.Future[tuple[str | ToolOutput | ToolPause, dict[str, Any]]]:
        """Run one call on the pool's loop; await it with ``asyncio.wrap_future``."""
        if self._closed:
            raise McpToolError(f"MCP tool {tool!r}: the MCP pool is closed")
        return asyncio.run_coroutine_threadsafe(
            self._call(server, tool, arguments, invocation), self._loop
        )

    # --- the end -------------------------------------------------------------------

    async def _close_all(self) -> None:
        for call in list(self._paused.values()):
            if call.task is not None:
                call.task.cancel()
        self._paused.clear()
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(self._end(c) for c in connections), return_exceptions=True)

    def close(self) -> None:
        """End every connection (stopping the subprocesses) and the pool's thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if threading.current_thread() is self._thread:
            raise RuntimeError("McpPool.close() from inside the pool's own thread")
        try:
            asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(15.0)
        except Exception:
            logger.warning("closing the MCP connections failed", exc_info=True)
        self._finalizer()

    async def aclose(self) -> None:
        """``close`` without blocking the caller's event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> McpPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _settled(call: _Call, task: asyncio.Task[CallToolResult]) -> None:
    """A call ended: out of its session's running calls, its outcome read (nobody may
    await it any more: its turn paused and the answer never came)."""
    call.connection.calls.discard(call)
    if not task.cancelled():
        task.exception()


def _shut(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Stop the pool's loop and thread (its connections are closed before)."""
    if loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10.0)
    if not thread.is_alive():
        loop.close()


class McpTool:
    """The ``ToolExecutor`` of one MCP tool: a ``tools/call`` through the pool."""

    def __init__(self, pool: McpPool, server: McpServer, name: str) -> None:
        self.pool, self.server, self.name = pool, server, name

    async def __call__(
        self, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> str | ToolOutput | ToolPause:
        """See ``ToolExecutor``: the MCP tool's result, or a pause for the user's answer."""
        from opentelemetry import trace

        span = trace.get_current_span()
        answer, attributes = await asyncio.wrap_future(
            self.pool.call(self.server, self.name, arguments, invocation)
        )
        if span.is_recording():  # the execute_tool span (engine/telemetry.py)
            span.set_attributes(attributes)
        return answer
