"""Helpers for the recording and replay tests: scenarios run with recording on.

``run_recorded(name, store)`` runs a scenario of tests/kits/trace_scenarios.py with
every pipeline recording its turns (``RecordingOptions``); each turn's report
comes back with the steps its pipeline replaced, so a replay can run the same
code (a scenario that broke a step on purpose replays with that step).
``run_recorded(..., streamed=True)`` runs every request through ``Pipeline.stream``
instead (``streamed_report``), taking every item as a client would.

For streamed turns cut short: ``CutStreamLLM`` streams its replies but breaks off
after some chunks (raising, or waiting for good, so a consumer that leaves stops
the turn inside the stream); ``hanging_tool`` is a server tool that never answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine_kit import (
    CALLER,
    call,
    calls,
    change_mode,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    text,
)
from trace_scenarios import SCENARIOS, Kit, Store

from aptix_pipeline import PipelineOptions, Recorder, RecordingOptions, TurnRecording
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.contracts import (
    LLM,
    Caller,
    LLMRequest,
    PipelineStep,
    ReplyChunk,
    SessionStore,
    ToolExecutor,
    ToolInvocation,
)
from aptix_pipeline.engine import (
    Pipeline,
    RequestInput,
    StreamProgress,
    Telemetry,
    TurnEvent,
    TurnReport,
)
from aptix_pipeline.steps import Hooks, Ports, StepFunction
from aptix_pipeline.validators import HostRule

__all__ = [
    "DEMO_SCRIPT",
    "CutStreamLLM",
    "RecordedTurn",
    "RecordingKit",
    "Ticks",
    "demo_session",
    "hanging_tool",
    "recording_pipeline",
    "run_recorded",
    "streamed_report",
]

Steps = Mapping[PipelineStep, StepFunction]


@dataclass(frozen=True)
class RecordedTurn:
    """One recorded turn of a scenario: its report, recording, the steps it ran with and
    the host's ports it ran on (to run some of them live in a replay)."""

    report: TurnReport
    steps: Steps | None
    ports: Ports
    pipeline: Pipeline | None = None

    @property
    def recording(self) -> TurnRecording:
        """The turn's recording (every pipeline of a ``RecordingKit`` records)."""
        assert self.report.recording is not None
        return self.report.recording


@dataclass
class RecordingKit(Kit):
    """A scenario kit whose pipelines record every turn with ``options``."""

    options: RecordingOptions = field(default_factory=RecordingOptions)
    turns: list[RecordedTurn] = field(default_factory=list)
    hooks: Hooks | None = None
    """The host's hooks every pipeline of the kit runs."""
    rules: Sequence[HostRule] = ()
    """The host rules every pipeline of the kit runs."""
    _steps: dict[int, Steps | None] = field(default_factory=dict)
    _ports: dict[int, Ports] = field(default_factory=dict)
    _pipelines: dict[int, Pipeline] = field(default_factory=dict)

    def pipeline(
        self,
        replies: Sequence[Mapping[str, Any]] | LLM = (),
        *,
        config: str | None = None,
        tools: Mapping[str, Any] | None = None,
        options: PipelineOptions | None = None,
    ) -> Pipeline:
        """``Kit.pipeline``, recording."""
        base = super().pipeline(replies, config=config, tools=tools, options=options)
        made = Pipeline(
            base.ports,
            base.options,
            telemetry=self.telemetry,
            interceptors=[Recorder(self.options)],
            hooks=self.hooks,
            rules=self.rules,
        )
        self._steps[id(made)] = None
        self._ports[id(made)] = made.ports
        self._pipelines[id(made)] = made
        return made

    def rebuilt(self, base: Pipeline, *, steps: Steps | None = None, **ports: Any) -> Pipeline:
        """``Kit.rebuilt``, recording."""
        made = Pipeline(
            replace(base.ports, **ports),
            base.options,
            steps=steps,
            telemetry=self.telemetry,
            interceptors=[Recorder(self.options)],
            hooks=self.hooks,
            rules=self.rules,
        )
        self._steps[id(made)] = steps
        self._ports[id(made)] = made.ports
        self._pipelines[id(made)] = made
        return made

    def keep(self, pipeline: Pipeline, report: TurnReport) -> None:
        """Keep the recorded turn ``pipeline`` ran, with its steps and ports."""
        key = id(pipeline)
        self.turns.append(
            RecordedTurn(report, self._steps[key], self._ports[key], self._pipelines.get(key))
        )

    async def run(
        self,
        pipeline: Pipeline,
        request: Mapping[str, Any] | str,
        caller: Caller = CALLER,
        *,
        initial_mode: str | None = None,
    ) -> TurnReport:
        """``Kit.run``, keeping the recorded turn."""
        report = await super().run(pipeline, request, caller, initial_mode=initial_mode)
        self.keep(pipeline, report)
        return report


