"""Hooks: a host's code before each model request, after each reply and each server tool run.

``before_model_request`` may change the request or answer in the model's place
(the model is then not called; a streamed turn gets the answer as one delta); the
two ``after`` hooks observe. The hooks wrap the ports, so a recording holds what
they did as the ports' answers and a replay repeats the turn without them. A hook
that raises faults the turn with ``internal``, its traceback logged once, nothing
stored.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
from engine_kit import CALLER, NOTHING_STORED, call, calls, make_pipeline, ok, stored, text

from aptix_pipeline import (
    ChatMessage,
    ChatRole,
    ErrorCode,
    Hooks,
    LLMReply,
    LLMRequest,
    MemoryStore,
    Pipeline,
    PipelineOptions,
    Proceed,
    Recorder,
    RecordingOptions,
    ScriptedLLM,
    StreamDelta,
    StreamItem,
    StreamResult,
    Telemetry,
    ToolExecution,
    ToolInvocation,
    TurnCall,
    TurnReport,
    TurnStream,
    embedded_pipeline,
    replay,
)
from aptix_pipeline.contracts import LLM

HINT = ChatMessage(role=ChatRole.SYSTEM, content="Answer in French.")
CACHED = LLMReply(text="Bonjour, from the cache.", model="cache")
EXPAND = calls(call("m1", "Math"))  # Add is a member of the Math container
ADD = calls(call("s1", "Add", {"a": 40, "b": 2}))
ADDING = [EXPAND, ADD, text("42.")]
NO_WAIT = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)


def hooked(
    model: Sequence[dict[str, Any]] | LLM,
    hooks: Hooks | None,
    *,
    store: MemoryStore | None = None,
    tools: dict[str, Any] | None = None,
    recording: bool = False,
) -> tuple[Pipeline, ScriptedLLM | None]:
    """A pipeline on the memory store (deterministic clock and ids) with ``hooks``."""
    base, llm = make_pipeline(store or MemoryStore(), model, tools=tools)
    pipeline = Pipeline(
        base.ports,
        base.options,
        hooks=hooks,
        telemetry=Telemetry.off(),
        interceptors=[Recorder(RecordingOptions())] if recording else [],
    )
    return pipeline, llm


async def drain(stream: TurnStream) -> list[StreamItem]:
    async with stream:
        return [item async for item in stream]


def deltas(items: Sequence[StreamItem]) -> list[str]:
    return [item.text for item in items if isinstance(item, StreamDelta)]


def result_of(items: Sequence[StreamItem]) -> StreamResult:
    [result] = [item for item in items if isinstance(item, StreamResult)]
    return result


def with_hint(request: LLMRequest) -> LLMRequest:
    return request.model_copy(update={"messages": [*request.messages, HINT]})


# --- before_model_request -------------------------------------------------------------------


@pytest.mark.decision("D288")
async def test_a_before_request_hook_changes_the_request_the_model_gets() -> None:
    pipeline, llm = hooked([text("Bonjour.")], Hooks(before_model_request=with_hint))

    response = ok(await pipeline.execute({"Instruction": "Hi"}, CALLER))

    assert llm is not None
    [request] = llm.requests
    assert request.messages[-1] == HINT
    assert request.messages[-2].content == "Hi"
    assert response.primary_output_text == "Bonjour."


async def test_a_before_request_hook_that_returns_none_sends_the_request_as_it_is() -> None:
    seen: list[LLMRequest] = []

    def look(request: LLMRequest) -> None:
        seen.append(request)

    pipeline, llm = hooked([text("Hello.")], Hooks(before_model_request=look))

    ok(await pipeline.execute({"Instruction": "Hi"}, CALLER))

    assert llm is not None
    assert llm.requests == seen
    assert llm.requests[0].messages[-1].content == "Hi"


async def test_a_coroutine_hook_is_awaited() -> None:
    async def hint(request: LLMRequest) -> LLMRequest:
        return with_hint(request)

    pipeline, llm = hooked([text("Bonjour.")], Hooks(before_model_request=hint))

    ok(await pipeline.execute({"Instruction": "Hi"}, CALLER))

    assert llm is not None
    assert llm.requests[0].messages[-1] == HINT


@pytest.mark.decision("D288")
async def test_a_hook_answer_stands_in_for_the_model_which_is_not_called() -> None:
    pipeline, llm = hooked([], Hooks(before_model_request=lambda request: CACHED))

    report = await pipeline.run({"Instruction": "Hi"}, CALLER)

    assert llm is not None
    assert llm.requests == []  # an empty script: a call would have failed the turn
    assert ok(report.result).primary_output_text == CACHED.text
    [model_call] = report.trace.llm_calls if report.trace else []
    assert model_call.response_model == "cache"


@pytest.mark.decision("D288")
@pytest.mark.parametrize("streams", [True, False], ids=["streaming model", "whole model"])
async def test_a_hook_answer_on_a_streamed_turn_goes_out_as_one_delta(streams: bool) -> None:
    class Whole:
        """A model that cannot stream."""

        async def complete(self, request: LLMRequest) -> LLMReply:
            raise AssertionError("the hook answers")

    model: LLM = ScriptedLLM([], chunk_size=3) if streams else Whole()
    pipeline, _ = hooked(model, Hooks(before_model_request=lambda request: CACHED))

    items = await drain(pipeline.stream({"Instruction": "Hi"}, CALLER))

    assert deltas(items) == [CACHED.text]
    assert ok(result_of(items).result).primary_output_text == CACHED.text


async def test_a_model_the_hook_lets_through_still_streams_in_pieces() -> None:
    llm = ScriptedLLM([text("Bonjour tout le monde.")], chunk_size=3, chunk_delay_seconds=0.001)
    pipeline, _ = hooked(llm, Hooks(before_model_request=with_hint))

    items = await drain(pipeline.stream({"Instruction": "Hi"}, CALLER))

    assert len(deltas(items)) > 1
    assert "".join(deltas(items)) == "Bonjour tout le monde."
    assert llm.requests[0].messages[-1] == HINT


@pytest.mark.decision("D288")
async def test_the_before_request_hook_runs_before_each_attempt() -> None:
    attempts: list[int] = []

    class Flaky:
        """Fails its first attempt."""

        async def complete(self, request: LLMRequest) -> LLMReply:
            if len(attempts) == 1:
                raise ConnectionError("reset")
            return LLMReply(text="Second time lucky.")

    def count(request: LLMRequest) -> None:
        attempts.append(len(attempts) + 1)

    base, _ = make_pipeline(MemoryStore(), Flaky())
    pipeline = Pipeline(base.ports, NO_WAIT, hooks=Hooks(before_model_request=count))

    report = await pipeline.run({"Instruction": "Hi"}, CALLER)

    assert ok(report.result).primary_output_text == "Second time lucky."
    assert attempts == [1, 2]


# --- replay ----------------------------------------------------------------------------------


@pytest.mark.decision("D287")
async def test_a_turn_a_hook_answered_replays_without_the_hook() -> None:
    pipeline, _ = hooked([], Hooks(before_model_request=lambda request: CACHED), recording=True)
    report = await pipeline.run({"Instruction": "Hi"}, CALLER)
    assert report.recording is not None

    outcome = await replay(report.recording)

    assert outcome.ok, outcome.divergence and outcome.divergence.describe()
    [model_call] = [c for c in report.recording.calls if c.port == "LLM"]
    assert model_call.answer["Text"] == CACHED.text  # recorded as the model call's answer
    assert outcome.report.result == report.result


@pytest.mark.decision("D287")
async def test_a_streamed_turn_a_hook_answered_replays() -> None:
    pipeline, _ = hooked(
        ScriptedLLM([], chunk_size=3),
        Hooks(before_model_request=lambda request: CACHED),
        recording=True,
    )
    stream = pipeline.stream({"Instruction": "Hi"}, CALLER)
    await drain(stream)
    recording = stream.report.recording if stream.report is not None else None
    assert recording is not None

    outcome = await replay(recording)

    assert outcome.ok, outcome.divergence and outcome.divergence.describe()
    assert [c.call for c in recording.calls if c.port == "LLM"] == ["stream"]


@pytest.mark.decision("D287")
async def test_a_recording_holds_the_request_as_the_engine_made_it_and_replays() -> None:
    pipeline, llm = hooked(
        [text("Bonjour.")], Hooks(before_model_request=with_hint), recording=True
    )
    report = await pipeline.run({"Instruction": "Hi"}, CALLER)
    assert report.recording is not None
    assert llm is not None

    outcome = await replay(report.recording)

    assert outcome.ok, outcome.divergence and outcome.divergence.describe()
    [model_call] = [c for c in report.recording.calls if c.port == "LLM"]
    recorded = model_call.args["request"]["Messages"]
    assert len(recorded) == len(llm.requests[0].messages) - 1  # without the hook's hint


@pytest.mark.decision("D287")
async def test_interceptors_see_the_hooked_ports_and_a_pipeline_without_hooks_the_host_s() -> None:
    models: list[object] = []

    class Look:
        async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
            models.append(call.ports.llm)
            return await proceed()

    base, llm = make_pipeline(MemoryStore(), [text("a"), text("b")])
    plain = Pipeline(base.ports, base.options, interceptors=[Look()])
    hooked_pipeline = Pipeline(
        base.ports,
        base.options,
        interceptors=[Look()],
        hooks=Hooks(before_model_request=lambda request: None),
    )

    await plain.execute({"Instruction": "Hi"}, CALLER)
    await hooked_pipeline.execute({"Instruction": "Hi"}, CALLER)

    assert models[0] is llm
    assert models[1] is not llm
    assert getattr(models[1], "inner", None) is llm


# --- after_model_reply and after_tool -----------------------------------------------------------


@pytest.mark.decision("D288")
async def test_after_model_reply_sees_the_request_the_model_got_and_its_reply() -> None:
    seen: list[tuple[LLMRequest, LLMReply]] = []

    def note(request: LLMRequest, reply: LLMReply) -> None:
        seen.append((request, reply))

    pipeline, llm = hooked(ADDING, Hooks(before_model_request=with_hint, after_model_reply=note))

    ok(await pipeline.execute({"Instruction": "Add 40 and 2"}, CALLER))

    assert llm is not None
    assert [request for request, _ in seen] == llm.requests
    assert seen[0][0].messages[-1] == HINT
    assert [reply.text for _, reply in seen] == [None, None, "42."]
    assert seen[1][1].tool_calls[0].name == "Add"


async def test_after_model_reply_sees_a_streamed_reply_whole() -> None:
    seen: list[str | None] = []
    llm = ScriptedLLM([text("Streamed in pieces.")], chunk_size=4)
    pipeline, _ = hooked(
        llm, Hooks(after_model_reply=lambda request, reply: seen.append(reply.text))
    )

    await drain(pipeline.stream({"Instruction": "Hi"}, CALLER))

    assert seen == ["Streamed in pieces."]


@pytest.mark.decision("D288")
async def test_after_model_reply_does_not_run_for_a_hook_s_own_answer() -> None:
    seen: list[LLMReply] = []
    hooks = Hooks(
        before_model_request=lambda request: CACHED,
        after_model_reply=lambda request, reply: seen.append(reply),
    )
    pipeline, _ = hooked([], hooks)

    ok(await pipeline.execute({"Instruction": "Hi"}, CALLER))

    assert seen == []


@pytest.mark.decision("D288")
async def test_after_tool_sees_the_invocation_arguments_and_result() -> None:
    runs: list[ToolExecution] = []
    pipeline, _ = hooked(ADDING, Hooks(after_tool=runs.append))

    response = ok(await pipeline.execute({"Instruction": "Add 40 and 2"}, CALLER))

    [run] = runs
    assert (run.invocation.name, run.invocation.tool_call_id) == ("Add", "s1")
    assert (run.invocation.session_id, run.invocation.org) == (response.session_id, "acme")
    assert run.arguments == {"a": 40, "b": 2}
    assert run.result is not None
    assert "42" in run.result
    assert (run.error, run.failed) == (None, False)


async def test_after_tool_sees_the_exception_and_the_turn_goes_on() -> None:
    runs: list[ToolExecution] = []

    async def broken(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        raise KeyError("T-7")

    script = [EXPAND, calls(call("t1", "Add", {"a": 1, "b": 2})), text("It failed.")]
    pipeline, _ = hooked(script, Hooks(after_tool=runs.append), tools={"Add": broken})

    response = ok(await pipeline.execute({"Instruction": "Add"}, CALLER))

    [run] = runs
    assert run.failed
    assert isinstance(run.error, KeyError)
    assert run.result is None
    assert response.tool_results is not None
    assert response.tool_results[0].error_message == "KeyError: 'T-7'"


# --- a hook that fails --------------------------------------------------------------------------


def _raise(*args: object) -> None:
    raise ValueError(f"the hook broke on {type(args[0]).__name__}")


FAILING = {
    "before_model_request": Hooks(before_model_request=_raise),
    "after_model_reply": Hooks(after_model_reply=_raise),
    "after_tool": Hooks(after_tool=_raise),
}


@pytest.mark.decision("D288")
@pytest.mark.parametrize("name", list(FAILING))
async def test_a_raising_hook_faults_the_turn_with_internal_and_stores_nothing(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    pipeline, llm = hooked(ADDING, FAILING[name], store=store)

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        report = await pipeline.run({"Instruction": "Add 40 and 2"}, CALLER)

    [error] = report.result.errors
    assert error.code is ErrorCode.INTERNAL
    seen = "ToolExecution" if name == "after_tool" else "LLMRequest"
    assert error.message == f"the {name} hook raised ValueError"  # internal: no detail (D398)
    assert report.faulted_step == "llm_client"
    assert await stored(store) == NOTHING_STORED
    [logged] = [r for r in caplog.records if "Traceback" in r.getMessage()]
    assert f"in {_raise.__name__}" in logged.getMessage()  # the hook's own frame
    assert "ValueError" in logged.getMessage()
    assert f"on {seen}" not in caplog.text  # its message: only with content capture
    assert llm is not None
    made = {"before_model_request": 0, "after_model_reply": 1, "after_tool": 2}
    assert len(llm.requests) == made[name]  # never retried


@pytest.mark.decision("D288")
@pytest.mark.parametrize("name", ["before_model_request", "after_model_reply"])
async def test_a_hook_that_raises_on_a_streamed_turn_faults_with_internal_too(name: str) -> None:
    llm = ScriptedLLM([text("Streamed in pieces.")], chunk_size=4)
    pipeline, _ = hooked(llm, FAILING[name])

    items = await drain(pipeline.stream({"Instruction": "Hi"}, CALLER))

    [error] = result_of(items).result.errors
    assert (error.code, error.rule_id) == (ErrorCode.INTERNAL, None)  # not an interrupted stream
    assert error.message.startswith(f"the {name} hook raised ValueError")
    assert len(llm.requests) == (0 if name == "before_model_request" else 1)


@pytest.mark.decision("D288")
@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        (
            Hooks(before_model_request=lambda request: "cached"),  # type: ignore[arg-type,return-value]
            "the before_model_request hook returned str, not an LLMRequest, an LLMReply or None",
        ),
        (
            Hooks(after_model_reply=lambda request, reply: reply),  # type: ignore[arg-type,return-value]
            "the after_model_reply hook returned LLMReply; it observes and returns None",
        ),
    ],
    ids=["before returns a str", "after returns the reply"],
)
async def test_a_hook_that_returns_what_it_may_not_faults_with_internal(
    hooks: Hooks, message: str
) -> None:
    pipeline, _ = hooked([text("Hello.")], hooks)

    report = await pipeline.run({"Instruction": "Hi"}, CALLER)

    [error] = report.result.errors
    assert (error.code, error.message) == (ErrorCode.INTERNAL, message)


@pytest.mark.decision("D287", "D288")
@pytest.mark.parametrize("name", list(FAILING))
async def test_a_turn_whose_hook_raised_replays_to_the_same_fault(name: str) -> None:
    pipeline, _ = hooked(ADDING, FAILING[name], recording=True)
    report = await pipeline.run({"Instruction": "Add 40 and 2"}, CALLER)
    assert report.recording is not None

    outcome = await replay(report.recording)

    assert outcome.ok, outcome.divergence and outcome.divergence.describe()
    assert outcome.report.result.errors == report.result.errors


# --- wiring ------------------------------------------------------------------------------------


def test_a_hook_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Hooks\.after_tool must be a function or None"):
        Hooks(after_tool="log")  # type: ignore[arg-type]


def test_a_pipeline_refuses_hooks_that_are_not_hooks() -> None:
    base, _ = make_pipeline(MemoryStore(), [])

    with pytest.raises(TypeError, match="hooks must be a Hooks"):
        Pipeline(base.ports, hooks={"before_model_request": print})  # type: ignore[arg-type]


async def test_embedded_pipeline_takes_hooks() -> None:
    pipeline = embedded_pipeline(
        llm=ScriptedLLM([]), hooks=Hooks(before_model_request=lambda request: CACHED)
    )

    result = await pipeline.execute({"Instruction": "Hi"}, CALLER)

    assert ok(result).primary_output_text == CACHED.text
