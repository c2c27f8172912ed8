"""Replay against the host's own code: its model, server tools and catalogs run live.

1. A live host model: one that answers as recorded replays with no divergence; a
   changed reply, a changed failure, a reply where the recorded model failed, are
   each named at the model call and the JSON path; the request it is sent is
   still checked first.
2. Streamed turns: a live ``StreamingLLM`` is streamed where the recording's call
   was ``LLM.stream``, its assembled reply checked; streams closed by the engine
   and turns stopped by their consumer replay live too.
3. Live server tools and catalogs: a changed result, prompt or mode is named at
   its call; every scenario replays with its own tools and catalogs live.
4. The API: ``LivePorts`` and its mapping form, refusals naming the field, the
   redacted recording rule, ``assert_replays`` over a folder of recordings.
5. A diverging replay ends quietly: no "rollback failed", no traceback, one log
   line naming the divergence.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, FlakyLLM, call, calls, text
from replay_kit import (
    CutStreamLLM,
    hanging_tool,
    recording_pipeline,
    run_recorded,
    streamed_report,
)
from repo import ROOT
from trace_scenarios import SCENARIOS

from aptix_pipeline import (
    Caller,
    Divergence,
    Hooks,
    LivePorts,
    PipelineOptions,
    RecordingOptions,
    ReplayDivergenceError,
    ReplayOutcome,
    TurnRecording,
    assert_replays,
    embedded_pipeline,
    recordings_in,
    replay,
)
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.tools.builtin import BUILTIN_TOOLS
from aptix_pipeline.contracts import (
    ChatRole,
    LLMReply,
    LLMRequest,
    PipelineStep,
    ReplyChunk,
    ToolCall,
    ToolInvocation,
    split_reply,
)
from aptix_pipeline.engine import ModelCallRetried, TurnReport
from aptix_pipeline.steps import TurnScope
from aptix_pipeline.steps.prompt_content_provider_initializer import (
    prompt_content_provider_initializer,
)

sys.path.insert(0, str(ROOT / "examples"))

from make_recordings import STREAMED_SCRIPT

CATALOG_TOML = (ROOT / "adapters" / "config" / "default_config.toml").read_text(encoding="utf-8")
SUM_QUESTION = {"Instruction": "What is 2 + 3?"}


class HostModel:
    """A host's own model adapter: expands Math, asks the server's Add for 2 + 3, then
    says the sum the tool gave it, worded by ``wording``; it keeps every request."""

    provider_name = "host"

    def __init__(self, wording: str = "The sum is {}.") -> None:
        self.wording = wording
        self.requests: list[LLMRequest] = []

    async def complete(self, request: LLMRequest) -> LLMReply:
        """The next move, read from the request's last message."""
        self.requests.append(request)
        last = request.messages[-1]
        if last.role is not ChatRole.TOOL:
            return LLMReply(
                tool_calls=[ToolCall(tool_call_id="m1", name="Math", arguments_json="{}")]
            )
        if last.name == "Math":
            arguments = json.dumps({"a": 2, "b": 3})
            return LLMReply(
                tool_calls=[ToolCall(tool_call_id="a1", name="Add", arguments_json=arguments)]
            )
        return LLMReply(text=self.wording.format(json.loads(last.content)["result"]))


class StreamingHostModel(HostModel):
    """``HostModel`` that also streams its reply, ``chunk_size`` characters a chunk."""

    def __init__(self, wording: str = "The sum is {}.", chunk_size: int = 3) -> None:
        super().__init__(wording)
        self.chunk_size = chunk_size
        self.streamed = 0

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """The reply of ``complete``, in chunks."""
        self.streamed += 1
        for chunk in split_reply(await self.complete(request), self.chunk_size):
            yield chunk


async def host_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """The host's own ``Add``: a + b."""
    return json.dumps({"result": arguments["a"] + arguments["b"]})


async def off_by_one_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """The host's ``Add`` after a regression."""
    return json.dumps({"result": arguments["a"] + arguments["b"] + 1})


