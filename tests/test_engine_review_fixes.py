"""Scenario tests of the fixes from the engine's spec review (commit "Fixes from a spec review").

Each behaviour runs through the public API (``Pipeline.run`` / ``Pipeline.execute``)
on the memory store and on a SQLite file (the ``store`` fixture): R10 for the whole
session, the session-latched SolutionContextText (AGN-034 §4.5), client calls without
arguments (AGN-033 §5.1), RFC 8259 server tool results (AGN-033 §5.2), model tool-call
ids, unguarded JSON fenced rather than refused (AGN-033 §4.1), the ``branch`` flag and
the warnings of restored sessions (AGN-011 §3.3, §5.6, DESIGN.md R7/R8), and the
``aptix run`` usage errors for a bad SQLite file or catalog.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from engine_kit import (
    CALLER,
    NOTHING_STORED,
    call,
    calls,
    change_mode,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    scripted,
    stored,
    text,
)

from aptix_pipeline.adapters.memory_store import MemoryStore
from aptix_pipeline.adapters.scripted_llm import ScriptedLLM
from aptix_pipeline.adapters.sqlite_store import SQLiteStore
from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    ChatMessage,
    ChatRole,
    ErrorCode,
    LLMReply,
    LLMRequest,
    ResponseKind,
    Session,
    ToolCall,
    ToolInvocation,
    TurnStatus,
)
from aptix_pipeline.engine import Pipeline, TurnReport
from aptix_pipeline.validators.json_text import strict_json_loads

Store = MemoryStore | SQLiteStore

# --- rule ids --------------------------------------------------------------------------

FOLLOW_ON_SETTLED = "DESIGN/R10/follow-on-turn-settled"
TOOL_CALL_IDS = "AGN-033/5.1/model-tool-call-ids"
EMBEDDED_FILE = "AGN-033/6.1/no-embedded-file-contents"
INITIAL_MODE_KNOWN = "AGN-011/3.1/initial-mode-known"
MODE_KNOWN = "AGN-011/5.2/mode-known"

# --- a catalog with two agents and two conversations -------------------------------------

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

# --- helpers ----------------------------------------------------------------------------

READ_A = call("c1", "read_file", {"path": "a.py"})


def system_text(request: LLMRequest) -> str:
    """The system message the model was given in one call."""
    first = request.messages[0]
    assert first.role is ChatRole.SYSTEM
    return first.content


def tool_messages(request: LLMRequest, call_id: str) -> list[ChatMessage]:
    """The tool messages answering ``call_id`` in one model call."""
    return [m for m in request.messages if m.role is ChatRole.TOOL and m.tool_call_id == call_id]


def warning_codes(report: TurnReport) -> list[str]:
    """The codes of the result's warnings, in order."""
    return [warning.code for warning in report.result.warnings]


async def session_of(store: Store, session_id: str = "session-1") -> Session:
    """The committed session as a transaction of ``CALLER`` loads it; it must exist."""
    tx = store.begin(CALLER.org, CALLER.user)
    try:
        session = await tx.load_session(session_id)
    finally:
        await tx.rollback()
    assert session is not None, f"no session {session_id!r}"
    return session


async def start(
    pipeline: Pipeline, request: Mapping[str, Any] | None = None, *, initial_mode: str | None = None
) -> tuple[TurnReport, AgentExecuteResponse]:
    """An Initial turn that must succeed."""
    report = await pipeline.run(
        dict(request or {"Instruction": "hello"}), CALLER, initial_mode=initial_mode
    )
    return report, ok(report.result)


def assert_refused(report: TurnReport, rule_id: str, faulted_step: str) -> None:
    """The turn faulted at ``faulted_step`` on ``rule_id`` alone and returned no response."""
    assert not report.successful
    assert report.result.result is None
    assert report.states[-1] == "faulted"
    assert report.faulted_step == faulted_step
    assert report.result.rule_ids == (rule_id,)


# === 1. R10 for the session: a FollowOn waits for the open call set ======================


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


