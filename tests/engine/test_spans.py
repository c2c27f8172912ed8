"""OpenTelemetry spans of a turn, read back from the SDK's ``InMemorySpanExporter``.

DESIGN.md "Observability without leaks": one ``invoke_agent {agent}``
root per turn, a ``step {name}`` child per transition, ``chat {model}`` per model
call under its ``step llm_client``, ``execute_tool {tool}`` per server-side tool
execution; GenAI semantic-convention attributes; events for failed rules, mode
changes, warnings, refused tool calls and retries; ERROR status with the error
code on a failed turn; user content only when the host opts in. The span tree
must agree with the turn's ``StateTrace``.

Every test gives its pipeline its own SDK ``TracerProvider`` (tests/kits/span_kit.py);
none sets the global provider.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from engine_kit import (
    CALLER,
    call,
    calls,
    change_mode,
    content_request,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    text,
)
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from span_kit import Recorded, TurnSpans, attributes_of, events_named, values_of

from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import (
    ChatRole,
    LLMReply,
    LLMRequest,
    PipelineStep,
    ResponsePayload,
    SessionStore,
    ToolCall,
)
from aptix_pipeline.engine import Telemetry, TurnReport
from aptix_pipeline.engine.telemetry import CAPTURE_CONTENT_ENV
from aptix_pipeline.steps import STEP_FUNCTIONS, TurnScope

# --- the scenarios -------------------------------------------------------------------------

AGENT = "Aptix assistant"
INITIAL_STEPS = [
    "request_handler", "agent_context_resolver", "agent_session_creator",
    "prompt_content_provider_initializer", "reasoner",
]  # fmt: skip
FOLLOW_ON_STEPS = [
    "request_handler", "session_restorer", "agent_context_loader",
    "prompt_content_provider_initializer", "reasoner",
]  # fmt: skip
CONTINUATION_STEPS = [
    "request_handler", "session_restorer", "client_tool_continuation_resolver",
    "agent_context_loader", "prompt_content_provider_initializer", "reasoner",
]  # fmt: skip
ROUND = ["llm_client", "server_tool_round"]
ANSWER = ["llm_client", "response_builder", "complete"]

CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.definitions",
    "aptix.mode.reason",
)
"""Attributes that carry user content: present only with content capture."""


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    """A scripted reply's usage."""
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}


TOOLS_SCRIPT: list[dict[str, Any]] = [
    {**calls(call("m1", "Math")), "usage": usage(11, 2), "model": "scripted-2025-01"},
    {**calls(call("a1", "Add", {"a": 2, "b": 3})), "usage": usage(23, 3)},
    {**calls(call("r1", "read_file", {"path": "app.py"})), "usage": usage(37, 5)},
    {**text("app.py is fine."), "usage": usage(41, 7)},
]
"""Initial: expand Math, run Add on the server, then ask the client for read_file;
the continuation answers. Each reply reports usage; the first names its model."""


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    """An SDK tracer provider of this test only, into memory."""
    found = Recorded()
    yield found
    found.shutdown()


async def run_tools_scenario(
    store: SessionStore, telemetry: Telemetry
) -> tuple[TurnReport, TurnReport]:
    """The Initial turn with a server tool round and a client call, then its continuation."""
    pipeline, _ = make_pipeline(store, TOOLS_SCRIPT, telemetry=telemetry)
    first = await pipeline.run({"Instruction": "Review app.py"}, CALLER)
    second = await pipeline.run(continuation(ok(first.result)), CALLER)
    return first, second


def names(spans: list[ReadableSpan]) -> list[str]:
    """The spans' names."""
    return [span.name for span in spans]


def step_names(turn: TurnSpans) -> list[str]:
    """The steps of a turn, by their span's ``aptix.step.name``."""
    return [attributes_of(step)["aptix.step.name"] for step in turn.steps]


def assert_succeeded(turn: TurnSpans) -> None:
    """No span of a successful turn has status ERROR."""
    for span in (turn.root, *turn.spans):
        assert span.status.status_code is not StatusCode.ERROR, span.name
        assert "error.type" not in attributes_of(span), span.name


# === 1. the span tree ========================================================================


@pytest.mark.decision("D51", "D53", "D95")
async def test_initial_turn_is_one_invoke_agent_root_with_a_step_span_per_transition(
    store: SessionStore, recorded: Recorded
) -> None:
    first, _ = await run_tools_scenario(store, recorded.telemetry())

    initial, _ = recorded.turns()
    assert initial.root.name == f"invoke_agent {AGENT}"
    assert initial.root.kind is SpanKind.INTERNAL
    assert names(initial.steps) == [f"step {name}" for name in step_names(initial)]
    assert step_names(initial) == [*INITIAL_STEPS, *ROUND, *ROUND, *ANSWER]
    assert all(step.kind is SpanKind.INTERNAL for step in initial.steps)
    walked = [attributes_of(s) for s in initial.steps]
    assert [(a["aptix.step.from"], a["aptix.step.to"]) for a in walked] == [
        (t.source, t.target) for t in first.transitions
    ]
    assert {a["aptix.context.type"] for a in walked} == {"Initial"}
    assert all(a["aptix.mode"] == "general" for a in walked[2:])  # from the session creator on
    assert_succeeded(initial)


