"""The pipeline diagram (engine/diagram.py) and ``aptix diagram``.

Expected states and transitions come from ``TurnMachine`` itself, never from a
list written here. svg/png are rendered by the real Graphviz ``dot``
(``make graphviz`` installs it); where it is missing those tests skip, except under
CI (``CI`` set), where they fail. Runs' paths come from real turns of the
scenario suite (tests/kits/trace_scenarios.py, in-memory store).
"""

from __future__ import annotations

import dataclasses
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from diagram_files import FILES, README, expected_files, readme_block
from engine_kit import call, calls, continuation, text
from trace_scenarios import INSTRUCTION, READ_A, SCENARIOS, Kit, run_scenario

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import PipelineStep
from aptix_pipeline.engine import (
    DiagramError,
    DiagramFormat,
    GraphvizMissingError,
    StateTrace,
    TransitionRecord,
    diagram_text,
    format_for,
    pipeline_diagram,
)
from aptix_pipeline.engine.machine import TurnMachine
from aptix_pipeline.validators import Phase, step_rule_ids

APTIX = Path(sys.executable).parent / "aptix"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVG_A = "{http://www.w3.org/2000/svg}a"
SECTIONS = {step.value: f"§4.{n}" for n, step in enumerate(PipelineStep, start=1)}

MACHINE_STATES = [state.id for state in TurnMachine.states]
MACHINE_EDGES = [
    (state.id, str(event), target.id, [str(c) for c in transition.cond])
    for state in TurnMachine.states
    for transition in state.transitions
    for event in transition.events
    for target in transition.targets
]
STEP_EDGES = [edge for edge in MACHINE_EDGES if edge[1] in SECTIONS]

EdgeKey = tuple[str, str, str]


def need_dot() -> None:
    """Skip without Graphviz's ``dot``, except under CI, where that is a failure."""
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("Graphviz's dot is missing on CI (make graphviz)", pytrace=False)
        pytest.skip("Graphviz's dot is not installed (run `make graphviz`)")


# --- reading the outputs back ----------------------------------------------------------------

_DOT_EDGE = re.compile(r"^    (\w+) -> (\w+) \[(.*)\];$")
_DOT_NODE = re.compile(r"^    (\w+) \[(.*)\];$")
_DOT_ATTR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_MERMAID_EDGE = re.compile(r"^    (\w+) --> (\w+) : (.*)$")


def dot_edges(dot: str) -> dict[EdgeKey, dict[str, str]]:
    """(source, event, target) → attributes; the event is the tooltip's first word."""
    edges: dict[EdgeKey, dict[str, str]] = {}
    for line in dot.splitlines():
        if match := _DOT_EDGE.match(line):
            attributes = dict(_DOT_ATTR.findall(match.group(3)))
            event = attributes["tooltip"].split(":", 1)[0]
            edges[(match.group(1), event, match.group(2))] = attributes
    return edges


def dot_nodes(dot: str) -> dict[str, dict[str, str]]:
    """State id → attributes."""
    nodes = {}
    for line in dot.splitlines():
        if (match := _DOT_NODE.match(line)) and match.group(1) in MACHINE_STATES:
            nodes[match.group(1)] = dict(_DOT_ATTR.findall(match.group(2)))
    return nodes


def mermaid_labels(mermaid: str) -> dict[tuple[str, str], list[str]]:
    """(source, target) → the labels of the edges between them."""
    labels: dict[tuple[str, str], list[str]] = {}
    for line in mermaid.splitlines():
        if match := _MERMAID_EDGE.match(line):
            labels.setdefault((match.group(1), match.group(2)), []).append(match.group(3))
    return labels


def mermaid_label(mermaid: str, source: str, event: str, target: str) -> str:
    """The one label of that transition."""
    (label,) = [
        label
        for label in mermaid_labels(mermaid)[(source, target)]
        if re.sub(r"^(#[\d,#]+ )?(✗ )?", "", label).split(" ")[0] == event
    ]
    return label


