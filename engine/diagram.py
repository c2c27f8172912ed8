"""The pipeline diagram, drawn from the machine definition itself (DESIGN.md "Who uses it" 2).

``TurnMachine`` (engine/machine.py) is read, never instantiated: its states come
from python-statemachine's own diagram extractor (``extract``), its transitions
from the class's transitions, in definition order. Each step edge is labelled
with the step's exact event id, its path condition and its guard / exit hook as
the AGN-036 section, e.g. ``session_restorer [is_resumed] PRE §4.2 / POST §4.2``
(``PRE`` is the transition's validator, ``/ POST`` its ``after`` hook, as in a
UML ``event [guard] / action`` label); a step whose set is empty (§4.1 PRE, §4.8
POST: N/A) shows none. ``server_tool_round`` shows its DESIGN.md R5 round limit,
``complete`` that it commits the turn.

A host's own guard rules (``HostRules``, ``Pipeline.rules``) are drawn with
``rules=``: each joins its step's guard in the label after the section
(``llm_client PRE §4.9 + host/no-weekend / POST §4.9``) and in the tooltip's
``PRE:`` line, after the DDR ids. Without them the picture is the engine's alone.
The budget check that guards each model call (``within_budget``, issue 31) joins
``llm_client``'s guard last: ``+ budget`` in the label, ``DESIGN/budget/within`` and
``DESIGN/budget/unpriced`` in the tooltip.

Four formats (``DiagramFormat``):

- ``mermaid``: ``stateDiagram-v2`` text from python-statemachine's
  ``MermaidRenderer``, for the README and GitHub.
- ``dot``: Graphviz DOT from our own small renderer (python-statemachine's needs
  pydot and puts ``id()`` values into node names, so its output differs from
  process to process); every step edge carries its full rule ids in ``tooltip``.
- ``svg`` / ``png``: the DOT rendered by Graphviz's ``dot`` program; without it
  ``GraphvizMissingError``. The text formats need nothing.

Every output is a function of the machine definition (and the path) alone: the
same bytes on every run and in every process.

With ``path`` (a ``StateTrace``) the same picture shows the run: the states it
visited and the transitions it took highlighted, each taken edge numbered in the
order it was taken (``#4,#6`` for the server-tool-round loop), and in red the
step that faulted, the ``fault`` transition and ``faulted``; the caption names
the step and the rule that failed the turn. ``aptix replay FILE
--diagram OUT`` draws a recorded turn this way.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from statemachine.contrib.diagram.extract import extract
from statemachine.contrib.diagram.graphviz import (
    GraphvizError,
    GraphvizNotFoundError,
    run_graphviz,
)
from statemachine.contrib.diagram.model import (
    DiagramGraph,
    DiagramState,
    DiagramTransition,
    StateType,
)
from statemachine.contrib.diagram.renderers.mermaid import MermaidRenderer, MermaidRendererConfig

from aptix_pipeline.contracts import AptixPipelineError, PipelineStep
from aptix_pipeline.validators import (
    BUDGET_UNPRICED,
    BUDGET_WITHIN,
    ROUND_LIMIT,
    HostRule,
    HostRules,
    Phase,
    step_rule_ids,
)

from .machine import COMPLETE, FAULT, SERVER_TOOL_ROUND, TurnMachine, within_budget
from .trace import StateTrace

__all__ = [
    "DiagramError",
    "DiagramFormat",
    "GraphvizMissingError",
    "diagram_text",
    "format_for",
    "pipeline_diagram",
]


class DiagramFormat(StrEnum):
    """The formats the pipeline diagram is drawn in."""

    MERMAID = "mermaid"
    DOT = "dot"
    SVG = "svg"
    PNG = "png"


_SUFFIXES: Mapping[str, DiagramFormat] = {
    ".mmd": DiagramFormat.MERMAID,
    ".mermaid": DiagramFormat.MERMAID,
    ".md": DiagramFormat.MERMAID,
    ".dot": DiagramFormat.DOT,
    ".gv": DiagramFormat.DOT,
    ".svg": DiagramFormat.SVG,
    ".png": DiagramFormat.PNG,
}


def format_for(path: Path) -> DiagramFormat:
    """The format a file name asks for, by its suffix (case-insensitive).

    Raises ``ValueError`` naming the suffix and the accepted ones when it is none of them.
    """
    suffix = path.suffix.lower()
    try:
        return _SUFFIXES[suffix]
    except KeyError:
        accepted = ", ".join(_SUFFIXES)
        shown = repr(path.suffix) if path.suffix else "no suffix"
        raise ValueError(
            f"cannot tell the diagram format of {str(path)!r} from {shown}; "
            f"accepted suffixes: {accepted}"
        ) from None


class DiagramError(AptixPipelineError):
    """The diagram could not be drawn (Graphviz failed; its message says why)."""


class GraphvizMissingError(DiagramError):
    """svg/png need Graphviz's ``dot`` program and it is not on ``PATH``."""


