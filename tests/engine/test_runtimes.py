"""The compiled runner against python-statemachine's own runtime, and what it is compiled from.

``Pipeline(runtime="compiled")`` (the default) walks a table compiled once from
``TurnMachine``; ``runtime="statechart"`` runs one ``StateChart`` per turn. Every
scenario of tests/kits/trace_scenarios.py must give both the same traces, results and
spans. The table is read from the class: a transition added to a machine is
followed by the compiled runner with no other change, in the library's order
(condition, guard, action, exit hook) and with the same faults; what the compiled
runner does not run it refuses when it compiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from engine_kit import CALLER, make_pipeline
from opentelemetry.sdk.trace import ReadableSpan
from span_kit import Recorded, attributes_of, span_id
from statemachine import State, StateChart
from trace_scenarios import SCENARIOS, run_scenario

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import ContextType, ErrorCode, PipelineContext, PipelineStep
from aptix_pipeline.engine import RUNTIMES, Pipeline, TransitionTaken, TurnEvent
from aptix_pipeline.engine.machine import FAULT, TurnMachine, TurnRun
from aptix_pipeline.engine.runner import MachineCompileError, compile_machine, walk
from aptix_pipeline.steps import PipelineOptions, StepFaultError, TurnScope

NAMES = list(SCENARIOS)


def _spans(recorded: Recorded) -> list[dict[str, Any]]:
    """Every span as what it says (no ids or times), its parent by position."""
    spans = recorded.spans
    position = {span_id(span): index for index, span in enumerate(spans)}

    def shape(span: ReadableSpan) -> dict[str, Any]:
        return {
            "name": span.name,
            "kind": str(span.kind),
            "parent": position.get(span.parent.span_id) if span.parent else None,
            "status": (str(span.status.status_code), span.status.description),
            "attributes": attributes_of(span),
            "events": [(event.name, attributes_of(event)) for event in span.events],
        }

    return [shape(span) for span in spans]


@pytest.mark.decision("D127")
@pytest.mark.parametrize("capture", [False, True], ids=["plain", "content"])
@pytest.mark.parametrize("name", NAMES)
async def test_both_runtimes_give_the_same_traces_results_and_spans(
    name: str, capture: bool
) -> None:
    seen = {}
    for runtime in RUNTIMES:
        recorded = Recorded()
        kit = await run_scenario(
            name, MemoryStore(), recorded.telemetry(capture_content=capture), runtime
        )
        seen[runtime] = (
            [report.trace.to_dict() if report.trace else None for report in kit.reports],
            [report.result.to_wire() for report in kit.reports],
            [report.to_dict() for report in kit.reports],
            _spans(recorded),
        )
        recorded.shutdown()
    compiled, statechart = seen["compiled"], seen["statechart"]
    assert compiled[0] == statechart[0]  # traces
    assert compiled[1] == statechart[1]  # results
    assert compiled[2] == statechart[2]  # reports
    assert compiled[3] == statechart[3]  # spans
    assert compiled[3], "the scenario emitted spans"


def test_unknown_runtime_is_refused_naming_the_choices() -> None:
    pipeline, _ = make_pipeline(MemoryStore())
    with pytest.raises(ValueError, match=r"compiled, statechart.*'fast'"):
        Pipeline(pipeline.ports, runtime="fast")  # type: ignore[arg-type]


# --- the table is the class ----------------------------------------------------------------


@pytest.mark.decision("D129")
def test_the_table_holds_every_transition_of_turn_machine() -> None:
    table = compile_machine(TurnMachine)
    compiled = {
        (t.source.id, t.event, t.target.id) for leaving in table.routes.values() for t in leaving
    } | {(t.source.id, t.event, t.target.id) for t in table.faults.values()}
    declared = {
        (state.id, str(event), transition.target.id)
        for state in TurnMachine.states
        for transition in state.transitions
        for event in transition.events
    }
    assert compiled == declared
    assert table.initial == "received"
    assert table.finals == {"done", "faulted"}
    non_final = {state.id for state in TurnMachine.states if not state.final}
    assert set(table.faults) == non_final


def test_each_step_transition_has_its_four_parts_in_order() -> None:
    table = compile_machine(TurnMachine)
    [restorer] = table.routes["validated"][:1]
    assert restorer.event == "session_restorer"
    assert [c.name for c in restorer.conditions] == ["is_resumed"]
    assert [c.name for c in restorer.validators] == ["pre_session_restorer"]
    assert [c.name for c in restorer.actions] == ["session_restorer"]
    assert [c.name for c in restorer.after] == ["post_session_restorer"]
    [handler] = table.routes["received"]
    assert handler.validators == ()  # §4.1: PRE is N/A
    [llm] = table.routes["reasoning"]
    assert [c.name for c in llm.after] == ["post_llm_client_once_settled"]  # §4.9 deferred
    builder = [t for t in table.routes["llm_answered"] if t.event == "response_builder"]
    assert [c.name for c in builder[0].validators] == [
        "snapshot_before_response",  # §4.10 snapshot, then PRE
        "pre_response_builder",
    ]


@pytest.mark.decision("D129")
def test_routes_out_of_validated_follow_the_context_type() -> None:
    table = compile_machine(TurnMachine)
    pipeline, _ = make_pipeline(MemoryStore())
    for kind, expected in [
        (ContextType.INITIAL, "agent_context_resolver"),
        (ContextType.FOLLOW_ON, "session_restorer"),
        (ContextType.CLIENT_TOOL_CALL_CONTINUATION, "session_restorer"),
    ]:
        scope = TurnScope(pipeline.ports, PipelineOptions(), CALLER, {})
        scope.context = PipelineContext(type=kind)
        assert table.route("validated", TurnRun(scope)).event == expected


# --- a machine of our own: the compiled runner follows what the class says ----------------

CALLS: list[str] = []


def mark(label: str, *, fail: bool = False) -> Callable[..., None]:
    def callback(model: TurnRun, event: str) -> None:
        CALLS.append(f"{event}:{label}")
        if fail:
            raise StepFaultError([])

    callback.__name__ = label
    return callback


async def mark_async(model: TurnRun, event: str, source: State, target: State) -> None:
    CALLS.append(f"{event}:on {source.id}->{target.id}")


def wants_detour(model: TurnRun) -> bool:
    CALLS.append("cond:wants_detour")
    return model.scope.initial_mode == "detour"


def no_detour(model: TurnRun) -> bool:
    return not wants_detour(model)


def _machine(
    *, detour_guard_fails: bool = False, detour_after_fails: bool = False
) -> type[StateChart[Any]]:
    """received → checked → (detour → detoured →) finish → done; fault from everywhere."""
    received = State(initial=True)
    checked = State()
    detoured = State()
    done = State(final=True)
    faulted = State(final=True)
    body: dict[str, Any] = {
        "catch_errors_as_events": False,
        "allow_event_without_transition": False,
        "received": received,
        "checked": checked,
        "detoured": detoured,
        "done": done,
        "faulted": faulted,
        "check": received.to(checked, on=mark_async, after=mark("after")),
        # the transition this test adds: nothing else names it
        "detour": checked.to(
            detoured,
            cond=wants_detour,
            validators=mark("guard", fail=detour_guard_fails),
            on=mark_async,
            after=mark("after", fail=detour_after_fails),
        ),
        "finish": checked.to(done, cond=no_detour, on=mark_async)
        | detoured.to(done, on=mark_async),
        "fault": faulted.from_.any(),  # type: ignore[no-untyped-call]
    }
    return type("Detour", (StateChart,), body)


async def _walk(machine: type[StateChart[Any]], runtime: Any, mode: str) -> tuple[Any, ...]:
    pipeline, _ = make_pipeline(MemoryStore())
    scope = TurnScope(pipeline.ports, PipelineOptions(), CALLER, {}, initial_mode=mode)
    events: list[TurnEvent] = []
    CALLS.clear()
    walked = await walk(TurnRun(scope, emit=events.append), runtime, machine)
    taken = [e.transition.event for e in events if isinstance(e, TransitionTaken)]
    return walked.states, walked.faulted_step, taken, list(CALLS)


@pytest.mark.decision("D129")
@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_the_runner_follows_a_transition_added_to_the_machine(runtime: str) -> None:
    machine = _machine()
    states, faulted, taken, calls = await _walk(machine, runtime, "detour")
    assert states == ("received", "checked", "detoured", "done")
    assert faulted is None
    assert taken == ["check", "detour", "finish"]
    assert calls[:4] == [
        "check:on received->checked",
        "check:after",
        "cond:wants_detour",
        "detour:guard",
    ]
    assert calls[-2:] == ["detour:after", "finish:on detoured->done"]
    states, _, taken, _ = await _walk(machine, runtime, "straight")
    assert taken == ["check", "finish"]
    assert states == ("received", "checked", "done")


@pytest.mark.decision("D127")
async def test_both_runtimes_call_the_same_callbacks_in_the_same_order() -> None:
    for fails in [{}, {"detour_guard_fails": True}, {"detour_after_fails": True}]:
        machine = _machine(**fails)
        compiled = await _walk(machine, "compiled", "detour")
        statechart = await _walk(machine, "statechart", "detour")
        assert compiled[:3] == statechart[:3], fails
        # python-statemachine evaluates the condition again inside send; the calls
        # are otherwise the same, in the same order.
        assert [c for c in compiled[3] if not c.startswith("cond:")] == [
            c for c in statechart[3] if not c.startswith("cond:")
        ], fails


@pytest.mark.decision("D127")
@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_a_failed_guard_faults_from_the_source_and_a_failed_exit_hook_from_the_target(
    runtime: str,
) -> None:
    states, faulted, taken, _ = await _walk(_machine(detour_guard_fails=True), runtime, "detour")
    assert (faulted, taken[-1]) == ("detour", FAULT)
    assert states == ("received", "checked", "faulted")
    states, faulted, taken, _ = await _walk(_machine(detour_after_fails=True), runtime, "detour")
    assert (faulted, taken) == ("detour", ["check", "detour", FAULT])
    assert states == ("received", "checked", "detoured", "faulted")


@pytest.mark.decision("D128")
def test_a_callback_given_by_name_is_refused() -> None:
    a, b = State(initial=True), State(final=True)
    machine = type(
        "Named",
        (StateChart,),
        {"a": a, "b": b, "go": a.to(b, on="do_it"), "do_it": lambda self: None},
    )
    with pytest.raises(MachineCompileError, match="'do_it' is given by name"):
        compile_machine(machine)


@pytest.mark.decision("D128")
def test_a_naming_convention_callback_is_refused() -> None:
    a, b = State(initial=True), State(final=True)
    machine = type(
        "Convention", (StateChart,), {"a": a, "b": b, "go": a.to(b), "on_go": lambda self: None}
    )
    with pytest.raises(MachineCompileError, match="on_go: naming-convention"):
        compile_machine(machine)


@pytest.mark.decision("D128")
def test_a_state_entry_action_is_refused() -> None:
    a, b = State(initial=True), State(final=True, enter=mark("enter"))
    machine = type("Entry", (StateChart,), {"a": a, "b": b, "go": a.to(b)})
    with pytest.raises(MachineCompileError, match="entry/exit actions"):
        compile_machine(machine)


@pytest.mark.decision("D128")
def test_a_callback_asking_for_an_unknown_argument_is_refused() -> None:
    def needs(model: TurnRun, machine: object) -> None:
        return None

    a, b = State(initial=True), State(final=True)
    machine = type("Asks", (StateChart,), {"a": a, "b": b, "go": a.to(b, on=needs)})
    with pytest.raises(MachineCompileError, match="takes 'machine'"):
        compile_machine(machine)


async def test_a_step_that_raises_is_an_internal_error_on_both_runtimes() -> None:
    async def broken(scope: TurnScope) -> None:
        raise KeyError("boom")

    results = []
    for runtime in RUNTIMES:
        pipeline, _ = make_pipeline(
            MemoryStore(),
            [{"text": "hi"}],
            steps={PipelineStep.REASONER: broken},
            runtime=runtime,
        )
        report = await pipeline.run({"Instruction": "hi"}, CALLER)
        assert [e.code for e in report.result.errors] == [ErrorCode.INTERNAL]
        assert report.states[-2:] == ("prompt_ready", "faulted")
        results.append(report.to_dict())
    assert results[0] == results[1]


def _fresh_python(*lines: str) -> None:
    """Run ``lines`` in a new interpreter, where nothing is imported yet; fail on its failure."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", "\n".join(lines)], check=True)