def recording_of(report: TurnReport) -> TurnRecording:
    """The report's recording (the test fails when there is none)."""
    assert report.recording is not None, "the turn was not recorded"
    return report.recording


@pytest.fixture
async def host_recording() -> TurnRecording:
    """A turn of ``HostModel`` on the built-in catalog, with ``host_add`` as ``Add``."""
    pipeline = recording_pipeline(MemoryStore(), HostModel(), tools={"Add": host_add})
    report = await pipeline.run(SUM_QUESTION, CALLER)
    assert report.successful
    assert report.result.result is not None
    assert report.result.result.primary_output_text == "The sum is 5."
    return recording_of(report)


def assert_replays_exactly(recording: TurnRecording, outcome: ReplayOutcome) -> None:
    """No divergence; the replayed trace and result are the recorded ones."""
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    assert outcome.report.trace is not None
    assert outcome.report.trace.to_dict() == recording.trace.to_dict()
    assert outcome.report.result.to_wire() == recording.result


def diverged(outcome: ReplayOutcome) -> Divergence:
    """The outcome's divergence (the test fails when there is none)."""
    assert outcome.divergence is not None, "replayed without divergence"
    return outcome.divergence


def calls_named(recording: TurnRecording, name: str) -> list[int]:
    """The numbers (``n``) of the recording's calls named ``name``."""
    return [c.n for c in recording.calls if c.name == name]


# === 1. a live host model =======================================================================


@pytest.mark.decision("D293")
async def test_a_live_host_model_that_answers_the_same_replays_with_no_divergence(
    host_recording: TurnRecording,
) -> None:
    model = HostModel()

    outcome = await replay(host_recording, live=LivePorts(llm=model))

    assert_replays_exactly(host_recording, outcome)
    recorded = [c.args["request"] for c in host_recording.calls if c.name == "LLM.complete"]
    assert [r.to_wire() for r in model.requests] == recorded  # asked, every round


@pytest.mark.decision("D293")
async def test_a_live_host_model_with_a_changed_reply_is_named_at_the_model_call_and_path(
    host_recording: TurnRecording,
) -> None:
    outcome = await replay(host_recording, live=LivePorts(llm=HostModel("2 + 3 makes {}.")))

    divergence = diverged(outcome)
    assert (divergence.kind, divergence.port_call) == ("answer", "LLM.complete")
    assert divergence.step == "llm_client"
    assert divergence.call_number == calls_named(host_recording, "LLM.complete")[-1]
    assert divergence.where == "answer.Text"
    assert (divergence.expected, divergence.actual) == ("The sum is 5.", "2 + 3 makes 5.")
    described = divergence.describe()
    assert f"port call #{divergence.call_number} LLM.complete during step llm_client" in described
    assert "the live port answered otherwise" in described
    assert "at:       answer.Text" in described
    # The replay stopped there: the changed reply went nowhere.
    assert outcome.report.faulted_step == "llm_client"


async def with_a_postscript(scope: TurnScope) -> None:
    """Today's prompt initializer gives the model one more message."""
    await prompt_content_provider_initializer(scope)
    scope.messages.append(scope.messages[-1].model_copy(update={"content": "P.S."}))


@pytest.mark.decision("D293")
async def test_the_request_a_live_model_is_sent_is_checked_before_it_is_asked(
    host_recording: TurnRecording,
) -> None:
    model = HostModel()

    outcome = await replay(
        host_recording,
        steps={PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER: with_a_postscript},
        live=LivePorts(llm=model),
    )

    divergence = diverged(outcome)
    # The longer prompt is reserved at a larger estimate first (D594): the reservation
    # diverges, before the model call.
    assert (divergence.kind, divergence.port_call) == ("arguments", "UsageLedger.reserve_usage")
    assert divergence.where == "call.Charge.Tokens"
    assert model.requests == []  # never asked what the recorded model was not


