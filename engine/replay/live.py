"""The ports a replay runs live: the host's own model, server tools, catalogs and retriever.

A plain replay answers every port from the recording, so a change in the host's
model adapter, tool or prompt catalog never shows. ``replay(recording,
live=LivePorts(...))`` (or the mapping form, ``live={"llm": ..., "tools": ...,
"catalog": ...}``) runs the named ports with the host's objects of today: each
call still has to be the next recorded one, with the same arguments, and what the
live port answers (or raises) has to be what the recorded port answered, or the
replay names the call and the JSON path of the first difference (docs/RECORDING.md
"Replaying against your own code").

The store, the clock and the id source always answer from the recording: they
are the turn's state and its determinism (STYLE.md "Determinism first"), and a
host's store has a contract kit of its own.

A pipeline's own code goes with its ports: ``hooks`` run around the live model
and the live server tools exactly as in the pipeline (a prompt a
``before_model_request`` hook rewrites reaches the live model rewritten), and
``rules`` are the host rules the replayed turn runs in its guards
(``LivePorts.of_pipeline`` takes both from the pipeline). Hooks do nothing
around ports that answer from the recording: the recording already holds what
the hooks let through (docs/CONFORMANCE.md D287).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from aptix_pipeline.contracts import LLM, AgentCatalog, ModeCatalog, Retriever, ToolExecutor
from aptix_pipeline.steps import ErrorDetail, Hooks, hooked_llm, hooked_tools
from aptix_pipeline.validators import HostRule, HostRules

if TYPE_CHECKING:
    from aptix_pipeline.engine import Pipeline

__all__ = ["LIVE_KEYS", "LivePorts"]

LIVE_KEYS = ("llm", "tools", "modes", "agents", "catalog", "retriever", "hooks", "rules")
"""The keys of ``live``'s mapping form; ``catalog`` is one object serving as both catalogs."""

_RECORDED_ONLY = ("store", "clock", "ids")