@pytest.mark.rule(FOLLOW_ON_SETTLED, "holds")
async def test_a_pending_turn_of_another_session_does_not_block_a_follow_on(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("one"), calls(READ_A), text("two")])
    _, first = await start(pipeline)
    _, other = await start(pipeline)
    assert other.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert other.session_id != first.session_id

    response = ok(await pipeline.execute(follow_on(first), CALLER))

    assert (response.session_id, response.primary_output_text) == (first.session_id, "two")


# === 2. SolutionContextText is latched on the session (AGN-034 §4.5) =====================


async def test_follow_on_solution_context_replaces_the_sessions_and_is_kept_afterwards(
    store: Store,
) -> None:
    pipeline, llm = make_pipeline(store, [text("a"), text("b"), text("c")])
    _, first = await start(pipeline, {"Instruction": "hi", "SolutionContextText": "CTX-A"})
    assert "CTX-A" in system_text(scripted(llm).requests[0])
    assert (await session_of(store)).solution_context_text == "CTX-A"

    second = ok(
        await pipeline.execute({**follow_on(first), "SolutionContextText": "CTX-B"}, CALLER)
    )

    replaced = system_text(scripted(llm).requests[1])
    assert "CTX-B" in replaced
    assert "CTX-A" not in replaced
    assert (await session_of(store)).solution_context_text == "CTX-B"

    ok(await pipeline.execute(follow_on(second), CALLER))

    kept = system_text(scripted(llm).requests[2])
    assert "CTX-B" in kept
    assert "CTX-A" not in kept
    assert (await session_of(store)).solution_context_text == "CTX-B"


async def test_a_continuation_sees_the_solution_context_its_follow_on_set(store: Store) -> None:
    pipeline, llm = make_pipeline(store, [text("a"), calls(READ_A), text("b")])
    _, first = await start(pipeline, {"Instruction": "hi", "SolutionContextText": "CTX-A"})
    pending = ok(
        await pipeline.execute({**follow_on(first), "SolutionContextText": "CTX-B"}, CALLER)
    )

    ok(await pipeline.execute(continuation(pending), CALLER))

    resumed = system_text(scripted(llm).requests[2])
    assert "CTX-B" in resumed
    assert "CTX-A" not in resumed


async def test_a_failed_follow_on_leaves_the_solution_context_as_it_was(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("a")])  # the FollowOn finds the script empty
    _, first = await start(pipeline, {"Instruction": "hi", "SolutionContextText": "CTX-A"})
    before = await stored(store)

    report = await pipeline.run({**follow_on(first), "SolutionContextText": "CTX-B"}, CALLER)

    assert not report.successful
    assert await stored(store) == before
    assert (await session_of(store)).solution_context_text == "CTX-A"


# === 3. client calls without arguments are emitted with {} (AGN-033 §5.1) ===============


@pytest.mark.parametrize("arguments", ["", "null", "   "], ids=["empty", "null", "blank"])
async def test_client_call_without_arguments_is_emitted_with_an_empty_object(
    store: Store, arguments: str
) -> None:
    pipeline, _ = make_pipeline(store, [calls(call("c1", "run_tests", arguments)), text("ran")])

    report, pending = await start(pipeline)

    assert report.successful
    assert pending.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert [(c.tool_call_id, c.name, c.arguments_json) for c in pending.tool_calls or []] == [
        ("c1", "run_tests", "{}")
    ]
    turn = await store.read_turn(CALLER.org, CALLER.user, pending.session_id, pending.turn_id)
    assert turn is not None
    assert [c.arguments_json for c in turn.pending_tool_calls] == ["{}"]
    assert ok(await pipeline.execute(continuation(pending), CALLER)).primary_output_text == "ran"


@pytest.mark.parametrize(
    "arguments",
    ['{"pattern":   "test_*"}', "{}", "{ }", '{"pattern": "caf\\u00e9"}'],
    ids=["spaced", "empty-object", "spaced-empty-object", "escaped"],
)
async def test_client_call_with_arguments_keeps_their_exact_text(
    store: Store, arguments: str
) -> None:
    pipeline, _ = make_pipeline(store, [calls(call("c1", "run_tests", arguments))])

    _, pending = await start(pipeline)

    assert [c.arguments_json for c in pending.tool_calls or []] == [arguments]