async def test_step_spans_carry_their_guard_and_exit_hook_rule_ids_and_outcomes(
    store: SessionStore, recorded: Recorded
) -> None:
    first, _ = await run_tools_scenario(store, recorded.telemetry())

    initial, _ = recorded.turns()
    checks = list(first.checks)
    for step in initial.steps:
        found = attributes_of(step)
        name = found["aptix.step.name"]
        for prefix, phase in (("aptix.guard", "PRE"), ("aptix.exit_hook", "POST")):
            if f"{prefix}.outcome" not in found:
                continue
            check = next(c for c in checks if (c.step, c.phase) == (name, phase))
            checks.remove(check)
            assert found[f"{prefix}.rule_ids"] == list(check.rule_ids)
            assert found[f"{prefix}.failed_rule_ids"] == []
            assert found[f"{prefix}.outcome"] == check.outcome
    assert checks == []  # every guard and exit hook run is on a span
    resolver = attributes_of(initial.steps[1])
    assert resolver["aptix.guard.rule_ids"] == [
        "AGN-036/4.3/PRE/session-null",
        "AGN-036/4.3/PRE/turn-null",
    ]
    assert resolver["aptix.guard.outcome"] == "passed"
    first_round = attributes_of(initial.steps[5])
    assert first_round["aptix.exit_hook.outcome"] == "deferred"  # DESIGN.md R5: a round goes on


@pytest.mark.decision("D52", "D53")
async def test_each_model_call_is_a_chat_client_span_under_its_llm_client_step(
    store: SessionStore, recorded: Recorded
) -> None:
    await run_tools_scenario(store, recorded.telemetry())

    initial, _ = recorded.turns()
    llm_steps = [s for s in initial.steps if s.name == "step llm_client"]
    chats = [[c for c in initial.children(step) if c.name.startswith("chat")] for step in llm_steps]
    assert [len(found) for found in chats] == [1, 1, 1]
    expected = [  # (response model, response id, finish reason, input, output tokens)
        ("scripted-2025-01", "scripted-0", "tool_calls", 11, 2),
        ("scripted", "scripted-1", "tool_calls", 23, 3),
        ("scripted", "scripted-2", "tool_calls", 37, 5),
    ]
    for round_, ([chat], want) in enumerate(zip(chats, expected, strict=True), start=1):
        assert chat.name == "chat scripted"
        assert chat.kind is SpanKind.CLIENT
        found = attributes_of(chat)
        assert found["gen_ai.operation.name"] == "chat"
        assert found["gen_ai.provider.name"] == "aptix"
        assert found["gen_ai.request.model"] == "scripted"
        assert found["aptix.llm.round"] == round_
        got = (
            found["gen_ai.response.model"],
            found["gen_ai.response.id"],
            found["gen_ai.response.finish_reasons"],
            found["gen_ai.usage.input_tokens"],
            found["gen_ai.usage.output_tokens"],
        )
        assert got == (*want[:2], [want[2]], *want[3:])


@pytest.mark.decision("D96")
async def test_only_server_tool_executions_are_execute_tool_spans(
    store: SessionStore, recorded: Recorded
) -> None:
    await run_tools_scenario(store, recorded.telemetry())

    initial, _ = recorded.turns()
    [tool] = initial.named("execute_tool")  # not Math (expanded) nor read_file (client's)
    assert tool.name == "execute_tool Add"
    assert tool.kind is SpanKind.INTERNAL
    assert initial.step_of(tool) is initial.steps[7]  # the second round's llm_client
    found = attributes_of(tool)
    assert found["gen_ai.operation.name"] == "execute_tool"
    assert found["gen_ai.tool.name"] == "Add"
    assert found["gen_ai.tool.call.id"] == "a1"
    assert found["gen_ai.tool.type"] == "function"
    assert found["aptix.tool.outcome"] == "executed"


@pytest.mark.decision("D54", "D55")
async def test_root_span_names_the_agent_session_model_and_sums_the_usage_of_its_calls(
    store: SessionStore, recorded: Recorded
) -> None:
    first, second = await run_tools_scenario(store, recorded.telemetry())

    initial, resumed = recorded.turns()
    response = ok(first.result)
    found = attributes_of(initial.root)
    assert found["gen_ai.operation.name"] == "invoke_agent"
    assert found["gen_ai.provider.name"] == "aptix"
    assert found["gen_ai.agent.name"] == AGENT
    assert found["gen_ai.agent.id"] == "assistant"
    assert found["gen_ai.conversation.id"] == response.session_id == "session-1"
    assert found["aptix.turn.id"] == response.turn_id
    assert found["gen_ai.request.model"] == "scripted"
    assert found["aptix.response.type"] == "ToolContinuation"
    assert (found["gen_ai.usage.input_tokens"], found["gen_ai.usage.output_tokens"]) == (71, 10)
    chats = [attributes_of(c) for c in initial.named("chat")]
    assert found["gen_ai.usage.input_tokens"] == sum(c["gen_ai.usage.input_tokens"] for c in chats)
    # The continuation counts only its own call; the turn's total is the response's Usage.
    later = attributes_of(resumed.root)
    final = ok(second.result)
    assert (later["gen_ai.usage.input_tokens"], later["gen_ai.usage.output_tokens"]) == (41, 7)
    assert final.usage is not None
    turn_total = (later["aptix.turn.usage.input_tokens"], later["aptix.turn.usage.output_tokens"])
    assert turn_total == (final.usage.input_tokens, final.usage.output_tokens) == (112, 17)