@dataclass(frozen=True, slots=True)
class LivePorts:
    """The host's ports a replay runs live; a port left ``None`` answers from the recording.

    - ``llm``: the host's model (an ``LLM``; a ``StreamingLLM`` is streamed when
      the recorded call was ``LLM.stream``);
    - ``tools``: server tools by name (``ToolExecutor``); the recorded server tools
      not named here answer from the recording;
    - ``modes`` / ``agents``: the host's Mode Catalog and Agent Catalog (one object
      may be both);
    - ``retriever``: the host's ``Retriever`` (AGN-034 §4.4), asked where the
      recorded turn asked its retriever; a turn recorded without one has none in
      the replay either;
    - ``hooks``: the host's ``Hooks``, run around the live ``llm`` and ``tools``
      as the pipeline runs them (the module docstring);
    - ``rules``: the host's ``HostRule`` list the replayed turn runs in its guards.

    Each is checked for the port's methods when made: a wrong object is a
    ``TypeError`` naming the field.
    """

    llm: LLM | None = None
    tools: Mapping[str, ToolExecutor] = field(default_factory=dict)
    modes: ModeCatalog | None = None
    agents: AgentCatalog | None = None
    retriever: Retriever | None = None
    hooks: Hooks | None = None
    rules: tuple[HostRule, ...] = ()

    @classmethod
    def of_pipeline(cls, pipeline: Pipeline) -> LivePorts:
        """A pipeline's own model, server tools, catalogs and retriever, with its hooks
        and its host rules: a replay runs the host's code of today as its turns run it."""
        ports = pipeline.ports
        return cls(
            llm=ports.llm,
            tools=dict(ports.tools),
            modes=ports.modes,
            agents=ports.agents,
            retriever=ports.retriever,
            hooks=pipeline.hooks,
            rules=tuple(pipeline.rules),
        )

    def hooked(self, detail: ErrorDetail) -> LivePorts:
        """These ports with ``hooks`` around the model and the tools (and no ``hooks``
        left to apply); a hook's failure told per ``detail``, as the recorded turn's."""
        if self.hooks is None:
            return self
        return replace(
            self,
            llm=None if self.llm is None else hooked_llm(self.llm, self.hooks, detail),
            tools=dict(hooked_tools(self.tools, self.hooks, detail)),
            hooks=None,
        )

    def __post_init__(self) -> None:
        if self.hooks is not None and not isinstance(self.hooks, Hooks):
            raise TypeError(f"live hooks: {_named(self.hooks)} is not a Hooks")
        if isinstance(self.rules, HostRule | str | bytes) or not hasattr(self.rules, "__iter__"):
            raise TypeError(f"live rules: a list of HostRule, not {_named(self.rules)}")
        rules = tuple(self.rules)
        HostRules(rules)  # a rule that is not a HostRule, or an id given twice, is refused
        object.__setattr__(self, "rules", rules)
        if self.llm is not None and not isinstance(self.llm, LLM):
            raise TypeError(f"live llm: {_named(self.llm)} is not an LLM (it has no complete)")
        if not isinstance(self.tools, Mapping):
            raise TypeError(
                f"live tools: a mapping of tool names to executors, not {_named(self.tools)}"
            )
        for name, executor in self.tools.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"live tools: a tool's name is a non-empty string, not {name!r}")
            if not callable(executor):
                raise TypeError(f"live tools[{name!r}]: {_named(executor)} is not a ToolExecutor")
        if self.modes is not None and not isinstance(self.modes, ModeCatalog):
            raise TypeError(
                f"live modes: {_named(self.modes)} is not a ModeCatalog "
                "(it needs get_mode and list_modes)"
            )
        if self.agents is not None and not isinstance(self.agents, AgentCatalog):
            raise TypeError(
                f"live agents: {_named(self.agents)} is not an AgentCatalog "
                "(it needs get_agent_context and get_conversation_context)"
            )
        if self.retriever is not None and not callable(getattr(self.retriever, "retrieve", None)):
            raise TypeError(f"live retriever: {_named(self.retriever)} is not a Retriever")

    @classmethod
    def of(cls, live: LivePorts | Mapping[str, Any] | None) -> LivePorts:
        """``live`` as ``LivePorts``: its mapping form read (keys ``LIVE_KEYS``), ``None`` as none.

        ``catalog`` stands for ``modes`` and ``agents`` both, and goes with neither;
        an unknown key is a ``ValueError`` naming it.
        """
        if live is None:
            return cls()
        if isinstance(live, LivePorts):
            return live
        if not isinstance(live, Mapping):
            raise TypeError(f"live: LivePorts or a mapping of {', '.join(LIVE_KEYS)}")
        for key in live:
            if key in _RECORDED_ONLY:
                raise ValueError(
                    f"live[{key!r}]: the store, clock and ids always answer from the recording "
                    "(they are the turn's state and its determinism)"
                )
            if key not in LIVE_KEYS:
                raise ValueError(
                    f"live[{key!r}]: not a port a replay runs live ({', '.join(LIVE_KEYS)})"
                )
        catalog = live.get("catalog")
        if catalog is not None and ("modes" in live or "agents" in live):
            raise ValueError("live['catalog'] stands for modes and agents: give it, or them")
        return cls(
            llm=live.get("llm"),
            tools=live.get("tools") or {},
            modes=live.get("modes", catalog),
            agents=live.get("agents", catalog),
            retriever=live.get("retriever"),
            hooks=live.get("hooks"),
            rules=tuple(live.get("rules") or ()),
        )

    @property
    def any(self) -> bool:
        """Whether any port runs live."""
        return bool(self.tools) or any(
            port is not None for port in (self.llm, self.modes, self.agents, self.retriever)
        )

    @property
    def names(self) -> list[str]:
        """What runs live, for a message: ``llm``, ``tools['Add']``, ``modes``, ``agents``,
        ``retriever``."""
        named = ["llm"] if self.llm is not None else []
        named.extend(f"tools[{name!r}]" for name in self.tools)
        named.extend(
            name for name in ("modes", "agents", "retriever") if getattr(self, name) is not None
        )
        return named


def _named(value: object) -> str:
    return f"a {type(value).__qualname__}"
