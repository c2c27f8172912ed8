"""The Mode Catalog and Agent Catalog from a TOML file, with a built-in default.

One file configures both ports (docs/CONFIGURATION.md "The catalog"):

- ``[[modes]]`` — ``name``, ``display_name``, ``server_tools`` (names of
  ``[[server_tools]]`` entries) and ``vision`` (default ``true``: images reach the
  model in this mode). A mode ``"general"`` must exist: it is every new
  session's default (AGN-011 §3.1).
- ``[[server_tools]]`` — tool definitions, with the container design's metadata
  where a tool is a container or a member of one.
- ``[[agents]]`` — ``id``, ``name``, ``system_prompt``, ``model``, ``default``,
  ``vision`` (default ``true``: the agent's model takes images) and
  ``[[agents.client_tools]]``.
- ``[[conversations]]`` — ``id``, ``name``, ``instructions``, ``default``.

The table says where a tool runs: ``executes_on`` defaults to ``"server"`` in
``[[server_tools]]`` and to ``"client"`` in ``[[agents.client_tools]]``, and the
other side is refused (a ``ToolDefinition`` built in Python has no default).

Without a file, ``default_config.toml`` (shipped with the package) is used; it
brings the executors of its demo tools (``ConfigCatalog.tools``,
``tools/builtin.py``). Another catalog brings them only when read with
``demo_tools=True``, and then only for the demo tools its modes offer.
Mistakes are reported as ``CatalogError`` naming the entry and the problem.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aptix_pipeline.adapters.tools import DEMO_TOOLS
from aptix_pipeline.contracts import (
    DEFAULT_MODE,
    AgentContext,
    AptixPipelineError,
    ConversationContext,
    ModeSpec,
    ToolDefinition,
    ToolExecutor,
)

__all__ = ["CatalogError", "ConfigCatalog"]

_RESERVED_TOOL = "agent_change_mode"


class CatalogError(AptixPipelineError, ValueError):
    """The catalog configuration is wrong; the message names where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Mode(_Strict):
    name: str = Field(min_length=1)
    display_name: str = Field(min_length=1)
    server_tools: list[str] = Field(default_factory=list)
    vision: bool = True


class _Agent(_Strict):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    system_prompt: str = ""
    model: str | None = None
    default: bool = False
    vision: bool = True
    client_tools: list[dict[str, Any]] = Field(default_factory=list)


class _Conversation(_Strict):
    id: str = Field(min_length=1)
    name: str | None = None
    instructions: str = ""
    default: bool = False


class _Config(_Strict):
    modes: list[_Mode]
    server_tools: list[dict[str, Any]] = Field(default_factory=list)
    agents: list[_Agent]
    conversations: list[_Conversation]


def _tool(data: dict[str, Any], where: str, side: str) -> ToolDefinition:
    try:
        tool = ToolDefinition.model_validate({"executes_on": side, **data})
    except ValidationError as error:
        raise CatalogError(
            f"{where}: {error.errors()[0]['msg']} "
            f"(at {'.'.join(map(str, error.errors()[0]['loc']))})"
        ) from None
    if tool.executes_on != side:
        raise CatalogError(f"{where}: {tool.name!r} must have executes_on = {side!r}")
    if tool.name == _RESERVED_TOOL:
        raise CatalogError(f"{where}: {_RESERVED_TOOL!r} is the engine's own tool")
    return tool


