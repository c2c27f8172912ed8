"""``[[mcp_servers]]``: MCP servers whose tools join the catalog (docs/MCP.md).

Each entry is a stdio server (``command``, ``args``, ``env``, ``env_from``, ``cwd``)
or a streamable HTTP one (``url``, ``headers_env``), with ``name`` and, optionally,
``tools`` (an allow-list), ``modes`` (modes that offer all its tools) and
``elicitation_timeout_seconds``. A secret never sits in the file: ``env_from`` and
``headers_env`` map a child variable or a header to the environment variable
holding its value.

Loading the configuration starts every server once and lists its tools
(``start_pool``): a server that cannot start, or tools that clash, is a
``ConfigError`` naming the server (``aptix`` exits 2 with that line). The listed
tools become ``[[server_tools]]`` entries (``with_mcp_tools``), so a mode offers
them by name in ``server_tools`` or all of a server's through its ``modes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aptix_pipeline.contracts import AptixPipelineError

if TYPE_CHECKING:
    from aptix_pipeline.adapters.tools import McpPool, McpServer

__all__ = ["McpConfigError", "mcp_servers", "start_pool", "with_mcp_tools"]

_ENV = r"^[A-Za-z_][A-Za-z0-9_]*$"


class McpConfigError(AptixPipelineError, ValueError):
    """``[[mcp_servers]]`` is wrong; the message names the entry and the key."""


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_from: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    headers_env: dict[str, str] = Field(default_factory=dict)
    tools: list[str] | None = Field(default=None, min_length=1)
    modes: list[str] = Field(default_factory=list)
    elicitation_timeout_seconds: float = Field(default=600.0, gt=0, allow_inf_nan=False)


def _variable(name: str, where: str, env: Mapping[str, str]) -> str:
    import re

    if not re.fullmatch(_ENV, name):
        raise McpConfigError(f"{where}: {name!r} is not an environment variable name")
    value = env.get(name)
    if value is None or not value.strip():
        raise McpConfigError(f"{where}: environment variable {name} is not set (or is empty)")
    return value


def mcp_servers(
    data: object, base: Path, source: str, env: Mapping[str, str]
) -> tuple[McpServer, ...]:
    """The servers ``[[mcp_servers]]`` describes, secrets read from ``env``."""
    from aptix_pipeline.adapters.tools import HttpServer, StdioServer

    if not isinstance(data, list):
        raise McpConfigError(f"{source}: [[mcp_servers]] must be an array of tables")
    servers: list[McpServer] = []
    for index, entry in enumerate(data):
        where = f"{source}: mcp_servers[{index}]"
        try:
            table = _Server.model_validate(entry)
        except ValidationError as error:
            first = error.errors()[0]
            loc = ".".join(map(str, first["loc"]))
            raise McpConfigError(f"{where}.{loc}: {first['msg']}") from None
        where = f"{source}: mcp_servers[{index}] ({table.name})"
        if (table.command is None) == (table.url is None):
            raise McpConfigError(f"{where}: give exactly one of command (stdio) and url (HTTP)")
        stdio_keys = ("args", "env", "env_from", "cwd")
        if table.url is not None:
            given = [key for key in stdio_keys if key in entry]
            if given:
                raise McpConfigError(f"{where}: {given[0]} applies to a stdio server (command)")
            headers = {
                header: _variable(variable, f"{where}.headers_env.{header}", env)
                for header, variable in table.headers_env.items()
            }
            servers.append(
                HttpServer(
                    name=table.name,
                    url=table.url,
                    headers=headers,
                    tools=table.tools,
                    modes=table.modes,
                    elicitation_timeout_seconds=table.elicitation_timeout_seconds,
                )
            )
            continue
        if table.headers_env:
            raise McpConfigError(f"{where}: headers_env applies to an HTTP server (url)")
        assert table.command is not None
        child_env = dict(table.env)
        for name, variable in table.env_from.items():
            child_env[name] = _variable(variable, f"{where}.env_from.{name}", env)
        servers.append(
            StdioServer(
                name=table.name,
                command=table.command,
                args=table.args,
                env=child_env,
                cwd=str(base / table.cwd) if table.cwd is not None else str(base),
                tools=table.tools,
                modes=table.modes,
                elicitation_timeout_seconds=table.elicitation_timeout_seconds,
            )
        )
    names = [server.name for server in servers]
    for name in names:
        if names.count(name) > 1:
            raise McpConfigError(f"{source}: two [[mcp_servers]] are named {name!r}")
    return tuple(servers)


def start_pool(servers: Sequence[McpServer] | McpPool, source: str) -> McpPool:
    """A started pool for ``servers`` (a pool given is started when it is not yet);
    ``McpConfigError`` naming the server that fails."""
    try:
        from aptix_pipeline.adapters.tools import McpCatalogError, McpPool, McpStartError
    except ImportError as error:  # the extra is missing
        raise McpConfigError(
            f"{source}: [[mcp_servers]] needs the mcp extra ({error}): "
            "pip install 'aptix-pipeline[mcp]'"
        ) from None
    pool = servers if isinstance(servers, McpPool) else McpPool(servers)
    if pool.started:
        return pool
    try:
        return pool.start()
    except (McpStartError, McpCatalogError) as error:
        raise McpConfigError(f"{source}: {error}") from None


def with_mcp_tools(
    data: Mapping[str, Any], pool: McpPool, source: str, host_tools: Sequence[str] = ()
) -> dict[str, Any]:
    """The catalog tables ``data`` with the pool's tools as ``[[server_tools]]`` and the
    modes that servers name offering them; ``McpConfigError`` naming both sides of a
    clash with a declared server tool or a host tool."""
    declared = {
        tool.get("name"): index
        for index, tool in enumerate(data.get("server_tools", []))
        if isinstance(tool, dict)
    }
    added = []
    for definition in pool.definitions():
        server = pool.server_of(definition.name)
        if definition.name in declared:
            raise McpConfigError(
                f"{source}: MCP tool {definition.name!r} of server {server!r} clashes with "
                f"server_tools[{declared[definition.name]}] {definition.name!r}: rename one, "
                "or leave it out of the server's tools allow-list"
            )
        if definition.name in host_tools:
            raise McpConfigError(
                f"{source}: MCP tool {definition.name!r} of server {server!r} clashes with "
                f"the host tool {definition.name!r}: rename one, or leave it out of the "
                "server's tools allow-list"
            )
        added.append(definition.model_dump(mode="json", exclude={"executes_on"}))
    merged = dict(data)
    merged["server_tools"] = [*data.get("server_tools", []), *added]
    offered = pool.offered_in()
    modes = []
    known = set()
    for mode in data.get("modes", []):
        if isinstance(mode, dict) and mode.get("name") in offered:
            extra = [n for n in offered[mode["name"]] if n not in mode.get("server_tools", [])]
            mode = {**mode, "server_tools": [*mode.get("server_tools", []), *extra]}
        if isinstance(mode, dict):
            known.add(mode.get("name"))
        modes.append(mode)
    unknown = sorted(set(offered) - known)
    if unknown:
        raise McpConfigError(
            f"{source}: [[mcp_servers]] modes names {unknown}, which the catalog does not have"
        )
    merged["modes"] = modes
    return merged