@pytest.mark.decision("D293")
async def test_a_live_model_failing_as_recorded_is_retried_as_recorded() -> None:
    kit = await run_recorded("llm_recovers_after_retries", MemoryStore())
    [turn] = kit.turns
    failed = [c for c in turn.recording.calls if c.name == "LLM.complete" and c.error]
    assert len(failed) == 2

    outcome = await replay(turn.recording, live=LivePorts(llm=FlakyLLM(failures=2)))

    assert_replays_exactly(turn.recording, outcome)


@pytest.mark.decision("D293")
@pytest.mark.parametrize(
    ("failures", "call", "where"),
    [(1, 1, "error"), (3, 2, "answer")],
    ids=["answers-where-it-failed", "fails-where-it-answered"],
)
async def test_a_live_model_failing_otherwise_is_named_at_the_call_that_differs(
    failures: int, call: int, where: str
) -> None:
    """The recorded model failed twice, then answered (calls 0, 1 and 2 of the model)."""
    kit = await run_recorded("llm_recovers_after_retries", MemoryStore())
    [turn] = kit.turns
    recorded = [c for c in turn.recording.calls if c.name == "LLM.complete"]

    live = LivePorts(llm=FlakyLLM(failures=failures))
    divergence = diverged(await replay(turn.recording, live=live))

    assert (divergence.kind, divergence.where) == ("answer", where)
    assert divergence.call_number == recorded[call].n
    assert repr(divergence.actual) == "<absent>"  # no error, or no answer
    recorded_outcome = recorded[call].to_dict()[where]
    assert divergence.expected == recorded_outcome


@pytest.mark.decision("D293")
async def test_a_live_model_failing_with_another_message_is_named_at_the_message() -> None:
    class Unreachable(FlakyLLM):
        async def complete(self, request: LLMRequest) -> LLMReply:
            self.calls += 1
            if self.calls <= self.failures:
                raise ConnectionError(f"model down (call {self.calls})")
            return LLMReply(text=self.text)

    kit = await run_recorded("llm_recovers_after_retries", MemoryStore())
    [turn] = kit.turns

    divergence = diverged(await replay(turn.recording, live=LivePorts(llm=Unreachable(2))))

    assert (divergence.kind, divergence.where) == ("answer", "error.message")
    assert divergence.call_number == calls_named(turn.recording, "LLM.complete")[0]
    assert divergence.expected == "model unreachable (call 1)"
    assert divergence.actual == "model down (call 1)"


# === 2. streamed turns ==========================================================================


async def streamed_recording(
    llm: Any, *, options: PipelineOptions | None = None, **leave: Any
) -> TurnRecording:
    """One Initial turn run through ``Pipeline.stream`` with recording on; its recording."""
    pipeline = recording_pipeline(MemoryStore(), llm, options=options, tools={"Add": host_add})
    return recording_of(await streamed_report(pipeline, SUM_QUESTION, **leave))


@pytest.mark.decision("D296")
async def test_a_live_streaming_model_is_streamed_where_the_recorded_call_streamed() -> None:
    recording = await streamed_recording(StreamingHostModel(chunk_size=4))
    assert set(calls_named(recording, "LLM.stream"))
    model = StreamingHostModel(chunk_size=5)  # chunks need not be the recorded ones

    outcome = await replay(recording, live=LivePorts(llm=model))

    assert_replays_exactly(recording, outcome)
    assert model.streamed == len(calls_named(recording, "LLM.stream")) == 3


@pytest.mark.decision("D296")
async def test_a_live_streaming_model_with_a_changed_reply_is_named_at_the_stream_call() -> None:
    recording = await streamed_recording(StreamingHostModel())

    outcome = await replay(recording, live=LivePorts(llm=StreamingHostModel("Sum: {}.")))

    divergence = diverged(outcome)
    assert (divergence.kind, divergence.port_call) == ("answer", "LLM.stream")
    assert divergence.call_number == calls_named(recording, "LLM.stream")[-1]
    assert (divergence.where, divergence.expected, divergence.actual) == (
        "answer.Text",
        "The sum is 5.",
        "Sum: 5.",
    )