def mermaid_classes(mermaid: str) -> dict[str, list[str]]:
    """Mermaid class name → the states given it."""
    classes: dict[str, list[str]] = {}
    for line in mermaid.splitlines():
        if match := re.match(r"^    class ([\w,]+) (\w+)$", line):
            classes[match.group(2)] = match.group(1).split(",")
    return classes


# --- the picture of the machine --------------------------------------------------------------


@pytest.mark.decision("D101")
def test_every_state_and_transition_of_the_machine_is_drawn_in_both_formats() -> None:
    mermaid, dot = diagram_text(DiagramFormat.MERMAID), diagram_text(DiagramFormat.DOT)

    drawn = [
        (source, label.split(" ")[0], target)
        for (source, target), labels in mermaid_labels(mermaid).items()
        for label in labels
    ]
    expected = [(source, event, target) for source, event, target, _ in MACHINE_EDGES]
    assert sorted(drawn) == sorted(expected)
    assert sorted(dot_edges(dot)) == sorted(expected)
    assert len(dot_edges(dot)) == len(MACHINE_EDGES) == dot.count(" -> ") - 1  # + __start__
    assert set(dot_nodes(dot)) == set(MACHINE_STATES)
    mentioned = set(re.findall(r"\w+", mermaid))
    assert set(MACHINE_STATES) <= mentioned
    initial = TurnMachine.initial_state.id
    assert f"    [*] --> {initial}" in mermaid.splitlines()
    assert f"    __start__ -> {initial};" in dot.splitlines()
    for state in TurnMachine.states:
        if state.final:
            assert f"    {state.id} --> [*]" in mermaid.splitlines()
            assert dot_nodes(dot)[state.id]["peripheries"] == "2"


@pytest.mark.decision("D100")
@pytest.mark.parametrize(
    ("source", "event", "target", "cond"), STEP_EDGES, ids=[f"{e[0]}-{e[1]}" for e in STEP_EDGES]
)
def test_a_step_edge_shows_its_condition_guard_and_exit_hook(
    source: str, event: str, target: str, cond: list[str]
) -> None:
    step, section = PipelineStep(event), SECTIONS[event]
    pre, post = step_rule_ids(step, Phase.PRE), step_rule_ids(step, Phase.POST)
    expected = " ".join(
        [event]
        + [f"[{', '.join(cond)}]"] * bool(cond)
        + [f"PRE {section}"] * bool(pre)
        + ["+ budget"] * (event == "llm_client")  # the model call's budget check (D597)
        + [f"/ POST {section}"] * bool(post)
    )

    label = mermaid_label(diagram_text("mermaid"), source, event, target)
    attributes = dot_edges(diagram_text("dot"))[(source, event, target)]

    assert label == expected
    assert attributes["label"] == expected
    tooltip = attributes["tooltip"]
    assert f"AGN-036 {section}" in tooltip
    for rule_id in (*pre, *post):
        assert rule_id in tooltip


def test_the_steps_without_a_pre_or_post_set_show_none() -> None:
    mermaid = diagram_text("mermaid")

    # AGN-036 §4.1 PRE: N/A; the reasoner has no POST set
    assert mermaid_label(mermaid, "received", "request_handler", "validated") == (
        "request_handler / POST §4.1"
    )
    assert mermaid_label(mermaid, "prompt_ready", "reasoner", "reasoning") == "reasoner PRE §4.8"


def test_the_round_loop_commit_and_fault_edges() -> None:
    dot = dot_edges(diagram_text("dot"))

    loop = dot[("llm_answered", "server_tool_round", "reasoning")]
    assert loop["label"] == "server_tool_round [needs_another_round] PRE R5"
    assert "DESIGN/R5/round-limit" in loop["tooltip"]
    assert dot[("response_built", "complete", "done")]["label"] == "complete / commit"
    faults = {key: value for key, value in dot.items() if key[1] == "fault"}
    assert {source for source, _, _ in faults} == {
        state.id for state in TurnMachine.states if not state.final
    }
    assert all(value["style"] == "dashed" for value in faults.values())
    assert all(value.get("style") != "dashed" for key, value in dot.items() if key[1] != "fault")


