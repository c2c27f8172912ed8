"""Scenario tests of the engine through its public API: ``Pipeline.run`` / ``execute``.

The three paths of DESIGN.md "The machine" (state by state) and the guards and
exit hooks a report lists, every step's PRE and POST rules broken by a misbehaving
step, the agent and conversation contexts (a restored session keeps its own, with a
warning), raising steps, a failing commit, stores and catalogs that raise, the
request and identity front door (R1, AGN-036 §3, errors quoting client values only
in part), the pending-turn protocol (R10, for the whole session), isolation
(AGN-033 §3.1), the server-tool round limit (R5), LLM port failures and
cancellation, and concurrency. Every scenario runs on the memory store and on a
SQLite file (the ``store`` fixture), and every failing turn is checked to have
persisted nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from itertools import pairwise
from typing import Any

import pytest
from engine_kit import (
    CALLER,
    EXPAND_MATH,
    NOTHING_STORED,
    OTHER_ORG,
    OTHER_USER,
    READ_A,
    CommitFailingStore,
    FailingModes,
    FlakyLLM,
    Mutation,
    ReadFailingStore,
    StoreView,
    after,
    assert_refused,
    call,
    calls,
    continuation,
    does_nothing,
    fill_session,
    follow_on,
    make_pipeline,
    ok,
    raising_after,
    scripted,
    server_calls,
    session_of,
    start,
    stored,
    system_text,
    text,
    warning_codes,
)
from rulecases import rule_params

from aptix_pipeline import PipelineOptions
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    AgentExecuteResponse,
    Caller,
    ChatRole,
    ContextType,
    ErrorCode,
    LLMReply,
    LLMRequest,
    PipelineStep,
    ResponseKind,
    ResponsePayload,
    ResponseType,
    Session,
    StoreConflictError,
    ToolCall,
    Turn,
    TurnStatus,
)
from aptix_pipeline.engine import Pipeline, TurnReport
from aptix_pipeline.steps import StepFunction, TurnScope
from aptix_pipeline.validators import Phase

Store = MemoryStore | SQLiteStore
S = PipelineStep
INITIAL = ContextType.INITIAL
FOLLOW_ON = ContextType.FOLLOW_ON
CONTINUATION = ContextType.CLIENT_TOOL_CALL_CONTINUATION

INITIAL_REQUEST: dict[str, Any] = {"Instruction": "Explain a.py."}
FINAL: dict[str, Any] = {"text": "All done."}
READ_FILE: dict[str, Any] = {
    "tool_calls": [{"id": "call-1", "name": "read_file", "arguments": {"path": "a.py"}}]
}
ADD: dict[str, Any] = {
    "tool_calls": [{"id": "call-add", "name": "Add", "arguments": {"a": 1, "b": 2}}]
}

INITIAL_STATES = (
    "received", "validated", "agent_context_resolved", "session_created", "prompt_ready",
    "reasoning", "llm_answered", "response_built", "done",
)  # fmt: skip
FOLLOW_ON_STATES = (
    "received", "validated", "session_restored", "agent_context_loaded", "prompt_ready",
    "reasoning", "llm_answered", "response_built", "done",
)  # fmt: skip
CONTINUATION_STATES = (
    "received", "validated", "session_restored", "continuation_resolved",
    "agent_context_loaded", "prompt_ready", "reasoning", "llm_answered", "response_built", "done",
)  # fmt: skip
STEPS_OF: dict[ContextType, tuple[PipelineStep, ...]] = {
    INITIAL: (
        S.REQUEST_HANDLER, S.AGENT_CONTEXT_RESOLVER, S.AGENT_SESSION_CREATOR,
        S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER, S.LLM_CLIENT, S.RESPONSE_BUILDER,
    ),
    FOLLOW_ON: (
        S.REQUEST_HANDLER, S.SESSION_RESTORER, S.AGENT_CONTEXT_LOADER,
        S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER, S.LLM_CLIENT, S.RESPONSE_BUILDER,
    ),
    CONTINUATION: (
        S.REQUEST_HANDLER, S.SESSION_RESTORER, S.CLIENT_TOOL_CONTINUATION_RESOLVER,
        S.AGENT_CONTEXT_LOADER, S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER,
        S.LLM_CLIENT, S.RESPONSE_BUILDER,
    ),
}  # fmt: skip


# --- helpers ---------------------------------------------------------------------------


def events(report: TurnReport) -> list[str]:
    """The events of the transitions the turn took, in order."""
    return [transition.event for transition in report.transitions]


def expected_checks(kind: ContextType) -> list[tuple[str, str]]:
    """Every guard and exit hook of the path, in order (§4.1 has no PRE: N/A)."""
    steps = STEPS_OF[kind]
    return [(S.REQUEST_HANDLER.value, "POST")] + [
        (step.value, phase) for step in steps[1:] for phase in ("PRE", "POST")
    ]


def assert_faulted(report: TurnReport, faulted_step: str) -> None:
    """The turn faulted at ``faulted_step``, never reached ``done`` and returned no response."""
    assert not report.successful
    assert report.result.result is None
    assert report.result.errors
    assert report.states[-1] == "faulted"
    assert "done" not in report.states
    assert report.faulted_step == faulted_step
    assert report.transitions[-1].event == "fault"
    assert report.transitions[-1].target == "faulted"
    assert "complete" not in events(report)


@dataclass
class Prepared:
    """A working pipeline, the request of a turn of one kind, and the turn it follows."""

    base: Pipeline
    request: dict[str, Any]
    first: AgentExecuteResponse | None


async def prepare(store: Store, kind: ContextType, replies: int = 5) -> Prepared:
    """A pipeline on ``store`` and a valid request of ``kind``: Initial needs nothing first;
    FollowOn follows a completed turn; a continuation follows a turn awaiting read_file."""
    script = [READ_FILE if kind is CONTINUATION else FINAL, *[FINAL] * replies]
    base, _ = make_pipeline(store, script)
    if kind is INITIAL:
        return Prepared(base, dict(INITIAL_REQUEST), None)
    first = ok(await base.execute(INITIAL_REQUEST, CALLER))
    request = follow_on(first) if kind is FOLLOW_ON else continuation(first)
    return Prepared(base, request, first)


def broken_pipeline(base: Pipeline, steps: Mapping[PipelineStep, StepFunction]) -> Pipeline:
    """``base``'s ports and options (same ids, clock, LLM script) with steps replaced."""
    return Pipeline(base.ports, base.options, steps=steps)


async def assert_nothing_changed(store: Store, prepared: Prepared, before: StoreView) -> None:
    """The failed turn left the store as it was, and the same request still works."""
    assert await stored(store) == before
    first = prepared.first
    if first is None:
        assert before[0] is None
        refused = await prepared.base.run(
            {"SessionId": "session-1", "TurnId": "turn-1", "Instruction": "again"}, CALLER
        )
        assert refused.result.rule_ids == ("AGN-033/3.1/session-found",)
        assert ok(await prepared.base.execute(INITIAL_REQUEST, CALLER)).kind is ResponseKind.FINAL
        return
    again = ok(await prepared.base.execute(prepared.request, CALLER))
    assert again.session_id == first.session_id
    if prepared.request.get("ToolResults"):
        assert again.turn_id == first.turn_id  # the pending turn was still pending (R4)
    else:
        assert again.turn_id != first.turn_id


# --- misbehaving steps -----------------------------------------------------------------


def _stray_turn() -> Turn:
    return Turn(id="turn-stray", session_id="session-stray", mode="general")


def fill_turn(scope: TurnScope) -> None:
    scope.ctx.turn = _stray_turn()


def clear_session(scope: TurnScope) -> None:
    scope.ctx.session = None


def clear_turn(scope: TurnScope) -> None:
    scope.ctx.turn = None


def clear_correlation_id(scope: TurnScope) -> None:
    scope.ctx.correlation_id = ""


def clear_instructions(scope: TurnScope) -> None:
    scope.ctx.envelope.instructions = None


def clear_tool_results(scope: TurnScope) -> None:
    scope.ctx.envelope.tool_results = None


