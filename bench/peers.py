"""The plain loop's nodes as graphs of two peer libraries: Apache Burr and LangGraph.

Each node does exactly what one iteration of the plain loop does (``turns.run_step``:
PRE rules, the step function, POST rules), and a last node commits the turn
(``complete_turn``). The graph is built once; each turn gets a fresh run of it:

- **Burr** — one async ``@action`` per step (bound to its step) in a ``Graph``
  built once by ``GraphBuilder``; each turn builds an ``Application`` from it
  with the turn's ``TurnScope`` as its only state value and runs ``arun`` until
  ``complete``. No tracker, no persister, no hooks. Actions read ``scope`` and write
  nothing: Burr deep-copies the previous value of a key it writes, so the scope
  (which the steps change in place) is never written back.
- **LangGraph** — a ``StateGraph`` over a ``TypedDict`` holding the scope, with one
  async node per step, compiled once without a checkpointer, run by ``ainvoke``.

Both route like the engine: after ``request_handler`` and ``session_restorer`` by
the context type (conditional edges derived from ``builders.PATHS``), and after
``llm_client`` back to itself while the engine answered the model's tool calls
(``scope.another_round``, DESIGN.md R5; never taken by these fixed-reply turns).

The libraries come with the ``bench`` extra (``pip install -e '.[bench]'``). They are
imported through ``importlib`` so this module type-checks, and ``make bench`` runs,
without them: ``peer_runners`` then returns only what is installed and
``MISSING`` says what was skipped.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import Any, TypedDict

from builders import PATHS
from turns import run_step

from aptix_pipeline import PipelineOptions, Ports
from aptix_pipeline.contracts import Caller, ContextType, PipelineStep
from aptix_pipeline.steps import TurnScope, complete_turn

__all__ = ["MISSING", "PEERS", "peer_runners", "peer_versions"]

Runner = Callable[[dict[str, Any]], Awaitable[None]]

PEERS = {"burr": "apache-burr", "langgraph": "langgraph"}
"""Variant name → distribution, for the tables and ``peer_versions``."""

MISSING: dict[str, str] = {}
"""Variant name → why it was skipped (filled by ``peer_runners``)."""

ENTRY = PipelineStep.REQUEST_HANDLER.value
LLM_CLIENT = PipelineStep.LLM_CLIENT.value
RESPONSE_BUILDER = PipelineStep.RESPONSE_BUILDER.value
COMPLETE = "complete"


def _routes() -> dict[str, dict[ContextType, str]]:
    """Node → (context type → next node), from the three paths."""
    routes: dict[str, dict[ContextType, str]] = {}
    for kind, path in PATHS.items():
        names = [step.value for step in path] + [COMPLETE]
        for node, following in itertools.pairwise(names):
            routes.setdefault(node, {})[kind] = following
    return routes


def peer_versions() -> dict[str, str]:
    """Installed version of each peer library ('' when absent)."""
    versions = {}
    for name, distribution in PEERS.items():
        try:
            versions[name] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            versions[name] = ""
    return versions


# --- Apache Burr ------------------------------------------------------------------------


def _burr_runner(ports: Ports, options: PipelineOptions, caller: Caller) -> Runner:
    core: Any = importlib.import_module("burr.core")
    graph_module: Any = importlib.import_module("burr.core.graph")

    async def step_node(state: Any, step: PipelineStep) -> Any:
        await run_step(state["scope"], step)
        return state

    async def commit_node(state: Any) -> Any:
        await complete_turn(state["scope"])
        return state

    # @action(reads=["scope"], writes=[]), applied by hand: the decorator is untyped.
    step_action = core.action(reads=["scope"], writes=[])(step_node)
    commit_action = core.action(reads=["scope"], writes=[])(commit_node)

    def of_kind(kind: ContextType) -> Any:
        return core.Condition(
            ["scope"], lambda state: state["scope"].ctx.type is kind, name=f"is_{kind.value}"
        )

    another_round = core.Condition(
        ["scope"], lambda state: state["scope"].another_round, name="another_round"
    )
    transitions: list[tuple[Any, ...]] = []
    for node, by_kind in _routes().items():
        if node == LLM_CLIENT:
            transitions.append((LLM_CLIENT, LLM_CLIENT, another_round))
        if len(set(by_kind.values())) == 1:
            transitions.append((node, next(iter(by_kind.values()))))
        else:
            transitions.extend(
                (node, following, of_kind(kind)) for kind, following in by_kind.items()
            )
    actions = {step.value: step_action.bind(step=step) for step in PipelineStep}
    graph = (
        graph_module.GraphBuilder()
        .with_actions(**actions, **{COMPLETE: commit_action})
        .with_transitions(*transitions)
        .build()
    )

    async def run(request: dict[str, Any]) -> None:
        scope = TurnScope(ports, options, caller, request)
        application = (
            core.ApplicationBuilder()
            .with_graph(graph)
            .with_entrypoint(ENTRY)
            .with_state(scope=scope)
            .build()
        )
        last, _, _ = await application.arun(halt_after=[COMPLETE])
        assert last.name == COMPLETE
        assert scope.ctx.response is not None

    return run


# --- LangGraph --------------------------------------------------------------------------


class _GraphState(TypedDict):
    scope: TurnScope


def _langgraph_runner(ports: Ports, options: PipelineOptions, caller: Caller) -> Runner:
    graph_module: Any = importlib.import_module("langgraph.graph")

    def step_node(step: PipelineStep) -> Callable[[_GraphState], Awaitable[dict[str, Any]]]:
        async def node(state: _GraphState) -> dict[str, Any]:
            await run_step(state["scope"], step)
            return {}

        node.__name__ = step.value
        return node

    async def commit_node(state: _GraphState) -> dict[str, Any]:
        await complete_turn(state["scope"])
        return {}

    def by_type(state: _GraphState) -> ContextType:
        return state["scope"].ctx.type

    def after_llm(state: _GraphState) -> str:
        return LLM_CLIENT if state["scope"].another_round else RESPONSE_BUILDER

    builder = graph_module.StateGraph(_GraphState)
    for step in PipelineStep:
        builder.add_node(step.value, step_node(step))
    builder.add_node(COMPLETE, commit_node)
    builder.add_edge(graph_module.START, ENTRY)
    for node, by_kind in _routes().items():
        targets = set(by_kind.values())
        if node == LLM_CLIENT:
            (following,) = targets
            builder.add_conditional_edges(LLM_CLIENT, after_llm, [LLM_CLIENT, following])
        elif len(targets) == 1:
            builder.add_edge(node, targets.pop())
        else:
            builder.add_conditional_edges(node, by_type, dict(by_kind))
    builder.add_edge(COMPLETE, graph_module.END)
    graph = builder.compile()

    async def run(request: dict[str, Any]) -> None:
        scope = TurnScope(ports, options, caller, request)
        final = await graph.ainvoke({"scope": scope})
        assert final["scope"] is scope
        assert scope.ctx.response is not None

    return run


_BUILDERS = {"burr": _burr_runner, "langgraph": _langgraph_runner}


def peer_runners(ports: Ports, options: PipelineOptions, caller: Caller) -> dict[str, Runner]:
    """One turn runner per installed peer, on these ports; the others go to ``MISSING``."""
    runners = {}
    for name, build in _BUILDERS.items():
        try:
            runners[name] = build(ports, options, caller)
        except ImportError as error:
            MISSING[name] = f"{PEERS[name]} not installed ({error}); pip install -e '.[bench]'"
    return runners
