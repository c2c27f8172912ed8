"""Streamed turns (AGN-034 §4.7) recorded and replayed.

1. Recording: a streamed turn's model call is one ``LLM.stream`` port call whose
   answer is the reply its chunks make — the same JSON a ``complete`` call
   records for the same turn; a tapped model streams exactly when the real one
   does.
2. Replay: a recorded streamed turn replays streamed, on every scenario; what
   the engine puts together again is checked at the stream call; a recording
   edited to another reply is named where that reply leads.
3. Streams cut short: a failure part-way (``DESIGN/streaming/interrupted``),
   failures before the text (retried), the reply-size limit crossed mid-stream —
   each replays to the same end, redacted too.
4. A turn whose consumer left (``DESIGN/streaming/consumer-gone``) is recorded
   and replays to the same stop: inside the model's stream, inside a server
   tool, or before the commit. A call the turn deadline cut short is named
   unreplayable.
5. The JSON form: old recordings and non-streamed turns keep theirs.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, text
from replay_kit import (
    CutStreamLLM,
    hanging_tool,
    recording_pipeline,
    run_recorded,
    streamed_report,
)
from trace_scenarios import SCENARIOS

from aptix_pipeline import (
    PipelineOptions,
    PortCall,
    RecordedError,
    RecordingOptions,
    TurnRecording,
    replay,
)
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import (
    ErrorCode,
    LLMReply,
    LLMRequest,
    ReplyAssembler,
    ReplyFinished,
    ReplyTextDelta,
    ReplyToolCallDelta,
    StreamingLLM,
    ToolCall,
)
from aptix_pipeline.engine import ModelCallRetried, Telemetry, TurnEvent, TurnReport
from aptix_pipeline.engine.replay.port_tap import tap_ports
from aptix_pipeline.engine.replay.recorder import RecordingTap

llm_client_module = importlib.import_module("aptix_pipeline.steps.llm_client")
"""The step module (``aptix_pipeline.steps.llm_client`` is also the step function's name)."""
CONSUMER_GONE = "DESIGN/streaming/consumer-gone"
INTERRUPTED = "DESIGN/streaming/interrupted"
REPLY_SIZE = "DESIGN/limits/model-reply-size"
MATH_THEN_ADD = [
    calls(call("x1", "Math")),
    calls(call("a1", "Add", {"a": 1, "b": 2}), text="Adding one and two, "),
    text("The sum is 3: one and two make three, as the server tool said."),
]
"""An Initial turn that expands Math, runs Add on the server (with text), then answers."""


def recording_of(report: TurnReport) -> TurnRecording:
    """The report's recording (the test fails when there is none)."""
    assert report.recording is not None, "the turn was not recorded"
    return report.recording


def model_calls(recording: TurnRecording) -> list[PortCall]:
    """The recording's calls of the LLM port, in order."""
    return [c for c in recording.calls if c.port == "LLM"]


async def streamed(
    script: list[dict[str, Any]] | ScriptedLLM,
    *,
    options: RecordingOptions | None = None,
    pipeline_options: PipelineOptions | None = None,
    tools: dict[str, Any] | None = None,
    leave_after: int | None = None,
    leave_at: type[TurnEvent] | None = None,
    telemetry: Telemetry | None = None,
) -> TurnRecording:
    """One Initial turn run through ``Pipeline.stream`` with recording on; its recording."""
    pipeline = recording_pipeline(
        MemoryStore(),
        script,
        recording=options,
        options=pipeline_options,
        tools=tools,
        telemetry=telemetry,
    )
    report = await streamed_report(
        pipeline, {"Instruction": "Add"}, leave_after=leave_after, leave_at=leave_at
    )
    return recording_of(report)


def assert_replays_exactly(recording: TurnRecording, outcome: Any) -> None:
    """No divergence; the replayed trace and result are the recorded ones."""
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    assert outcome.report.trace is not None
    assert outcome.report.trace.to_dict() == recording.trace.to_dict()
    assert outcome.report.result.to_wire() == recording.result


def through_json(recording: TurnRecording) -> TurnRecording:
    """The recording after a round trip through its JSON text."""
    return TurnRecording.from_dict(json.loads(recording.to_json()))


# === 1. recording ===============================================================================


@pytest.mark.decision("D270")
async def test_a_streamed_turn_records_the_same_calls_as_unstreamed_but_stream_for_complete() -> (
    None
):
    plain = recording_of(
        await recording_pipeline(MemoryStore(), MATH_THEN_ADD).run({"Instruction": "Add"}, CALLER)
    )

    recording = await streamed(MATH_THEN_ADD)

    assert [c.name for c in model_calls(recording)] == ["LLM.stream"] * 3
    assert [replace(c, call="complete") if c.port == "LLM" else c for c in recording.calls] == list(
        plain.calls
    )
    assert recording.trace == plain.trace
    assert recording.result == plain.result
    assert model_calls(recording)[1].answer["ToolCalls"][0]["ArgumentsJson"] == ('{"a": 1, "b": 2}')


@pytest.mark.decision("D270")
def test_a_tapped_model_streams_exactly_when_the_real_one_does() -> None:
    base = recording_pipeline(MemoryStore(), [text("hi")]).ports

    class Plain:
        async def complete(self, request: Any) -> LLMReply:
            return LLMReply(text="hi")

    tap = RecordingTap()
    assert isinstance(tap_ports(tap, base).llm, StreamingLLM)
    assert not isinstance(tap_ports(tap, replace(base, llm=Plain())).llm, StreamingLLM)
    assert isinstance(tap_ports(tap, None, streaming=True).llm, StreamingLLM)
    assert not isinstance(tap_ports(tap, None).llm, StreamingLLM)


@pytest.mark.decision("D270")
async def test_a_streamed_turn_on_a_model_that_cannot_stream_records_complete_and_replays() -> None:
    class Plain:
        def __init__(self) -> None:
            self._scripted = ScriptedLLM([text("Hello there.")])

        async def complete(self, request: Any) -> LLMReply:
            return await self._scripted.complete(request)

    recording = await streamed(Plain())  # type: ignore[arg-type]

    assert [c.name for c in model_calls(recording)] == ["LLM.complete"]
    assert_replays_exactly(recording, await replay(recording))


# === 2. replay ==================================================================================


@pytest.mark.decision("D271")
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_recorded_streamed_replays_with_no_divergence(name: str) -> None:
    kit = await run_recorded(name, MemoryStore(), streamed=True)

    assert kit.turns, name
    for turn in kit.turns:
        recording = turn.recording
        assert recording.trace == turn.report.trace
        assert_replays_exactly(recording, await replay(recording, steps=turn.steps))
        assert_replays_exactly(recording, await replay(through_json(recording), steps=turn.steps))


@pytest.mark.decision("D271")
async def test_the_scenarios_streamed_hold_stream_calls_for_every_scripted_model() -> None:
    """The scenarios above replayed streams: those whose model is a ScriptedLLM streamed."""
    kit = await run_recorded(
        "server_tool_rounds_with_container_expansion", MemoryStore(), streamed=True
    )

    names = {c.name for turn in kit.turns for c in model_calls(turn.recording)}

    assert names == {"LLM.stream"}


@pytest.mark.decision("D271")
async def test_a_recorded_streamed_turn_replays_streamed_with_no_divergence() -> None:
    recording = await streamed(MATH_THEN_ADD)

    outcome = await replay(recording)

    assert_replays_exactly(recording, outcome)
    assert outcome.report.llm_calls == 3


@pytest.mark.decision("D271")
async def test_a_recording_edited_to_another_streamed_reply_is_named_where_that_reply_leads() -> (
    None
):
    recording = await streamed(MATH_THEN_ADD)
    data = json.loads(recording.to_json())
    last = [c for c in data["calls"] if c["port"] == "LLM"][-1]
    last["answer"]["Text"] = "The sum is 4."

    outcome = await replay(TurnRecording.from_dict(data))

    divergence = outcome.divergence
    assert divergence is not None
    assert (divergence.kind, divergence.port_call) == (
        "arguments",
        "SessionTransaction.append_transcript",
    )
    assert divergence.where.endswith("].Content")
    assert divergence.expected.startswith("The sum is 3")
    assert divergence.actual == "The sum is 4."


class _AssemblerLosingTheFinishReason(ReplyAssembler):
    """An engine whose assembly of streamed replies drops the finish reason."""

    def reply(self) -> LLMReply:
        return super().reply().model_copy(update={"finish_reason": None})


class _AssemblerEditingArguments(ReplyAssembler):
    """An engine whose assembly of streamed replies pads each tool call's arguments."""

    def reply(self) -> LLMReply:
        made = super().reply()
        padded = [
            ToolCall(
                tool_call_id=c.tool_call_id, name=c.name, arguments_json=c.arguments_json + " "
            )
            for c in made.tool_calls
        ]
        return made.model_copy(update={"tool_calls": padded})


@pytest.mark.decision("D271")
@pytest.mark.parametrize("capture", [False, True], ids=["plain", "content-captured"])
async def test_an_engine_that_assembles_another_reply_is_named_at_the_stream_call(
    monkeypatch: pytest.MonkeyPatch, capture: bool
) -> None:
    recording = await streamed(
        MATH_THEN_ADD, telemetry=Telemetry(spans=False, capture_content=capture)
    )
    first = model_calls(recording)[0]
    monkeypatch.setattr(llm_client_module, "ReplyAssembler", _AssemblerLosingTheFinishReason)

    outcome = await replay(recording)

    divergence = outcome.divergence
    assert divergence is not None
    assert (divergence.kind, divergence.call_number, divergence.port_call, divergence.step) == (
        "reply",
        first.n,
        "LLM.stream",
        "llm_client",
    )
    assert (divergence.where, divergence.expected, divergence.actual) == (
        "answer.FinishReason",
        "tool_calls",
        None,
    )
    described = divergence.describe()
    assert f"port call #{first.n} LLM.stream during step llm_client" in described
    assert "the engine put another reply together" in described


@pytest.mark.decision("D271")
async def test_with_content_capture_the_replay_checks_the_assembled_tool_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recording = await streamed(
        MATH_THEN_ADD, telemetry=Telemetry(spans=False, capture_content=True)
    )
    add = model_calls(recording)[1]
    monkeypatch.setattr(llm_client_module, "ReplyAssembler", _AssemblerEditingArguments)

    divergence = (await replay(recording)).divergence

    assert divergence is not None
    assert (divergence.kind, divergence.call_number) == ("reply", model_calls(recording)[0].n)
    assert divergence.where == "answer.ToolCalls[0].ArgumentsJson"
    assert (divergence.expected, divergence.actual) == ("{}", "{} ")
    assert add.answer["ToolCalls"][0]["ArgumentsJson"] == '{"a": 1, "b": 2}'


@pytest.mark.decision("D271")
async def test_a_non_streamed_recording_replays_without_streaming() -> None:
    recording = recording_of(
        await recording_pipeline(MemoryStore(), MATH_THEN_ADD).run({"Instruction": "Add"}, CALLER)
    )

    outcome = await replay(recording)

    assert [c.name for c in model_calls(recording)] == ["LLM.complete"] * 3
    assert_replays_exactly(recording, outcome)


@pytest.mark.decision("D271")
async def test_a_redacted_recording_of_a_streamed_turn_replays_and_holds_no_reply_text() -> None:
    recording = await streamed(MATH_THEN_ADD, options=RecordingOptions(redact=True))

    outcome = await replay(recording)

    assert recording.redacted
    assert_replays_exactly(recording, outcome)
    file = recording.to_json()
    assert "one and two" not in file
    assert [c.answer.get("Text") for c in model_calls(recording)] == [
        None,
        "[redacted]",
        "[redacted]",
    ]
    assert model_calls(recording)[1].answer["ToolCalls"][0]["ArgumentsJson"] == '{"a":0,"b":0}'


@pytest.mark.decision("D271")
async def test_a_stream_call_is_redacted_as_a_complete_call_is() -> None:
    plain = recording_of(
        await recording_pipeline(
            MemoryStore(), MATH_THEN_ADD, recording=RecordingOptions(redact=True, timer=None)
        ).run({"Instruction": "Add"}, CALLER)
    )

    recording = await streamed(MATH_THEN_ADD, options=RecordingOptions(redact=True, timer=None))

    assert [c.to_dict() for c in model_calls(recording)] == [
        {**c.to_dict(), "call": "stream"} for c in model_calls(plain)
    ]


# === 3. streams cut short =======================================================================


@pytest.mark.decision("D270", "D271")
async def test_a_stream_failing_part_way_records_its_reply_so_far_and_replays_the_fault() -> None:
    llm = CutStreamLLM([text("Hello there, a reply in pieces.")], after=3)

    recording = await streamed(llm)

    [cut] = model_calls(recording)
    assert cut.answer == {"Text": "Hello there,", "ToolCalls": []}
    assert cut.error == RecordedError(
        "ConnectionError",
        "the model's connection dropped",
        ("ConnectionError", "OSError", "Exception", "BaseException"),
    )
    assert [e["RuleId"] for e in recording.result["Errors"]] == [INTERRUPTED]
    for replayed in (recording, through_json(recording), recording.redact()):
        outcome = await replay(replayed)
        assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
        assert outcome.report.result.errors[0].rule_id == INTERRUPTED


@pytest.mark.decision("D270", "D271")
async def test_streams_failing_before_any_text_are_retried_and_replay_so() -> None:
    llm = CutStreamLLM([text("Hello there.")] * 3, after=0, times=2)

    recording = await streamed(llm)

    assert [(c.name, c.answer, c.error is not None) for c in model_calls(recording)] == [
        ("LLM.stream", None, True),
        ("LLM.stream", None, True),
        ("LLM.stream", model_calls(recording)[2].answer, False),
    ]
    assert recording.successful
    assert_replays_exactly(recording, await replay(recording))


@pytest.mark.decision("D270", "D271")
async def test_a_stream_the_reply_size_limit_closed_replays_crossing_it_at_the_same_chunk() -> None:
    llm = ScriptedLLM([text("Hello there, a reply that is far too long.")], chunk_size=7)

    recording = await streamed(llm, pipeline_options=PipelineOptions(max_model_reply_chars=20))

    [closed] = model_calls(recording)
    assert closed.answer == {"Text": "Hello there, a", "ToolCalls": []}
    assert closed.last_chunk == {"Text": " reply "}
    assert (closed.error, closed.cancelled) == (None, False)
    [error] = recording.result["Errors"]
    assert error["RuleId"] == REPLY_SIZE
    assert "21 characters" in error["Message"]
    assert_replays_exactly(recording, await replay(recording))
    assert_replays_exactly(recording, await replay(through_json(recording)))


class ChunksLLM:
    """A model that streams the chunks it is given, whatever they are (and cannot answer whole)."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks

    async def complete(self, request: LLMRequest) -> LLMReply:
        raise AssertionError("a streamed turn asks a streaming model to stream")

    async def stream(self, request: LLMRequest) -> AsyncIterator[Any]:
        for chunk in self.chunks:
            yield chunk


@pytest.mark.decision("D270", "D271")
@pytest.mark.parametrize(
    ("chunks", "how"),
    [
        ([ReplyTextDelta("Hi"), ReplyFinished(), ReplyTextDelta(" again")], "closed"),
        ([ReplyTextDelta("Hi"), ReplyToolCallDelta(0, "c1", None, "{}")], "ended"),
        ([ReplyToolCallDelta(0, "c1", "read_file"), ReplyToolCallDelta(0, "c2")], "closed"),
    ],
    ids=["text-after-the-end", "call-without-a-name", "call-given-two-ids"],
)
async def test_a_malformed_stream_records_what_the_engine_refused_and_replays_to_that_fault(
    chunks: list[Any], how: str
) -> None:
    recording = await streamed(ChunksLLM(chunks))  # type: ignore[arg-type]

    cut = model_calls(recording)[0]
    if how == "closed":
        assert cut.last_chunk is not None
    else:
        assert cut.error is not None
        assert cut.error.type == "MalformedStreamError"
    assert not recording.successful
    assert_replays_exactly(recording, await replay(recording))
    assert_replays_exactly(recording, await replay(through_json(recording)))


@pytest.mark.decision("D271")
async def test_an_engine_reading_a_closed_stream_on_is_named_at_the_stream_call() -> None:
    llm = ScriptedLLM([text("Hello there, a reply that is far too long.")], chunk_size=7)
    recording = await streamed(llm, pipeline_options=PipelineOptions(max_model_reply_chars=20))
    options = {**recording.options, "max_model_reply_chars": 100}

    divergence = (await replay(replace(recording, options=options))).divergence

    assert divergence is not None
    assert (divergence.kind, divergence.port_call) == ("stream", "LLM.stream")
    assert (divergence.expected, divergence.actual) == (
        "closed after chunk 2",
        "read on after chunk 2",
    )


@pytest.mark.decision("D271")
async def test_an_engine_closing_a_stream_early_is_named_at_the_stream_call() -> None:
    recording = await streamed([text("Hello there, a reply of some length.")])
    options = {**recording.options, "max_model_reply_chars": 20}

    divergence = (await replay(replace(recording, options=options))).divergence

    assert divergence is not None
    assert (divergence.kind, divergence.port_call) == ("stream", "LLM.stream")
    assert divergence.expected == "read to its end (2 chunks)"
    assert divergence.actual == "closed after chunk 1"


# === 4. a consumer that leaves ==================================================================


@pytest.mark.decision("D272")
async def test_a_turn_whose_consumer_left_mid_stream_is_recorded_and_replays_to_the_same_stop() -> (
    None
):
    llm = CutStreamLLM([text("Hello there, a reply in pieces.")], after=3, hang=True)

    recording = await streamed(llm, leave_after=4)

    [cut] = model_calls(recording)
    assert (cut.cancelled, cut.error, cut.answer) == (
        True,
        None,
        {"Text": "Hello there,", "ToolCalls": []},
    )
    assert recording.stopped_after_call == cut.n
    assert [c.name for c in recording.calls[cut.n :]] == [
        "UsageLedger.settle_usage",  # the cut call, settled as failed (D594)
        "SessionTransaction.rollback",
    ]
    assert [e["RuleId"] for e in recording.result["Errors"]] == [CONSUMER_GONE]
    assert recording.trace.faulted_step == "llm_client"
    for replayed in (recording, through_json(recording), recording.redact()):
        outcome = await replay(replayed)
        assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
        assert outcome.report.result.errors[0].rule_id == CONSUMER_GONE


@pytest.mark.decision("D272")
async def test_a_turn_whose_consumer_left_during_a_server_tool_replays_to_the_same_stop() -> None:
    recording = await streamed(MATH_THEN_ADD, tools={"Add": hanging_tool}, leave_after=6)

    [add] = [c for c in recording.calls if c.name == "ToolExecutor.Add"]
    assert (add.cancelled, add.answer, add.error) == (True, None, None)
    assert "cancelled" in add.to_dict()
    assert "answer" not in add.to_dict()
    assert recording.stopped_after_call == add.n
    assert_replays_exactly(recording, await replay(recording))


@pytest.mark.decision("D272")
async def test_a_turn_whose_consumer_left_before_its_commit_replays_to_the_same_stop() -> None:
    recording = await streamed([text("Hello there, a reply of some length.")], leave_after=1)

    assert not any(c.cancelled for c in recording.calls)
    assert recording.stopped_after_call is not None
    before_stop = recording.calls[: recording.stopped_after_call]
    assert [c.name for c in recording.calls[recording.stopped_after_call :]] == [
        "UsageLedger.settle_usage",  # the model call's usage, settled as the walk ends (D594)
        "SessionTransaction.rollback",
    ]
    assert "LLM.stream" in [c.name for c in before_stop]
    assert recording.trace.faulted_step == "complete"
    assert_replays_exactly(recording, await replay(recording))
    assert_replays_exactly(recording, await replay(through_json(recording)))


@pytest.mark.decision("D272")
async def test_a_turn_whose_consumer_left_between_two_model_attempts_replays_to_that_stop() -> None:
    """The first stream fails before its text; the consumer leaves during the wait."""
    llm = CutStreamLLM([text("Hello there.")] * 2, after=0)
    waits = PipelineOptions(retry_wait_seconds=600, retry_max_wait_seconds=600)

    recording = await streamed(llm, pipeline_options=waits, leave_at=ModelCallRetried)

    [failed] = model_calls(recording)
    assert (failed.error is not None, failed.cancelled) == (True, False)
    assert recording.stopped_after_call == failed.n
    [record] = recording.trace.llm_calls
    assert (record.retries, record.error) == (("ConnectionError",), "CancelledError")
    assert_replays_exactly(recording, await replay(recording))


@pytest.mark.decision("D272")
async def test_a_call_the_turn_deadline_cut_short_is_named_unreplayable() -> None:
    report = await recording_pipeline(
        MemoryStore(),
        MATH_THEN_ADD,
        tools={"Add": hanging_tool},
        options=PipelineOptions(turn_deadline_seconds=0.05),
    ).run({"Instruction": "Add"}, CALLER)
    recording = recording_of(report)
    [add] = [c for c in recording.calls if c.name == "ToolExecutor.Add"]
    assert add.cancelled
    assert recording.stopped_after_call is None
    assert report.result.errors[0].code is ErrorCode.DEADLINE_EXCEEDED

    outcome = await replay(recording)

    divergence = outcome.divergence
    assert divergence is not None
    assert (divergence.kind, divergence.call_number, divergence.port_call) == (
        "unreplayable",
        add.n,
        "ToolExecutor.Add",
    )
    assert "cut short by the turn's deadline" in divergence.describe()


# === 5. the JSON form ===========================================================================


def stream_calls() -> Iterator[PortCall]:
    """A stream call in each form it is recorded in."""
    error = RecordedError("ConnectionError", "dropped", ("ConnectionError", "Exception"))
    partial = {"Text": "Hel", "ToolCalls": []}
    yield PortCall(1, "llm_client", "LLM", "stream", {}, {"Text": "Hello", "ToolCalls": []})
    yield PortCall(2, "llm_client", "LLM", "stream", {}, partial, error)
    yield PortCall(3, "llm_client", "LLM", "stream", {}, None, error)
    yield PortCall(4, "llm_client", "LLM", "stream", {}, partial, last_chunk={"Text": "lo"})
    yield PortCall(5, "llm_client", "LLM", "stream", {}, partial, cancelled=True)
    yield PortCall(6, "llm_client", "ToolExecutor", "Add", {}, cancelled=True)
    yield PortCall(7, "llm_client", "LLM", "stream", {}, partial, last_chunk={}, ended=True)


@pytest.mark.decision("D270")
def test_every_form_of_a_stream_call_reads_back_as_written() -> None:
    for written in stream_calls():
        data = json.loads(json.dumps(written.to_dict()))
        assert PortCall.from_dict(data) == written
    keys = [list(c.to_dict())[5:] for c in stream_calls()]
    assert keys == [
        ["answer"],
        ["answer", "error"],
        ["error"],
        ["answer", "last_chunk"],
        ["answer", "cancelled"],
        ["cancelled"],
        ["answer", "last_chunk", "ended"],
    ]


@pytest.mark.decision("D270")
def test_a_call_that_answered_or_raised_keeps_its_json_form() -> None:
    answered = PortCall(1, "request_handler", "Clock", "now", {}, "2026-01-01T00:00:00Z")
    nothing = PortCall(2, "complete", "SessionTransaction", "commit", {})
    raised = PortCall(3, "llm_client", "LLM", "complete", {}, error=RecordedError("E", "m"))

    assert [list(c.to_dict()) for c in (answered, nothing, raised)] == [
        ["n", "step", "port", "call", "args", "answer"],
        ["n", "step", "port", "call", "args", "answer"],
        ["n", "step", "port", "call", "args", "error"],
    ]


@pytest.mark.decision("D270")
async def test_a_stopped_turns_recording_says_where_and_refuses_a_bad_count() -> None:
    recording = await streamed([text("Hello there.")], leave_after=1)
    data = json.loads(recording.to_json())

    assert list(data)[list(data).index("trace_content") + 1] == "stopped_after_call"
    assert data["format"] == "aptix.turn-recording/2"
    with pytest.raises(ValueError, match="stopped_after_call"):
        TurnRecording.from_dict({**data, "stopped_after_call": -1})
    assert "stopped_after_call" not in json.loads((await streamed([text("hi")])).to_json())