def clear_agent_context(scope: TurnScope) -> None:
    scope.ctx.agent_context = None


def clear_conversation_context(scope: TurnScope) -> None:
    scope.ctx.conversation_context = None


def clear_manifest(scope: TurnScope) -> None:
    scope.ctx.tool_call_manifest = None


def rename_manifest_result(scope: TurnScope) -> None:
    manifest = scope.ctx.tool_call_manifest
    assert manifest is not None
    first = manifest.tool_call_results[0]
    manifest.tool_call_results[0] = first.model_copy(update={"name": "run_tests"})


def resume_named_turn(scope: TurnScope) -> None:
    turn = scope.ctx.turn
    assert turn is not None
    scope.ctx.turn = turn.model_copy(update={"id": scope.ctx.envelope.turn_id})


def swap_turn_id(scope: TurnScope) -> None:
    turn = scope.ctx.turn
    assert turn is not None
    scope.ctx.turn = turn.model_copy(update={"id": "turn-stray"})


def drop_session_mode(scope: TurnScope) -> None:
    session = scope.ctx.session
    assert session is not None
    scope.ctx.session = session.model_copy(update={"mode": None})


def unready_prompt(scope: TurnScope) -> None:
    scope.ctx.prompt_provider_ready = False


def answer_early(scope: TurnScope) -> None:
    scope.ctx.response_payload = ResponsePayload(primary_output_text="too early")


def add_client_call(scope: TurnScope) -> None:
    scope.ctx.client_tool_calls = [
        ToolCall(tool_call_id="call-stray", name="read_file", arguments_json='{"path": "b.py"}')
    ]


def mistype_outcome(scope: TurnScope) -> None:
    scope.ctx.response_type = ResponseType.TOOL_CONTINUATION


def change_mode(scope: TurnScope) -> None:
    scope.ctx.mode = "review"


def misaddress_response(scope: TurnScope) -> None:
    response = scope.ctx.response
    assert response is not None
    scope.ctx.response = response.model_copy(update={"turn_id": "turn-stray"})


@dataclass(frozen=True)
class Breakage:
    """On a ``kind`` turn, step ``replaced`` misbehaves so that rule ``rule_id`` of step
    ``faulted`` breaks: its PRE when ``faulted`` comes after ``replaced``, else its POST."""

    rule_id: str
    variant: str
    kind: ContextType
    replaced: PipelineStep
    replacement: StepFunction
    faulted: PipelineStep


def _pre(
    rule_id: str, kind: ContextType, replaced: PipelineStep, mutate: Mutation, faulted: S
) -> Breakage:
    variant = f"{replaced.value}-then-{mutate.__name__}"
    return Breakage(rule_id, variant, kind, replaced, after(replaced, mutate), faulted)


def _post(rule_id: str, kind: ContextType, step: PipelineStep, mutate: Mutation | None) -> Breakage:
    if mutate is None:
        return Breakage(rule_id, "does-nothing", kind, step, does_nothing, step)
    return Breakage(rule_id, f"then-{mutate.__name__}", kind, step, after(step, mutate), step)


PRE_BREAKAGES = [
    # §4.1 RequestHandler has no PRE (N/A). §4.10's PRE (response-type-valid) is
    # unreachable by a step: §4.9's POST response-type-matches-outcome guards the same.
    _pre("AGN-036/4.2/PRE/session-null", FOLLOW_ON, S.REQUEST_HANDLER, fill_session,
         S.SESSION_RESTORER),
    _pre("AGN-036/4.2/PRE/turn-null", CONTINUATION, S.REQUEST_HANDLER, fill_turn,
         S.SESSION_RESTORER),
    _pre("AGN-036/4.3/PRE/session-null", INITIAL, S.REQUEST_HANDLER, fill_session,
         S.AGENT_CONTEXT_RESOLVER),
    _pre("AGN-036/4.3/PRE/turn-null", INITIAL, S.REQUEST_HANDLER, fill_turn,
         S.AGENT_CONTEXT_RESOLVER),
    _pre("AGN-036/4.4/PRE/tool-results-present", CONTINUATION, S.SESSION_RESTORER,
         clear_tool_results, S.CLIENT_TOOL_CONTINUATION_RESOLVER),
    _pre("AGN-036/4.5/PRE/session-null", INITIAL, S.AGENT_CONTEXT_RESOLVER, fill_session,
         S.AGENT_SESSION_CREATOR),
    _pre("AGN-036/4.5/PRE/turn-null", INITIAL, S.AGENT_CONTEXT_RESOLVER, fill_turn,
         S.AGENT_SESSION_CREATOR),
    _pre("AGN-036/4.6/PRE/session-populated", CONTINUATION, S.CLIENT_TOOL_CONTINUATION_RESOLVER,
         clear_session, S.AGENT_CONTEXT_LOADER),
    _pre("AGN-036/4.7/PRE/session-populated", FOLLOW_ON, S.AGENT_CONTEXT_LOADER, clear_session,
         S.PROMPT_CONTENT_PROVIDER_INITIALIZER),
    _pre("AGN-036/4.7/PRE/turn-populated", FOLLOW_ON, S.AGENT_CONTEXT_LOADER, clear_turn,
         S.PROMPT_CONTENT_PROVIDER_INITIALIZER),
    _pre("AGN-036/4.7/PRE/agent-context-populated", INITIAL, S.AGENT_SESSION_CREATOR,
         clear_agent_context, S.PROMPT_CONTENT_PROVIDER_INITIALIZER),
    _pre("AGN-036/4.7/PRE/conversation-context-populated", INITIAL, S.AGENT_SESSION_CREATOR,
         clear_conversation_context, S.PROMPT_CONTENT_PROVIDER_INITIALIZER),
    _pre("AGN-036/4.7/PRE/tool-call-manifest-present", CONTINUATION, S.AGENT_CONTEXT_LOADER,
         clear_manifest, S.PROMPT_CONTENT_PROVIDER_INITIALIZER),
    # §4.8 PRE: "core context valid" (ValidateCore again before reasoning)
    _pre("AGN-036/3/correlation-id-present", FOLLOW_ON, S.PROMPT_CONTENT_PROVIDER_INITIALIZER,
         clear_correlation_id, S.REASONER),
    _pre("AGN-036/3.1/input-present", INITIAL, S.PROMPT_CONTENT_PROVIDER_INITIALIZER,
         clear_instructions, S.REASONER),
    _pre("AGN-036/4.9/PRE/response-payload-null", INITIAL, S.REASONER, answer_early,
         S.LLM_CLIENT),
    _pre("AGN-036/4.9/PRE/tool-call-manifest-valid", CONTINUATION, S.REASONER, clear_manifest,
         S.LLM_CLIENT),
    _pre("AGN-036/5/name-match", CONTINUATION, S.REASONER, rename_manifest_result, S.LLM_CLIENT),
]  # fmt: skip

