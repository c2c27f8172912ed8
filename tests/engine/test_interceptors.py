"""Interceptors wrap every turn a pipeline runs (``engine/interceptors.py``).

The first given is the outermost; each sees the turn as a ``TurnCall`` and runs it
through ``proceed``, may hand it other ports and more listeners, and returns the
report. A call answered without a turn (a stored answer, a malformed key) runs none.
Recording is one such interceptor (``Recorder``), composed where the pipeline is
assembled: the pipeline itself knows nothing of recordings.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, continuation, make_pipeline, ok, text

from aptix_pipeline import (
    Caller,
    Pipeline,
    Proceed,
    Recorder,
    RecordingOptions,
    StepStarted,
    TurnCall,
    TurnEvent,
    TurnInterceptor,
    TurnReport,
    embedded_pipeline,
)
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.engine import pipeline as pipeline_module


class Around:
    """Writes what it sees into ``log``, around the turn."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
        self.log.append(f"{self.name} in")
        report = await proceed()
        self.log.append(f"{self.name} out")
        return report


def with_interceptors(*interceptors: TurnInterceptor, replies: Any = None) -> Pipeline:
    base, _ = make_pipeline(MemoryStore(), list(replies or [text("hi")]))
    return Pipeline(base.ports, base.options, interceptors=interceptors)


@pytest.mark.decision("D252")
async def test_the_first_interceptor_given_is_the_outermost() -> None:
    log: list[str] = []
    pipeline = with_interceptors(Around("a", log), Around("b", log))

    report = await pipeline.run({"Instruction": "hi"}, CALLER)

    assert report.successful
    assert log == ["a in", "b in", "b out", "a out"]


@pytest.mark.decision("D252")
async def test_an_interceptor_sees_the_call_as_the_host_made_it() -> None:
    seen: list[TurnCall] = []

    class Look:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            seen.append(call)
            return await proceed()

    pipeline = with_interceptors(Look())
    await pipeline.run(
        {"Instruction": "hi"},
        {"org": "acme", "user": "ana"},
        initial_mode="review",
        idempotency_key="k-1",
    )

    [turn] = seen
    assert turn.request == {"Instruction": "hi"}
    assert turn.caller == Caller(org="acme", user="ana")
    assert (turn.initial_mode, turn.idempotency_key) == ("review", "k-1")
    assert turn.ports is pipeline.turn_ports  # the host's, its tools through the ledger
    assert turn.options is pipeline.options
    assert turn.telemetry.capture_content is not None  # resolved, not left to the environment


@pytest.mark.decision("D252")
async def test_an_interceptor_can_change_the_report() -> None:
    class Relabel:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            report = await proceed()
            return replace(report, branch=True)

    report = await with_interceptors(Relabel()).run({"Instruction": "hi"}, CALLER)

    assert report.successful
    assert report.branch is True


@pytest.mark.decision("D252")
async def test_listeners_given_to_proceed_hear_this_turn_only() -> None:
    heard: list[list[str]] = []

    class Listen:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            steps: list[str] = []

            def on_event(event: TurnEvent) -> None:
                if isinstance(event, StepStarted):
                    steps.append(event.step)

            report = await proceed(listeners=[on_event])
            heard.append(steps)
            return report

    pipeline = with_interceptors(Listen(), replies=[text("one"), text("two")])
    first = ok(await pipeline.execute({"Instruction": "one"}, CALLER))
    await pipeline.execute(
        {"SessionId": first.session_id, "Instruction": "two", "TurnId": first.turn_id}, CALLER
    )

    assert len(heard) == 2
    assert heard[0][0] == "request_handler"
    assert "agent_session_creator" in heard[0]
    assert "session_restorer" in heard[1]
    assert "agent_session_creator" not in heard[1]


@pytest.mark.decision("D252")
async def test_ports_given_to_proceed_run_the_turn_and_are_guarded() -> None:
    class Failing:
        async def complete(self, request: Any) -> Any:
            raise RuntimeError("down")

    class Swap:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            return await proceed(ports=replace(call.ports, llm=Failing()))

    report = await with_interceptors(Swap()).run({"Instruction": "hi"}, CALLER)

    assert not report.successful
    assert report.result.errors[0].code == "port_failed"


@pytest.mark.decision("D252")
async def test_an_inner_interceptor_sees_the_ports_an_outer_one_gave() -> None:
    seen: list[object] = []
    marker = ScriptedLLM([text("from the outer interceptor")])

    class Outer:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            return await proceed(ports=replace(call.ports, llm=marker))

    class Inner:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            seen.append(call.ports.llm)
            return await proceed()

    report = await with_interceptors(Outer(), Inner()).run({"Instruction": "hi"}, CALLER)

    assert seen == [marker]
    assert ok(report.result).primary_output_text == "from the outer interceptor"


@pytest.mark.decision("D252")
async def test_proceed_runs_the_turn_once() -> None:
    class Twice:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            await proceed()
            return await proceed()

    with pytest.raises(RuntimeError, match="runs the turn once"):
        await with_interceptors(Twice()).run({"Instruction": "hi"}, CALLER)


@pytest.mark.decision("D252")
async def test_a_stored_answer_runs_no_interceptor() -> None:
    log: list[str] = []
    pipeline = with_interceptors(
        Around("a", log), replies=[calls(call("c1", "read_file", {"path": "a"})), text("done")]
    )
    pending = ok(await pipeline.execute({"Instruction": "read"}, CALLER))
    results = {"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": "{}"}
    first = await pipeline.run(continuation(pending, results), CALLER)
    log.clear()

    again = await pipeline.run(continuation(pending, results), CALLER)

    assert first.successful
    assert again.replayed
    assert log == []


@pytest.mark.decision("D252")
async def test_a_malformed_idempotency_key_runs_no_interceptor() -> None:
    log: list[str] = []

    report = await with_interceptors(Around("a", log)).run(
        {"Instruction": "hi"}, CALLER, idempotency_key="has space"
    )

    assert not report.successful
    assert log == []


@pytest.mark.decision("D252")
async def test_a_recorder_is_an_interceptor_and_the_pipeline_knows_no_recording() -> None:
    parameters = inspect.signature(Pipeline).parameters
    tooling = [
        name
        for name, value in vars(pipeline_module).items()
        if str(getattr(value, "__module__", "")).startswith("aptix_pipeline.engine.replay")
    ]

    report = await with_interceptors(Recorder()).run({"Instruction": "hi"}, CALLER)

    assert report.recording is not None
    assert report.recording.trace == report.trace
    assert "recording" not in parameters
    assert tooling == []


@pytest.mark.decision("D252")
async def test_embedded_pipeline_composes_the_recorder_outside_the_hosts_interceptors() -> None:
    log: list[str] = []
    recordings: list[object] = []

    class Look:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            report = await proceed()
            log.append("recorded already" if report.recording is not None else "not yet")
            return report

    pipeline = embedded_pipeline(
        llm=ScriptedLLM([text("hi")]),
        store="memory",
        recording=RecordingOptions(sink=recordings.append),
        interceptors=[Look()],
    )
    report = await pipeline.run({"Instruction": "hi"}, CALLER)

    assert log == ["not yet"]
    assert report.recording is not None
    assert recordings == [report.recording]