_MISSING_DOT = (
    "svg and png diagrams need Graphviz's 'dot' program, which is not on PATH: install "
    "Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz). "
    "The mermaid and dot formats need nothing."
)


# --- the machine's transitions, labelled -------------------------------------------------

_STEP_SECTIONS: Mapping[str, str] = {
    step.value: f"§4.{number}" for number, step in enumerate(PipelineStep, start=1)
}
"""AGN-036 §4.1 to §4.10: ``PipelineStep`` lists the steps in section order."""

_BUDGET_GUARD = within_budget.__name__
"""The guard of ``llm_client`` that reserves the model call against the budgets."""
_BUDGET_IDS = (BUDGET_WITHIN.id, BUDGET_UNPRICED.id)

_EdgeKey = tuple[str, str, str]
"""(source, event, target): one transition of the machine."""

_HostIds = tuple[tuple[str, tuple[str, ...]], ...]
"""(step, its host rule ids) for each step with host rules: hashable, for the cache."""


def _host_ids(rules: HostRules | Iterable[HostRule]) -> _HostIds:
    hosted = rules if isinstance(rules, HostRules) else HostRules(rules)
    return tuple((step.value, hosted.ids(step)) for step in PipelineStep if hosted.ids(step))


@dataclass(frozen=True, slots=True)
class _Edge:
    source: str
    event: str
    target: str
    cond: str | None
    pre: str | None  # what the guard checks, short: "§4.2", "R5"
    post: str | None  # what the exit hook does, short: "POST §4.2", "commit"
    tooltip: str

    @property
    def key(self) -> _EdgeKey:
        return (self.source, self.event, self.target)

    @property
    def label(self) -> str:
        parts = [self.event]
        if self.cond:
            parts.append(f"[{self.cond}]")
        if self.pre:
            parts.append(f"PRE {self.pre}")
        if self.post:
            parts.append(f"/ {self.post}")
        return " ".join(parts)


def _names(callbacks: Iterable[object]) -> list[str]:
    return [str(callback) for callback in callbacks]