POST_BREAKAGES = [
    _post("AGN-036/3/correlation-id-present", INITIAL, S.REQUEST_HANDLER, clear_correlation_id),
    _post("AGN-036/3.1/input-present", FOLLOW_ON, S.REQUEST_HANDLER, clear_instructions),
    _post("AGN-036/4.2/POST/session-populated", FOLLOW_ON, S.SESSION_RESTORER, None),
    _post("AGN-036/4.2/POST/turn-populated", FOLLOW_ON, S.SESSION_RESTORER, clear_turn),
    _post("AGN-036/4.2/POST/turn-id-new", FOLLOW_ON, S.SESSION_RESTORER, resume_named_turn),
    _post("AGN-036/4.2/POST/session-mode-present", CONTINUATION, S.SESSION_RESTORER,
          drop_session_mode),
    _post("AGN-036/4.3/POST/agent-context-populated", INITIAL, S.AGENT_CONTEXT_RESOLVER, None),
    _post("AGN-036/4.3/POST/conversation-context-populated", INITIAL, S.AGENT_CONTEXT_RESOLVER,
          clear_conversation_context),
    _post("AGN-036/4.4/POST/tool-call-manifest-valid", CONTINUATION,
          S.CLIENT_TOOL_CONTINUATION_RESOLVER, None),
    _post("AGN-036/4.4/POST/turn-id-matches-envelope", CONTINUATION,
          S.CLIENT_TOOL_CONTINUATION_RESOLVER, swap_turn_id),
    _post("AGN-036/4.5/POST/session-populated", INITIAL, S.AGENT_SESSION_CREATOR, clear_session),
    _post("AGN-036/4.5/POST/turn-populated", INITIAL, S.AGENT_SESSION_CREATOR, clear_turn),
    _post("AGN-036/4.6/POST/agent-context-populated", FOLLOW_ON, S.AGENT_CONTEXT_LOADER, None),
    _post("AGN-036/4.6/POST/conversation-context-populated", CONTINUATION,
          S.AGENT_CONTEXT_LOADER, clear_conversation_context),
    _post("AGN-036/4.7/POST/prompt-provider-ready", FOLLOW_ON,
          S.PROMPT_CONTENT_PROVIDER_INITIALIZER, unready_prompt),
    # §4.8 Reasoner has no POST (N/A).
    _post("AGN-036/4.9/POST/exactly-one-outcome", INITIAL, S.LLM_CLIENT, add_client_call),
    _post("AGN-036/4.9/POST/response-type-matches-outcome", FOLLOW_ON, S.LLM_CLIENT,
          mistype_outcome),
    _post("AGN-036/4.10/POST/response-conforms", INITIAL, S.RESPONSE_BUILDER, None),
    _post("AGN-036/4.10/POST/context-unchanged", FOLLOW_ON, S.RESPONSE_BUILDER, change_mode),
    _post("AGN-036/4.10/POST/response-matches-context", CONTINUATION, S.RESPONSE_BUILDER,
          misaddress_response),
]  # fmt: skip


# --- 1. the three paths ----------------------------------------------------------------


@pytest.mark.decision("D27", "R1")
@pytest.mark.rule("AGN-036/4.3/PRE/session-null", "holds")
@pytest.mark.rule("AGN-036/4.3/agent-context-known", "holds")
@pytest.mark.rule("AGN-036/4.3/conversation-context-known", "holds")
@pytest.mark.rule("AGN-036/4.5/POST/session-populated", "holds")
async def test_initial_turn_walks_the_initial_path_and_opens_session_1_turn_1(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(store, [FINAL])

    report = await pipeline.run(INITIAL_REQUEST, CALLER)

    response = ok(report.result)
    assert report.states == INITIAL_STATES
    assert events(report) == [*(s.value for s in STEPS_OF[INITIAL]), "complete"]
    assert [(t.source, t.target) for t in report.transitions] == list(pairwise(INITIAL_STATES))
    assert [(c.step, c.phase) for c in report.checks] == expected_checks(INITIAL)
    assert all(c.failed == () and not c.deferred for c in report.checks)
    assert report.context_type is INITIAL
    assert report.faulted_step is None
    assert report.llm_calls == 1
    assert (response.kind, response.session_id, response.turn_id) == (
        ResponseKind.FINAL,
        "session-1",
        "turn-1",
    )
    assert response.primary_output_text == "All done."
    assert response.mode_display_name == "General"
    session, turns, _ = await stored(store)
    assert session is not None
    assert (session.org, session.user, session.mode) == (CALLER.org, CALLER.user, "general")
    assert turns[0] is not None
    assert turns[0].status is TurnStatus.COMPLETED


@pytest.mark.decision("D27", "R5")
async def test_server_tool_rounds_loop_from_llm_answered_back_to_reasoning(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [EXPAND_MATH, ADD, FINAL])

    report = await pipeline.run(INITIAL_REQUEST, CALLER)

    response = ok(report.result)
    assert report.states == (
        "received",
        "validated",
        "agent_context_resolved",
        "session_created",
        "prompt_ready",
        "reasoning",
        "llm_answered",
        "reasoning",
        "llm_answered",
        "reasoning",
        "llm_answered",
        "response_built",
        "done",
    )
    assert events(report) == [
        "request_handler",
        "agent_context_resolver",
        "agent_session_creator",
        "prompt_content_provider_initializer",
        "reasoner",
        "llm_client",
        "server_tool_round",
        "llm_client",
        "server_tool_round",
        "llm_client",
        "response_builder",
        "complete",
    ]
    rounds = [t for t in report.transitions if t.event == "server_tool_round"]
    assert all((t.source, t.target) == ("llm_answered", "reasoning") for t in rounds)
    llm_posts = [c for c in report.checks if (c.step, c.phase) == ("llm_client", "POST")]
    assert [c.deferred for c in llm_posts] == [True, True, False]
    assert report.llm_calls == 3
    assert [(c.name, c.side, c.outcome) for c in report.tool_calls] == [
        ("Math", "server", "expanded"),
        ("Add", "server", "executed"),
    ]
    assert response.kind is ResponseKind.FINAL
    assert response.tool_results is not None
    assert [json.loads(r.result_json or "null") for r in response.tool_results] == [{"result": 3}]


@pytest.mark.decision("R4")
@pytest.mark.rule("AGN-036/4.2/POST/turn-id-new", "holds")
@pytest.mark.rule("AGN-033/3.1/session-found", "holds")
@pytest.mark.rule("AGN-033/3.1/turn-in-session", "holds")
@pytest.mark.rule("AGN-036/4.6/agent-context-known", "holds")
@pytest.mark.rule("AGN-036/4.6/conversation-context-known", "holds")
async def test_follow_on_opens_a_new_turn_in_the_same_session(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [FINAL, {"text": "Second answer."}])
    first = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))

    report = await pipeline.run(follow_on(first, "And the tests?"), CALLER)

    response = ok(report.result)
    assert report.states == FOLLOW_ON_STATES
    assert events(report) == [*(s.value for s in STEPS_OF[FOLLOW_ON]), "complete"]
    assert [(c.step, c.phase) for c in report.checks] == expected_checks(FOLLOW_ON)
    assert all(c.failed == () for c in report.checks)
    assert report.context_type is FOLLOW_ON
    assert (response.kind, response.session_id, response.turn_id) == (
        ResponseKind.FINAL,
        "session-1",
        "turn-2",
    )
    assert response.primary_output_text == "Second answer."
    _, turns, transcript = await stored(store)
    assert [t.status if t else None for t in turns[:3]] == [
        TurnStatus.COMPLETED,
        TurnStatus.COMPLETED,
        None,
    ]
    assert [m.role for m in transcript] == [ChatRole.USER, ChatRole.ASSISTANT] * 2


@pytest.mark.decision("R4")
@pytest.mark.rule("AGN-036/4.4/POST/turn-id-matches-envelope", "holds")
@pytest.mark.rule("AGN-036/4.4/POST/tool-call-manifest-valid", "holds")
async def test_continuation_resumes_the_pending_turn_and_keeps_its_turn_id(store: Store) -> None:
    pipeline, llm = make_pipeline(store, [READ_FILE, {"text": "a.py defines x."}])
    asked = await pipeline.run(INITIAL_REQUEST, CALLER)
    pending = ok(asked.result)
    _, awaiting, _ = await stored(store)

    report = await pipeline.run(continuation(pending), CALLER)

    assert asked.states == INITIAL_STATES
    assert pending.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert pending.primary_output_text is None
    assert [(c.tool_call_id, c.name) for c in pending.tool_calls or []] == [("call-1", "read_file")]
    assert awaiting[0] is not None
    assert awaiting[0].status is TurnStatus.AWAITING_CLIENT_TOOLS
    assert awaiting[0].pending_tool_calls == pending.tool_calls
    response = ok(report.result)
    assert report.states == CONTINUATION_STATES
    assert events(report) == [*(s.value for s in STEPS_OF[CONTINUATION]), "complete"]
    assert [(c.step, c.phase) for c in report.checks] == expected_checks(CONTINUATION)
    assert all(c.failed == () for c in report.checks)
    assert report.context_type is CONTINUATION
    assert (response.kind, response.session_id, response.turn_id) == (
        ResponseKind.FINAL,
        "session-1",
        "turn-1",
    )
    assert llm is not None
    tool_messages = [m for m in llm.requests[-1].messages if m.role is ChatRole.TOOL]
    assert [(m.tool_call_id, m.content) for m in tool_messages] == [("call-1", '{"ok": true}')]
    _, turns, _ = await stored(store)
    assert turns[0] is not None
    assert (turns[0].status, turns[0].pending_tool_calls) == (TurnStatus.COMPLETED, [])
    assert turns[1] is None