# === 4. server tool results are RFC 8259 JSON (AGN-033 §5.2) =============================


def checklist_turn(store: Store, executor: Any, answer: str) -> tuple[Pipeline, ScriptedLLM | None]:
    """A pipeline whose model calls ``review_checklist`` (run by ``executor``), then answers."""
    return make_pipeline(
        store,
        [calls(call("k1", "review_checklist")), text(answer)],
        tools={"review_checklist": executor},
    )


@pytest.mark.parametrize("answer", ["Infinity", '{"x": NaN}', "-Infinity", "[1, NaN]"])
async def test_server_tool_text_that_is_not_strict_json_is_quoted(
    store: Store, answer: str
) -> None:
    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return answer

    pipeline, llm = checklist_turn(store, checklist, "checked")

    report, response = await start(pipeline, initial_mode="review")

    [message] = tool_messages(scripted(llm).requests[1], "k1")
    assert message.content == json.dumps(answer)
    assert strict_json_loads(message.content) == answer
    assert response.kind is ResponseKind.FINAL
    [result] = response.tool_results or []
    assert result.tool_call_id == "k1"
    assert result.error_message is None
    assert result.result_json is not None
    assert strict_json_loads(result.result_json) == answer
    assert [(c.name, c.outcome) for c in report.tool_calls] == [("review_checklist", "executed")]


async def test_server_tool_text_that_is_strict_json_is_kept_as_is(store: Store) -> None:
    answer = '{"x":  1.5, "y": [true, null]}'

    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return answer

    pipeline, llm = checklist_turn(store, checklist, "checked")

    _, response = await start(pipeline, initial_mode="review")

    assert [m.content for m in tool_messages(scripted(llm).requests[1], "k1")] == [answer]
    assert [r.result_json for r in response.tool_results or []] == [answer]


@pytest.mark.parametrize(
    "value",
    [{"x": float("inf")}, {"x": float("nan")}, [float("-inf")]],
    ids=["inf", "nan", "minus-inf-in-list"],
)
async def test_server_tool_value_that_cannot_be_strict_json_is_a_tool_failure(
    store: Store, value: object
) -> None:
    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> Any:
        return value

    pipeline, llm = checklist_turn(store, checklist, "it failed")

    report, response = await start(pipeline, initial_mode="review")

    assert response.kind is ResponseKind.FINAL
    assert response.primary_output_text == "it failed"
    [result] = response.tool_results or []
    assert result.tool_call_id == "k1"
    assert result.result_json is None
    assert result.error_message
    [message] = tool_messages(scripted(llm).requests[1], "k1")
    assert set(strict_json_loads(message.content)) == {"error"}
    assert [(c.name, c.outcome) for c in report.tool_calls] == [("review_checklist", "failed")]


async def test_adding_two_huge_numbers_gives_strict_json_not_infinity(store: Store) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(call("x1", "Math")),
            calls(call("a1", "Add", {"a": 1e308, "b": 1e308})),
            text("too big"),
        ],
    )

    _, response = await start(pipeline)

    assert response.primary_output_text == "too big"
    [message] = tool_messages(scripted(llm).requests[2], "a1")
    strict_json_loads(message.content)
    added = [r for r in response.tool_results or [] if r.tool_call_id == "a1"]
    assert len(added) == 1
    assert added[0].result_json is not None
    assert "Infinity" in strict_json_loads(added[0].result_json)  # the executor's text, quoted


# === 5. model tool-call ids (AGN-033/5.1/model-tool-call-ids) ============================


def reply(*tool_calls: tuple[str, str, str]) -> LLMReply:
    """A model reply with tool calls given as (id, name, arguments JSON); ids may be empty."""
    return LLMReply(
        tool_calls=[ToolCall(tool_call_id=i, name=n, arguments_json=a) for i, n, a in tool_calls],
        finish_reason="tool_calls",
    )


READ = '{"path": "a.py"}'
NO_ARGS = "{}"

