"""Where each tool runs, checked against the executors before any turn (AGN-011 §4.2-§4.3, §5.2).

A call of a tool goes where its definition says (``ToolDefinition.executes_on``):
a server tool runs by the executor registered under its name (``Ports.tools``), a
client tool ends the turn and the client runs it. A pipeline whose executors do
not match its catalog would route calls where nothing runs them, or register
executors that never run. ``tool_routing_problems`` finds each such mismatch:

- ``no_executor``: a server tool (``executes_on="server"``) that a mode or an
  agent offers has no executor. A container needs none: the engine expands it
  (container design, "Validation Decision Tree").
- ``client_tool_executor``: an executor is registered for a tool that is only
  ever declared for the client; the client runs every call of it.
- ``unoffered_executor``: an executor is registered for a tool that no mode (and
  no agent) offers; the model never sees it.

``agent_change_mode`` is the engine's own tool (AGN-011 §5.2): it needs no
executor, and a host may register one of its own under that name (D29).

``Pipeline`` checks at construction when its catalogs can be read at once
(``ListsModes``, ``ListsAgents``: ``ConfigCatalog`` can), and
``await Pipeline.verify()`` checks any catalog through its ports. A mismatch is
a ``ToolRoutingError`` naming each tool and the fix.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from aptix_pipeline.contracts import (
    AgentCatalog,
    AgentContext,
    AptixPipelineError,
    ModeCatalog,
    ModeSpec,
    ToolDefinition,
)
from aptix_pipeline.steps import AGENT_CHANGE_MODE, Ports

__all__ = [
    "ListsAgents",
    "ListsModes",
    "ToolRoutingError",
    "ToolRoutingProblem",
    "check_tool_routing",
    "check_tool_routing_now",
    "tool_routing_problems",
    "verify_tool_routing",
]

ProblemKind = Literal["no_executor", "client_tool_executor", "unoffered_executor"]


@dataclass(frozen=True, slots=True)
class ToolRoutingProblem:
    """One mismatch between the tools the catalog offers and the executors registered."""

    kind: ProblemKind
    tool: str
    message: str


class ToolRoutingError(AptixPipelineError, ValueError):
    """The pipeline's executors do not match where its catalog's tools run.

    ``problems`` holds each mismatch; the message names every tool and its fix,
    one per line.
    """

    def __init__(self, problems: Sequence[ToolRoutingProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(problem.message for problem in self.problems))


@runtime_checkable
class ListsModes(Protocol):
    """A Mode Catalog whose modes can be read without awaiting (``ConfigCatalog``)."""

    def all_modes(self) -> Sequence[ModeSpec]:
        """Every mode, in catalog order."""
        ...


@runtime_checkable
class ListsAgents(Protocol):
    """An Agent Catalog whose agents can be read without awaiting (``ConfigCatalog``)."""

    def all_agents(self) -> Sequence[AgentContext]:
        """Every agent, in catalog order."""
        ...


def _declared(
    modes: Iterable[ModeSpec], agents: Iterable[AgentContext]
) -> list[tuple[ToolDefinition, str]]:
    """Every tool the catalogs offer, with who offers it (``mode 'general'``)."""
    declared = [(tool, f"mode {mode.name!r}") for mode in modes for tool in mode.server_tools]
    declared += [(tool, f"agent {agent.id!r}") for agent in agents for tool in agent.client_tools]
    return declared


def _offered_by(places: list[str]) -> str:
    return ", ".join(dict.fromkeys(places))


def tool_routing_problems(
    modes: Iterable[ModeSpec], agents: Iterable[AgentContext], executors: Collection[str]
) -> tuple[ToolRoutingProblem, ...]:
    """Every mismatch between the tools ``modes`` and ``agents`` offer and ``executors``
    (the names of ``Ports.tools``), server tools first, then executors by name."""
    server: dict[str, list[str]] = {}
    client: dict[str, list[str]] = {}
    containers: set[str] = set()
    for tool, place in _declared(modes, agents):
        if tool.name == AGENT_CHANGE_MODE:
            continue
        (server if tool.executes_on == "server" else client).setdefault(tool.name, []).append(place)
        if tool.is_container and tool.executes_on == "server":
            containers.add(tool.name)
    problems = [
        ToolRoutingProblem(
            "no_executor",
            name,
            f"server tool {name!r} (offered by {_offered_by(places)}) has no executor: "
            f"register one under {name!r} (Ports.tools, embedded_pipeline(tools=...)), "
            "or declare the tool executes_on='client'",
        )
        for name, places in server.items()
        if name not in executors and name not in containers
    ]
    for name in sorted(executors):
        if name == AGENT_CHANGE_MODE or name in server:
            continue
        if name in client:
            problems.append(
                ToolRoutingProblem(
                    "client_tool_executor",
                    name,
                    f"tool {name!r} has an executor but is declared for the client "
                    f"(executes_on='client' by {_offered_by(client[name])}), so the client "
                    "would run every call of it: declare it executes_on='server', "
                    "or remove its executor",
                )
            )
        else:
            problems.append(
                ToolRoutingProblem(
                    "unoffered_executor",
                    name,
                    f"executor {name!r} runs no tool: no mode offers a tool named {name!r}; "
                    "add the tool to a mode's server tools, or remove the executor",
                )
            )
    return tuple(problems)


def check_tool_routing(
    modes: Iterable[ModeSpec], agents: Iterable[AgentContext], executors: Collection[str]
) -> None:
    """Raise ``ToolRoutingError`` when ``tool_routing_problems`` finds any."""
    problems = tool_routing_problems(modes, agents, executors)
    if problems:
        raise ToolRoutingError(problems)


def check_tool_routing_now(ports: Ports) -> None:
    """Check ``ports`` when its Mode Catalog can be read at once; else nothing is read.

    The agents' client tools count when the Agent Catalog can be read at once too.
    """
    modes: ModeCatalog = ports.modes
    if not isinstance(modes, ListsModes):
        return
    agents: AgentCatalog = ports.agents
    listed = agents.all_agents() if isinstance(agents, ListsAgents) else ()
    check_tool_routing(modes.all_modes(), listed, set(ports.tools))


async def verify_tool_routing(ports: Ports) -> None:
    """Check ``ports`` through the catalog ports: every mode (``list_modes``) and every
    agent when the Agent Catalog can list them, else the default agent. A catalog that
    raises raises here."""
    agents: list[AgentContext]
    if isinstance(ports.agents, ListsAgents):
        agents = list(ports.agents.all_agents())
    else:
        default = await ports.agents.get_agent_context(None)
        agents = [default] if default is not None else []
    check_tool_routing(await ports.modes.list_modes(), agents, set(ports.tools))