@pytest.mark.decision("D53")
async def test_provider_name_comes_from_the_llm_port(recorded: Recorded) -> None:
    class NamedLLM(ScriptedLLM):
        provider_name = "openai"

    pipeline, _ = make_pipeline(
        MemoryStore(), NamedLLM([text("hi")]), telemetry=recorded.telemetry()
    )
    ok(await pipeline.execute({"Instruction": "hello"}, CALLER))

    turn = recorded.turn()
    assert attributes_of(turn.root)["gen_ai.provider.name"] == "openai"
    [chat] = turn.named("chat")
    assert attributes_of(chat)["gen_ai.provider.name"] == "openai"


@pytest.mark.decision("D95")
async def test_continuation_is_its_own_tree_on_the_continuation_path(
    store: SessionStore, recorded: Recorded
) -> None:
    first, second = await run_tools_scenario(store, recorded.telemetry())

    _, resumed = recorded.turns()
    assert resumed.root.name == f"invoke_agent {AGENT}"
    assert first.turn_id == second.turn_id
    assert step_names(resumed) == [*CONTINUATION_STEPS, *ANSWER]
    assert {attributes_of(s)["aptix.context.type"] for s in resumed.steps} == {
        "ClientToolCallContinuation"
    }
    found = attributes_of(resumed.root)
    assert found["gen_ai.conversation.id"] == ok(second.result).session_id
    assert found["aptix.context.type"] == "ClientToolCallContinuation"
    assert found["aptix.response.type"] == "Final"
    [chat] = resumed.named("chat")
    assert resumed.step_of(chat).name == "step llm_client"
    assert resumed.named("execute_tool") == []
    assert_succeeded(resumed)


async def test_follow_on_with_a_mode_change_has_the_change_on_its_execute_tool_span(
    store: SessionStore, recorded: Recorded
) -> None:
    script = [
        text("Hello."),
        calls(change_mode("c1", "review", reason="the user wants a review", branch=True)),
        text("Reviewing."),
    ]
    pipeline, _ = make_pipeline(store, script, telemetry=recorded.telemetry())
    first = ok(await pipeline.execute({"Instruction": "hi"}, CALLER))
    recorded.clear()

    report = await pipeline.run(follow_on(first, "review it"), CALLER)

    turn = recorded.turn()
    assert step_names(turn) == [*FOLLOW_ON_STEPS, *ROUND, *ANSWER]
    assert {attributes_of(s)["aptix.context.type"] for s in turn.steps} == {"FollowOn"}
    [tool] = turn.named("execute_tool")
    assert tool.name == "execute_tool agent_change_mode"
    assert attributes_of(tool)["aptix.tool.outcome"] == "mode_changed"
    assert events_named(tool, "aptix.mode.changed") == [
        {
            "aptix.mode.previous": "general",
            "aptix.mode.new": "review",
            "aptix.mode.branch": True,
            "gen_ai.tool.call.id": "c1",
        }
    ]  # the reason is content: not without opt-in
    first_round, _, second_round = (turn.steps[i] for i in (5, 6, 7))
    assert attributes_of(first_round)["aptix.mode"] == "review"  # the mode the step left
    [chat_1] = turn.children(first_round)[:1]
    [chat_2] = [c for c in turn.children(second_round) if c.name.startswith("chat")]
    assert attributes_of(chat_1)["aptix.mode"] == "general"
    assert attributes_of(chat_2)["aptix.mode"] == "review"
    assert attributes_of(turn.root)["aptix.mode"] == "review" == report.mode
    assert_succeeded(turn)


# === 2. events ===============================================================================


async def reasoner_then_answer_early(scope: TurnScope) -> None:
    """The reasoner, then a response payload set too early: §4.9's guard must fail."""
    await STEP_FUNCTIONS[PipelineStep.REASONER](scope)
    scope.ctx.response_payload = ResponsePayload(primary_output_text="too early")


@pytest.mark.decision("D51")
async def test_a_failed_guard_is_a_rule_failed_event_on_the_step_that_did_not_run(
    store: SessionStore, recorded: Recorded
) -> None:
    steps = {PipelineStep.REASONER: reasoner_then_answer_early}
    pipeline, _ = make_pipeline(store, [text("hi")], steps=steps, telemetry=recorded.telemetry())

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    turn = recorded.turn()
    step = turn.steps[-1]
    assert step.name == "step llm_client"
    rule = "AGN-036/4.9/PRE/response-payload-null"
    assert events_named(step, "aptix.rule.failed") == [
        {"aptix.rule.id": rule, "aptix.step.name": "llm_client", "aptix.check.phase": "PRE"}
    ]
    found = attributes_of(step)
    assert found["aptix.guard.outcome"] == "failed"
    assert found["aptix.guard.failed_rule_ids"] == [rule]
    assert "aptix.step.to" not in found  # the guard stopped it: it went nowhere
    assert turn.children(step) == []  # the model was not called
    assert step.status.status_code is StatusCode.ERROR
    assert found["error.type"] == "pipeline_rule_failed"
    assert rule in report.result.rule_ids