@pytest.mark.decision("D296")
async def test_a_live_model_that_cannot_stream_a_streamed_recording_is_a_call_divergence() -> None:
    recording = await streamed_recording(StreamingHostModel())

    divergence = diverged(await replay(recording, live=LivePorts(llm=HostModel())))

    assert divergence.kind == "call"
    assert (divergence.expected["call"], divergence.actual["call"]) == (
        "LLM.stream",
        "LLM.complete",
    )


@pytest.mark.decision("D296")
async def test_a_live_streaming_model_replays_an_unstreamed_recording_unstreamed(
    host_recording: TurnRecording,
) -> None:
    model = StreamingHostModel()

    outcome = await replay(host_recording, live=LivePorts(llm=model))

    assert_replays_exactly(host_recording, outcome)
    assert model.streamed == 0


@pytest.mark.decision("D296")
async def test_a_live_stream_the_reply_size_limit_closes_replays_closed_at_the_same_chunk() -> None:
    script = [text("Hello there, a reply that is far too long.")]
    limit = PipelineOptions(max_model_reply_chars=20)
    recording = await streamed_recording(ScriptedLLM(script, chunk_size=7), options=limit)
    assert recording.calls[calls_named(recording, "LLM.stream")[0] - 1].last_chunk is not None

    same = await replay(recording, live=LivePorts(llm=ScriptedLLM(script, chunk_size=7)))
    other = await replay(recording, live=LivePorts(llm=ScriptedLLM(script, chunk_size=5)))

    assert_replays_exactly(recording, same)
    divergence = diverged(other)  # closed at another chunk: another reply so far
    assert (divergence.kind, divergence.port_call) == ("answer", "LLM.stream")
    assert divergence.where == "answer.Text"


class PausingCatalog:
    """The built-in catalog, pausing (yielding to the event loop) before each answer: a stop
    asked for while it runs would land inside it."""

    def __init__(self) -> None:
        self.inner = ConfigCatalog.from_toml(CATALOG_TOML)

    async def get_mode(self, mode: str) -> Any:
        """See ``ModeCatalog``."""
        await asyncio.sleep(0)
        return await self.inner.get_mode(mode)

    async def list_modes(self) -> Any:
        """See ``ModeCatalog``."""
        await asyncio.sleep(0)
        return await self.inner.list_modes()


class PausingCutStreamLLM(ScriptedLLM):
    """A model whose first stream pauses, then fails before its text, as ``CutStreamLLM``
    (``after=0``) does; its later streams are the script's."""

    def __init__(self, replies: Sequence[dict[str, Any]]) -> None:
        super().__init__(replies)
        self.failed = False

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """See ``StreamingLLM``."""
        if not self.failed:
            self.failed = True
            await asyncio.sleep(0)
            raise ConnectionError("the model's connection dropped")
        async for chunk in super().stream(request):
            yield chunk


@pytest.mark.decision("D296")
@pytest.mark.parametrize(
    "recorded_llm",
    [CutStreamLLM([text("Hello there, a reply in pieces.")], after=3, hang=True), None],
    ids=["mid-stream", "before-the-commit"],
)
async def test_a_turn_whose_consumer_left_replays_live_to_the_same_stop(
    recorded_llm: ScriptedLLM | None,
) -> None:
    script = [text("Hello there, a reply in pieces.")]
    leave_after = 4 if recorded_llm is not None else 1
    recording = await streamed_recording(
        recorded_llm or ScriptedLLM(script), leave_after=leave_after
    )
    stopped = recording.stopped_after_call
    assert stopped is not None
    assert recording.calls[stopped - 1].cancelled is (recorded_llm is not None)
    catalog = PausingCatalog()  # the stop came after a catalog call, or in the model's stream
    model = ScriptedLLM(script)

    outcome = await replay(recording, live=LivePorts(llm=model, modes=catalog))

    assert_replays_exactly(recording, outcome)
    # A stream the stop cut short answers from the recording: a live one would not stop there.
    assert len(model.requests) == (0 if recorded_llm is not None else 1)