@pytest.mark.decision("D106")
def test_the_committed_diagrams_and_the_readme_picture_are_current() -> None:
    for path, expected in expected_files().items():
        assert path.is_file(), f"{path} is missing: run make diagrams"
        assert path.read_text(encoding="utf-8") == expected, f"{path} is stale: run make diagrams"
    mermaid = next(p for p, f in FILES.items() if f is DiagramFormat.MERMAID)
    block = readme_block(README.read_text(encoding="utf-8"))
    assert block == mermaid.read_text(encoding="utf-8"), (
        "README.md's mermaid block differs from diagrams/pipeline.mmd: run make diagrams"
    )


SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_state_traces"
DRAW = """
import json, sys
from pathlib import Path
from aptix_pipeline.engine import StateTrace, pipeline_diagram
trace = StateTrace.from_dict(json.loads(Path(sys.argv[2]).read_text())[-1])
sys.stdout.buffer.write(pipeline_diagram(sys.argv[1]))
sys.stdout.buffer.write(pipeline_diagram(sys.argv[1], path=trace))
"""


@pytest.mark.decision("D101")
@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_two_processes_draw_the_same_bytes(fmt: str) -> None:
    trace_file = SNAPSHOTS / "test_scenario_trace[round_limit].json"
    outputs = [
        subprocess.run(
            [sys.executable, "-c", DRAW, fmt, str(trace_file)],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]

    assert outputs[0] == outputs[1]
    assert b"#7,#9" in outputs[0]  # the path is in it too


# --- svg and png through Graphviz --------------------------------------------------------------


def test_svg_is_rendered_by_dot_and_names_every_step() -> None:
    need_dot()

    svg = pipeline_diagram(DiagramFormat.SVG)

    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for step in PipelineStep:
        assert step.value in texts
    assert "[is_resumed]" in texts
    assert "POST §4.2" in texts
    titles = [a.get("{http://www.w3.org/1999/xlink}title", "") for a in root.iter(SVG_A)]
    assert any("AGN-036/4.2/PRE/session-null" in title for title in titles)  # hover tooltips
    assert pipeline_diagram("svg") == svg


def test_png_is_rendered_by_dot() -> None:
    need_dot()

    png = pipeline_diagram(DiagramFormat.PNG)

    assert png.startswith(PNG_MAGIC)
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert width > 600
    assert height > 600


def test_without_dot_svg_and_png_fail_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no dot

    for fmt in ("svg", "png"):
        with pytest.raises(GraphvizMissingError) as caught:
            pipeline_diagram(fmt)
        message = str(caught.value)
        assert "apt-get install graphviz" in message
        assert "brew install graphviz" in message
        assert "mermaid and dot formats need nothing" in message
    assert pipeline_diagram("mermaid") == diagram_text("mermaid").encode()


def test_a_failing_dot_is_a_diagram_error_with_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "dot"
    broken.write_text("#!/bin/sh\necho 'Error: renderer exploded' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(DiagramError) as caught:
        pipeline_diagram("svg")

    assert not isinstance(caught.value, GraphvizMissingError)
    assert "renderer exploded" in str(caught.value)
    assert "exit code 3" in str(caught.value)


# --- format_for -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("pipeline.mmd", "mermaid"),
        ("pipeline.mermaid", "mermaid"),
        ("README.md", "mermaid"),
        ("pipeline.dot", "dot"),
        ("pipeline.gv", "dot"),
        ("pipeline.svg", "svg"),
        ("PIPELINE.PNG", "png"),
    ],
)
def test_format_for_reads_the_suffix(name: str, fmt: str) -> None:
    assert format_for(Path(name)) is DiagramFormat(fmt)


@pytest.mark.parametrize(("name", "shown"), [("pipeline.txt", "'.txt'"), ("pipeline", "no suffix")])
def test_format_for_refuses_an_unknown_suffix_naming_it(name: str, shown: str) -> None:
    with pytest.raises(ValueError, match=r"accepted suffixes: \.mmd, \.mermaid, \.md") as caught:
        format_for(Path(name))
    assert shown in str(caught.value)