def test_importing_the_engine_leaves_the_diagram_renderers_for_later() -> None:
    _fresh_python(
        "import sys, aptix_pipeline.engine as e",
        "assert 'statemachine.contrib.diagram' not in sys.modules",
        "assert 'aptix_pipeline.engine.diagram' not in sys.modules",
        "assert e.DiagramFormat('dot').value == 'dot'",
        "assert 'aptix_pipeline.engine.diagram' in sys.modules",
        "from aptix_pipeline import replay",
        "assert callable(replay) and replay.__name__ == 'replay'",
    )


@pytest.mark.decision("D251")
def test_the_runtime_imports_nothing_of_the_replay_tooling() -> None:
    _fresh_python(
        "import sys, aptix_pipeline.engine as e, aptix_pipeline.adapters.stores.memory",
        "loaded = sorted(m for m in sys.modules if m.startswith('aptix_pipeline.engine.replay'))",
        "assert loaded == [], loaded",
    )


def _comparable(value: object) -> object:
    """An event's field as a test compares it: an exception (one object per run) by its
    class and message."""
    return (type(value), str(value)) if isinstance(value, BaseException) else value


@pytest.mark.decision("D127")
@pytest.mark.parametrize("name", NAMES)
async def test_both_runtimes_emit_the_same_events(name: str) -> None:
    """What a host listener hears does not depend on the runtime (run ids aside)."""
    import dataclasses

    heard: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for runtime in RUNTIMES:
        events: list[TurnEvent] = []
        await run_scenario(
            name, MemoryStore(), Recorded().telemetry(spans=False), runtime, [events.append]
        )
        heard[runtime] = [
            (
                type(event).__name__,
                {
                    f.name: _comparable(getattr(event, f.name))
                    for f in dataclasses.fields(event)
                    if f.name != "run_id"
                },
            )
            for event in events
        ]
    assert heard["compiled"] == heard["statechart"]
    assert heard["compiled"][0][0] == "TurnStarted"
