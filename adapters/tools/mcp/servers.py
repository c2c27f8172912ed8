"""The MCP servers a host configures (docs/MCP.md): how to reach each one.

- ``StdioServer`` — a command the engine starts, talking MCP on its stdin and
  stdout: ``command``, ``args``, ``env`` (added to the engine's environment).
- ``HttpServer`` — a streamable HTTP endpoint: ``url`` and ``headers`` (their
  values read from the environment by the configuration, never written in it).

Both name the server (``name``, used in messages and spans), may keep only some
of its tools (``tools``, an allow-list; ``None`` keeps all), offer them in some
modes (``modes``; a mode's ``server_tools`` may also name them one by one), and
say how long a call paused for the user waits for the answer
(``elicitation_timeout_seconds``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = ["DEFAULT_ELICITATION_TIMEOUT_SECONDS", "HttpServer", "McpServer", "StdioServer"]

DEFAULT_ELICITATION_TIMEOUT_SECONDS: Final = 600.0
"""How long a call paused for the user's answer waits for the continuation (10 minutes)."""

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def _check_common(
    kind: str, name: str, tools: Sequence[str] | None, modes: Sequence[str], timeout: float
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    where = f"{kind}({name!r})"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{kind}.name: {name!r} is not 1-64 letters, digits, '_', '.' or '-'")
    if isinstance(tools, str) or isinstance(modes, str):
        raise TypeError(f"{where}: tools and modes are lists of names, not a string")
    kept = None if tools is None else tuple(tools)
    if kept is not None and (not kept or not all(isinstance(t, str) and t for t in kept)):
        raise ValueError(f"{where}.tools: a non-empty list of tool names, or None for all")
    offered = tuple(modes)
    if not all(isinstance(m, str) and m for m in offered):
        raise ValueError(f"{where}.modes: a list of mode names")
    if not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
        raise ValueError(f"{where}.elicitation_timeout_seconds: a number of seconds above 0")
    return kept, offered


@dataclass(frozen=True, slots=True)
class StdioServer:
    """An MCP server the engine starts as a subprocess and talks to over stdio."""

    name: str
    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    tools: Sequence[str] | None = None
    modes: Sequence[str] = ()
    elicitation_timeout_seconds: float = DEFAULT_ELICITATION_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        tools, modes = _check_common(
            "StdioServer", self.name, self.tools, self.modes, self.elicitation_timeout_seconds
        )
        if not isinstance(self.command, str) or not self.command.strip():
            raise ValueError(f"StdioServer({self.name!r}).command: give the command to run")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError(f"StdioServer({self.name!r}).args: a list of strings")
        if not isinstance(self.env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()
        ):
            raise TypeError(f"StdioServer({self.name!r}).env: a table of strings")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "modes", modes)

    @property
    def transport(self) -> str:
        """``network.transport`` of the OpenTelemetry MCP conventions: a pipe."""
        return "pipe"


@dataclass(frozen=True, slots=True)
class HttpServer:
    """An MCP server reached over streamable HTTP at ``url``."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    tools: Sequence[str] | None = None
    modes: Sequence[str] = ()
    elicitation_timeout_seconds: float = DEFAULT_ELICITATION_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        tools, modes = _check_common(
            "HttpServer", self.name, self.tools, self.modes, self.elicitation_timeout_seconds
        )
        if not isinstance(self.url, str) or not re.fullmatch(r"https?://\S+", self.url):
            raise ValueError(f"HttpServer({self.name!r}).url: an http:// or https:// URL")
        if not isinstance(self.headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()
        ):
            raise TypeError(f"HttpServer({self.name!r}).headers: a table of strings")
        object.__setattr__(self, "headers", dict(self.headers))
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "modes", modes)

    @property
    def transport(self) -> str:
        """``network.transport`` of the OpenTelemetry MCP conventions: TCP."""
        return "tcp"


McpServer = StdioServer | HttpServer
"""One configured MCP server."""