# --- a run's path ---------------------------------------------------------------------------------


async def trace_of(name: str) -> StateTrace:
    """The last turn of scenario ``name``."""
    kit = await run_scenario(name, MemoryStore())
    trace = kit.reports[-1].trace
    assert trace is not None
    return trace


async def continuation_with_a_server_tool_round() -> StateTrace:
    """Initial → client call; the continuation's reply expands Math (a server round)."""
    kit = Kit(MemoryStore())
    pipeline = kit.pipeline([calls(READ_A), calls(call("x1", "Math")), text("done")])
    pending = await kit.ok(pipeline, INSTRUCTION)
    await kit.ok(pipeline, continuation(pending))
    trace = kit.reports[-1].trace
    assert trace is not None
    assert trace.context_type == "ClientToolCallContinuation"
    return trace


def numbers(label: str) -> str:
    return label.split(" ")[0] if label.startswith("#") else ""


@pytest.mark.decision("D102", "D103")
async def test_an_initial_turn_is_drawn_in_order_in_blue() -> None:
    trace = await trace_of("initial_final_answer")

    dot, mermaid = diagram_text("dot", path=trace), diagram_text("mermaid", path=trace)

    edges = dot_edges(dot)
    for number, record in enumerate(trace.transitions, start=1):
        key = (record.source, record.event, record.target)
        assert numbers(edges[key]["label"]) == f"#{number}"
        assert (edges[key]["color"], edges[key]["penwidth"]) == ("#0969da", "2.5")
        assert numbers(mermaid_label(mermaid, *key)) == f"#{number}"
    taken = {(t.source, t.event, t.target) for t in trace.transitions}
    for key, attributes in edges.items():
        if key not in taken:
            assert attributes["color"] == "#8c959f"
            assert not numbers(attributes["label"])
    assert "#cf222e" not in dot  # nothing red
    nodes = dot_nodes(dot)
    assert {s for s, a in nodes.items() if a.get("fillcolor") == "#ddf4ff"} == set(trace.states)
    assert mermaid_classes(mermaid) == {"visited": [s for s in MACHINE_STATES if s in trace.states]}
    assert "path: Initial turn, 8 transitions, done" in dot


@pytest.mark.decision("D102")
async def test_a_continuation_with_a_server_tool_round_numbers_the_loop() -> None:
    trace = await continuation_with_a_server_tool_round()

    dot, mermaid = dot_edges(diagram_text("dot", path=trace)), diagram_text("mermaid", path=trace)

    assert [t.event for t in trace.transitions] == [
        "request_handler",
        "session_restorer",
        "client_tool_continuation_resolver",
        "agent_context_loader",
        "prompt_content_provider_initializer",
        "reasoner",
        "llm_client",
        "server_tool_round",
        "llm_client",
        "response_builder",
        "complete",
    ]
    llm = ("reasoning", "llm_client", "llm_answered")
    loop = ("llm_answered", "server_tool_round", "reasoning")
    loader = ("continuation_resolved", "agent_context_loader", "agent_context_loaded")
    assert numbers(dot[llm]["label"]) == numbers(mermaid_label(mermaid, *llm)) == "#7,#9"
    assert numbers(dot[loop]["label"]) == numbers(mermaid_label(mermaid, *loop)) == "#8"
    assert numbers(dot[loader]["label"]) == "#4"
    assert not numbers(
        dot[("session_restored", "agent_context_loader", "agent_context_loaded")]["label"]
    )
    assert "agent_context_resolved" not in mermaid_classes(mermaid)["visited"]