@pytest.mark.decision("D296")
async def test_a_turn_whose_consumer_left_between_model_attempts_replays_live_to_that_stop() -> (
    None
):
    script = [text("Hello there.")] * 2
    waits = PipelineOptions(retry_wait_seconds=600, retry_max_wait_seconds=600)
    recording = await streamed_recording(
        CutStreamLLM(script, after=0), options=waits, leave_at=ModelCallRetried
    )
    stopped = recording.stopped_after_call
    assert stopped is not None
    assert recording.calls[stopped - 1].name == "LLM.stream"  # the stop came right after it

    outcome = await replay(recording, live=LivePorts(llm=PausingCutStreamLLM(script)))

    assert_replays_exactly(recording, outcome)


@pytest.mark.decision("D296")
async def test_a_server_tool_call_the_consumers_stop_cut_short_answers_from_the_recording() -> None:
    script = [calls(call("x1", "Math")), calls(call("a1", "Add", {"a": 1, "b": 2})), text("3")]
    pipeline = recording_pipeline(MemoryStore(), script, tools={"Add": hanging_tool})
    recording = recording_of(await streamed_report(pipeline, SUM_QUESTION, leave_after=6))
    [add] = [c for c in recording.calls if c.name == "ToolExecutor.Add"]
    assert add.cancelled
    ran: list[str] = []

    async def counting_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        ran.append(invocation.tool_call_id)
        return await host_add(arguments, invocation)

    outcome = await replay(recording, live=LivePorts(tools={"Add": counting_add}))

    assert_replays_exactly(recording, outcome)
    assert ran == []  # a stop a live tool would not repeat: the recorded call answers


# === 3. live server tools and catalogs ==========================================================


@pytest.mark.decision("D293")
async def test_a_live_server_tool_that_answers_the_same_replays_with_no_divergence(
    host_recording: TurnRecording,
) -> None:
    ran: list[dict[str, Any]] = []

    async def add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        ran.append(arguments)
        return await host_add(arguments, invocation)

    outcome = await replay(host_recording, live=LivePorts(tools={"Add": add}))

    assert_replays_exactly(host_recording, outcome)
    assert ran == [{"a": 2, "b": 3}]


@pytest.mark.decision("D293")
async def test_a_live_server_tool_whose_result_changed_is_named_at_the_tool_call(
    host_recording: TurnRecording,
) -> None:
    outcome = await replay(host_recording, live=LivePorts(tools={"Add": off_by_one_add}))

    divergence = diverged(outcome)
    assert (divergence.kind, divergence.port_call) == ("answer", "ToolExecutor.Add")
    assert divergence.step == "llm_client"
    assert divergence.call_number == calls_named(host_recording, "ToolExecutor.Add")[0]
    assert (divergence.where, divergence.expected, divergence.actual) == (
        "answer",
        '{"result": 5}',
        '{"result": 6}',
    )
    assert outcome.report.faulted_step == "llm_client"  # stopped at the tool, not after


@pytest.mark.decision("D293")
async def test_a_live_server_tool_raising_where_the_recorded_one_answered_is_named(
    host_recording: TurnRecording,
) -> None:
    async def broken_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        raise RuntimeError("adder on fire")

    divergence = diverged(await replay(host_recording, live=LivePorts(tools={"Add": broken_add})))

    assert (divergence.kind, divergence.port_call, divergence.where) == (
        "answer",
        "ToolExecutor.Add",
        "answer",
    )