def _edge(
    source: str, target: str, event: str, transition: object, host: Mapping[str, tuple[str, ...]]
) -> _Edge:
    cond = _names(getattr(transition, "cond", ()))
    validators = _names(getattr(transition, "validators", ()))
    afters = _names(getattr(transition, "after", ()))
    condition = ", ".join(cond) or None
    if event in _STEP_SECTIONS:
        step, section = PipelineStep(event), _STEP_SECTIONS[event]
        # The PRE and POST callbacks are named for their step (engine/machine.py);
        # §4.9's exit hook is post_llm_client_once_settled.
        pre_ids = step_rule_ids(step, Phase.PRE) if f"pre_{event}" in validators else ()
        posts = [name for name in afters if name.startswith(f"post_{event}")]
        post_ids = step_rule_ids(step, Phase.POST) if posts else ()
        host_ids = host.get(event, ()) if f"pre_{event}" in validators else ()
        # The model call's budget check guards it beside its PRE set (D597).
        budget_ids = _BUDGET_IDS if _BUDGET_GUARD in validators else ()
        guard_ids = (*pre_ids, *host_ids, *budget_ids)
        lines = [f"{event}: AGN-036 {section}"]
        lines += [f"PRE: {', '.join(guard_ids)}"] if guard_ids else ["PRE: N/A"]
        lines += [f"POST: {', '.join(post_ids)}"] if post_ids else ["POST: N/A"]
        budget = ["budget"] if budget_ids else []
        pre = " + ".join([*([section] if pre_ids else []), *host_ids, *budget]) or None
        return _Edge(
            source,
            event,
            target,
            condition,
            pre,
            f"POST {section}" if post_ids else None,
            "\n".join(lines),
        )
    if event == SERVER_TOOL_ROUND:
        pre = "R5" if validators else None
        tooltip = f"{event}: another model call (DESIGN.md R5)\nPRE: {ROUND_LIMIT.id}"
        return _Edge(source, event, target, condition, pre, None, tooltip)
    if event == COMPLETE:
        tooltip = f"{event}: commits the turn to the session store; done means persisted"
        return _Edge(source, event, target, condition, None, "commit", tooltip)
    tooltip = f"{event}: a failed rule, a failing port or a raising step ends the turn"
    return _Edge(source, event, target, condition, None, None, tooltip)


@functools.cache
def _edges(host: _HostIds = ()) -> tuple[_Edge, ...]:
    """Every transition of ``TurnMachine``, in definition order (state by state), with
    ``host`` rule ids in their steps' guards."""
    hosted = dict(host)
    edges: list[_Edge] = []
    for state in TurnMachine.states:
        for transition in state.transitions:
            for event in transition.events:
                for target in transition.targets:
                    edges.append(_edge(state.id, target.id, str(event), transition, hosted))
    return tuple(edges)


def _states() -> list[DiagramState]:
    """The machine's states as python-statemachine's diagram IR, named by their ids.

    The ids (``session_restored``) are what traces and the code say, so the picture
    shows them rather than the humanized names (``Session restored``).
    """
    states = extract(TurnMachine).states
    for state in states:
        state.name = state.id
    return states


# --- a run's path ------------------------------------------------------------------------


@dataclass(slots=True)
class _Path:
    visited: list[str] = field(default_factory=list)  # machine order
    order: dict[_EdgeKey, list[int]] = field(default_factory=dict)
    faulting: _EdgeKey | None = None  # the step that faulted
    fault: _EdgeKey | None = None  # the fault transition taken
    faulted: bool = False
    caption: str = ""

    def numbers(self, key: _EdgeKey) -> str:
        return ",".join(f"#{number}" for number in self.order.get(key, ()))


def _path(trace: StateTrace) -> _Path:
    edges = {edge.key: edge for edge in _edges()}
    state_ids = [state.id for state in TurnMachine.states]
    for state in trace.states:
        if state not in state_ids:
            raise ValueError(
                f"state {state!r} of the path is not a state of TurnMachine "
                f"(a trace from another engine version?); its states: {', '.join(state_ids)}"
            )
    path = _Path()
    seen = set(trace.states)
    fault_source: str | None = None
    for number, record in enumerate(trace.transitions, start=1):
        key = (record.source, record.event, record.target)
        if key not in edges:
            raise ValueError(
                f"transition {record.event!r} from {record.source!r} to {record.target!r} "
                "of the path is not a transition of TurnMachine "
                "(a trace from another engine version?)"
            )
        path.order.setdefault(key, []).append(number)
        seen.update((record.source, record.target))
        if record.event == FAULT:
            path.fault, fault_source = key, record.source
    path.visited = [state for state in state_ids if state in seen]
    path.faulted = "faulted" in seen or trace.outcome == "faulted"
    if fault_source is None and path.faulted:
        before = [state for state in trace.states if state != "faulted"]
        fault_source = before[-1] if before else None
    step = trace.faulted_step
    if step is not None and fault_source is not None:
        taken = [t for t in trace.transitions if t.event != FAULT]
        last = taken[-1] if taken else None
        if last is not None and last.event == step and last.target == fault_source:
            path.faulting = (last.source, last.event, last.target)  # its exit hook failed
        else:  # its guard failed or it raised: the step was not taken
            leaving = [e.key for e in _edges() if e.source == fault_source and e.event == step]
            if not leaving:
                raise ValueError(
                    f"faulted step {step!r} of the path has no transition leaving "
                    f"{fault_source!r} in TurnMachine (a trace from another engine version?)"
                )
            path.faulting = leaving[0]
    steps = len(trace.transitions)
    ended = f"faulted at {step}" if step else trace.outcome
    failed = trace.failed_rules
    if failed:
        ended = f"{ended} (rule {', '.join(failed)})"
    path.caption = f"{trace.context_type or 'unknown'} turn, {steps} transitions, {ended}"
    return path