BAD_IDS = {
    "empty": ([reply(("", "read_file", READ))], "general", "ToolCalls[0].ToolCallId", "read_file"),
    "blank": ([reply(("  ", "read_file", READ))], "general", "ToolCalls[0].ToolCallId",
              "read_file"),
    "empty-second": ([reply(("c1", "read_file", READ), ("", "run_tests", NO_ARGS))], "general",
                     "ToolCalls[1].ToolCallId", "run_tests"),
    "client+client": ([reply(("c1", "read_file", READ), ("c1", "run_tests", NO_ARGS))],
                      "general", "ToolCalls[1].ToolCallId", "run_tests"),
    "server+server": ([reply(("k1", "review_checklist", NO_ARGS),
                             ("k1", "review_checklist", NO_ARGS))],
                      "review", "ToolCalls[1].ToolCallId", "review_checklist"),
    "server+client": ([reply(("k1", "review_checklist", NO_ARGS), ("k1", "read_file", READ))],
                      "review", "ToolCalls[1].ToolCallId", "read_file"),
    "client+server": ([reply(("k1", "read_file", READ), ("k1", "review_checklist", NO_ARGS))],
                      "review", "ToolCalls[1].ToolCallId", "review_checklist"),
    "earlier-round": ([reply(("x1", "Math", NO_ARGS)), reply(("x1", "Add", '{"a": 1, "b": 2}'))],
                      "general", "ToolCalls[0].ToolCallId", "Add"),
    "earlier-round-server-then-client": (
        [reply(("k1", "review_checklist", NO_ARGS)), reply(("k1", "read_file", READ))],
        "review", "ToolCalls[0].ToolCallId", "read_file"),
}  # fmt: skip


@pytest.mark.rule(TOOL_CALL_IDS, "broken")
@pytest.mark.parametrize(
    ("replies", "mode", "field", "tool_name"), BAD_IDS.values(), ids=BAD_IDS.keys()
)
async def test_model_tool_calls_with_empty_or_repeated_ids_fault_and_store_nothing(
    store: Store, replies: list[LLMReply], mode: str, field: str, tool_name: str
) -> None:
    ran: list[str] = []

    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        ran.append(invocation.tool_call_id)
        return "{}"

    llm = ScriptedLLM([*replies, LLMReply(text="never")])
    pipeline, _ = make_pipeline(store, llm, tools={"review_checklist": checklist})

    report = await pipeline.run({"Instruction": "hello"}, CALLER, initial_mode=mode)

    assert_refused(report, TOOL_CALL_IDS, "llm_client")
    [error] = report.result.errors
    assert error.code is ErrorCode.PIPELINE_RULE_FAILED
    assert error.field == field
    assert error.tool_name == tool_name
    assert llm.remaining == 1
    assert await stored(store) == NOTHING_STORED
    # a reply is checked before any of its calls runs: a repeated id in one reply runs nothing
    if len(replies) == 1:
        assert ran == []


@pytest.mark.rule(TOOL_CALL_IDS, "broken")
async def test_a_continuation_reply_reusing_an_answered_call_id_faults(store: Store) -> None:
    llm = ScriptedLLM([reply(("c1", "read_file", READ)), reply(("c1", "read_file", READ))])
    pipeline, _ = make_pipeline(store, llm)
    _, pending = await start(pipeline)

    report = await pipeline.run(continuation(pending), CALLER)

    assert_refused(report, TOOL_CALL_IDS, "llm_client")
    assert report.result.errors[0].tool_call_id == "c1"
    tx = store.begin(CALLER.org, CALLER.user)
    turn = await tx.load_turn(pending.session_id, pending.turn_id)
    await tx.rollback()
    assert turn is not None  # nothing changed: the turn still awaits c1
    assert turn.status is TurnStatus.AWAITING_CLIENT_TOOLS
    assert [call.tool_call_id for call in turn.pending_tool_calls] == ["c1"]