@pytest.mark.decision("D51")
async def test_a_failed_exit_hook_is_a_rule_failed_event_on_the_step_that_ran(
    store: SessionStore, recorded: Recorded
) -> None:
    pipeline, _ = make_pipeline(store, [text("")], telemetry=recorded.telemetry())

    await pipeline.run({"Instruction": "hello"}, CALLER)

    turn = recorded.turn()
    step = turn.steps[-1]
    assert step.name == "step llm_client"
    rule = "AGN-036/4.9/POST/exactly-one-outcome"
    assert events_named(step, "aptix.rule.failed") == [
        {"aptix.rule.id": rule, "aptix.step.name": "llm_client", "aptix.check.phase": "POST"}
    ]
    found = attributes_of(step)
    assert found["aptix.exit_hook.outcome"] == "failed"
    assert found["aptix.exit_hook.failed_rule_ids"] == [rule]
    assert found["aptix.step.to"] == "llm_answered"  # the step was taken, then its POST failed
    assert step.status.status_code is StatusCode.ERROR


async def test_several_mode_changes_warn_on_the_span_of_the_second_change(
    store: SessionStore, recorded: Recorded
) -> None:
    script = [calls(change_mode("c1", "review"), change_mode("c2", "general")), text("ok")]
    pipeline, _ = make_pipeline(store, script, telemetry=recorded.telemetry())

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    ok(report.result)
    turn = recorded.turn()
    first, second = turn.named("execute_tool")
    assert [attributes_of(s)["gen_ai.tool.call.id"] for s in (first, second)] == ["c1", "c2"]
    changes = [events_named(s, "aptix.mode.changed") for s in (first, second)]
    moves = [[(c["aptix.mode.previous"], c["aptix.mode.new"]) for c in found] for found in changes]
    assert moves == [
        [("general", "review")],
        [("review", "general")],
    ]
    assert events_named(first, "aptix.warning") == []
    assert events_named(second, "aptix.warning") == [
        {
            "aptix.warning.code": "several_mode_changes",
            "aptix.rule.id": "DESIGN/R8/several-mode-changes",
        }
    ]
    assert [w.rule_id for w in report.result.warnings] == ["DESIGN/R8/several-mode-changes"]


@pytest.mark.decision("D96")
async def test_refused_tool_calls_are_events_on_the_llm_client_step(
    store: SessionStore, recorded: Recorded
) -> None:
    refused = calls(call("x1", "Math", {"a": 1}), call("r1", "read_file", {}), call("n1", "nope"))
    pipeline, _ = make_pipeline(store, [refused, text("sorry")], telemetry=recorded.telemetry())

    ok(await pipeline.execute({"Instruction": "hello"}, CALLER))

    turn = recorded.turn()
    step = turn.steps[5]
    assert step.name == "step llm_client"
    assert events_named(step, "aptix.tool.container_invocation_error") == [
        {
            "gen_ai.tool.name": "Math",
            "gen_ai.tool.call.id": "x1",
            "aptix.rule.id": "CPV/container-without-arguments",
        }
    ]
    assert events_named(step, "aptix.tool.argument_validation_error") == [
        {
            "gen_ai.tool.name": "read_file",
            "gen_ai.tool.call.id": "r1",
            "aptix.rule.id": "CPV/arguments-match-schema",
        }
    ]
    assert events_named(step, "aptix.tool.unknown") == [
        {"gen_ai.tool.name": "nope", "gen_ai.tool.call.id": "n1", "aptix.rule.id": "CPV/tool-known"}
    ]
    assert turn.named("execute_tool") == []  # a refused call runs nothing


class FlakyLLM:
    """Raises ``ConnectionError`` ``failures`` times, then plays its script."""

    def __init__(self, failures: int, replies: list[dict[str, Any]]) -> None:
        self.failures = failures
        self.script = ScriptedLLM(replies)
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        """A failure, or the next scripted reply."""
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("the model is unreachable")
        return await self.script.complete(request)


@pytest.mark.decision("D52")
async def test_an_llm_retry_is_an_event_on_the_chat_span(
    store: SessionStore, recorded: Recorded
) -> None:
    llm = FlakyLLM(1, [{**text("Recovered."), "usage": usage(5, 1)}])
    pipeline, _ = make_pipeline(store, llm, telemetry=recorded.telemetry())

    ok(await pipeline.execute({"Instruction": "hello"}, CALLER))

    [chat] = recorded.turn().named("chat")
    [retry] = events_named(chat, "aptix.llm.retry")
    assert retry["aptix.llm.attempt"] == 1
    assert retry["error.type"] == "ConnectionError"
    assert retry["aptix.llm.retry_wait_seconds"] == 0.0
    found = attributes_of(chat)
    assert found["aptix.llm.attempts"] == 2
    assert found["gen_ai.usage.input_tokens"] == 5
    assert chat.status.status_code is not StatusCode.ERROR
    assert llm.calls == 2