# --- Mermaid -------------------------------------------------------------------------------

_MERMAID_VISITED = "fill:#ddf4ff,stroke:#0969da,stroke-width:2px"
_MERMAID_FAULTED = "fill:#ffebe9,stroke:#cf222e,stroke-width:2px,color:#82071e"
_FAULT_MARK = "✗"


def _mermaid(path: _Path | None, host: _HostIds = ()) -> str:
    transitions = []
    for edge in _edges(host):
        label = edge.label
        if path is not None:
            if edge.key == path.faulting:
                label = f"{_FAULT_MARK} {label}"
            if numbers := path.numbers(edge.key):
                label = f"{numbers} {label}"
        transitions.append(DiagramTransition(edge.source, [edge.target], event=label))
    graph = DiagramGraph(name=TurnMachine.__name__, states=_states(), transitions=transitions)
    text = MermaidRenderer(MermaidRendererConfig(direction="TB")).render(graph)
    if path is None:
        return text
    lines = [f"    %% path: {path.caption}", f"    classDef visited {_MERMAID_VISITED}"]
    lines.append(f"    classDef fault {_MERMAID_FAULTED}")
    visited = [state for state in path.visited if state != "faulted"]
    if visited:
        lines.append(f"    class {','.join(visited)} visited")
    if path.faulted:
        lines.append("    class faulted fault")
    return text + "\n".join(lines) + "\n"


# --- DOT -----------------------------------------------------------------------------------

_FONT = "Helvetica"
_INK, _MUTED, _BLUE, _RED = "#24292f", "#8c959f", "#0969da", "#cf222e"