@pytest.mark.decision("D293")
@pytest.mark.parametrize(
    ("edit", "port_call", "where", "expected", "actual"),
    [
        (
            ("Be brief and precise.", "Be thorough."),
            "AgentCatalog.get_agent_context",
            "answer.SystemPrompt",
            "You are the Aptix coding assistant. Be brief and precise.",
            "You are the Aptix coding assistant. Be thorough.",
        ),
        (
            ('display_name = "General"', 'display_name = "Everyday"'),
            "ModeCatalog.get_mode",
            "answer.DisplayName",
            "General",
            "Everyday",
        ),
        (
            ('description = "Add two numbers."', 'description = "Sum two numbers."'),
            "ModeCatalog.get_mode",
            "answer.ServerTools[1].Description",
            "Add two numbers.",
            "Sum two numbers.",
        ),
    ],
    ids=["system-prompt", "mode-display-name", "tool-description"],
)
async def test_a_live_catalog_whose_prompt_or_mode_changed_is_named_at_its_answer(
    host_recording: TurnRecording,
    edit: tuple[str, str],
    port_call: str,
    where: str,
    expected: str,
    actual: str,
) -> None:
    assert edit[0] in CATALOG_TOML
    changed = ConfigCatalog.from_toml(CATALOG_TOML.replace(*edit))

    outcome = await replay(host_recording, live={"catalog": changed})

    divergence = diverged(outcome)
    assert (divergence.kind, divergence.port_call) == ("answer", port_call)
    assert divergence.call_number == calls_named(host_recording, port_call)[0]
    assert (divergence.where, divergence.expected, divergence.actual) == (where, expected, actual)


@pytest.mark.decision("D293")
async def test_a_live_catalog_that_answers_the_same_replays_with_no_divergence(
    host_recording: TurnRecording,
) -> None:
    outcome = await replay(host_recording, live={"catalog": ConfigCatalog.from_toml(CATALOG_TOML)})

    assert_replays_exactly(host_recording, outcome)


@pytest.mark.decision("D293")
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "streamed"])
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_replays_with_its_own_tools_and_catalogs_live(
    name: str, streamed: bool
) -> None:
    """Failing catalogs and tools included: a live port failing as recorded replays."""
    kit = await run_recorded(name, MemoryStore(), streamed=streamed)

    for turn in kit.turns:
        ports = turn.ports
        live = LivePorts(tools=ports.tools, modes=ports.modes, agents=ports.agents)
        outcome = await replay(turn.recording, steps=turn.steps, live=live)
        assert_replays_exactly(turn.recording, outcome)


@pytest.mark.decision("D293")
@pytest.mark.parametrize(
    "path", recordings_in(ROOT / "examples" / "recordings"), ids=lambda path: path.name
)
def test_the_example_recordings_replay_with_todays_catalog_tools_and_model_live(
    path: Path,
) -> None:
    recording = TurnRecording.load(path)
    live: dict[str, Any] = {"tools": BUILTIN_TOOLS, "catalog": ConfigCatalog.default()}
    if calls_named(recording, "LLM.stream"):
        live["llm"] = ScriptedLLM(STREAMED_SCRIPT, chunk_size=3)

    assert assert_replays(path, live=live).ok


# === 4. the API =================================================================================


@pytest.mark.decision("D293")
async def test_the_mapping_form_runs_the_same_ports_live_as_live_ports(
    host_recording: TurnRecording,
) -> None:
    catalog = ConfigCatalog.from_toml(CATALOG_TOML.replace("Be brief", "Be short"))
    typed = LivePorts(llm=HostModel(), tools={"Add": host_add}, modes=catalog, agents=catalog)

    by_mapping = await replay(
        host_recording, live={"llm": HostModel(), "tools": {"Add": host_add}, "catalog": catalog}
    )
    by_type = await replay(host_recording, live=typed)

    assert diverged(by_mapping) == diverged(by_type)
    assert diverged(by_type).where == "answer.SystemPrompt"
    assert LivePorts.of({"modes": catalog}) == LivePorts(modes=catalog)
    assert LivePorts.of(None) == LivePorts()