@pytest.mark.decision("D102")
async def test_a_failed_guard_draws_the_step_that_was_not_taken_in_red() -> None:
    trace = await trace_of("pre_guard_fails")  # §4.2 PRE fails on a FollowOn

    text_dot, mermaid = diagram_text("dot", path=trace), diagram_text("mermaid", path=trace)

    dot, nodes = dot_edges(text_dot), dot_nodes(text_dot)
    step = dot[("validated", "session_restorer", "session_restored")]
    assert step["color"] == "#cf222e"
    assert step["label"].startswith("✗ session_restorer")  # not taken: no number
    fault = dot[("validated", "fault", "faulted")]
    assert (fault["color"], fault["label"], fault["style"]) == ("#cf222e", "#2 fault", "dashed")
    red = [key for key, value in dot.items() if value["color"] == "#cf222e"]
    assert sorted(red) == sorted(
        [("validated", "session_restorer", "session_restored"), ("validated", "fault", "faulted")]
    )
    assert nodes["faulted"]["fillcolor"] == "#ffebe9"
    assert nodes["session_restored"].get("fillcolor") != "#ddf4ff"
    label = mermaid_label(mermaid, "validated", "session_restorer", "session_restored")
    assert label.startswith("✗ session_restorer")
    assert mermaid_classes(mermaid) == {"visited": ["received", "validated"], "fault": ["faulted"]}


@pytest.mark.decision("D102")
async def test_a_failed_exit_hook_draws_the_taken_step_in_red() -> None:
    trace = await trace_of("post_exit_hook_fails")  # §4.3 POST fails

    dot = dot_edges(diagram_text("dot", path=trace))

    step = dot[("validated", "agent_context_resolver", "agent_context_resolved")]
    assert step["color"] == "#cf222e"
    assert step["label"].startswith("#2 ✗ agent_context_resolver")
    assert dot[("agent_context_resolved", "fault", "faulted")]["label"] == "#3 fault"
    assert (
        dot[("agent_context_resolved", "agent_session_creator", "session_created")]["color"]
        == "#8c959f"
    )


@pytest.mark.decision("D102")
async def test_a_round_limit_fault_reds_the_llm_client_leaving_reasoning() -> None:
    trace = await trace_of("round_limit")

    dot = dot_edges(diagram_text("dot", path=trace))

    red = sorted(key for key, value in dot.items() if value["color"] == "#cf222e")
    assert red == [("reasoning", "fault", "faulted"), ("reasoning", "llm_client", "llm_answered")]
    assert dot[("reasoning", "llm_client", "llm_answered")]["label"].startswith("#6,#8 ✗ ")


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_turn_of_every_scenario_draws(name: str) -> None:
    kit = await run_scenario(name, MemoryStore())

    for report in kit.reports:
        trace = report.trace
        assert trace is not None
        dot = dot_edges(diagram_text("dot", path=trace))
        numbered = [n for v in dot.values() for n in re.findall(r"#(\d+)", v["label"])]
        assert sorted(int(n) for n in numbered) == list(range(1, len(trace.transitions) + 1))
        red = [key for key, value in dot.items() if value["color"] == "#cf222e"]
        assert len(red) == (2 if trace.faulted_step else 0)
        mermaid = diagram_text("mermaid", path=trace)
        assert ("fault" in mermaid_classes(mermaid)) is (trace.outcome == "faulted")


@pytest.mark.decision("D104")
async def test_a_path_with_an_unknown_state_is_refused_naming_it() -> None:
    trace = await trace_of("initial_final_answer")
    older = dataclasses.replace(trace, states=(*trace.states[:-1], "archived"))

    for fmt in ("mermaid", "dot", "svg"):
        with pytest.raises(ValueError, match="state 'archived' of the path is not a state"):
            pipeline_diagram(fmt, path=older)


@pytest.mark.decision("D104")
async def test_a_path_with_an_unknown_transition_is_refused_naming_it() -> None:
    trace = await trace_of("initial_final_answer")
    entries = (*trace.entries, TransitionRecord("teleport", "received", "done"))

    with pytest.raises(ValueError, match="transition 'teleport' from 'received' to 'done'"):
        diagram_text("dot", path=dataclasses.replace(trace, entries=entries))


# --- the CLI --------------------------------------------------------------------------------------