async def test_follow_on_after_a_continuation_opens_the_next_turn(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [READ_FILE, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    settled = ok(await pipeline.execute(continuation(pending), CALLER))

    report = await pipeline.run(follow_on(settled), CALLER)

    response = ok(report.result)
    assert report.states == FOLLOW_ON_STATES
    assert (response.session_id, response.turn_id) == ("session-1", "turn-2")


async def test_the_report_lists_every_guard_and_exit_hook_and_the_warnings(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("hi")])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    data = report.to_dict()
    assert [(c["step"], c["phase"]) for c in data["checks"]][:2] == [
        ("request_handler", "POST"),
        ("agent_context_resolver", "PRE"),
    ]
    assert all(c["failed"] == [] for c in data["checks"])
    assert "AGN-036/3/org-present" in data["checks"][0]["rule_ids"]
    assert data["warnings"] == []


# --- 2. every step's PRE and POST rules, broken by a misbehaving step ------------------


@pytest.mark.parametrize("case", rule_params(PRE_BREAKAGES, "broken", "kind"))
async def test_a_broken_pre_rule_faults_before_the_step_runs_and_persists_nothing(
    store: Store, case: Breakage
) -> None:
    prepared = await prepare(store, case.kind)
    broken = broken_pipeline(prepared.base, {case.replaced: case.replacement})
    before = await stored(store)

    report = await broken.run(prepared.request, CALLER)

    assert_faulted(report, case.faulted.value)
    assert case.rule_id in report.result.rule_ids
    assert report.context_type is case.kind
    guard = [c for c in report.checks if (c.step, c.phase) == (case.faulted.value, "PRE")]
    assert len(guard) == 1
    assert case.rule_id in guard[0].failed
    assert case.faulted.value not in events(report)  # the guard stopped the step itself
    assert events(report)[-2] == case.replaced.value
    assert report.transitions[-1].source == report.transitions[-2].target
    await assert_nothing_changed(store, prepared, before)


@pytest.mark.decision("D26")
@pytest.mark.parametrize("case", rule_params(POST_BREAKAGES, "broken", "kind"))
async def test_a_broken_post_rule_faults_before_any_later_step_and_persists_nothing(
    store: Store, case: Breakage
) -> None:
    prepared = await prepare(store, case.kind)
    broken = broken_pipeline(prepared.base, {case.replaced: case.replacement})
    before = await stored(store)

    report = await broken.run(prepared.request, CALLER)

    assert_faulted(report, case.faulted.value)
    assert case.rule_id in report.result.rule_ids
    exit_hook = report.checks[-1]
    assert (exit_hook.step, exit_hook.phase) == (case.faulted.value, Phase.POST.value)
    assert case.rule_id in exit_hook.failed
    assert events(report)[-2:] == [case.faulted.value, "fault"]
    assert report.transitions[-1].source == report.transitions[-2].target
    await assert_nothing_changed(store, prepared, before)


@pytest.mark.decision("D27")
@pytest.mark.parametrize(
    ("script", "caller", "expected"),
    [
        pytest.param(
            [{"text": ""}], CALLER, (*INITIAL_STATES[:7], "faulted"), id="llm_client-POST"
        ),
        pytest.param(
            [FINAL],
            {"user": "ana"},
            ("received", "validated", "faulted"),
            id="request_handler-POST",
        ),
    ],
)
async def test_states_of_a_post_failure_include_the_state_the_step_entered(
    store: Store,
    script: list[dict[str, Any]],
    caller: Caller | dict[str, Any],
    expected: tuple[str, ...],
) -> None:
    # TurnReport: "states are the machine states in the order the turn entered them".
    # A POST rule is the step's exit hook: it runs once the step's target is entered,
    # and `fault` leaves from there.
    pipeline, _ = make_pipeline(store, script)

    report = await pipeline.run(INITIAL_REQUEST, caller)

    assert report.transitions[-1].source == expected[-2]
    assert report.states == expected


@pytest.mark.rule("AGN-036/5/id-match", "broken")
async def test_tool_results_that_do_not_match_the_pending_calls_fault_and_change_nothing(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(store, [READ_FILE, FINAL])
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    before = await stored(store)
    wrong = {"ToolCallId": "call-404", "ExecutionMs": 1, "ResultJson": "{}"}

    report = await pipeline.run(continuation(pending, wrong), CALLER)

    assert_faulted(report, "client_tool_continuation_resolver")
    assert "AGN-036/5/id-match" in report.result.rule_ids
    assert report.llm_calls == 0
    assert await stored(store) == before
    assert ok(await pipeline.execute(continuation(pending), CALLER)).turn_id == pending.turn_id


@pytest.mark.decision("D46")
@pytest.mark.parametrize(
    "result",
    [
        {"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": "{}", "ErrorMessage": "x"},
        {"ToolCallId": "c1", "ExecutionMs": 1},
        {"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": "{not json"},
    ],
    ids=["both", "neither", "bad-json"],
)
async def test_a_refused_tool_result_names_the_pending_calls_tool(
    store: Store, result: dict[str, Any]
) -> None:
    pipeline, _ = make_pipeline(store, [calls(call("c1", "read_file", {"path": "a.py"}))])
    _, pending = await start(pipeline)

    report = await pipeline.run(continuation(pending, result), CALLER)

    assert not report.successful
    [error] = report.result.errors
    assert (error.tool_call_id, error.tool_name) == ("c1", "read_file")


@pytest.mark.decision("R3")
async def test_a_failed_tool_reaches_the_model_as_an_error_payload(store: Store) -> None:
    pipeline, llm = make_pipeline(store, [READ_FILE, FINAL])
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    failed = {"ToolCallId": "call-1", "ExecutionMs": 4, "ErrorMessage": "no such file"}

    report = await pipeline.run(continuation(pending, failed), CALLER)

    assert ok(report.result).turn_id == pending.turn_id
    assert report.states == CONTINUATION_STATES
    assert llm is not None
    [tool_message] = [m for m in llm.requests[-1].messages if m.role is ChatRole.TOOL]
    assert tool_message.tool_call_id == "call-1"
    assert json.loads(tool_message.content) == {"error": "no such file"}


@pytest.mark.decision("D26")
async def test_a_mode_change_of_a_failed_turn_is_not_persisted(store: Store) -> None:
    change = {
        "tool_calls": [
            {"id": "call-mode", "name": "agent_change_mode", "arguments": {"mode": "review"}}
        ]
    }
    pipeline, _ = make_pipeline(store, [FINAL, change, {"text": ""}, FINAL])
    first = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    before = await stored(store)

    report = await pipeline.run(follow_on(first), CALLER)

    assert_faulted(report, "llm_client")
    assert [c.outcome for c in report.tool_calls] == ["mode_changed"]
    assert report.mode_changes == ()
    assert report.branch is None
    assert await stored(store) == before
    session = before[0]
    assert session is not None
    assert (session.mode, session.mode_history) == ("general", [])
    assert ok(await pipeline.execute(follow_on(first), CALLER)).mode_display_name == "General"


# --- the agent and conversation contexts (AGN-036 §4.3, §4.6) ----------------------------

DEFAULT_CONFIG = (
    resources.files("aptix_pipeline.adapters.config")
    .joinpath("default_config.toml")
    .read_text("utf-8")
)
AGENT, CONVERSATION = "AGN-036/{}/agent-context-known", "AGN-036/{}/conversation-context-known"


async def test_an_initial_turn_naming_known_contexts_records_them_on_the_session(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(store, [FINAL])
    request = {
        **INITIAL_REQUEST,
        "AgentContextId": "assistant",
        "ConversationContextId": "workspace",
    }

    ok(await pipeline.execute(request, CALLER))

    session, _, _ = await stored(store)
    assert session is not None
    assert (session.agent_context_id, session.conversation_context_id) == ("assistant", "workspace")


@pytest.mark.decision("D28")
@pytest.mark.parametrize(
    ("field", "rule_id"),
    [
        pytest.param(
            "AgentContextId",
            AGENT.format("4.3"),
            id="agent",
            marks=pytest.mark.rule(AGENT.format("4.3"), "broken"),
        ),
        pytest.param(
            "ConversationContextId",
            CONVERSATION.format("4.3"),
            id="conversation",
            marks=pytest.mark.rule(CONVERSATION.format("4.3"), "broken"),
        ),
    ],
)
async def test_an_initial_turn_naming_an_unknown_context_is_not_found(
    store: Store, field: str, rule_id: str
) -> None:
    pipeline, llm = make_pipeline(store, [FINAL])

    report = await pipeline.run({**INITIAL_REQUEST, field: "nobody"}, CALLER)

    assert_faulted(report, "agent_context_resolver")
    assert report.result.rule_ids == (rule_id,)
    [error] = report.result.errors
    assert (error.code, error.field) == (ErrorCode.NOT_FOUND, field)
    assert "'nobody'" in error.message
    assert llm is not None
    assert llm.remaining == 1
    assert await stored(store) == NOTHING_STORED


@pytest.mark.parametrize(
    ("renamed", "rule_id"),
    [
        pytest.param(
            'id = "assistant"',
            AGENT.format("4.6"),
            id="agent",
            marks=pytest.mark.rule(AGENT.format("4.6"), "broken"),
        ),
        pytest.param(
            'id = "workspace"',
            CONVERSATION.format("4.6"),
            id="conversation",
            marks=pytest.mark.rule(CONVERSATION.format("4.6"), "broken"),
        ),
    ],
)
@pytest.mark.parametrize("kind", [FOLLOW_ON, CONTINUATION], ids=str)
async def test_a_session_whose_context_left_the_catalog_faults_at_the_loader(
    store: Store, renamed: str, rule_id: str, kind: ContextType
) -> None:
    prepared = await prepare(store, kind)
    catalog = ConfigCatalog.from_toml(DEFAULT_CONFIG.replace(renamed, 'id = "renamed"'))
    moved = Pipeline(replace(prepared.base.ports, agents=catalog), prepared.base.options)
    before = await stored(store)

    report = await moved.run(prepared.request, CALLER)

    assert_faulted(report, "agent_context_loader")
    assert report.result.rule_ids == (rule_id,)
    assert [e.code for e in report.result.errors] == [ErrorCode.NOT_FOUND]
    await assert_nothing_changed(store, prepared, before)


TWO_AGENTS_CONFIG = """
[[modes]]
name = "general"
display_name = "General"

[[modes]]
name = "review"
display_name = "Code Review"

[[agents]]
id = "assistant"
name = "Aptix assistant"
default = true
model = "scripted"
system_prompt = "You are the first assistant."

[[agents]]
id = "other"
name = "Other assistant"
model = "scripted"
system_prompt = "You are the other assistant."

[[conversations]]
id = "workspace"
name = "Workspace conversation"
default = true
instructions = "Workspace instructions."

[[conversations]]
id = "elsewhere"
name = "Another conversation"
instructions = "Elsewhere instructions."
"""


@pytest.mark.decision("D43")
@pytest.mark.parametrize(
    ("field", "asked", "warned"),
    [
        ("AgentContextId", "other", True),
        ("AgentContextId", "assistant", False),
        ("ConversationContextId", "elsewhere", True),
        ("ConversationContextId", "workspace", False),
    ],
    ids=["agent-other", "agent-same", "conversation-other", "conversation-same"],
)
async def test_follow_on_naming_another_context_id_warns_and_keeps_the_sessions(
    store: Store, field: str, asked: str, warned: bool
) -> None:
    pipeline, llm = make_pipeline(store, [text("one"), text("two")], config=TWO_AGENTS_CONFIG)
    _, first = await start(pipeline)

    report = await pipeline.run({**follow_on(first), field: asked}, CALLER)

    ok(report.result)
    assert warning_codes(report) == (["context_id_ignored"] if warned else [])
    if warned:
        assert field in report.result.warnings[0].message
        assert asked in report.result.warnings[0].message
    prompt = system_text(scripted(llm).requests[1])
    assert "You are the first assistant." in prompt
    assert "Workspace instructions." in prompt
    assert "other assistant" not in prompt
    assert "Elsewhere" not in prompt
    session = await session_of(store)
    assert (session.agent_context_id, session.conversation_context_id) == (
        "assistant",
        "workspace",
    )


# --- 3. a raising step, a failing commit -----------------------------------------------

RAISING_PATH = {
    S.REQUEST_HANDLER: INITIAL,
    S.SESSION_RESTORER: FOLLOW_ON,
    S.AGENT_CONTEXT_RESOLVER: INITIAL,
    S.CLIENT_TOOL_CONTINUATION_RESOLVER: CONTINUATION,
    S.AGENT_SESSION_CREATOR: INITIAL,
    S.AGENT_CONTEXT_LOADER: FOLLOW_ON,
    S.PROMPT_CONTENT_PROVIDER_INITIALIZER: CONTINUATION,
    S.REASONER: INITIAL,
    S.LLM_CLIENT: FOLLOW_ON,
    S.RESPONSE_BUILDER: CONTINUATION,
}


@pytest.mark.decision("D28")
@pytest.mark.parametrize("step", list(PipelineStep), ids=str)
async def test_a_raising_step_faults_the_turn_as_internal_and_persists_nothing(
    store: Store, step: PipelineStep
) -> None:
    assert step in STEPS_OF[RAISING_PATH[step]]
    prepared = await prepare(store, RAISING_PATH[step])
    broken = broken_pipeline(prepared.base, {step: raising_after(step)})
    before = await stored(store)

    report = await broken.run(prepared.request, CALLER)

    assert_faulted(report, step.value)
    [error] = report.result.errors
    assert error.code is ErrorCode.INTERNAL
    assert error.field == step.value
    assert error.message == f"step {step.value} raised RuntimeError"  # internal: no detail (D398)
    await assert_nothing_changed(store, prepared, before)


@pytest.mark.decision("D26", "D27")
@pytest.mark.parametrize(
    ("error", "code"),
    [
        (RuntimeError("disk full"), ErrorCode.PORT_FAILED),
        (StoreConflictError("another turn won"), ErrorCode.CONFLICT),
    ],
    ids=["raises", "conflict"],
)
async def test_a_failing_commit_faults_the_turn_and_rolls_back(
    store: Store, error: Exception, code: ErrorCode
) -> None:
    failing = CommitFailingStore(store, error)
    pipeline, _ = make_pipeline(failing, [FINAL])

    report = await pipeline.run(INITIAL_REQUEST, CALLER)

    assert_faulted(report, "complete")
    assert [e.code for e in report.result.errors] == [code]
    assert report.states[-2] == "response_built"
    assert [tx.rolled_back for tx in failing.transactions] == [True]
    assert report.mode_changes == ()
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D28")
async def test_a_failing_store_read_is_a_port_failure_naming_the_call(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [FINAL])
    first = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    failing, _ = make_pipeline(ReadFailingStore(store), [FINAL])

    report = await failing.run(follow_on(first), CALLER)

    assert_faulted(report, "session_restorer")
    error = report.result.errors[0]
    assert (error.code, error.field) == (ErrorCode.PORT_FAILED, "SessionStore")
    assert "load_session" in error.message
    assert "database is unavailable" in error.message


@pytest.mark.decision("D28")
@pytest.mark.parametrize(
    ("error", "at_begin"),
    [(KeyError("s"), False), (ValueError("bad row"), False), (OSError("no disk"), True)],
    ids=["KeyError", "ValueError", "begin"],
)
async def test_any_store_exception_is_a_port_failure(
    store: Store, error: Exception, at_begin: bool
) -> None:
    first, _ = make_pipeline(store, [text("hi")])
    done = ok(await first.execute({"Instruction": "hello"}, CALLER))
    pipeline, _ = make_pipeline(ReadFailingStore(store, error, at_begin=at_begin), [text("x")])

    report = await pipeline.run(follow_on(done), CALLER)

    [failure] = report.result.errors
    assert (failure.code, failure.field) == (ErrorCode.PORT_FAILED, "SessionStore")
    assert type(error).__name__ in failure.message


@pytest.mark.decision("D28")
async def test_a_failing_catalog_is_a_port_failure_and_stores_nothing(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [FINAL])
    broken = Pipeline(replace(pipeline.ports, modes=FailingModes()), pipeline.options)

    report = await broken.run(INITIAL_REQUEST, CALLER)

    assert report.result.errors[0].code == ErrorCode.PORT_FAILED
    assert report.result.errors[0].field == "ModeCatalog"
    assert await stored(store) == NOTHING_STORED


# --- 4. R1 and bad requests ------------------------------------------------------------


@pytest.mark.decision("R1")
@pytest.mark.rule("AGN-034/3/session-turn-pair", "broken")
@pytest.mark.parametrize(
    "request_data",
    [
        {"SessionId": "session-1", "Instruction": "Go on."},
        {"TurnId": "turn-1", "Instruction": "Go on."},
        {
            "SessionId": "session-1",
            "ToolResults": [{"ToolCallId": "call-1", "ExecutionMs": 1, "ResultJson": "{}"}],
        },
        AgentExecuteRequest(session_id="session-1", instruction="Go on."),
    ],
    ids=["session-only", "turn-only", "session-only-with-tool-results", "model-session-only"],
)
async def test_a_request_with_only_one_of_session_id_and_turn_id_is_rejected(
    store: Store, request_data: dict[str, Any] | AgentExecuteRequest
) -> None:
    pipeline, llm = make_pipeline(store, [READ_FILE, FINAL])
    ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    before = await stored(store)

    report = await pipeline.run(request_data, CALLER)

    assert_faulted(report, "request_handler")
    assert report.result.rule_ids == ("AGN-034/3/session-turn-pair",)
    assert [e.code for e in report.result.errors] == [ErrorCode.INVALID_REQUEST]
    assert report.states == ("received", "faulted")
    assert report.context_type is None
    assert await stored(store) == before
    assert llm is not None
    assert llm.remaining == 1


@pytest.mark.parametrize(
    ("request_input", "rule_id"),
    [
        ({"Mode": "x"}, "AGN-034/3/server-owned-field"),
        ({"Instruction": "Hi", "Mode": "review"}, "AGN-034/3/server-owned-field"),
        (b"{", "AGN-034/3/envelope-object"),
        ("not json", "AGN-034/3/envelope-object"),
        ("[]", "AGN-034/3/envelope-object"),
        ({"Instruction": 5}, "AGN-034/3/field-type"),
        ({}, "AGN-034/2.1/input-required"),
        ('{"Instruction": "Hi", "Bogus": 1}', "AGN-034/3/unknown-field"),
    ],
    ids=[
        "mode-only",
        "mode-with-instruction",
        "truncated-bytes",
        "not-json",
        "array",
        "instruction-not-text",
        "empty-object",
        "unknown-field-text",
    ],
)
async def test_a_bad_request_returns_an_unsuccessful_result_and_never_raises(
    store: Store, request_input: dict[str, Any] | str | bytes, rule_id: str
) -> None:
    pipeline, llm = make_pipeline(store, [FINAL])

    result = await pipeline.execute(request_input, CALLER)

    assert not result.successful
    assert result.result is None
    assert rule_id in result.rule_ids
    assert all(e.code is ErrorCode.INVALID_REQUEST for e in result.errors)
    assert await stored(store) == NOTHING_STORED
    assert llm is not None
    assert llm.remaining == 1


@pytest.mark.parametrize(
    "request_input",
    [
        {"Instruction": "Explain a.py."},
        '{"Instruction": "Explain a.py."}',
        b'{"Instruction": "Explain a.py."}',
        AgentExecuteRequest(instruction="Explain a.py."),
    ],
    ids=["mapping", "json-text", "json-bytes", "model"],
)
async def test_a_request_may_be_a_mapping_json_text_json_bytes_or_a_model(
    store: Store, request_input: dict[str, Any] | str | bytes | AgentExecuteRequest
) -> None:
    pipeline, llm = make_pipeline(store, [FINAL])

    response = ok(await pipeline.execute(request_input, CALLER))

    assert (response.session_id, response.turn_id) == ("session-1", "turn-1")
    assert llm is not None
    assert llm.requests[0].messages[-1].content == "Explain a.py."


@pytest.mark.decision("D46", "D142")
async def test_an_error_quotes_a_huge_id_only_in_part(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("x")])
    huge = "s" * 100_000

    report = await pipeline.run({"SessionId": huge, "TurnId": "t", "Instruction": "hi"}, CALLER)

    [error] = report.result.errors
    assert error.rule_id == "AGN-033/3.1/session-found"
    assert len(error.message) < 300


# --- 5. R10: the pending-turn protocol --------------------------------------------------

FOLLOW_ON_SETTLED = "DESIGN/R10/follow-on-turn-settled"


@pytest.mark.decision("R10")
@pytest.mark.rule("DESIGN/R10/follow-on-turn-settled", "broken")
async def test_follow_on_naming_a_turn_that_awaits_tool_results_is_refused(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [READ_FILE, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    before = await stored(store)

    report = await pipeline.run(follow_on(pending), CALLER)

    assert_faulted(report, "session_restorer")
    assert report.result.rule_ids == ("DESIGN/R10/follow-on-turn-settled",)
    assert report.result.errors[0].code is ErrorCode.INVALID_REQUEST
    assert report.llm_calls == 0
    assert await stored(store) == before
    settled = ok(await pipeline.execute(continuation(pending), CALLER))
    assert (settled.session_id, settled.turn_id) == (pending.session_id, pending.turn_id)


@pytest.mark.decision("R10")
@pytest.mark.rule("DESIGN/R10/continuation-turn-pending", "broken")
async def test_continuation_naming_a_completed_turn_is_refused(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [FINAL, FINAL])
    done = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    before = await stored(store)
    result = {"ToolCallId": "call-1", "ExecutionMs": 1, "ResultJson": "{}"}

    report = await pipeline.run(continuation(done, result), CALLER)

    assert_faulted(report, "session_restorer")
    assert report.result.rule_ids == ("DESIGN/R10/continuation-turn-pending",)
    assert report.result.errors[0].code is ErrorCode.INVALID_REQUEST
    assert await stored(store) == before
    assert ok(await pipeline.execute(follow_on(done), CALLER)).turn_id == "turn-2"


async def test_a_continuation_sent_twice_gets_the_first_answer_again(store: Store) -> None:
    pipeline, llm = make_pipeline(store, [READ_FILE, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    first = await pipeline.execute(continuation(pending), CALLER)
    before = await stored(store)

    report = await pipeline.run(continuation(pending), CALLER)

    assert report.replayed
    assert report.result == first
    assert report.states == ()
    assert len(scripted(llm).requests) == 2  # no model call for the copy
    assert await stored(store) == before


@pytest.mark.decision("D181", "R10")
@pytest.mark.rule("DESIGN/R10/continuation-turn-pending", "broken")
async def test_a_continuation_of_other_calls_of_a_settled_turn_is_refused(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [READ_FILE, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    ok(await pipeline.execute(continuation(pending), CALLER))
    before = await stored(store)
    other = {"ToolCallId": "call-9", "ExecutionMs": 1, "ResultJson": "{}"}

    report = await pipeline.run(continuation(pending, other), CALLER)

    assert_faulted(report, "session_restorer")
    assert report.result.rule_ids == ("DESIGN/R10/continuation-turn-pending",)
    assert await stored(store) == before


@pytest.mark.decision("D37", "R10")
@pytest.mark.rule(FOLLOW_ON_SETTLED, "broken")
async def test_follow_on_naming_a_completed_turn_is_refused_while_another_turn_awaits_tools(
    store: Store,
) -> None:
    pipeline, llm = make_pipeline(
        store, [text("first"), calls(READ_A), text("read it"), text("after")]
    )
    _, first = await start(pipeline)
    pending = ok(await pipeline.execute(follow_on(first), CALLER))
    assert pending.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert (first.turn_id, pending.turn_id) == ("turn-1", "turn-2")
    before = await stored(store)

    report = await pipeline.run(follow_on(first, "never mind"), CALLER)

    assert_refused(report, FOLLOW_ON_SETTLED, "session_restorer")
    [error] = report.result.errors
    assert error.code is ErrorCode.INVALID_REQUEST
    assert "turn-2" in error.message
    assert "c1" in error.message
    assert error.field == "TurnId"
    assert await stored(store) == before
    assert len(scripted(llm).requests) == 2  # the model was not called

    resumed = ok(await pipeline.execute(continuation(pending), CALLER))
    assert (resumed.kind, resumed.turn_id) == (ResponseKind.FINAL, "turn-2")
    after = ok(await pipeline.execute(follow_on(first, "never mind"), CALLER))

    assert after.kind is ResponseKind.FINAL
    assert after.primary_output_text == "after"
    assert after.turn_id not in {"turn-1", "turn-2"}


@pytest.mark.decision("D37", "R10")
@pytest.mark.rule(FOLLOW_ON_SETTLED, "holds")
async def test_a_pending_turn_of_another_session_does_not_block_a_follow_on(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("one"), calls(READ_A), text("two")])
    _, first = await start(pipeline)
    _, other = await start(pipeline)
    assert other.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert other.session_id != first.session_id

    response = ok(await pipeline.execute(follow_on(first), CALLER))

    assert (response.session_id, response.primary_output_text) == (first.session_id, "two")


# --- 6. isolation ----------------------------------------------------------------------


@pytest.mark.decision("D28")
@pytest.mark.rule("AGN-033/3.1/session-found", "broken")
@pytest.mark.parametrize("other", [OTHER_ORG, OTHER_USER], ids=["other-org", "other-user"])
@pytest.mark.parametrize("kind", [FOLLOW_ON, CONTINUATION], ids=str)
async def test_another_callers_session_is_not_found(
    store: Store, other: Caller, kind: ContextType
) -> None:
    prepared = await prepare(store, kind)
    before = await stored(store)
    unknown = {**prepared.request, "SessionId": "session-404"}

    report = await prepared.base.run(prepared.request, other)
    missing = await prepared.base.run(unknown, CALLER)

    assert_faulted(report, "session_restorer")
    assert report.result.rule_ids == ("AGN-033/3.1/session-found",)
    assert [e.code for e in report.result.errors] == [ErrorCode.NOT_FOUND]
    assert [(e.code, e.rule_id, e.field) for e in report.result.errors] == [
        (e.code, e.rule_id, e.field) for e in missing.result.errors
    ]  # indistinguishable from a session that does not exist
    assert await stored(store) == before
    assert await other_callers_sessions(store, other) == []
    await assert_nothing_changed(store, prepared, before)


async def other_callers_sessions(store: Store, other: Caller) -> list[Session]:
    """What the other caller can read of session-1: nothing."""
    found = await store.read_session(other.org, other.user, "session-1")
    return [] if found is None else [found]


@pytest.mark.rule("AGN-033/3.1/turn-in-session", "broken")
@pytest.mark.parametrize("turn_id", ["turn-2", "turn-404"], ids=["of-another-session", "unknown"])
async def test_a_turn_id_outside_the_named_session_is_not_found(store: Store, turn_id: str) -> None:
    pipeline, _ = make_pipeline(store, [FINAL, FINAL, FINAL])
    first = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    second = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    assert (second.session_id, second.turn_id) == ("session-2", "turn-2")
    before = (await stored(store, "session-1"), await stored(store, "session-2"))

    report = await pipeline.run(
        {"SessionId": first.session_id, "TurnId": turn_id, "Instruction": "next"}, CALLER
    )

    assert_faulted(report, "session_restorer")
    assert report.result.rule_ids == ("AGN-033/3.1/turn-in-session",)
    assert [e.code for e in report.result.errors] == [ErrorCode.NOT_FOUND]
    assert (await stored(store, "session-1"), await stored(store, "session-2")) == before


@pytest.mark.rule("AGN-033/3.1/turn-in-session", "broken")
async def test_a_continuation_naming_a_pending_turn_of_another_session_is_not_found(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(store, [READ_FILE, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    other = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    before = (await stored(store, "session-1"), await stored(store, "session-2"))
    crossed = {**continuation(pending), "SessionId": other.session_id}

    report = await pipeline.run(crossed, CALLER)

    assert_faulted(report, "session_restorer")
    assert report.result.rule_ids == ("AGN-033/3.1/turn-in-session",)
    assert (await stored(store, "session-1"), await stored(store, "session-2")) == before
    assert ok(await pipeline.execute(continuation(pending), CALLER)).turn_id == pending.turn_id


# --- 7. R5: the server-tool round limit ------------------------------------------------

LIMITED = PipelineOptions(max_server_tool_rounds=2, retry_wait_seconds=0, retry_max_wait_seconds=0)


ROUND_TOOLS = [("review", "review_checklist"), ("general", "Math")]


@pytest.mark.decision("R5")
@pytest.mark.rule("DESIGN/R5/round-limit", "holds")
@pytest.mark.parametrize(("mode", "tool"), ROUND_TOOLS, ids=["review_checklist", "Math-Add"])
async def test_exactly_max_server_tool_rounds_then_an_answer_succeeds(
    store: Store, mode: str, tool: str
) -> None:
    pipeline, _ = make_pipeline(store, [*server_calls(tool, 2), FINAL], options=LIMITED)

    report = await pipeline.run(INITIAL_REQUEST, CALLER, initial_mode=mode)

    response = ok(report.result)
    assert response.kind is ResponseKind.FINAL
    assert events(report).count("server_tool_round") == 2
    assert report.llm_calls == 3
    assert report.states[-1] == "done"


@pytest.mark.decision("R5")
@pytest.mark.rule("DESIGN/R5/round-limit", "broken")
@pytest.mark.parametrize(("mode", "tool"), ROUND_TOOLS, ids=["review_checklist", "Math-Add"])
async def test_a_model_that_keeps_calling_server_tools_faults_past_the_round_limit(
    store: Store, mode: str, tool: str
) -> None:
    pipeline, llm = make_pipeline(store, [*server_calls(tool, 5), FINAL], options=LIMITED)

    report = await pipeline.run(INITIAL_REQUEST, CALLER, initial_mode=mode)

    assert_faulted(report, "llm_client")
    assert report.result.rule_ids == ("DESIGN/R5/round-limit",)
    assert events(report).count("server_tool_round") == 2
    assert report.llm_calls == 3
    assert report.states[-2] == "reasoning"
    # The over-limit reply's own calls never ran: their results would reach no model.
    assert len(report.tool_calls) == 2
    assert llm is not None
    assert llm.remaining == 3
    assert await stored(store) == NOTHING_STORED


# --- 8. LLM port failures --------------------------------------------------------------


class CountingLLM:
    """Counts the calls it passes on."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        return await self.inner.complete(request)


@pytest.mark.decision("D34")
async def test_an_llm_that_fails_twice_then_answers_succeeds_on_the_third_attempt(
    store: Store,
) -> None:
    llm = FlakyLLM(failures=2)
    pipeline, _ = make_pipeline(store, llm)

    report = await pipeline.run(INITIAL_REQUEST, CALLER)

    response = ok(report.result)
    assert response.primary_output_text == "Recovered."
    assert llm.calls == 3
    assert report.llm_calls == 1
    assert report.states == INITIAL_STATES


@pytest.mark.decision("D28", "D34")
@pytest.mark.parametrize("attempts", [1, 3, 5])
async def test_an_llm_that_always_fails_faults_as_port_failed_after_every_attempt(
    store: Store, attempts: int
) -> None:
    llm = FlakyLLM(failures=1_000)
    options = PipelineOptions(llm_attempts=attempts, retry_wait_seconds=0, retry_max_wait_seconds=0)
    pipeline, _ = make_pipeline(store, llm, options=options)

    report = await pipeline.run(INITIAL_REQUEST, CALLER)

    assert_faulted(report, "llm_client")
    [error] = report.result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert f"after {attempts} attempt(s)" in error.message
    assert "ConnectionError" in error.message
    assert llm.calls == attempts
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D34")
async def test_a_script_that_runs_out_faults_at_once_without_retrying(store: Store) -> None:
    llm = CountingLLM(ScriptedLLM([]))
    pipeline, _ = make_pipeline(store, llm)

    report = await pipeline.run(INITIAL_REQUEST, CALLER)

    assert_faulted(report, "llm_client")
    [error] = report.result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert "ScriptExhaustedError" in error.message
    assert "after 1 attempt(s)" in error.message
    assert llm.calls == 1
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D32")
@pytest.mark.rule("AGN-036/4.9/POST/exactly-one-outcome", "broken")
@pytest.mark.parametrize("text", ["", "   \n"], ids=["empty", "blank"])
async def test_an_empty_reply_without_tool_calls_has_no_outcome_and_faults(
    store: Store, text: str
) -> None:
    pipeline, _ = make_pipeline(store, [{"text": text}])

    report = await pipeline.run(INITIAL_REQUEST, CALLER)

    assert_faulted(report, "llm_client")
    assert report.result.rule_ids == ("AGN-036/4.9/POST/exactly-one-outcome",)
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D34")
async def test_cancelling_a_turn_stops_the_model_call_without_retrying(store: Store) -> None:
    calls: list[float] = []

    class SlowLLM:
        async def complete(self, request: LLMRequest) -> LLMReply:
            calls.append(asyncio.get_running_loop().time())
            await asyncio.sleep(5)
            return LLMReply(text="late")

    pipeline, _ = make_pipeline(store, SlowLLM())
    task = asyncio.create_task(pipeline.execute({"Instruction": "hello"}, CALLER))
    await asyncio.sleep(0.05)

    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=1)
    assert len(calls) == 1
    assert await stored(store) == NOTHING_STORED


# --- 9. concurrency --------------------------------------------------------------------


async def test_twenty_concurrent_initial_turns_all_succeed_in_distinct_sessions(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(store, [FINAL] * 20)

    results = await asyncio.gather(
        *(pipeline.execute({"Instruction": f"Task {n}"}, CALLER) for n in range(20))
    )

    responses = [ok(result) for result in results]
    session_ids = {response.session_id for response in responses}
    assert len(session_ids) == 20
    assert len({response.turn_id for response in responses}) == 20
    for response in responses:
        session = await store.read_session(CALLER.org, CALLER.user, response.session_id)
        turn = await store.read_turn(CALLER.org, CALLER.user, response.session_id, response.turn_id)
        assert session is not None
        assert turn is not None
        assert turn.status is TurnStatus.COMPLETED


class BarrierLLM:
    """A scripted LLM that, once armed, holds each call until ``parties`` calls wait."""

    def __init__(self, replies: list[dict[str, Any]], parties: int) -> None:
        self.inner = ScriptedLLM(replies)
        self.parties = parties
        self.armed = False
        self.arrived = 0
        self.all_in = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMReply:
        if self.armed:
            self.arrived += 1
            if self.arrived >= self.parties:
                self.all_in.set()
            await asyncio.wait_for(self.all_in.wait(), timeout=10)
        return await self.inner.complete(request)


@pytest.mark.decision("D28", "D35")
async def test_two_concurrent_continuations_of_one_pending_turn_one_wins_one_conflicts(
    store: Store,
) -> None:
    llm = BarrierLLM([READ_FILE, {"text": "first"}, {"text": "second"}, FINAL], parties=2)
    pipeline, _ = make_pipeline(store, llm)
    pending = ok(await pipeline.execute(INITIAL_REQUEST, CALLER))
    llm.armed = True

    # Two different results for the one call: identical copies would share one run.
    first, second = (
        {"ToolCallId": "call-1", "ExecutionMs": 1, "ResultJson": json.dumps({"n": n})}
        for n in (1, 2)
    )
    reports = await asyncio.gather(
        pipeline.run(continuation(pending, first), CALLER),
        pipeline.run(continuation(pending, second), CALLER),
    )

    assert llm.arrived == 2  # both were in flight before either committed
    winners = [r for r in reports if r.successful]
    losers = [r for r in reports if not r.successful]
    assert len(winners) == 1
    assert len(losers) == 1
    assert [e.code for e in losers[0].result.errors] == [ErrorCode.CONFLICT]
    assert_faulted(losers[0], "complete")
    winner = ok(winners[0].result)
    assert (winner.session_id, winner.turn_id) == (pending.session_id, pending.turn_id)
    _, turns, transcript = await stored(store)
    assert turns[0] is not None
    assert turns[0].status is TurnStatus.COMPLETED
    assert [m.content for m in transcript if m.role is ChatRole.ASSISTANT][-1] == (
        winner.primary_output_text
    )
    tool_messages = [m for m in transcript if m.role is ChatRole.TOOL]
    assert len(tool_messages) == 1  # the loser's messages were not kept
    llm.armed = False
    again = await pipeline.run(continuation(pending), CALLER)  # other results for call-1
    assert again.result.rule_ids == ("DESIGN/idempotency/continuation-conflict",)
    winner_again = await pipeline.run(
        continuation(pending, first if winners[0] is reports[0] else second), CALLER
    )
    assert winner_again.replayed
    assert winner_again.result == winners[0].result


# --- 10. sync entry points and the caller ----------------------------------------------


def test_execute_sync_runs_a_turn_from_plain_sync_code(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [FINAL, FINAL])

    first = pipeline.execute_sync(INITIAL_REQUEST, CALLER)
    second = pipeline.execute_sync(follow_on(ok(first)), CALLER)

    assert (ok(first).session_id, ok(first).turn_id) == ("session-1", "turn-1")
    assert (ok(second).session_id, ok(second).turn_id) == ("session-1", "turn-2")


async def test_run_sync_inside_a_running_event_loop_raises_and_runs_nothing(
    store: Store,
) -> None:
    pipeline, llm = make_pipeline(store, [FINAL])

    with pytest.raises(RuntimeError, match="running event loop"):
        pipeline.run_sync(INITIAL_REQUEST, CALLER)

    assert llm is not None
    assert llm.remaining == 1
    assert await stored(store) == NOTHING_STORED


ORG, USER = "AGN-036/3/org-present", "AGN-036/3/user-present"


@pytest.mark.decision("D36")
@pytest.mark.parametrize(
    ("caller", "rule_id"),
    [
        pytest.param({"user": "ana"}, ORG, id="org-missing", marks=pytest.mark.rule(ORG, "broken")),
        pytest.param({"org": "", "user": "ana"}, ORG, id="org-empty"),
        pytest.param({"org": None, "user": "ana"}, ORG, id="org-null"),
        pytest.param(
            {"org": "acme"}, USER, id="user-missing", marks=pytest.mark.rule(USER, "broken")
        ),
        pytest.param({"org": "acme", "user": 7}, USER, id="user-not-text"),
    ],
)
async def test_a_caller_mapping_without_org_or_user_is_refused_and_never_raises(
    store: Store, caller: dict[str, Any], rule_id: str
) -> None:
    pipeline, llm = make_pipeline(store, [FINAL])

    report = await pipeline.run(INITIAL_REQUEST, caller)

    assert_faulted(report, "request_handler")
    assert report.result.rule_ids == (rule_id,)
    assert llm is not None
    assert llm.remaining == 1
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D36")
async def test_a_caller_mapping_with_wire_names_is_accepted(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [FINAL])

    response = ok(await pipeline.execute(INITIAL_REQUEST, {"Org": "acme", "User": "ana"}))

    session = await store.read_session("acme", "ana", response.session_id)
    assert session is not None
    assert (session.org, session.user) == ("acme", "ana")