# === 3. failed turns ========================================================================


@pytest.mark.decision("D51")
async def test_failed_turn_ends_in_error_on_the_root_and_the_faulting_step(
    store: SessionStore, recorded: Recorded
) -> None:
    pipeline, _ = make_pipeline(store, [text("")], telemetry=recorded.telemetry())

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    turn = recorded.turn()
    assert turn.root.status.status_code is StatusCode.ERROR
    found = attributes_of(turn.root)
    assert found["error.type"] == "pipeline_rule_failed" == report.result.errors[0].code
    assert found["aptix.error.codes"] == ["pipeline_rule_failed"]
    assert found["aptix.rule.failed_ids"] == ["AGN-036/4.9/POST/exactly-one-outcome"]
    errored = [s for s in turn.steps if s.status.status_code is StatusCode.ERROR]
    assert names(errored) == ["step llm_client"]
    assert errored[0] is turn.steps[-1]  # nothing ran after the fault
    assert all(s.status.status_code is StatusCode.UNSET for s in turn.steps[:-1])


@pytest.mark.decision("D59")
async def test_a_failed_initial_turn_names_no_session_a_failed_follow_on_names_its_own(
    store: SessionStore, recorded: Recorded
) -> None:
    pipeline, _ = make_pipeline(
        store, [text(""), text("first"), text("")], telemetry=recorded.telemetry()
    )

    failed = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert failed.session_id is None  # nothing was stored
    found = attributes_of(recorded.turn().root)
    assert "gen_ai.conversation.id" not in found
    assert "aptix.turn.id" not in found

    first = ok(await pipeline.execute({"Instruction": "hello"}, CALLER))
    recorded.clear()
    again = await pipeline.run(follow_on(first), CALLER)

    assert not again.successful
    found = attributes_of(recorded.turn().root)
    assert found["gen_ai.conversation.id"] == first.session_id  # the session exists
    assert "aptix.turn.id" not in found  # the failed FollowOn's new turn was not stored


async def test_a_step_of_its_own_rule_faults_not_found_with_its_rule_as_an_event(
    store: SessionStore, recorded: Recorded
) -> None:
    pipeline, _ = make_pipeline(store, [text("hi")], telemetry=recorded.telemetry())

    report = await pipeline.run(
        {"SessionId": "session-404", "TurnId": "turn-404", "Instruction": "again"}, CALLER
    )

    turn = recorded.turn()
    assert attributes_of(turn.root)["error.type"] == "not_found"
    assert turn.root.status.status_code is StatusCode.ERROR
    assert step_names(turn) == ["request_handler", "session_restorer"]
    step = turn.steps[-1]
    assert step.status.status_code is StatusCode.ERROR
    assert attributes_of(step)["error.type"] == "not_found"
    assert "aptix.step.to" not in attributes_of(step)  # it raised: not taken
    [rule] = report.result.rule_ids
    assert events_named(step, "aptix.rule.failed") == [
        {"aptix.rule.id": rule, "aptix.step.name": "session_restorer"}
    ]
    assert turn.root.name == "invoke_agent"  # no agent was resolved to name it after


@pytest.mark.decision("D52")
async def test_a_failing_model_faults_port_failed_with_the_chat_span_in_error(
    store: SessionStore, recorded: Recorded
) -> None:
    pipeline, _ = make_pipeline(store, FlakyLLM(99, []), telemetry=recorded.telemetry())

    await pipeline.run({"Instruction": "hello"}, CALLER)

    turn = recorded.turn()
    assert attributes_of(turn.root)["error.type"] == "port_failed"
    step = turn.steps[-1]
    assert step.name == "step llm_client"
    assert attributes_of(step)["error.type"] == "port_failed"
    [chat] = turn.children(step)
    assert chat.status.status_code is StatusCode.ERROR
    assert attributes_of(chat)["error.type"] == "ConnectionError"
    assert len(events_named(chat, "aptix.llm.retry")) == 2  # three attempts by default


# === 4. content ==============================================================================

SECRETS = {
    "instruction": "INSTR-7f3a",
    "artifact": "ARTIFACT-BODY-91c2",
    "image": base64.b64encode(b"IMAGE-DATA-b4d9").decode(),
    "solution context": "SOLUTION-CTX-5e1d",
    "tool arguments": "31337",
    "tool result": "58519",
    "client arguments": "ARG-PATH-d00d",
    "model text (continuation message)": "MODEL-TEXT-CALL-aa11",
    "mode change reason": "REASON-0c8e",
    "client tool result": "CLIENT-RESULT-5150",
    "model text (final)": "MODEL-TEXT-FINAL-e77e",
}
"""Distinctive user content of the content scenario, by what it is."""