def aptix(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(APTIX), *args], capture_output=True, check=False, env=env)


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_cli_prints_a_text_format(fmt: str) -> None:
    run = aptix("diagram", "--format", fmt)

    assert run.returncode == 0, run.stderr
    assert run.stdout == pipeline_diagram(fmt)


@pytest.mark.decision("D105")
def test_cli_prints_mermaid_by_default() -> None:
    run = aptix("diagram")

    assert (run.returncode, run.stdout) == (0, pipeline_diagram("mermaid"))


@pytest.mark.decision("D105")
@pytest.mark.parametrize("name", ["out.mmd", "out.dot", "out.gv", "out.svg", "out.png"])
def test_cli_infers_the_format_from_the_out_suffix(name: str, tmp_path: Path) -> None:
    if name.endswith((".svg", ".png")):
        need_dot()
    out = tmp_path / name

    run = aptix("diagram", "--out", str(out))

    assert run.returncode == 0, run.stderr
    assert run.stdout == b""
    assert out.read_bytes() == pipeline_diagram(format_for(out))


@pytest.mark.decision("D105")
def test_cli_writes_a_markdown_file_as_a_mermaid_block(tmp_path: Path) -> None:
    out = tmp_path / "pipeline.md"

    assert aptix("diagram", "--out", str(out)).returncode == 0

    assert readme_block(out.read_text(encoding="utf-8")) == diagram_text("mermaid")


@pytest.mark.decision("D105")
def test_cli_format_wins_over_the_suffix(tmp_path: Path) -> None:
    out = tmp_path / "picture.txt"

    run = aptix("diagram", "--format", "dot", "--out", str(out))

    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == pipeline_diagram("dot")


@pytest.mark.decision("D105")
def test_cli_refuses_an_unknown_suffix(tmp_path: Path) -> None:
    out = tmp_path / "picture.txt"

    run = aptix("diagram", "--out", str(out))

    assert run.returncode == 2
    assert b"'.txt'" in run.stderr
    assert b"--format" in run.stderr
    assert not out.exists()


def test_cli_refuses_an_unknown_format() -> None:
    run = aptix("diagram", "--format", "jpeg")

    assert run.returncode == 2
    assert b"jpeg" in run.stderr


@pytest.mark.decision("D105")
def test_cli_writes_png_to_a_pipe() -> None:
    need_dot()

    run = aptix("diagram", "--format", "png")

    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(PNG_MAGIC)


@pytest.mark.decision("D105")
def test_cli_refuses_binary_output_to_a_terminal() -> None:
    controller, terminal = pty.openpty()
    try:
        run = subprocess.run(
            [str(APTIX), "diagram", "--format", "svg"],
            stdout=terminal,
            stderr=subprocess.PIPE,
            check=False,
            timeout=60,
        )
    finally:
        os.close(terminal)
        os.close(controller)

    assert run.returncode == 2
    assert b"give --out FILE" in run.stderr


@pytest.mark.decision("D105")
def test_cli_without_dot_exits_2_with_the_install_hint(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}

    run = aptix("diagram", "--out", str(tmp_path / "pipeline.svg"), env=env)

    assert run.returncode == 2
    assert b"apt-get install graphviz" in run.stderr
    assert not (tmp_path / "pipeline.svg").exists()
    assert aptix("diagram", "--format", "dot", env=env).returncode == 0


@pytest.mark.decision("D597")
def test_the_model_calls_guard_shows_the_budget_check_with_its_rule_ids() -> None:
    dot = diagram_text("dot")
    [edge] = [line for line in dot.splitlines() if "reasoning -> llm_answered" in line]
    assert 'label="llm_client PRE §4.9 + budget / POST §4.9"' in edge
    pre = edge.split("\\nPRE: ")[1].split("\\n")[0]
    assert pre.endswith("DESIGN/budget/within, DESIGN/budget/unpriced")
    assert "+ budget" in diagram_text("mermaid")
    # no other step's guard shows it
    assert dot.count("DESIGN/budget/within") == 1