@pytest.mark.rule(TOOL_CALL_IDS, "holds")
async def test_model_tool_calls_with_distinct_ids_across_rounds_succeed(store: Store) -> None:
    ran: list[str] = []

    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        ran.append(invocation.tool_call_id)
        return "{}"

    llm = ScriptedLLM(
        [
            reply(("k1", "review_checklist", NO_ARGS), ("k2", "review_checklist", NO_ARGS)),
            reply(("k3", "review_checklist", NO_ARGS), ("c1", "read_file", READ)),
        ]
    )
    pipeline, _ = make_pipeline(store, llm, tools={"review_checklist": checklist})

    _, response = await start(pipeline, initial_mode="review")

    assert ran == ["k1", "k2", "k3"]
    assert response.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert [c.tool_call_id for c in response.tool_calls or []] == ["c1"]


# === 6. unguarded JSON in the model's text is fenced (AGN-033 §4.1) ======================

FENCED_TEXTS = {
    "whole-object": ('{"a": 1}', '```json\n{"a": 1}\n```'),
    "array-of-objects": ('[{"a": 1}, {"b": 2}]', '```json\n[{"a": 1}, {"b": 2}]\n```'),
    "untagged-fence": ('```\n{"a": 1}\n```', '```json\n{"a": 1}\n```'),
    "paragraph-between-prose": (
        'Here it is:\n\n{"a": 1}\n\nThat is all.',
        'Here it is:\n\n```json\n{"a": 1}\n```\n\nThat is all.',
    ),
}

UNCHANGED_TEXTS = {
    "prose": "All done. Nothing to add.",
    "prose-list": "[1, 2]",
    "prose-with-braces": "Use {a: 1} in the config.",
    "tagged-json-fence": '```json\n{"a": 1}\n```',
    "tagged-code-fence": '```python\nprint({"a": 1})\n```',
    "untagged-code-fence": "```\nprint(1)\n```",
}


@pytest.mark.parametrize(("answer", "expected"), FENCED_TEXTS.values(), ids=FENCED_TEXTS.keys())
async def test_unguarded_json_in_a_final_answer_is_fenced_as_json(
    store: Store, answer: str, expected: str
) -> None:
    pipeline, _ = make_pipeline(store, [text(answer)])

    report, response = await start(pipeline)

    assert report.states[-1] == "done"
    assert response.kind is ResponseKind.FINAL
    assert response.primary_output_text == expected


@pytest.mark.parametrize("answer", UNCHANGED_TEXTS.values(), ids=UNCHANGED_TEXTS.keys())
async def test_prose_and_guarded_fences_in_a_final_answer_stay_byte_identical(
    store: Store, answer: str
) -> None:
    pipeline, _ = make_pipeline(store, [text(answer)])

    _, response = await start(pipeline)

    assert response.primary_output_text == answer


async def test_json_after_an_unclosed_fence_does_not_fail_the_turn(store: Store) -> None:
    # A model cut off mid-answer leaves its fence open; the validator reads what follows
    # as prose, so the guard must leave nothing there that the guarded-payload rule refuses.
    pipeline, _ = make_pipeline(store, [text('```\n{"a": 1}')])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert report.successful, report.result.rule_ids
    assert '{"a": 1}' in (ok(report.result).primary_output_text or "")


@pytest.mark.rule(EMBEDDED_FILE, "broken")
@pytest.mark.parametrize("with_calls", [False, True], ids=["final", "continuation"])
async def test_embedded_file_contents_in_the_models_text_still_fail(
    store: Store, with_calls: bool
) -> None:
    blob = "See data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    answer = calls(READ_A, text=blob) if with_calls else text(blob)
    pipeline, _ = make_pipeline(store, [answer])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert_refused(report, EMBEDDED_FILE, "response_builder")
    field = "ToolContinuationMessage" if with_calls else "PrimaryOutputText"
    assert [e.field for e in report.result.errors] == [field]
    assert await stored(store) == NOTHING_STORED


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        *FENCED_TEXTS.values(),
        *((unchanged, unchanged) for unchanged in UNCHANGED_TEXTS.values()),
    ],
    ids=[*FENCED_TEXTS.keys(), *UNCHANGED_TEXTS.keys()],
)
async def test_tool_continuation_message_is_guarded_like_a_final_answer(
    store: Store, message: str, expected: str
) -> None:
    pipeline, _ = make_pipeline(store, [calls(READ_A, text=message)])

    _, response = await start(pipeline)

    assert response.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert response.tool_continuation_message == expected
    assert [c.tool_call_id for c in response.tool_calls or []] == ["c1"]