CONTENT_SCRIPT: list[dict[str, Any]] = [
    calls(call("m1", "Math")),
    calls(call("a1", "Add", {"a": 31337, "b": 27182})),
    calls(change_mode("c1", "review", reason=SECRETS["mode change reason"])),
    calls(
        call("r1", "read_file", {"path": f"{SECRETS['client arguments']}.py"}),
        text=SECRETS["model text (continuation message)"],
    ),
    text(SECRETS["model text (final)"]),
]


async def run_content_scenario(store: SessionStore, telemetry: Telemetry) -> list[TurnReport]:
    """An Initial turn full of user content, and its continuation."""
    pipeline, _ = make_pipeline(store, CONTENT_SCRIPT, telemetry=telemetry)
    request = content_request(SECRETS)
    first = await pipeline.run(request, CALLER)
    result = {
        "ToolCallId": "r1",
        "ExecutionMs": 2,
        "ResultJson": json.dumps({"out": SECRETS["client tool result"]}),
    }
    second = await pipeline.run(continuation(ok(first.result), result), CALLER)
    ok(second.result)
    return [first, second]


def leaks(recorded: Recorded) -> list[tuple[str, str, str]]:
    """(span, where, what) for each secret found anywhere in any exported span."""
    return [
        (span.name, where, what)
        for span in recorded.spans
        for where, value in values_of(span)
        for what, secret in SECRETS.items()
        if secret in value
    ]


def content_attributes(recorded: Recorded) -> list[tuple[str, str]]:
    """(span, key) of each content attribute on any span or event."""
    found = []
    for span in recorded.spans:
        items = [attributes_of(span), *(attributes_of(event) for event in span.events)]
        found += [(span.name, key) for item in items for key in item if key in CONTENT_KEYS]
    return found


@pytest.mark.decision("D50", "D98")
async def test_by_default_no_span_holds_user_content(
    store: SessionStore, recorded: Recorded
) -> None:
    reports = await run_content_scenario(store, recorded.telemetry(capture_content=None))

    assert len(recorded.turns()) == 2
    assert leaks(recorded) == []
    assert content_attributes(recorded) == []
    for report in reports:  # nor does the state trace
        assert report.trace is not None
        dumped = report.trace.to_json()
        assert [what for what, secret in SECRETS.items() if secret in dumped] == []


@pytest.mark.decision("D50", "D56", "D98")
async def test_with_content_capture_the_content_is_on_the_spans(
    store: SessionStore, recorded: Recorded
) -> None:
    await run_content_scenario(store, recorded.telemetry(capture_content=True))

    initial, resumed = recorded.turns()
    found = {what for _, _, what in leaks(recorded)}
    assert found == set(SECRETS)  # every piece of content is captured somewhere
    root = attributes_of(initial.root)
    user = json.loads(root["gen_ai.input.messages"])
    assert user[0]["role"] == "user"
    parts = json.dumps(user)
    assert all(SECRETS[k] in parts for k in ("instruction", "artifact", "image"))
    first_chat = attributes_of(initial.named("chat")[0])
    assert SECRETS["solution context"] in first_chat["gen_ai.system_instructions"]
    assert SECRETS["instruction"] in first_chat["gen_ai.input.messages"]
    assert "gen_ai.tool.definitions" in first_chat
    last_chat = attributes_of(initial.named("chat")[-1])
    assert SECRETS["model text (continuation message)"] in last_chat["gen_ai.output.messages"]
    assert SECRETS["client arguments"] in last_chat["gen_ai.output.messages"]
    add, mode = initial.named("execute_tool")
    assert json.loads(attributes_of(add)["gen_ai.tool.call.arguments"]) == {"a": 31337, "b": 27182}
    assert json.loads(attributes_of(add)["gen_ai.tool.call.result"]) == {"result": 58519}
    [changed] = events_named(mode, "aptix.mode.changed")
    assert changed["aptix.mode.reason"] == SECRETS["mode change reason"]
    [final_chat] = resumed.named("chat")
    assert SECRETS["client tool result"] in attributes_of(final_chat)["gen_ai.input.messages"]
    later = attributes_of(resumed.root)
    assert SECRETS["model text (final)"] in later["gen_ai.output.messages"]


@pytest.mark.decision("D56")
@pytest.mark.parametrize(("value", "captured"), [("true", True), ("false", False)])
async def test_the_conventions_env_switch_decides_when_the_host_does_not(
    store: SessionStore,
    recorded: Recorded,
    monkeypatch: pytest.MonkeyPatch,
    value: str,
    captured: bool,
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, value)

    await run_content_scenario(store, recorded.telemetry(capture_content=None))

    assert bool(content_attributes(recorded)) is captured
    assert bool(leaks(recorded)) is captured