def _unique(names: list[str], what: str, source: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise CatalogError(f"{source}: {what} {name!r} is declared twice")
        seen.add(name)


def _check_containers(tools: list[ToolDefinition], where: str) -> None:
    """Every member's container is in the same set, and every container's members are.

    A container whose members are missing would expand to nothing, and a member
    whose container is missing could never be revealed (container design, R9).
    """
    by_name = {tool.name: tool for tool in tools}
    for tool in tools:
        if tool.member_of is None:
            continue
        container = by_name.get(tool.member_of)
        if container is None or not container.is_container:
            raise CatalogError(
                f"{where}: {tool.name!r} is a member of {tool.member_of!r}, "
                "which is not a container of the same set"
            )
        if container.function_names is not None and tool.name not in container.function_names:
            raise CatalogError(
                f"{where}: {tool.name!r} is not in the FunctionNames of {container.name!r}"
            )
    for tool in tools:
        missing = [
            name
            for name in tool.function_names or ()
            if name not in by_name or by_name[name].member_of != tool.name
        ]
        if missing:
            raise CatalogError(
                f"{where}: container {tool.name!r} names functions that are not its "
                f"members in the same set: {missing}"
            )


def _default(items: list[Any], what: str, source: str) -> Any:
    defaults = [item for item in items if item.default]
    if len(defaults) > 1:
        raise CatalogError(f"{source}: more than one default {what}: {[d.id for d in defaults]}")
    return defaults[0] if defaults else (items[0] if len(items) == 1 else None)


class ConfigCatalog:
    """``ModeCatalog`` and ``AgentCatalog`` from one configuration; see the module docstring.

    ``demo_tools`` brings the executors of the demo tools (``DEMO_TOOLS``: ``Add``,
    ``Multiply``, ``review_checklist``, ``make_report``) that the catalog's modes
    offer, in ``tools``;
    ``ConfigCatalog.default()`` does. The whole catalog can be read at once
    (``all_modes``, ``all_agents``), so a ``Pipeline`` built on it checks its tool
    routing when it is built (``engine/tool_routing.py``).
    """

    def __init__(
        self, data: dict[str, Any], *, source: str = "configuration", demo_tools: bool = False
    ) -> None:
        try:
            config = _Config.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(map(str, first["loc"]))
            raise CatalogError(f"{source}: {where}: {first['msg']}") from None
        canonical = json.dumps(config.model_dump(mode="json"), sort_keys=True)
        self.config_digest = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        """A digest of the validated configuration; a turn recording carries it."""
        tools = [
            _tool(t, f"{source}: server_tools[{i}]", "server")
            for i, t in enumerate(config.server_tools)
        ]
        _unique([t.name for t in tools], "server tool", source)
        _check_containers(tools, f"{source}: server_tools")
        by_name = {tool.name: tool for tool in tools}
        _unique([m.name for m in config.modes], "mode", source)
        if DEFAULT_MODE not in {m.name for m in config.modes}:
            raise CatalogError(f"{source}: a mode {DEFAULT_MODE!r} is required (AGN-011 §3.1)")
        self._modes: dict[str, ModeSpec] = {}
        for mode in config.modes:
            missing = [name for name in mode.server_tools if name not in by_name]
            if missing:
                raise CatalogError(
                    f"{source}: mode {mode.name!r} names unknown server tools {missing}"
                )
            _check_containers(
                [by_name[name] for name in mode.server_tools],
                f"{source}: mode {mode.name!r}",
            )
            self._modes[mode.name] = ModeSpec(
                name=mode.name,
                display_name=mode.display_name,
                server_tools=tuple(by_name[name] for name in mode.server_tools),
                vision=mode.vision,
            )
        _unique([a.id for a in config.agents], "agent", source)
        _unique([c.id for c in config.conversations], "conversation", source)
        self._agents: dict[str, AgentContext] = {}
        for index, agent in enumerate(config.agents):
            client_tools = [
                _tool(t, f"{source}: agents[{index}].client_tools[{i}]", "client")
                for i, t in enumerate(agent.client_tools)
            ]
            _unique([t.name for t in client_tools], f"client tool of agent {agent.id!r}:", source)
            _check_containers(client_tools, f"{source}: agent {agent.id!r} client_tools")
            self._agents[agent.id] = AgentContext(
                id=agent.id,
                name=agent.name,
                system_prompt=agent.system_prompt,
                model=agent.model,
                client_tools=client_tools,
                vision=agent.vision,
            )
        self._conversations = {
            c.id: ConversationContext(id=c.id, name=c.name, instructions=c.instructions)
            for c in config.conversations
        }
        default_agent = _default(config.agents, "agent", source)
        default_conversation = _default(config.conversations, "conversation", source)
        self._default_agent: str | None = default_agent.id if default_agent else None
        self._default_conversation: str | None = (
            default_conversation.id if default_conversation else None
        )
        offered = {tool.name for mode in self._modes.values() for tool in mode.server_tools}
        self.tools: Mapping[str, ToolExecutor] = MappingProxyType(
            {name: run for name, run in DEMO_TOOLS.items() if name in offered} if demo_tools else {}
        )
        """The executors that come with the catalog: the demo tools' it offers, with
        ``demo_tools``; else none."""

    @classmethod
    def from_toml(
        cls, text: str, *, source: str = "configuration", demo_tools: bool = False
    ) -> ConfigCatalog:
        """A catalog from TOML text."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise CatalogError(f"{source}: not valid TOML: {error}") from None
        return cls(data, source=source, demo_tools=demo_tools)

    @classmethod
    def from_file(cls, path: str | Path, *, demo_tools: bool = False) -> ConfigCatalog:
        """A catalog from a TOML file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise CatalogError(f"{path}: not UTF-8 text: {error}") from None
        return cls.from_toml(text, source=str(path), demo_tools=demo_tools)

    @classmethod
    def default(cls) -> ConfigCatalog:
        """The built-in catalog (``default_config.toml``), with its demo tools' executors."""
        text = resources.files(__package__).joinpath("default_config.toml").read_text("utf-8")
        return cls.from_toml(text, source="default_config.toml", demo_tools=True)

    def all_modes(self) -> list[ModeSpec]:
        """Every mode, in file order, without awaiting."""
        return list(self._modes.values())

    def all_agents(self) -> list[AgentContext]:
        """Every agent, in file order, without awaiting."""
        return list(self._agents.values())

    async def get_mode(self, mode: str) -> ModeSpec | None:
        """The mode's entry, or ``None``."""
        return self._modes.get(mode)

    async def list_modes(self) -> list[ModeSpec]:
        """Every mode, in file order."""
        return list(self._modes.values())

    async def get_agent_context(self, agent_context_id: str | None) -> AgentContext | None:
        """The agent with this id, the default for ``None``, else ``None``."""
        key = agent_context_id if agent_context_id is not None else self._default_agent
        agent = self._agents.get(key) if key is not None else None
        # Tool definitions are frozen values; the list is the turn's own.
        return (
            None
            if agent is None
            else agent.model_copy(update={"client_tools": list(agent.client_tools)})
        )

    async def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> ConversationContext | None:
        """The conversation context with this id, the default for ``None``, else ``None``."""
        key = (
            conversation_context_id
            if conversation_context_id is not None
            else self._default_conversation
        )
        found = self._conversations.get(key) if key is not None else None
        # Its fields are text: a shallow copy is the turn's own.
        return None if found is None else found.model_copy()
