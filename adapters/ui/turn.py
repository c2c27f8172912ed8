"""One recorded turn as the turn browser page shows it (docs/UI.md "The turn page").

- **The path picture**: the pipeline diagram with the turn's path drawn on it
  (``engine/diagram.py``, the picture ``aptix replay --diagram`` draws): visited
  states and taken edges in blue, numbered in order, the faulting step, the
  ``fault`` edge and ``faulted`` in red, the caption naming the step and the rule
  that failed. It is Graphviz's SVG; where Graphviz's ``dot`` is not installed the
  page draws the path itself (``path_strip``): the states the turn entered, in
  order, joined by the steps taken, the faulting one in red with its rule.
- **The timeline**: the ``StateTrace`` entries in order (engine/trace.py): each
  transition, each guard and exit hook with its rule ids (the failed ones named),
  each model call with its tokens, each tool call and its fate, each mode change,
  warning and the fault. A trace holds no wall-clock time (it is deterministic);
  the times shown are the clock readings the turn itself made, at the step that
  made them, a server tool's ``ExecutionMs`` from the result, and how long each
  model call took, from the recording's timed port calls (``PortCall.elapsed_ms``).
- **Request and response** exactly as recorded: a redacted recording shows its
  redaction marks, and the model's text appears in the timeline only where the
  recording captured content (``trace_content``).
- **Replay**: ``replay_outcome`` shows what ``engine/replay`` answered: ok, or the
  first divergence, and how the replayed turn ended.
- **A kept trace** (``kept_trace_view``): every turn's trace the store keeps, failed
  turns included (``TraceLog``): the same picture and timeline without the port
  calls, the fault with the error the caller got, and beside each step what it
  changed in the turn's context (``engine/state_diff.py``): mode, tools, messages
  added (their text only under content capture) and the response kind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from aptix_pipeline.contracts import KeptTrace
from aptix_pipeline.engine import (
    CheckRecord,
    DiagramError,
    DiagramFormat,
    FaultRecord,
    LLMCallRecord,
    StateTrace,
    StepChange,
    TransitionRecord,
    changes_from_json,
    pipeline_diagram,
)
from aptix_pipeline.engine.replay import ReplayOutcome, TurnRecording
from aptix_pipeline.steps import ModeChange, ToolCallRecord

from .durable_view import durable_facts
from .html import Markup, html, join

__all__ = [
    "fault_banner",
    "kept_trace_view",
    "path_picture",
    "path_strip",
    "replay_outcome",
    "request_and_response",
    "step_change",
    "timeline",
]

_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)
_NODE = re.compile(r'(<g id="[^"]*" class="node">\s*<title>([^<]*)</title>\s*<g id="[^"]*">)<a\b')
"""A node of ``engine/diagram.py``'s SVG: Graphviz draws each inside a link of its own
(``xlink:title``, the state's tooltip), which becomes the link to the timeline."""
_ZOOM_TOOLS = (
    '<div class="picture-tools" role="toolbar" aria-label="zoom the picture">'
    '<button type="button" data-zoom="out" title="zoom out">&minus;</button>'
    '<button type="button" data-zoom="actual" title="actual size">100%</button>'
    '<button type="button" data-zoom="fit" title="fit the width">fit</button>'
    '<button type="button" data-zoom="in" title="zoom in">+</button>'
    '<span class="muted"> drag to pan; a state of the path opens its step in the timeline'
    "</span></div>"
)


def _step_of_state(trace: StateTrace) -> dict[str, int]:
    """Each state of the path and the step (numbered from 1, as the timeline's ``#step-N``)
    of its timeline entry: the first step that entered it; the first state's, the step
    that left it."""
    found: dict[str, int] = {}
    for number, step in enumerate(trace.transitions, start=1):
        found.setdefault(step.source, number)
        found.setdefault(step.target, number)
    return found


def _linked_nodes(svg: str, trace: StateTrace) -> str:
    """Graphviz's SVG with each state of the path a link to its step in the timeline."""
    steps = _step_of_state(trace)

    def link(match: re.Match[str]) -> str:
        number = steps.get(match.group(2))
        if number is None:
            return match.group(0)
        return (
            f'{match.group(1)}<a href="#step-{number}" class="path-state" '
            f'data-state="{match.group(2)}"'
        )

    return _NODE.sub(link, svg)


def path_picture(trace: StateTrace) -> Markup:
    """The pipeline diagram with this turn's path (Graphviz SVG), else ``path_strip``."""
    try:
        svg = pipeline_diagram(DiagramFormat.SVG, path=trace).decode("utf-8")
    except (DiagramError, ValueError):  # no Graphviz, or a trace of another engine version
        return path_strip(trace)
    return html(
        '{tools}<div class="picture" data-picture="graphviz">{svg}</div>',
        tools=Markup(_ZOOM_TOOLS),
        svg=Markup(_linked_nodes(_PROLOG.sub("", svg, count=1), trace)),
    )


def path_strip(trace: StateTrace) -> Markup:
    """The turn's path drawn without Graphviz: its states in order, joined by the steps taken."""
    rules = trace.failed_rules
    box_w, box_h, gap, x = 300, 30, 34, 20
    steps = list(trace.transitions)
    states = [steps[0].source, *(t.target for t in steps)] if steps else list(trace.states)
    numbers = _step_of_state(trace)
    height = 60 + len(states) * (box_h + gap)
    parts = [
        html(
            '<text x="{x}" y="20" class="caption">{caption}</text>',
            x=x,
            caption=_caption(trace, rules),
        )
    ]
    for index, state in enumerate(states):
        top = 40 + index * (box_h + gap)
        red = state == "faulted"
        parts.append(
            html(
                '<a href="#step-{number}" class="path-state" data-state="{state}">'
                '<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" '
                'fill="{fill}" stroke="{stroke}" stroke-width="2"/>'
                '<text x="{tx}" y="{ty}" text-anchor="middle" fill="{stroke}">{state}</text></a>',
                number=numbers.get(state, 1),
                x=x,
                y=top,
                w=box_w,
                h=box_h,
                fill="#ffebe9" if red else "#ddf4ff",
                stroke="#cf222e" if red else "#0969da",
                tx=x + box_w // 2,
                ty=top + 20,
                state=state,
            )
        )
        if index < len(steps):
            step = steps[index]
            faulting = step.event in ("fault", trace.faulted_step)
            label = f"#{index + 1} {step.event}"
            if step.event == trace.faulted_step:
                label = f"#{index + 1} ✗ {step.event}"
            parts.append(
                html(
                    '<line x1="{cx}" y1="{y1}" x2="{cx}" y2="{y2}" stroke="{color}" '
                    'stroke-width="2"/><text x="{lx}" y="{ly}" fill="{color}">{label}</text>',
                    cx=x + box_w // 2,
                    y1=top + box_h,
                    y2=top + box_h + gap,
                    color="#cf222e" if faulting else "#0969da",
                    lx=x + box_w // 2 + 8,
                    ly=top + box_h + gap // 2 + 4,
                    label=label,
                )
            )
    return html(
        '{tools}<div class="picture" data-picture="strip"><svg xmlns="http://www.w3.org/2000/svg" '
        'width="{w}" height="{h}" font-family="Helvetica, sans-serif" font-size="12">'
        "<title>the path of the turn (Graphviz is not installed: the states it entered)"
        "</title>{parts}</svg></div>",
        tools=Markup(_ZOOM_TOOLS),
        w=box_w + 2 * x + 260,
        h=height,
        parts=join(parts),
    )


def _caption(trace: StateTrace, rules: Sequence[str]) -> str:
    ended = f"faulted at {trace.faulted_step}" if trace.faulted_step else trace.outcome
    if rules:
        ended = f"{ended} (rule {', '.join(rules)})"
    kind = trace.context_type or "unknown"
    return f"path: {kind} turn, {len(trace.transitions)} transitions, {ended}"


def fault_banner(recording: TurnRecording) -> Markup:
    """For a failed turn: where it faulted, by which rules, and the errors it answered."""
    trace = recording.trace
    if recording.successful:
        return Markup("")
    errors = recording.result.get("Errors") or []
    items = join(
        html(
            "<li><code>{code}</code> {rule}: {message}</li>",
            code=error.get("Code"),
            rule=html("<code>{r}</code>", r=error.get("RuleId")) if error.get("RuleId") else "",
            message=error.get("Message"),
        )
        for error in errors
        if isinstance(error, Mapping)
    )
    return _fault_banner(trace.faulted_step or trace.outcome, trace.failed_rules, items)


def _fault_banner(step: str, rules: Sequence[str], items: Markup) -> Markup:
    """The banner over a faulted turn: the step, the rules that failed it (a port's
    failure names none) and its errors."""
    return html(
        '<div class="fault-banner" data-fault-step="{step}">✗ the turn faulted at '
        "<strong>{step}</strong>{rules}<ul>{items}</ul></div>",
        step=step,
        rules=html(", rule <strong>{r}</strong>", r=", ".join(rules)) if rules else "",
        items=items,
    )


def _clock_by_step(recording: TurnRecording) -> dict[str, list[str]]:
    times: dict[str, list[str]] = {}
    for call in recording.calls:
        if call.port == "Clock" and call.step is not None:
            times.setdefault(call.step, []).append(str(call.answer))
    return times


def _execution_ms(recording: TurnRecording) -> dict[str, Any]:
    result = recording.result.get("Result")
    found: dict[str, Any] = {}
    if isinstance(result, Mapping):
        for tool_result in result.get("ToolResults") or []:
            if isinstance(tool_result, Mapping):
                found[str(tool_result.get("ToolCallId"))] = tool_result.get("ExecutionMs")
    return found


def _model_call_ms(recording: TurnRecording) -> dict[int, float]:
    """How long each model call of the trace took (by its index among the trace's
    entries): its attempts' recorded ``elapsed_ms``, added up; a call whose attempts
    were not all timed (a recording made with ``timer=None``) is left out."""
    timed = iter([call.elapsed_ms for call in recording.calls if call.port == "LLM"])
    found: dict[int, float] = {}
    for index, entry in enumerate(recording.trace.entries):
        if isinstance(entry, LLMCallRecord):
            attempts = [next(timed, None) for _ in range(max(entry.attempts, 1))]
            if all(ms is not None for ms in attempts):
                found[index] = sum(ms for ms in attempts if ms is not None)
    return found


def _duration(ms: float) -> str:
    """A duration for a person: µs below a millisecond, one decimal below 100 ms."""
    if ms < 1:
        return f"{ms * 1000:.0f} µs"
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def _rules(ids: Sequence[str], failed: Sequence[str]) -> Markup:
    listed = join(
        html(
            '<li class="{cls}"><code>{rule}</code></li>',
            cls="failed" if r in failed else "",
            rule=r,
        )
        for r in ids
    )
    return html(
        "<details><summary>{n} rule ids</summary><ul class='rules'>{listed}</ul></details>",
        n=len(ids),
        listed=listed,
    )


def _bar(ms: float | None, longest: float, kind: str) -> Markup | str:
    """A bar as long, against the turn's longest timed call, as ``ms``."""
    if ms is None or longest <= 0:
        return ""
    return html(
        "<span class='bar-track'><span class='bar {kind}' data-ms='{ms}' "
        "style='width: {pct:.1f}%'></span></span>",
        kind=kind,
        ms=f"{ms:g}",
        pct=max(100 * ms / longest, 0.5),
    )


def _ms(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _entry(
    entry: object,
    clock: dict[str, list[str]],
    ms: dict[str, Any],
    took: float | None = None,
    number: int = 0,
    longest: float = 0.0,
    change: StepChange | None = None,
) -> Markup:
    if isinstance(entry, TransitionRecord):
        times = clock.get(entry.event, [])
        return html(
            '<li class="kind-transition" data-step="{step}">'
            '<span class="kind" id="step-{number}">step #{number}</span>'
            "<strong>{step}</strong> <span class='muted'>{source} → {target}</span>{times}"
            "{change}</li>",
            number=number,
            step=entry.event,
            source=entry.source,
            target=entry.target,
            times=html(" <span class='muted mono'>clock {t}</span>", t=", ".join(times))
            if times
            else "",
            change=step_change(change) if change is not None else "",
        )
    if isinstance(entry, CheckRecord):
        kind = "guard" if entry.phase == "PRE" else "exit hook"
        failed = html(
            " failed: {rules}",
            rules=join((html("<code>{r}</code>", r=r) for r in entry.failed), " "),
        )
        return html(
            '<li class="kind-check {outcome}" data-check="{step}:{phase}">'
            '<span class="kind">{kind}</span>{step} {phase} '
            '<span class="badge {outcome}">{outcome}</span>{failed}{rules}</li>',
            outcome=entry.outcome,
            step=entry.step,
            phase=entry.phase,
            kind=kind,
            failed=failed if entry.failed else "",
            rules=_rules(entry.rule_ids, entry.failed),
        )
    if isinstance(entry, LLMCallRecord):
        tokens = (
            f"{entry.input_tokens} in / {entry.output_tokens} out tokens"
            if entry.input_tokens is not None or entry.output_tokens is not None
            else "tokens not reported"
        )
        calls = ", ".join(f"{name} ({call_id})" for call_id, name in entry.tool_calls)
        return html(
            '<li class="kind-llm_call {err}"><span class="kind">model call</span>'
            "round {round}, mode <code>{mode}</code>, {messages} messages, {tokens}, "
            "{attempts} attempt(s){took}, finish <code>{finish}</code>{calls}{error}{bar}"
            "{text}</li>",
            err="failed" if entry.error else "",
            round=entry.round,
            mode=entry.mode,
            messages=entry.messages,
            tokens=tokens,
            attempts=entry.attempts,
            took=html(" in {t}", t=_duration(took)) if took is not None else "",
            bar=_bar(took, longest, "model"),
            finish=entry.finish_reason or "-",
            calls=html(", asked for {c}", c=calls) if calls else "",
            error=html(", error <code>{e}</code>", e=entry.error) if entry.error else "",
            text=html("<pre>{t}</pre>", t=entry.text) if entry.text is not None else "",
        )
    if isinstance(entry, ToolCallRecord):
        tool_ms = _ms(ms.get(entry.tool_call_id))
        return html(
            '<li class="kind-tool_call"><span class="kind">tool call</span>'
            "<code>{name}</code> ({id}) on the {side}: {outcome}{rule}{took}{bar}</li>",
            name=entry.name,
            id=entry.tool_call_id,
            side=entry.side,
            outcome=entry.outcome,
            rule=html(", rule <code>{r}</code>", r=entry.rule_id) if entry.rule_id else "",
            took=html(", {ms} ms", ms=f"{tool_ms:g}") if tool_ms is not None else "",
            bar=_bar(tool_ms, longest, "tool"),
        )
    if isinstance(entry, ModeChange):
        return html(
            '<li class="kind-mode_change"><span class="kind">mode change</span>'
            "<code>{old}</code> → <code>{new}</code>{branch}{reason}</li>",
            old=entry.previous_mode,
            new=entry.new_mode,
            branch=" (branch)" if entry.branch else "",
            reason=html(": {r}", r=entry.reason) if entry.reason is not None else "",
        )
    if isinstance(entry, FaultRecord):
        return html(
            '<li class="kind-fault failed" data-fault="{step}"><span class="kind">fault</span>'
            "at <strong>{step}</strong>: {codes}{rules}</li>",
            step=entry.step,
            codes=", ".join(entry.error_codes),
            rules=html(
                ", rule {r}", r=join((html("<code>{r}</code>", r=r) for r in entry.rule_ids), " ")
            )
            if entry.rule_ids
            else "",
        )
    data = getattr(entry, "code", None), getattr(entry, "rule_id", None)
    return html(
        '<li class="kind-warning"><span class="kind">warning</span><code>{code}</code> {rule}</li>',
        code=data[0],
        rule=data[1] or "",
    )


def step_change(change: StepChange) -> Markup:
    """What one step changed in the turn's context, as a diff (nothing when it changed
    nothing shown): ``-`` what went, ``+`` what came."""
    if not change.changed:
        return Markup("")
    lines: list[Markup] = []
    if change.mode is not None:
        lines.append(html("<li class='del'>- mode {m}</li>", m=change.mode[0] or "(none)"))
        lines.append(html("<li class='add'>+ mode {m}</li>", m=change.mode[1] or "(none)"))
    if change.tools_removed:
        lines.append(html("<li class='del'>- tools {t}</li>", t=", ".join(change.tools_removed)))
    if change.tools_added:
        lines.append(html("<li class='add'>+ tools {t}</li>", t=", ".join(change.tools_added)))
    texts = change.texts or ()
    for index, role in enumerate(change.messages_added):
        text = texts[index] if index < len(texts) else None
        lines.append(
            html(
                "<li class='add'>+ {role} message{text}</li>",
                role=role,
                text=html(": <q>{t}</q>", t=text) if text is not None else "",
            )
        )
    if change.response_type is not None:
        lines.append(html("<li class='add'>+ response {r}</li>", r=change.response_type))
    return html("<ul class='diff' data-diff='{step}'>{l}</ul>", step=change.step, l=join(lines))


def _timeline(
    trace: StateTrace,
    clock: dict[str, list[str]],
    ms: dict[str, Any],
    model_ms: dict[int, float],
    changes: Sequence[StepChange] = (),
) -> Markup:
    timed = [*model_ms.values(), *(t for t in map(_ms, ms.values()) if t is not None)]
    longest = max(timed, default=0.0)
    numbers: dict[int, int] = {}
    for index, entry in enumerate(trace.entries):
        if isinstance(entry, TransitionRecord):
            numbers[index] = len(numbers) + 1
    by_transition = iter(changes)
    items = join(
        _entry(
            entry,
            clock,
            ms,
            model_ms.get(index),
            numbers.get(index, 0),
            longest,
            next(by_transition, None) if isinstance(entry, TransitionRecord) else None,
        )
        for index, entry in enumerate(trace.entries)
    )
    return html(
        '<ol class="timeline" id="timeline">{items}<li class="kind-outcome {outcome}">'
        '<span class="kind">outcome</span><span class="badge {outcome}">{outcome}</span> '
        "{codes}</li></ol>",
        items=items,
        outcome=trace.outcome,
        codes=" ".join(trace.error_codes),
    )


def timeline(recording: TurnRecording) -> Markup:
    """The turn's state trace as a timeline (module docstring)."""
    return _timeline(
        recording.trace,
        _clock_by_step(recording),
        _execution_ms(recording),
        _model_call_ms(recording),
    )


def kept_trace_view(kept: KeptTrace) -> Markup:
    """A kept trace (module docstring): a durable turn's workflow, workers and attempts
    (its JSON's ``durable``, D678), its fault, path picture and timeline with what each
    step changed; a trace that cannot be read says so."""
    try:
        data = json.loads(kept.trace)
        trace = StateTrace.from_dict(data)
        changes = changes_from_json(kept.steps)
    except ValueError as error:  # json.JSONDecodeError is one
        return html("<p class='error'>this trace cannot be read: {e}</p>", e=str(error))
    durable = data.get("durable")
    banner: Markup | str = ""
    if kept.failed:
        banner = _fault_banner(
            kept.faulted_step or trace.faulted_step or trace.outcome,
            trace.failed_rules,
            html(
                "<li><code>{code}</code> {message}</li>",
                code=kept.error_code or "-",
                message=kept.error_message or "",
            ),
        )
    return html(
        "{durable}<section class='kept-trace' data-trace='{id}'>{banner}"
        "<div class='turn-grid'><div><h2>Path</h2>{picture}</div>"
        "<div><h2>Timeline</h2>{timeline}</div></div></section>",
        durable=durable_facts(durable if isinstance(durable, Mapping) else None),
        id=kept.id,
        banner=banner,
        picture=path_picture(trace),
        timeline=_timeline(trace, {}, {}, {}, changes),
    )


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def request_and_response(recording: TurnRecording) -> Markup:
    """The request and the result as recorded, with what the recording captured of content."""
    request = recording.request
    shown: object = request.get("json", request.get("text", request))
    if recording.redacted:
        note = "redacted: user content was replaced by the marks shown"
    elif recording.trace_content:
        note = "content captured: the model's text is in the timeline"
    else:
        note = "the request and result as given; the trace holds no content (capture off)"
    return html(
        "<p class='muted' id='content-note'>{note}</p>"
        "<h3>request</h3><pre id='request'>{request}</pre>"
        "<h3>response</h3><pre id='response'>{response}</pre>",
        note=note,
        request=_json(shown),
        response=_json(recording.result),
    )


def replay_outcome(outcome: ReplayOutcome) -> Markup:
    """What a replay answered: ok or the first divergence, and how the replayed turn ended."""
    report = outcome.report
    trace = report.trace
    if trace is not None and trace.outcome == "faulted":
        rules = ", ".join(trace.failed_rules) or "-"
        ended = f"the turn faulted at {trace.faulted_step} (rule {rules})"
    else:
        ended = f"the turn ended {trace.outcome if trace is not None else 'without a trace'}"
    verdict = "ok" if outcome.ok else "diverged"
    return html(
        '<div id="replay-result" data-verdict="{verdict}"><p><span class="badge {cls}">{verdict}'
        "</span> {ended}</p><pre>{lines}</pre></div>",
        verdict=verdict,
        cls="ok" if outcome.ok else "failed",
        ended=ended,
        lines="\n".join(outcome.describe()),
    )