@pytest.mark.decision("D56")
async def test_the_hosts_choice_beats_the_env_switch(
    store: SessionStore, recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")

    await run_content_scenario(store, recorded.telemetry(capture_content=False))

    assert leaks(recorded) == []


# === 5. spans off ============================================================================


def trace_dicts(reports: list[TurnReport] | tuple[TurnReport, ...]) -> list[dict[str, Any]]:
    """The state traces of the reports as JSON."""
    found = []
    for report in reports:
        assert report.trace is not None
        found.append(report.trace.to_dict())
    return found


@pytest.mark.decision("D49")
async def test_spans_off_exports_nothing_and_keeps_the_same_trace(
    store: SessionStore, recorded: Recorded
) -> None:
    with_spans = await run_tools_scenario(MemoryStore(), recorded.telemetry())
    assert recorded.spans
    recorded.clear()

    without = await run_tools_scenario(store, recorded.telemetry(spans=False))
    off = await run_tools_scenario(MemoryStore(), Telemetry.off())

    assert recorded.spans == ()
    assert trace_dicts(without) == trace_dicts(with_spans) == trace_dicts(off)


@pytest.mark.decision("D49")
async def test_spans_off_keeps_the_same_trace_of_a_failed_turn(recorded: Recorded) -> None:
    reports = []
    for telemetry in (recorded.telemetry(), recorded.telemetry(spans=False)):
        pipeline, _ = make_pipeline(MemoryStore(), [text("")], telemetry=telemetry)
        reports.append(await pipeline.run({"Instruction": "hello"}, CALLER))

    assert len(recorded.spans) == len(recorded.turn().spans) + 1  # only the first turn's
    on, off = trace_dicts(reports)
    assert on == off
    assert on["outcome"] == "faulted"


async def test_default_telemetry_without_an_sdk_runs_and_exports_nothing(
    store: SessionStore, recorded: Recorded
) -> None:
    # No test sets the global provider: the API's default is a proxy to the no-op.
    assert not isinstance(trace.get_tracer_provider(), SDKTracerProvider)
    pipeline, _ = make_pipeline(store, TOOLS_SCRIPT, telemetry=Telemetry())
    first = await pipeline.run({"Instruction": "Review app.py"}, CALLER)
    second = await pipeline.run(continuation(ok(first.result)), CALLER)

    ok(second.result)
    assert recorded.spans == ()
    expected = await run_tools_scenario(MemoryStore(), Telemetry.off())
    assert trace_dicts([first, second]) == trace_dicts(expected)


# === 6. the span tree and the StateTrace agree ==============================================

SERVER_EXECUTIONS = {"executed", "failed", "mode_changed", "mode_refused", "mode_unchanged"}


def assert_tree_matches_trace(turn: TurnSpans, report: TurnReport) -> None:
    """Steps, model calls and server tool executions: the same in the spans and the trace."""
    assert report.trace is not None
    trace_ = report.trace
    taken = [s for s in turn.steps if "aptix.step.to" in attributes_of(s)]
    assert [
        (a["aptix.step.name"], a["aptix.step.from"], a["aptix.step.to"])
        for a in map(attributes_of, taken)
    ] == [(t.event, t.source, t.target) for t in trace_.transitions if t.event != "fault"]
    # A step whose guard failed or that raised has a span but no transition: the last one.
    untaken = [s for s in turn.steps if s not in taken]
    assert untaken == ([turn.steps[-1]] if untaken else [])
    if trace_.outcome == "faulted":
        assert trace_.transitions[-1].event == "fault"  # the machine's move, not a step
        assert turn.root.status.status_code is StatusCode.ERROR
    chats = [attributes_of(c) for c in turn.named("chat")]
    assert [(c["aptix.llm.round"], c.get("gen_ai.response.id")) for c in chats] == [
        (call.round, call.response_id) for call in trace_.llm_calls
    ]
    tools = [attributes_of(t) for t in turn.named("execute_tool")]
    assert [
        (t["gen_ai.tool.call.id"], t["gen_ai.tool.name"], t["aptix.tool.outcome"]) for t in tools
    ] == [
        (c.tool_call_id, c.name, c.outcome)
        for c in trace_.tool_calls
        if c.side == "server" and c.outcome in SERVER_EXECUTIONS
    ]


RAISING_TOOL_CONFIG = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["lookup"]

[[server_tools]]
name = "lookup"
description = "Look something up."
executes_on = "server"

[[agents]]
id = "assistant"
name = "Aptix assistant"
default = true
model = "scripted"
system_prompt = "Tests."

[[conversations]]
id = "workspace"
name = "Workspace conversation"
default = true
instructions = "Tests."
"""


async def failing_lookup(arguments: dict[str, Any], invocation: Any) -> str:
    """A server tool that always fails."""
    raise RuntimeError("lookup is down")


@pytest.mark.decision("D49", "D97")
async def test_span_tree_and_state_trace_agree_on_every_scenario(
    store: SessionStore, recorded: Recorded
) -> None:
    reports: list[TurnReport] = []
    reports += await run_tools_scenario(store, recorded.telemetry())
    reports += await run_content_scenario(MemoryStore(), recorded.telemetry())
    scenarios: list[tuple[list[Any], dict[str, Any]]] = [
        ([text("")], {}),  # exit hook fault
        (
            [
                calls(
                    change_mode("c1", "review"),
                    change_mode("c2", "nowhere"),
                    change_mode("c3", "review"),
                ),
                text("ok"),
            ],
            {},
        ),
        (
            [calls(call("x1", "Math", {"a": 1}), call("l1", "lookup")), text("ok")],
            {"config": RAISING_TOOL_CONFIG, "tools": {"lookup": failing_lookup}},
        ),
    ]
    for script, more in scenarios:
        pipeline, _ = make_pipeline(MemoryStore(), script, telemetry=recorded.telemetry(), **more)
        reports.append(await pipeline.run({"Instruction": "hello"}, CALLER))
    pipeline, _ = make_pipeline(MemoryStore(), [text("hi")], telemetry=recorded.telemetry())
    reports.append(
        await pipeline.run({"SessionId": "s", "TurnId": "t", "Instruction": "x"}, CALLER)
    )

    turns = recorded.turns()
    assert len(turns) == len(reports) == 8
    outcomes = {c.outcome for r in reports for c in r.tool_calls}
    assert {"executed", "failed", "mode_changed", "mode_refused", "mode_unchanged"} <= outcomes
    for turn, report in zip(turns, reports, strict=True):
        assert_tree_matches_trace(turn, report)


# === 7. concurrency ==========================================================================


class TogetherLLM:
    """Holds each turn's first model call until both turns are in it, then expands Math;
    answers every later call. Both turns are open at once, their spans interleaved."""

    def __init__(self) -> None:
        self.waiting = 0
        self.both = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMReply:
        """Math on a first call (after the other turn's arrives), then an answer."""
        if any(message.role is ChatRole.TOOL for message in request.messages):
            return LLMReply(text="done")
        self.waiting += 1
        if self.waiting == 2:
            self.both.set()
        await asyncio.wait_for(self.both.wait(), timeout=10)
        return LLMReply(tool_calls=[ToolCall(tool_call_id="m1", name="Math", arguments_json="{}")])


@pytest.mark.decision("D97")
async def test_concurrent_turns_on_one_pipeline_make_separate_trees(
    store: SessionStore, recorded: Recorded
) -> None:
    pipeline, _ = make_pipeline(store, TogetherLLM(), telemetry=recorded.telemetry())

    reports = await asyncio.gather(
        pipeline.run({"Instruction": "one"}, CALLER), pipeline.run({"Instruction": "two"}, CALLER)
    )

    turns = recorded.turns()
    assert len(turns) == 2  # every span reaches exactly one root
    assert sum(len(t.spans) + 1 for t in turns) == len(recorded.spans)
    sessions = sorted(attributes_of(t.root)["gen_ai.conversation.id"] for t in turns)
    assert sessions == sorted(ok(r.result).session_id for r in reports)
    assert len(set(sessions)) == 2
    trace_ids: list[int] = []
    for turn in turns:
        ids = {s.context.trace_id for s in (turn.root, *turn.spans) if s.context is not None}
        assert len(ids) == 1  # the whole tree in one trace, no span of the other turn
        trace_ids += ids
        session = attributes_of(turn.root)["gen_ai.conversation.id"]
        [report] = [r for r in reports if ok(r.result).session_id == session]
        assert_tree_matches_trace(turn, report)
        assert step_names(turn) == [*INITIAL_STEPS, *ROUND, *ANSWER]
    assert len(set(trace_ids)) == 2


async def test_a_refused_mode_change_fails_its_execute_tool_span_and_names_its_rule(
    store: SessionStore, recorded: Recorded
) -> None:
    script = [calls(change_mode("c1", "nowhere")), text("staying")]
    pipeline, _ = make_pipeline(store, script, telemetry=recorded.telemetry())

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    ok(report.result)  # told to the model, not a fault of the turn
    turn = recorded.turn()
    [tool] = turn.named("execute_tool")
    assert tool.status.status_code is StatusCode.ERROR
    assert attributes_of(tool)["error.type"] == "mode_refused"
    assert events_named(tool, "aptix.mode.changed") == []
    step = turn.step_of(tool)
    assert events_named(step, "aptix.rule.failed") == [
        {
            "gen_ai.tool.name": "agent_change_mode",
            "gen_ai.tool.call.id": "c1",
            "aptix.rule.id": "AGN-011/5.2/mode-known",
        }
    ]
    assert step.status.status_code is StatusCode.UNSET
    assert turn.root.status.status_code is StatusCode.UNSET


async def test_a_turn_is_a_child_of_the_hosts_current_span_and_leaves_it_current(
    store: SessionStore, recorded: Recorded
) -> None:
    pipeline, _ = make_pipeline(store, [text("hi")], telemetry=recorded.telemetry())
    tracer = recorded.provider.get_tracer("host")

    with tracer.start_as_current_span("POST /v1/agent/execute") as host:
        ok(await pipeline.execute({"Instruction": "hello"}, CALLER))
        assert trace.get_current_span() is host

    [request] = recorded.turns()
    assert request.root.name == "POST /v1/agent/execute"
    [turn] = request.children(request.root)
    assert turn.name == f"invoke_agent {AGENT}"
    assert [s.name for s in request.children(turn)][:2] == [
        "step request_handler",
        "step agent_context_resolver",
    ]
