"""Replay carries the pipeline: its host rules and its hooks go where the turn goes.

1. Every trace scenario recorded with a passing host rule and a hook that rewrites
   the prompt, and with a host rule that refuses, replays clean — from the
   recording, and with the pipeline's own ports live (``LivePorts.of_pipeline``).
2. A recording names the host rules its turn ran; a replay without them says so
   in one line, and one with a rule the turn did not run says that.
3. The live form applies the hooks: a prompt a hook rewrites reaches the live model
   rewritten (``LivePorts(llm=..., hooks=...)``), and ``of_pipeline`` carries them.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from replay_kit import run_recorded
from trace_scenarios import SCENARIOS

from aptix_pipeline import (
    Caller,
    ChatMessage,
    ChatRole,
    Hooks,
    HostRule,
    LivePorts,
    LLMReply,
    LLMRequest,
    PipelineStep,
    RecordingOptions,
    ReplayOutcome,
    ScriptedLLM,
    TurnRecording,
    embedded_pipeline,
    replay,
)
from aptix_pipeline.adapters.stores.memory import MemoryStore

REMINDER = ChatMessage(role=ChatRole.SYSTEM, content="Answer briefly.")
ANA = Caller(org="acme", user="ana")


def remind(request: LLMRequest) -> LLMRequest:
    """A hook that rewrites every prompt the model is sent."""
    return request.replace(messages=[*request.messages, REMINDER])


PASSING = HostRule(
    id="host/always",
    step=PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER,
    message="the host lets every turn through",
    code="host.never",
    check=lambda ctx: True,
)
REFUSING = HostRule(
    id="host/closed",
    step=PipelineStep.REASONER,
    message="the agent is closed",
    code="host.closed",
    check=lambda ctx: "closed for the holidays",
)


def assert_clean(recording: TurnRecording, outcome: ReplayOutcome) -> None:
    assert outcome.ok, "\n".join(outcome.describe())
    assert outcome.report.trace is not None
    assert outcome.report.trace.to_dict() == recording.trace.to_dict()
    assert outcome.report.result.to_wire() == recording.result


# === 1. every scenario ==========================================================================


@pytest.mark.decision("D397")
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_with_a_passing_rule_and_a_rewriting_hook_replays_clean(
    name: str,
) -> None:
    kit = await run_recorded(
        name, MemoryStore(), hooks=Hooks(before_model_request=remind), rules=[PASSING]
    )

    assert kit.turns
    for turn in kit.turns:  # a turn refused before the rule's step never ran it
        assert turn.recording.host_rules in ((), (PASSING.id,))
        assert turn.pipeline is not None
        recording = turn.recording
        assert_clean(recording, await replay(recording, steps=turn.steps, rules=[PASSING]))
        # The scenario's scripted model has played its script: the rest of it runs live.
        live = replace(LivePorts.of_pipeline(turn.pipeline), llm=None)
        assert_clean(recording, await replay(recording, steps=turn.steps, live=live))


@pytest.mark.decision("D397")
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_with_a_refusing_rule_replays_clean(name: str) -> None:
    kit = await run_recorded(name, MemoryStore(), rules=[PASSING, REFUSING], checked=False)

    assert kit.turns
    for turn in kit.turns:
        recording = turn.recording
        if REFUSING.id in recording.host_rules:
            assert recording.result["Errors"][0]["Code"] == "host.closed"
        outcome = await replay(recording, steps=turn.steps, rules=[PASSING, REFUSING])
        assert_clean(recording, outcome)


# === 2. the recording names its rules ===========================================================


async def refused_recording() -> TurnRecording:
    pipeline = embedded_pipeline(
        llm=ScriptedLLM([{"text": "never asked"}]),
        recording=RecordingOptions(),
        rules=[PASSING, REFUSING],
    )
    report = await pipeline.run({"Instruction": "Hello"}, ANA)
    assert report.recording is not None
    assert not report.successful
    return report.recording


@pytest.mark.decision("D397")
async def test_a_recording_names_the_host_rules_its_turn_ran_and_keeps_them_in_its_file() -> None:
    recording = await refused_recording()

    assert recording.host_rules == ("host/always", "host/closed")
    data = json.loads(recording.to_json())
    assert data["host_rules"] == ["host/always", "host/closed"]
    assert TurnRecording.from_dict(data).host_rules == recording.host_rules
    del data["host_rules"]  # written before the key: read from the trace's guards
    assert TurnRecording.from_dict(data).host_rules == recording.host_rules


@pytest.mark.decision("D397")
async def test_a_replay_without_the_recorded_rules_says_so_in_one_line() -> None:
    recording = await refused_recording()

    outcome = await replay(recording)

    assert outcome.divergence is not None
    assert outcome.divergence.kind == "rules"
    [line] = outcome.divergence.describe().splitlines()
    assert "host/always, host/closed" in line
    assert "was not given" in line
    assert "expected host" not in line  # not a trace divergence


@pytest.mark.decision("D397")
async def test_a_replay_running_a_rule_the_turn_did_not_names_it() -> None:
    recording = await refused_recording()
    extra = HostRule(
        id="host/new",
        step=PipelineStep.PROMPT_CONTENT_PROVIDER_INITIALIZER,
        message="a rule added since",
        code="host.new",
        check=lambda ctx: True,
    )

    outcome = await replay(recording, rules=[PASSING, extra, REFUSING])

    assert outcome.divergence is not None
    assert outcome.divergence.kind == "rules"
    assert outcome.divergence.describe() == (
        "divergence: this replay ran host rule(s) host/new, which the recorded turn did not"
    )


@pytest.mark.decision("D397")
def test_live_ports_refuse_rules_that_are_not_host_rules() -> None:
    with pytest.raises(TypeError, match="a host rule is a HostRule"):
        LivePorts(rules=("host/closed",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="live rules: a list of HostRule"):
        LivePorts(rules=REFUSING)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="live hooks"):
        LivePorts(hooks=remind)  # type: ignore[arg-type]


# === 3. live replays apply the hooks ============================================================


class EchoModel:
    """A model that answers with the last message it got."""

    def __init__(self) -> None:
        self.requests: list[LLMRequest] = []

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.requests.append(request)
        return LLMReply(text=f"last: {request.messages[-1].content}")


@pytest.mark.decision("D397")
async def test_a_prompt_a_hook_rewrites_reaches_the_live_model_rewritten() -> None:
    hooks = Hooks(before_model_request=remind)
    pipeline = embedded_pipeline(llm=EchoModel(), recording=RecordingOptions(), hooks=hooks)
    report = await pipeline.run({"Instruction": "Hi"}, ANA)
    assert report.recording is not None
    assert report.result.result is not None
    assert report.result.result.primary_output_text == "last: Answer briefly."

    today = EchoModel()
    hooked = await replay(report.recording, live=LivePorts(llm=today, hooks=hooks))
    bare = await replay(report.recording, live=LivePorts(llm=EchoModel()))
    whole = await replay(report.recording, live=LivePorts.of_pipeline(pipeline))

    assert_clean(report.recording, hooked)
    assert today.requests[-1].messages[-1] == REMINDER
    assert_clean(report.recording, whole)
    assert bare.divergence is not None  # the unhooked model answered the unhooked prompt
    assert (bare.divergence.kind, bare.divergence.where) == ("answer", "answer.Text")


@pytest.mark.decision("D397")
async def test_of_pipeline_carries_the_pipelines_rules_and_hooks() -> None:
    hooks = Hooks(before_model_request=remind)
    pipeline = embedded_pipeline(llm=EchoModel(), hooks=hooks, rules=[PASSING])

    live = LivePorts.of_pipeline(pipeline)

    assert live.hooks is hooks
    assert live.rules == (PASSING,)
    assert live.llm is pipeline.ports.llm  # the host's own: the replay hooks it