@pytest.mark.decision("D293")
@pytest.mark.parametrize(
    ("live", "error", "named"),
    [
        ({"store": MemoryStore()}, ValueError, "live['store']"),
        ({"clock": object()}, ValueError, "live['clock']"),
        ({"model": HostModel()}, ValueError, "live['model']"),
        ({"catalog": ConfigCatalog.default(), "modes": None}, ValueError, "live['catalog']"),
        ({"llm": object()}, TypeError, "live llm"),
        ({"tools": ["Add"]}, TypeError, "live tools"),
        ({"tools": {"Add": "not a tool"}}, TypeError, "live tools['Add']"),
        ({"modes": object()}, TypeError, "live modes"),
        ({"agents": ConfigCatalog.default().get_mode}, TypeError, "live agents"),
    ],
    ids=[
        "store",
        "clock",
        "unknown-key",
        "catalog-and-modes",
        "not-a-model",
        "tools-not-a-mapping",
        "tool-not-callable",
        "not-a-mode-catalog",
        "not-an-agent-catalog",
    ],
)
async def test_a_live_port_that_is_not_one_is_refused_naming_the_field(
    host_recording: TurnRecording, live: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error) as raised:
        await replay(host_recording, live=live)

    assert str(raised.value).startswith(named)


@pytest.mark.decision("D294")
@pytest.mark.parametrize(
    ("live", "named"),
    [
        ({"llm": HostModel()}, "live llm"),
        ({"tools": {"Add": host_add}}, "live tools['Add']"),
    ],
    ids=["model", "tool"],
)
async def test_a_live_model_or_tool_is_refused_for_a_redacted_recording(
    host_recording: TurnRecording, live: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match="the recording is redacted") as raised:
        await replay(host_recording.redact(), live=live)

    assert str(raised.value).startswith(named)


@pytest.mark.decision("D294")
async def test_a_redacted_recording_replays_with_live_catalogs_compared_redacted(
    host_recording: TurnRecording,
) -> None:
    redacted = host_recording.redact()
    same = ConfigCatalog.from_toml(CATALOG_TOML)
    changed = ConfigCatalog.from_toml(CATALOG_TOML.replace("Be brief", "Be short"))

    assert_replays_exactly(redacted, await replay(redacted, live={"catalog": same}))
    divergence = diverged(await replay(redacted, live={"catalog": changed}))
    assert (divergence.kind, divergence.where) == ("answer", "answer.SystemPrompt")


@pytest.fixture
def recordings_folder(tmp_path: Path) -> Path:
    """A folder of two recorded turns of the host's model: one run, one streamed."""
    folder = tmp_path / "recordings"

    async def record() -> None:
        for llm, where in ((HostModel(), "run"), (StreamingHostModel(), "streamed")):
            pipeline = recording_pipeline(
                MemoryStore(),
                llm,
                tools={"Add": host_add},
                recording=RecordingOptions(directory=folder / where),
            )
            await streamed_report(pipeline, SUM_QUESTION)

    asyncio.run(record())
    return folder


def todays_ports(wording: str = "The sum is {}.", add: Any = host_add) -> LivePorts:
    """The host's ports of today, made afresh: its model, its ``Add``, the built-in catalog."""
    catalog = ConfigCatalog.from_toml(CATALOG_TOML)
    return LivePorts(
        llm=StreamingHostModel(wording), tools={"Add": add}, modes=catalog, agents=catalog
    )


@pytest.mark.decision("D293")
def test_a_folder_of_recordings_with_live_ports_is_a_regression_suite_for_the_hosts_code(
    recordings_folder: Path,
) -> None:
    paths = recordings_in(recordings_folder)
    assert [path.parent.name for path in paths] == ["run", "streamed"]

    passed = [assert_replays(path, live=todays_ports()) for path in paths]
    model_changed, tool_changed = [], []
    for path in paths:
        with pytest.raises(ReplayDivergenceError, match="the live port answered otherwise") as one:
            assert_replays(path, live=todays_ports(wording="Sum: {}."))
        model_changed.append(one.value.outcome.divergence)
        with pytest.raises(ReplayDivergenceError, match="the live port answered otherwise") as two:
            assert_replays(path, live=todays_ports(add=off_by_one_add))
        tool_changed.append(two.value.outcome.divergence)

    assert all(outcome.ok for outcome in passed)
    assert [(d.port_call, d.where) for d in model_changed if d is not None] == [
        ("LLM.complete", "answer.Text"),
        ("LLM.stream", "answer.Text"),
    ]
    assert [(d.port_call, d.where) for d in tool_changed if d is not None] == [
        ("ToolExecutor.Add", "answer"),
    ] * 2