def _q(value: str) -> str:
    """A DOT double-quoted string (``\\n`` stays Graphviz's line break)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _attrs(attributes: Mapping[str, str]) -> str:
    return ", ".join(f"{name}={_q(value)}" for name, value in attributes.items())


def _dot(path: _Path | None, host: _HostIds = ()) -> str:
    title = "TurnMachine: one agent turn (AGN-036 §4)"
    if path is not None:
        title = f"{title}\npath: {path.caption}"
    graph = {
        "label": title,
        "labelloc": "t",
        "fontname": _FONT,
        "fontsize": "14",
        "rankdir": "TB",
        "nodesep": "0.5",
        "ranksep": "0.5",
    }
    node = {
        "shape": "box",
        "style": "rounded,filled",
        "fillcolor": "#ffffff",
        "color": _INK,
        "fontname": _FONT,
        "fontsize": "11",
    }
    edge_style = {"fontname": _FONT, "fontsize": "9", "color": _INK, "fontcolor": _INK}
    start = {"shape": "point", "width": "0.15", "label": "", "fillcolor": _INK}
    lines = [
        f"digraph {TurnMachine.__name__} {{",
        f"    graph [{_attrs(graph)}];",
        f"    node [{_attrs(node)}];",
        f"    edge [{_attrs(edge_style)}];",
        f"    __start__ [{_attrs(start)}];",
    ]
    initial = ""
    for state in _states():
        attributes = {"label": state.id, "tooltip": state.id}
        if state.type is StateType.FINAL:
            attributes["peripheries"] = "2"
        if state.is_initial:
            initial = state.id
        if path is not None:
            if state.id == "faulted" and path.faulted:
                attributes |= {
                    "fillcolor": "#ffebe9",
                    "color": _RED,
                    "fontcolor": _RED,
                    "penwidth": "2.5",
                }
            elif state.id in path.visited:
                attributes |= {"fillcolor": "#ddf4ff", "color": _BLUE, "penwidth": "2.5"}
            else:
                attributes |= {"color": _MUTED, "fontcolor": _MUTED}
        lines.append(f"    {state.id} [{_attrs(attributes)}];")
    lines.append(f"    __start__ -> {initial};")
    for edge in _edges(host):
        attributes = {"label": edge.label, "tooltip": edge.tooltip}
        if edge.event == FAULT:
            attributes |= {"style": "dashed", "color": _MUTED, "fontcolor": _MUTED}
        if path is not None:
            numbers = path.numbers(edge.key)
            if edge.key == path.faulting or edge.key == path.fault:
                mark = f"{_FAULT_MARK} " if edge.key == path.faulting else ""
                attributes |= {"color": _RED, "fontcolor": _RED, "penwidth": "2.5"}
                attributes["label"] = f"{numbers} {mark}{edge.label}".strip()
            elif numbers:
                attributes |= {"color": _BLUE, "fontcolor": _BLUE, "penwidth": "2.5"}
                attributes["label"] = f"{numbers} {edge.label}"
            else:
                attributes |= {"color": _MUTED, "fontcolor": _MUTED}
        lines.append(f"    {edge.source} -> {edge.target} [{_attrs(attributes)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- the public functions --------------------------------------------------------------------


def diagram_text(
    fmt: DiagramFormat | str = DiagramFormat.MERMAID,
    *,
    path: StateTrace | None = None,
    rules: HostRules | Iterable[HostRule] = (),
) -> str:
    """The pipeline diagram as Mermaid or DOT text; with ``path``, that run drawn on it.

    ``rules`` are a host's guard rules (``Pipeline.rules``): each shows in its step's
    guard, after the AGN-036 section (see the module docstring).

    Mermaid: visited states get the ``visited`` class, ``faulted`` the ``fault``
    class, and each taken edge's label starts with its order numbers (``#1``,
    ``#4,#6``); the step that faulted is marked ``✗``. Mermaid's stateDiagram cannot
    style a single edge (``linkStyle`` is flowchart-only), so edges are not coloured
    there. DOT colours taken edges blue and the faulting step, the ``fault`` edge and
    ``faulted`` red. A path naming a state or transition the machine does not have
    (a trace from another engine version) raises ``ValueError`` naming it.
    """
    kind = DiagramFormat(fmt)
    marks = _path(path) if path is not None else None
    host = _host_ids(rules)
    if kind is DiagramFormat.MERMAID:
        return _mermaid(marks, host)
    if kind is DiagramFormat.DOT:
        return _dot(marks, host)
    raise ValueError(f"{kind.value} is not a text format; use pipeline_diagram()")


def pipeline_diagram(
    fmt: DiagramFormat | str,
    *,
    path: StateTrace | None = None,
    rules: HostRules | Iterable[HostRule] = (),
) -> bytes:
    """The pipeline diagram in ``fmt`` as bytes (text formats UTF-8); see ``diagram_text``.

    svg/png run Graphviz's ``dot`` on the DOT text: ``GraphvizMissingError`` when it
    is not on ``PATH``, ``DiagramError`` with its stderr when it fails.
    """
    kind = DiagramFormat(fmt)
    if kind in (DiagramFormat.MERMAID, DiagramFormat.DOT):
        return diagram_text(kind, path=path, rules=rules).encode("utf-8")
    source = diagram_text(DiagramFormat.DOT, path=path, rules=rules)
    try:
        return run_graphviz(source, kind.value)
    except GraphvizNotFoundError:
        raise GraphvizMissingError(_MISSING_DOT) from None
    except GraphvizError as error:
        raise DiagramError(f"Graphviz could not draw the {kind.value} diagram: {error}") from None