async def streamed_report(
    pipeline: Pipeline,
    request: RequestInput,
    caller: Caller = CALLER,
    *,
    initial_mode: str | None = None,
    leave_after: int | None = None,
    leave_at: type[TurnEvent] | None = None,
) -> TurnReport:
    """Run one request through ``Pipeline.stream`` and take its items as a client would:
    all of them, or ``leave_after`` of them, or up to the first progress item of a
    ``leave_at`` event, before leaving (the turn is then cancelled); the turn's report."""
    stream = pipeline.stream(request, caller, initial_mode=initial_mode)
    taken = 0
    async with stream:
        async for item in stream:
            taken += 1
            if leave_after is not None and taken >= leave_after:
                break
            if isinstance(item, StreamProgress) and type(item.event) is leave_at:
                break
    assert stream.report is not None
    return stream.report


async def run_recorded(
    name: str,
    store: Store,
    options: RecordingOptions | None = None,
    *,
    streamed: bool = False,
    hooks: Hooks | None = None,
    rules: Sequence[HostRule] = (),
    checked: bool = True,
) -> RecordingKit:
    """Run scenario ``name`` on ``store`` with every turn recorded (streamed, if asked),
    every pipeline running ``hooks`` and ``rules``. Unless ``checked``, the scenario's
    own checks of its path may fail (a host rule refused its turns): the turns it ran
    until then are kept."""
    kit = RecordingKit(
        store,
        streamed=streamed,
        options=options or RecordingOptions(timer=None),
        hooks=hooks,
        rules=rules,
    )
    try:
        await SCENARIOS[name](kit)
    except AssertionError:
        if checked:
            raise
    return kit


class CutStreamLLM(ScriptedLLM):
    """A ``ScriptedLLM`` whose first ``times`` streams break off after ``after`` chunks.

    They raise ``ConnectionError`` there, or, with ``hang``, wait there for good:
    a turn then ends only when something stops it (its consumer leaving).
    """

    def __init__(
        self,
        replies: Sequence[Mapping[str, Any]],
        *,
        after: int,
        hang: bool = False,
        times: int = 1,
        chunk_size: int = 4,
    ) -> None:
        super().__init__(replies, chunk_size=chunk_size)
        self.after, self.hang, self.times = after, hang, times

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """The scripted reply's chunks, broken off after ``after`` of them."""
        cut = self.times > 0
        self.times -= 1
        given = 0
        async for chunk in super().stream(request):
            if cut and given == self.after:
                if self.hang:
                    await asyncio.Event().wait()
                raise ConnectionError("the model's connection dropped")
            given += 1
            yield chunk


async def hanging_tool(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """A server tool that never answers: only a stop or a deadline ends the turn."""
    await asyncio.Event().wait()
    raise AssertionError("an unset event was set")


def recording_pipeline(
    store: SessionStore,
    replies: Sequence[Mapping[str, Any]] | LLM = (),
    *,
    recording: RecordingOptions | None = None,
    config: str | None = None,
    tools: Mapping[str, ToolExecutor] | None = None,
    options: PipelineOptions | None = None,
    steps: Steps | None = None,
    telemetry: Telemetry | None = None,
) -> Pipeline:
    """``make_pipeline`` (deterministic clock and ids) recording every turn; no spans by default.

    Without ``recording``, durations are not timed either, so the same turn records the
    same bytes."""
    base, _ = make_pipeline(store, replies, config=config, tools=tools, options=options)
    return Pipeline(
        base.ports,
        base.options,
        steps=steps,
        telemetry=telemetry or Telemetry.off(),
        interceptors=[Recorder(recording or RecordingOptions(timer=None))],
    )


DEMO_SCRIPT: list[dict[str, Any]] = [
    calls(
        change_mode("m1", "review", "review the diff"),
        call("r1", "read_file", {"path": "app.py"}),
        text="Switching to review; reading app.py.",
    ),
    text("app.py looks fine."),
    calls(call("k1", "review_checklist")),
    text("Checked."),
]
"""The demo-like session: a mode change and a client call, the continuation, then a
follow-on whose model runs a server tool (``review_checklist``)."""


async def demo_session(pipeline: Pipeline) -> list[TurnReport]:
    """Run the demo-like session on ``pipeline`` (made with ``DEMO_SCRIPT``): three turns."""
    first = await pipeline.run({"Instruction": "Review app.py"}, CALLER)
    second = await pipeline.run(continuation(ok(first.result)), CALLER)
    third = await pipeline.run(follow_on(ok(second.result), "Any checklist?"), CALLER)
    ok(third.result)
    return [first, second, third]


class Ticks:
    """A recorder's timer (``RecordingOptions.timer``) that moves on 2.5 ms each read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.0025
        return self.now