# === 7. branch is surfaced for a same-mode change (AGN-011 §5.6, R7) =====================


async def test_branch_of_a_same_mode_change_is_reported_without_a_mode_change(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(
        store, [calls(change_mode("m1", "general", branch=True)), text("staying")]
    )

    report, response = await start(pipeline)

    assert report.branch is True
    assert report.mode_changes == ()
    assert report.mode == "general"
    assert [(c.name, c.outcome) for c in report.tool_calls] == [
        ("agent_change_mode", "mode_unchanged")
    ]
    assert response.mode_display_name == "General"
    assert (await session_of(store)).mode_history == []


@pytest.mark.parametrize("branch", [True, False])
async def test_branch_of_the_last_successful_mode_change_is_reported(
    store: Store, branch: bool
) -> None:
    pipeline, _ = make_pipeline(
        store, [calls(change_mode("m1", "review", branch=branch)), text("switched")]
    )

    report, _ = await start(pipeline)

    assert report.branch is branch
    assert [(m.new_mode, m.branch) for m in report.mode_changes] == [("review", branch)]


async def test_a_turn_without_mode_change_has_no_branch(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("hi")])

    report, _ = await start(pipeline)

    assert report.branch is None


async def test_a_failed_turn_reports_no_branch(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [calls(change_mode("m1", "general", branch=True))])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert not report.successful
    assert report.branch is None
    assert report.mode_changes == ()


# === 8. warnings on restored sessions (AGN-011 §3.3) =====================================


async def test_follow_on_with_another_initial_mode_warns_and_keeps_the_sessions_mode(
    store: Store,
) -> None:
    pipeline, llm = make_pipeline(store, [text("one"), text("two")])
    _, first = await start(pipeline)

    report = await pipeline.run(follow_on(first), CALLER, initial_mode="review")

    response = ok(report.result)
    assert warning_codes(report) == ["mode_mismatch"]
    assert "review" in report.result.warnings[0].message
    assert report.mode == "general"
    assert response.mode_display_name == "General"
    assert scripted(llm).requests[1].mode == "general"
    assert (await session_of(store)).mode == "general"


async def test_follow_on_with_the_sessions_own_mode_does_not_warn(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("one"), text("two")])
    _, first = await start(pipeline)

    report = await pipeline.run(follow_on(first), CALLER, initial_mode="general")

    assert ok(report.result).mode_display_name == "General"
    assert warning_codes(report) == []


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


# === 9. a non-string initial mode =========================================================


@pytest.mark.rule(INITIAL_MODE_KNOWN, "broken")
@pytest.mark.parametrize("initial_mode", [5, ["review"], True], ids=["int", "list", "bool"])
async def test_a_non_string_initial_mode_is_refused_without_raising(
    store: Store, initial_mode: object
) -> None:
    pipeline, llm = make_pipeline(store, [text("hi")])

    report = await pipeline.run(
        {"Instruction": "hello"}, CALLER, initial_mode=cast(Any, initial_mode)
    )

    assert_refused(report, INITIAL_MODE_KNOWN, "agent_session_creator")
    assert [e.field for e in report.result.errors] == ["initial_mode"]
    assert scripted(llm).requests == []
    assert await stored(store) == NOTHING_STORED


# === 10. R8's warning only for a turn that persisted its changes ==========================


@pytest.mark.parametrize("answers", [True, False], ids=["succeeds", "faults"])
async def test_several_mode_changes_warn_only_when_the_turn_succeeds(
    store: Store, answers: bool
) -> None:
    script = [
        calls(change_mode("m1", "review")),
        calls(change_mode("m2", "general")),
        *([text("back")] if answers else []),
    ]
    pipeline, _ = make_pipeline(store, script)

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert report.successful is answers
    assert ("several_mode_changes" in warning_codes(report)) is answers
    if answers:
        assert [(m.previous_mode, m.new_mode) for m in report.mode_changes] == [
            ("general", "review"),
            ("review", "general"),
        ]
    else:
        assert report.mode_changes == ()
        assert await stored(store) == NOTHING_STORED