# === 5. a diverging replay ends quietly =========================================================


@pytest.mark.decision("D295")
@pytest.mark.parametrize(
    "how",
    ["recorded-arguments", "live-answer", "live-tool", "extra-call", "clock-argument"],
)
async def test_a_diverging_replay_logs_its_divergence_only(
    host_recording: TurnRecording, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    recording = host_recording
    live: LivePorts | None = None
    if how == "recorded-arguments":
        data = recording.to_dict()
        request = next(c for c in data["calls"] if c["call"] == "complete")["args"]["request"]
        request["Messages"][0]["Content"] += " (edited)"
        recording = TurnRecording.from_dict(data)
    elif how == "live-answer":
        live = LivePorts(llm=HostModel("Sum: {}."))
    elif how == "live-tool":
        live = LivePorts(tools={"Add": off_by_one_add})
    elif how == "extra-call":
        data = recording.to_dict()
        data["calls"] = data["calls"][:-1]  # no commit recorded
        recording = TurnRecording.from_dict(data)
    else:
        data = recording.to_dict()
        data["calls"][1]["args"]["kind"] = "tampered"
        recording = TurnRecording.from_dict(data)
    caplog.set_level(logging.DEBUG, logger="aptix_pipeline")

    outcome = await replay(recording, live=live)

    divergence = diverged(outcome)
    records = [r for r in caplog.records if r.name.startswith("aptix_pipeline")]
    assert "rollback failed" not in caplog.text
    assert [r.exc_info for r in records if r.exc_info] == []
    [logged] = records
    assert logged.levelno == logging.INFO
    message = logged.getMessage()
    assert message.startswith(f"replay of a recording diverged: {divergence.kind}")
    if divergence.call_number is not None:
        assert f"port call #{divergence.call_number} {divergence.port_call}" in message
    assert divergence.where in message
    assert "The sum is" not in message  # no values: they may be user content
    assert "(edited)" not in message


@pytest.mark.decision("D295")
async def test_a_diverged_turn_is_rolled_back_quietly_and_ends_faulted_at_the_divergence(
    host_recording: TurnRecording,
) -> None:
    outcome = await replay(host_recording, live=LivePorts(llm=HostModel("Sum: {}.")))

    [error] = outcome.report.result.errors
    assert error.code == "port_failed"
    assert error.field == "LLM"
    assert error.message.startswith("the replay diverged: divergence: port call #")
    assert outcome.report.trace is not None
    assert outcome.report.trace.outcome == "faulted"


async def test_a_pipelines_own_ports_replay_live_with_its_hooks() -> None:
    class Shouting:
        async def complete(self, request: LLMRequest) -> LLMReply:
            return LLMReply(text=request.messages[-1].content.upper())

    def answer_cached(request: LLMRequest) -> LLMReply | None:
        return LLMReply(text="cached") if "cache" in request.messages[-1].content else None

    pipeline = embedded_pipeline(
        llm=Shouting(),
        recording=RecordingOptions(),
        hooks=Hooks(before_model_request=answer_cached),
    )
    report = await pipeline.run({"Instruction": "from the cache"}, Caller(org="acme", user="ana"))
    assert report.recording is not None

    with_hooks = await replay(report.recording, live=LivePorts.of_pipeline(pipeline))
    bare = await replay(report.recording, live=LivePorts(llm=pipeline.ports.llm))

    assert with_hooks.ok, with_hooks.describe()
    assert not bare.ok
    assert bare.divergence is not None
    assert (bare.divergence.kind, bare.divergence.where) == ("answer", "answer.Text")