# === 11. a refused mode change is a failed tool call in ToolResults =======================


@pytest.mark.rule(MODE_KNOWN, "broken")
async def test_a_refused_mode_change_is_an_error_message_in_tool_results(store: Store) -> None:
    pipeline, llm = make_pipeline(
        store, [calls(change_mode("m1", "astrology")), text("staying in general")]
    )

    report, response = await start(pipeline)

    assert response.mode_display_name == "General"
    assert report.mode_changes == ()
    assert report.branch is None
    [result] = [r for r in response.tool_results or [] if r.tool_call_id == "m1"]
    assert result.result_json is None
    assert result.error_message
    assert "astrology" in result.error_message
    [message] = tool_messages(scripted(llm).requests[1], "m1")
    assert strict_json_loads(message.content)["rule_id"] == MODE_KNOWN


# === 12. aptix run: a bad store or catalog file is a usage error ==========================

APTIX = Path(sys.executable).parent / "aptix"


def aptix_run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``aptix run`` on a one-line Initial request with a one-reply script."""
    request = tmp / "request.json"
    request.write_text(json.dumps({"Instruction": "hi"}), encoding="utf-8")
    script = tmp / "script.json"
    script.write_text(json.dumps([{"text": "hello"}]), encoding="utf-8")
    return subprocess.run(
        [str(APTIX), "run", str(request), "--llm-script", str(script), "--compact", *args],
        capture_output=True, text=True, check=False, cwd=tmp,
    )  # fmt: skip


def test_aptix_run_on_a_directory_as_sqlite_store_is_a_usage_error(tmp_path: Path) -> None:
    directory = tmp_path / "store-dir"
    directory.mkdir()

    run = aptix_run(tmp_path, "--store", f"sqlite:{directory}")

    assert run.returncode == 2
    assert run.stderr.startswith("aptix run: ")
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert list(directory.iterdir()) == []


def test_aptix_run_on_a_file_that_is_not_a_database_is_a_usage_error(tmp_path: Path) -> None:
    junk = tmp_path / "notes.db"
    content = b"these are my notes, not a database\n" * 64
    junk.write_bytes(content)

    run = aptix_run(tmp_path, "--store", f"sqlite:{junk}")

    assert run.returncode == 2
    assert run.stderr.startswith("aptix run: ")
    assert "not a database" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert junk.read_bytes() == content


def test_aptix_run_with_a_non_utf8_config_is_a_usage_error_naming_the_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "latin1-catalog.toml"
    config.write_bytes('[[modes]]\nname = "général"\n'.encode("latin-1"))

    run = aptix_run(tmp_path, "--config", str(config), "--store", "memory")

    assert run.returncode == 2
    assert "latin1-catalog.toml" in run.stderr
    assert "UTF-8" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""


def test_a_sqlite_store_that_works_still_runs(tmp_path: Path) -> None:
    run = aptix_run(tmp_path, "--store", f"sqlite:{tmp_path / 'fine.db'}")

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["Result"]["PrimaryOutputText"] == "hello"


# === second review ======================================================================


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


class RaisingStore:
    """A store whose reads raise ``error`` (or whose ``begin`` does)."""

    def __init__(self, inner: Store, error: Exception, *, at_begin: bool = False) -> None:
        self.inner, self.error, self.at_begin = inner, error, at_begin

    def begin(self, org: str, user: str) -> Any:
        if self.at_begin:
            raise self.error
        tx = self.inner.begin(org, user)

        async def fail(*args: Any) -> None:
            raise self.error

        tx.load_session = fail  # type: ignore[method-assign,assignment]
        return tx


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
    pipeline, _ = make_pipeline(RaisingStore(store, error, at_begin=at_begin), [text("x")])

    report = await pipeline.run(follow_on(done), CALLER)

    [failure] = report.result.errors
    assert (failure.code, failure.field) == (ErrorCode.PORT_FAILED, "SessionStore")
    assert type(error).__name__ in failure.message


async def test_several_mode_changes_across_the_requests_of_one_turn_warn(store: Store) -> None:
    pipeline, _ = make_pipeline(
        store,
        [
            calls(change_mode("m1", "review"), call("c1", "read_file", {"path": "a.py"})),
            calls(change_mode("m2", "general")),
            text("done"),
        ],
    )
    first, pending = await start(pipeline)

    report = await pipeline.run(continuation(pending), CALLER)

    assert "several_mode_changes" not in warning_codes(first)
    assert "several_mode_changes" in warning_codes(report)
    history = (await session_of(store)).mode_history
    assert [(e.previous_mode, e.new_mode) for e in history] == [
        ("general", "review"),
        ("review", "general"),
    ]


async def test_a_final_answer_reports_the_whole_turns_usage_and_server_tools(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(
        store,
        [
            {**calls(call("k1", "Math"), call("c1", "read_file", {"path": "a.py"})),
             "usage": {"input_tokens": 10, "output_tokens": 2}},
            {**text("done"), "usage": {"input_tokens": 20, "output_tokens": 3}},
        ],
    )  # fmt: skip
    _, pending = await start(pipeline)

    final = ok(await pipeline.execute(continuation(pending), CALLER))

    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 5)
    assert final.usage.total_tokens == 35
    assert [r.tool_call_id for r in final.tool_results or []] == []  # an expansion is no tool run


async def test_a_final_answer_carries_server_results_from_before_the_client_round_trip(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(
        store,
        [calls(call("k1", "review_checklist"), call("c1", "read_file", {"path": "a.py"})),
         text("done")],
    )  # fmt: skip
    _, pending = await start(pipeline, initial_mode="review")

    final = ok(await pipeline.execute(continuation(pending), CALLER))

    assert [r.tool_call_id for r in final.tool_results or []] == ["k1"]


async def test_an_error_quotes_a_huge_id_only_in_part(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("x")])
    huge = "s" * 100_000

    report = await pipeline.run({"SessionId": huge, "TurnId": "t", "Instruction": "hi"}, CALLER)

    [error] = report.result.errors
    assert error.rule_id == "AGN-033/3.1/session-found"
    assert len(error.message) < 300


# === text with no UTF-8 form (lone surrogates) from ports and the model ==================


class SurrogateLLM:
    """A model port whose failure message holds a lone surrogate."""

    async def complete(self, request: LLMRequest) -> LLMReply:
        raise RuntimeError("model down \ud800")


async def test_a_port_error_with_a_lone_surrogate_still_serializes(store: Store) -> None:
    pipeline, _ = make_pipeline(store, SurrogateLLM())

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    [error] = report.result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert "model down \\ud800" in error.message
    assert json.loads(report.result.to_json())["Successful"] is False
    assert json.dumps(report.to_dict())


async def test_a_tool_name_with_a_lone_surrogate_is_refused_to_the_model(store: Store) -> None:
    pipeline, llm = make_pipeline(store, [calls(call("a", "x\ud800")), text("ok")])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert ok(report.result).primary_output_text == "ok"
    [answer] = tool_messages(scripted(llm).requests[1], "a")
    assert json.loads(answer.content)["error_type"] == "validation_error"
    assert report.tool_calls[0].rule_id == "CPV/tool-known"


async def test_server_tool_text_with_a_lone_surrogate_is_escaped(store: Store) -> None:
    async def broken(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        raise ValueError("bad \udcff")

    pipeline, _ = checklist_turn(store, broken, "done")

    report = await pipeline.run({"Instruction": "hello"}, CALLER, initial_mode="review")

    final = ok(report.result)
    [result] = final.tool_results or []
    assert result.error_message == "ValueError: bad \\udcff"
    assert json.loads(report.result.to_json())["Successful"] is True


async def test_server_tool_json_with_a_lone_surrogate_is_escaped(store: Store) -> None:
    async def odd(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return '{"text": "\ud800"}'

    pipeline, _ = checklist_turn(store, odd, "done")

    report = await pipeline.run({"Instruction": "hello"}, CALLER, initial_mode="review")

    [result] = ok(report.result).tool_results or []
    assert result.result_json == '{"text": "\\ud800"}'


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
