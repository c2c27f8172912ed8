"""Engine scenarios: mode (AGN-011), the turn's tools (container design) and continuations.

The mode a turn runs in (a host's initial mode, the persisted mode of a restored
session and the warning when they differ), the tools merged before the loop,
``agent_change_mode`` (several changes and R8's warning, refused changes, the
``branch`` flag of R7), container expansion and argument checks, client calls
and their arguments, the model's tool-call ids (AGN-033 §5.1), server tools that
fail, mixed replies (R5), and continuations (a final answer reports the whole
turn's usage and server tools). Every scenario runs through the public API
(``Pipeline.run`` / ``Pipeline.execute``) on both stores, with a scripted model
whose ``requests`` show what the model was given. Tests that show a rule holding
or broken carry its ``rule`` marker.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from engine_kit import (
    AGENT_AND_CONVERSATION,
    CALLER,
    NOTHING_STORED,
    THREE_MODES_CONFIG,
    FailingLLM,
    assert_refused,
    call,
    calls,
    change_mode,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    reply,
    scripted,
    session_of,
    start,
    stored,
    text,
    tool_messages,
    warning_codes,
)

from aptix_pipeline import (
    AgentContext,
    ConfigCatalog,
    ConversationContext,
    ModeSpec,
    PipelineOptions,
    SequentialIds,
    SteppingClock,
    embedded_pipeline,
)
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    ChatRole,
    ErrorCode,
    LLMReply,
    LLMRequest,
    ModeHistoryEntry,
    ResponseKind,
    Session,
    SessionStore,
    SessionTransaction,
    ToolInvocation,
    Turn,
    TurnStatus,
)
from aptix_pipeline.engine import TurnReport
from aptix_pipeline.validators.json_text import strict_json_loads

Store = MemoryStore | SQLiteStore

# --- rule ids --------------------------------------------------------------------------

INITIAL_MODE_KNOWN = "AGN-011/3.1/initial-mode-known"
MODE_KNOWN = "AGN-011/5.2/mode-known"
TOOL_CALL_IDS = "AGN-033/5.1/model-tool-call-ids"
MODE_RESULT_VALID = "AGN-011/5.2/mode-result-valid"
SEVERAL_MODE_CHANGES = "DESIGN/R8/several-mode-changes"
ROUND_LIMIT = "DESIGN/R5/round-limit"
CONTAINER = "CPV/container-without-arguments"
SCHEMA = "CPV/arguments-match-schema"
JSON_OBJECT = "CPV/arguments-json-object"
KNOWN = "CPV/tool-known"
COUNT_MATCH = "AGN-036/5/count-match"
ORDER_MATCH = "AGN-036/5/order-match"
ID_MATCH = "AGN-036/5/id-match"
NAME_MATCH = "AGN-036/5/name-match"

FINAL_RESPONSE_FIELDS = {
    "SessionId",
    "TurnId",
    "ModeDisplayName",
    "Kind",
    "PrimaryOutputText",
    "Files",
    "ToolResults",
    "UserWarnings",
    "Usage",
}
"""The buckets AGN-033 §3.4 allows in a final response."""
TOOL_RESULT_FIELDS = {"ToolCallId", "ExecutionMs", "ResultJson", "ErrorMessage"}
"""The fields of an AGN-033 §5.2 ToolResult."""

GENERAL_TOOLS = ["read_file", "run_tests", "Math", "agent_change_mode"]
"""What the built-in catalog advertises first in mode general: client, server, mode tool."""

# --- custom catalogs ---------------------------------------------------------------------

NO_SERVER_TOOLS_CONFIG = (
    """
[[modes]]
name = "general"
display_name = "General"

[[modes]]
name = "quiet"
display_name = "Quiet"
"""
    + AGENT_AND_CONVERSATION
)

SHADOWING_CONFIG = (
    """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["read_file", "lookup"]

[[server_tools]]
name = "read_file"
description = "A server tool that has a client tool's name."
executes_on = "server"

[[server_tools]]
name = "lookup"
description = "Look something up."
executes_on = "server"
"""
    + AGENT_AND_CONVERSATION
)

SEVEN_FUNCTIONS = ["Add", "Multiply", "Abs", "Square", "Subtract", "Min", "SolveQuadratic"]
BIG_CONTAINER_CONFIG = (
    """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["Math", "Add", "Multiply", "Abs", "Square", "Subtract", "Min", "SolveQuadratic"]

[[server_tools]]
name = "Math"
description = "Math plugin. Call it with no arguments to expand it."
is_container = true
plugin_name = "Math"
function_names = ["Add", "Multiply", "Abs", "Square", "Subtract", "Min", "SolveQuadratic"]
function_count = 7
source_type = "Plugin"
executes_on = "server"
"""
    + "".join(
        f'\n[[server_tools]]\nname = "{name}"\nmember_of = "Math"\nexecutes_on = "server"\n'
        for name in SEVEN_FUNCTIONS
    )
    + AGENT_AND_CONVERSATION
)

UNEXECUTABLE_CONFIG = (
    """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["weather"]

[[server_tools]]
name = "weather"
description = "Today's weather; no executor is registered for it."
executes_on = "server"
"""
    + AGENT_AND_CONVERSATION
)

# --- helpers ----------------------------------------------------------------------------


async def never_runs(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """The executor of a server tool a scenario offers but never calls."""
    raise AssertionError(f"{invocation.name} was not to be called")


def names(request: LLMRequest) -> list[str]:
    """The names of the tools advertised in one model call, in order."""
    return [tool.name for tool in request.tools]


def tool_answer(request: LLMRequest, call_id: str) -> Any:
    """The JSON content of the one tool message answering ``call_id``."""
    found = [m for m in tool_messages(request) if m.tool_call_id == call_id]
    assert len(found) == 1, [m.tool_call_id for m in tool_messages(request)]
    return json.loads(found[0].content)


def after_last_assistant_call(request: LLMRequest) -> list[tuple[str | None, str | None]]:
    """(id, name) of the tool messages after the last assistant message with tool calls."""
    last = max(
        index
        for index, message in enumerate(request.messages)
        if message.role is ChatRole.ASSISTANT and message.tool_calls
    )
    return [
        (m.tool_call_id, m.name) for m in request.messages[last + 1 :] if m.role is ChatRole.TOOL
    ]


async def stored_session(store: SessionStore, session_id: str) -> Session | None:
    """The session as committed, read through a transaction of ``CALLER``."""
    tx = store.begin(CALLER.org, CALLER.user)
    try:
        return await tx.load_session(session_id)
    finally:
        await tx.rollback()


async def stored_turn(store: SessionStore, session_id: str, turn_id: str) -> Turn | None:
    """The turn as committed."""
    tx = store.begin(CALLER.org, CALLER.user)
    try:
        return await tx.load_turn(session_id, turn_id)
    finally:
        await tx.rollback()


def rule_ids_of(report: TurnReport) -> tuple[str, ...]:
    """The rule ids of the errors that stopped the turn."""
    return report.result.rule_ids


def warning_rules(report: TurnReport) -> list[str | None]:
    """The rule ids of the result's warnings."""
    return [warning.rule_id for warning in report.result.warnings]


class ModeStoreDown:
    """The real store, except that SetSessionMode fails (a failing port)."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner

    def begin(self, org: str, user: str) -> SessionTransaction:
        """The real transaction with a failing ``set_session_mode``."""
        tx = self.inner.begin(org, user)

        async def down(session_id: str, entry: ModeHistoryEntry) -> Session:
            raise OSError("the mode table is unavailable")

        setattr(tx, "set_session_mode", down)  # noqa: B010
        return tx


# === AGN-011 §3: the mode a turn runs in ==================================================


@pytest.mark.decision("R2")
@pytest.mark.rule(INITIAL_MODE_KNOWN, "holds")
@pytest.mark.parametrize("initial_mode", [None, "", "   "], ids=["none", "empty", "blank"])
async def test_new_session_starts_in_general(store: SessionStore, initial_mode: str | None) -> None:
    pipeline, llm = make_pipeline(store, [text("hi")])

    report, response = await start(pipeline, initial_mode=initial_mode)

    assert response.mode_display_name == "General"
    assert report.mode == "general"
    assert scripted(llm).requests[0].mode == "general"
    assert (await session_of(store, response.session_id)).mode == "general"


@pytest.mark.decision("R2")
@pytest.mark.rule(INITIAL_MODE_KNOWN, "holds")
async def test_host_initial_mode_starts_the_session_in_that_mode(store: SessionStore) -> None:
    pipeline, llm = make_pipeline(store, [text("hi")])

    report, response = await start(pipeline, initial_mode="review")

    assert response.mode_display_name == "Code Review"
    assert report.mode == "review"
    first = scripted(llm).requests[0]
    assert first.mode == "review"
    assert "review_checklist" in names(first)
    assert "Math" not in names(first)
    assert (await session_of(store, response.session_id)).mode == "review"


@pytest.mark.decision("R2")
@pytest.mark.rule(INITIAL_MODE_KNOWN, "broken")
async def test_unknown_initial_mode_faults_and_stores_nothing(store: SessionStore) -> None:
    pipeline, llm = make_pipeline(store, [text("hi")])

    report = await pipeline.run({"Instruction": "hello"}, CALLER, initial_mode="astrology")

    assert not report.successful
    assert rule_ids_of(report) == (INITIAL_MODE_KNOWN,)
    assert report.states[-1] == "faulted"
    assert scripted(llm).requests == []
    assert await stored_session(store, "session-1") is None


async def test_request_naming_a_mode_is_refused_and_stores_nothing(store: SessionStore) -> None:
    pipeline, llm = make_pipeline(store, [text("hi")])

    report = await pipeline.run({"Instruction": "hello", "Mode": "review"}, CALLER)

    assert not report.successful
    assert scripted(llm).requests == []
    assert await stored_session(store, "session-1") is None


@pytest.mark.decision("R2")
async def test_follow_on_takes_the_persisted_mode_not_the_hosts(store: SessionStore) -> None:
    pipeline, llm = make_pipeline(store, [text("one"), text("two")])
    _, first = await start(pipeline, initial_mode="review")

    report = await pipeline.run(follow_on(first), CALLER, initial_mode="general")

    response = ok(report.result)
    assert response.mode_display_name == "Code Review"
    assert report.mode == "review"
    assert scripted(llm).requests[1].mode == "review"
    assert "review_checklist" in names(scripted(llm).requests[1])


@pytest.mark.decision("D43")
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


@pytest.mark.decision("D43")
async def test_follow_on_with_the_sessions_own_mode_does_not_warn(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("one"), text("two")])
    _, first = await start(pipeline)

    report = await pipeline.run(follow_on(first), CALLER, initial_mode="general")

    assert ok(report.result).mode_display_name == "General"
    assert warning_codes(report) == []


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


# === AGN-011 §4: tools merged before the loop ============================================


@pytest.mark.decision("D33")
async def test_first_model_call_gets_client_tools_mode_tools_and_the_mode_tool(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(store, [text("hi")])

    await start(pipeline)

    first = scripted(llm).requests[0]
    assert names(first) == GENERAL_TOOLS
    by_name = {tool.name: tool for tool in first.tools}
    assert by_name["read_file"].executes_on == "client"
    assert by_name["Math"].is_container
    assert by_name["agent_change_mode"].executes_on == "server"
    assert "Add" not in by_name
    assert "Multiply" not in by_name


@pytest.mark.decision("D33")
@pytest.mark.parametrize("mode", ["general", "quiet"])
async def test_mode_without_server_tools_still_has_the_mode_tool(
    store: SessionStore, mode: str
) -> None:
    pipeline, llm = make_pipeline(store, [text("hi")], config=NO_SERVER_TOOLS_CONFIG)

    await start(pipeline, initial_mode=mode)

    assert names(scripted(llm).requests[0]) == ["read_file", "run_tests", "agent_change_mode"]


@pytest.mark.decision("D33")
async def test_server_tool_named_like_a_client_tool_is_left_out_with_a_warning(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [calls(call("c1", "read_file", {"path": "a.py"}))],
        config=SHADOWING_CONFIG,
        tools={"read_file": never_runs, "lookup": never_runs},
    )

    report, response = await start(pipeline)

    tools = scripted(llm).requests[0].tools
    assert [tool.name for tool in tools] == [
        "read_file",
        "run_tests",
        "lookup",
        "agent_change_mode",
    ]
    assert tools[0].executes_on == "client"
    assert any(
        warning.code == "server_tool_shadowed" and "read_file" in warning.message
        for warning in report.result.warnings
    )
    # the client tool is the one kept: its call goes to the client
    assert response.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert [c.name for c in response.tool_calls or []] == ["read_file"]


# === AGN-011 §5: agent_change_mode ========================================================


@pytest.mark.decision("R6", "R9")
@pytest.mark.rule(MODE_KNOWN, "holds")
@pytest.mark.rule(MODE_RESULT_VALID, "holds")
@pytest.mark.rule(SEVERAL_MODE_CHANGES, "holds")
async def test_mode_change_applies_now_with_tools_frozen_and_persists(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [calls(change_mode("m1", "review", "review the diff")), text("switched"), text("next")],
    )

    report, response = await start(pipeline)

    # response and report (AGN-011 §5.4, R6)
    assert response.mode_display_name == "Code Review"
    assert report.mode == "review"
    assert len(report.mode_changes) == 1
    change = report.mode_changes[0]
    assert (change.previous_mode, change.new_mode, change.reason, change.branch) == (
        "general",
        "review",
        "review the diff",
        False,
    )
    assert SEVERAL_MODE_CHANGES not in warning_rules(report)
    assert [(c.name, c.side, c.outcome) for c in report.tool_calls] == [
        ("agent_change_mode", "server", "mode_changed")
    ]
    # same turn: the new mode at once, the same tools (§5.3, §4.4, R9)
    first, second = scripted(llm).requests
    assert (first.mode, second.mode) == ("general", "review")
    assert second.tools == first.tools
    assert "review_checklist" not in names(second)
    answer = tool_answer(second, "m1")
    assert answer["mode"] == "review"
    assert answer["changed"] is True
    # ModeHistory (§3.2, §5.7)
    session = await session_of(store, response.session_id)
    assert session.mode == "review"
    assert len(session.mode_history) == 1
    entry = session.mode_history[0]
    assert (entry.previous_mode, entry.new_mode, entry.reason) == (
        "general",
        "review",
        "review the diff",
    )
    assert (entry.org, entry.user) == (CALLER.org, CALLER.user)
    assert entry.turn_id == response.turn_id
    assert entry.branch is False
    # next turn: the persisted mode and its tools (§5.5, §5.7)
    next_report = await pipeline.run(follow_on(response), CALLER)
    assert ok(next_report.result).mode_display_name == "Code Review"
    third = scripted(llm).requests[2]
    assert third.mode == "review"
    assert names(third) == ["read_file", "run_tests", "review_checklist", "agent_change_mode"]
    assert next_report.mode_changes == ()


@pytest.mark.decision("R9")
async def test_mode_change_keeps_the_turns_tools_across_a_continuation(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(change_mode("m1", "review"), call("c1", "read_file", {"path": "a.py"})),
            text("done"),
        ],
    )
    _, pending = await start(pipeline)
    assert pending.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert pending.mode_display_name == "Code Review"

    response = ok(await pipeline.execute(continuation(pending), CALLER))

    first, resumed = scripted(llm).requests
    assert resumed.mode == "review"
    assert names(resumed) == names(first) == GENERAL_TOOLS
    assert response.mode_display_name == "Code Review"


@pytest.mark.decision("D45")
async def test_mode_change_on_a_continuation_is_recorded_for_that_turn(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(call("c1", "read_file", {"path": "a.py"})),
            calls(change_mode("m1", "review", "now reviewing")),
            text("done"),
            text("next"),
        ],
    )
    _, pending = await start(pipeline)

    report = await pipeline.run(continuation(pending), CALLER)

    response = ok(report.result)
    assert response.mode_display_name == "Code Review"
    assert [(c.previous_mode, c.new_mode) for c in report.mode_changes] == [("general", "review")]
    requests = scripted(llm).requests
    assert [r.mode for r in requests] == ["general", "general", "review"]
    assert names(requests[2]) == GENERAL_TOOLS
    session = await session_of(store, pending.session_id)
    assert [(e.new_mode, e.turn_id) for e in session.mode_history] == [("review", pending.turn_id)]
    ok(await pipeline.execute(follow_on(response), CALLER))
    assert "review_checklist" in names(scripted(llm).requests[3])


THREE_MODE_SCRIPTS = {
    "one reply": [
        calls(change_mode("m1", "review", "first"), change_mode("m2", "docs", "second")),
        text("done"),
    ],
    "two rounds": [
        calls(change_mode("m1", "review", "first")),
        calls(change_mode("m2", "docs", "second")),
        text("done"),
    ],
}


@pytest.mark.decision("R8")
@pytest.mark.rule(SEVERAL_MODE_CHANGES, "broken")
@pytest.mark.parametrize("script", THREE_MODE_SCRIPTS.values(), ids=THREE_MODE_SCRIPTS.keys())
async def test_several_mode_changes_are_all_recorded_and_the_last_wins(
    store: SessionStore, script: list[dict[str, Any]]
) -> None:
    pipeline, llm = make_pipeline(store, script, config=THREE_MODES_CONFIG)

    report, response = await start(pipeline)

    assert response.mode_display_name == "Documentation"
    assert report.mode == "docs"
    assert [(c.previous_mode, c.new_mode) for c in report.mode_changes] == [
        ("general", "review"),
        ("review", "docs"),
    ]
    assert warning_rules(report).count(SEVERAL_MODE_CHANGES) == 1
    session = await session_of(store, response.session_id)
    assert session.mode == "docs"
    assert [(e.previous_mode, e.new_mode, e.reason) for e in session.mode_history] == [
        ("general", "review", "first"),
        ("review", "docs", "second"),
    ]
    assert scripted(llm).requests[-1].mode == "docs"


@pytest.mark.decision("D43", "R8")
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


@pytest.mark.decision("D45", "R8")
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


@pytest.mark.decision("D29")
@pytest.mark.rule(MODE_KNOWN, "broken")
async def test_change_to_an_unknown_mode_is_told_to_the_model_and_the_mode_stays(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(store, [calls(change_mode("m1", "astrology")), text("ok")])

    report, response = await start(pipeline)

    answer = tool_answer(scripted(llm).requests[1], "m1")
    assert answer["error_type"] == "mode_change_error"
    assert answer["rule_id"] == MODE_KNOWN
    assert scripted(llm).requests[1].mode == "general"
    assert response.mode_display_name == "General"
    assert report.mode == "general"
    assert report.mode_changes == ()
    assert report.branch is None
    assert [(c.name, c.outcome) for c in report.tool_calls] == [
        ("agent_change_mode", "mode_refused")
    ]
    session = await session_of(store, response.session_id)
    assert (session.mode, session.mode_history) == ("general", [])


@pytest.mark.decision("D29")
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


MALFORMED_MODE_RESULTS = {
    "not json": "{mode: review",
    "not an object": '["review"]',
    "empty mode": '{"mode": ""}',
    "no mode": '{"reason": "x"}',
    "branch not boolean": '{"mode": "review", "branch": "yes"}',
    "reason not text": '{"mode": "review", "reason": 7}',
}


@pytest.mark.decision("D29")
@pytest.mark.rule(MODE_RESULT_VALID, "broken")
@pytest.mark.parametrize(
    "result", MALFORMED_MODE_RESULTS.values(), ids=MALFORMED_MODE_RESULTS.keys()
)
async def test_malformed_mode_change_result_is_told_to_the_model(
    store: SessionStore, result: str
) -> None:
    async def host_mode_tool(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return result

    pipeline, llm = make_pipeline(
        store,
        [calls(change_mode("m1", "review")), text("ok")],
        tools={"agent_change_mode": host_mode_tool},
    )

    report, response = await start(pipeline)

    answer = tool_answer(scripted(llm).requests[1], "m1")
    assert answer["error_type"] == "mode_change_error"
    assert answer["rule_id"] == MODE_RESULT_VALID
    assert response.mode_display_name == "General"
    assert report.mode_changes == ()
    assert (await session_of(store, response.session_id)).mode_history == []


@pytest.mark.decision("D29")
async def test_host_mode_tool_result_decides_the_mode(store: SessionStore) -> None:
    seen: list[ToolInvocation] = []

    async def host_mode_tool(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        seen.append(invocation)
        return json.dumps({"mode": "review", "reason": "host says so"})

    pipeline, _ = make_pipeline(
        store,
        [calls(change_mode("m1", "general")), text("ok")],
        tools={"agent_change_mode": host_mode_tool},
    )

    report, response = await start(pipeline)

    assert response.mode_display_name == "Code Review"
    assert [(c.new_mode, c.reason) for c in report.mode_changes] == [("review", "host says so")]
    assert [(i.tool_call_id, i.mode, i.org, i.user) for i in seen] == [
        ("m1", "general", CALLER.org, CALLER.user)
    ]


@pytest.mark.decision("D29")
async def test_change_to_the_current_mode_records_no_transition(store: SessionStore) -> None:
    pipeline, llm = make_pipeline(store, [calls(change_mode("m1", "general")), text("ok")])

    report, response = await start(pipeline)

    assert tool_answer(scripted(llm).requests[1], "m1")["changed"] is False
    assert report.mode_changes == ()
    assert [(c.name, c.outcome) for c in report.tool_calls] == [
        ("agent_change_mode", "mode_unchanged")
    ]
    assert response.mode_display_name == "General"
    assert (await session_of(store, response.session_id)).mode_history == []


@pytest.mark.decision("R7")
@pytest.mark.parametrize(("branch", "expected"), [(True, True), (False, False), (None, False)])
async def test_branch_flag_is_surfaced_to_the_host_not_the_response(
    store: SessionStore, branch: bool | None, expected: bool
) -> None:
    more: dict[str, Any] = {} if branch is None else {"branch": branch}
    pipeline, _ = make_pipeline(store, [calls(change_mode("m1", "review", **more)), text("ok")])

    report, response = await start(pipeline)

    assert report.branch is expected
    assert report.to_dict()["branch"] is expected
    # R7: AGN-033 is closed; the flag is no new field, of the response or of a ToolResult
    wire = response.to_wire()
    assert set(wire) <= FINAL_RESPONSE_FIELDS
    assert not any(key.lower() == "branch" for key in wire)
    for result in wire.get("ToolResults", []):
        assert set(result) <= TOOL_RESULT_FIELDS
    entry = (await session_of(store, response.session_id)).mode_history[0]
    assert entry.branch is expected


@pytest.mark.decision("R7")
async def test_turn_without_mode_change_has_no_branch(store: SessionStore) -> None:
    pipeline, _ = make_pipeline(store, [text("ok")])

    report, _ = await start(pipeline)

    assert report.branch is None
    assert report.mode_changes == ()


@pytest.mark.decision("D43")
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


@pytest.mark.decision("R7")
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


@pytest.mark.decision("R7")
async def test_a_turn_without_mode_change_has_no_branch(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("hi")])

    report, _ = await start(pipeline)

    assert report.branch is None


@pytest.mark.decision("D43", "R7")
async def test_a_failed_turn_reports_no_branch(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [calls(change_mode("m1", "general", branch=True))])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert not report.successful
    assert report.branch is None
    assert report.mode_changes == ()


@pytest.mark.decision("D26")
async def test_mode_change_in_a_turn_that_faults_is_not_persisted(store: SessionStore) -> None:
    llm = FailingLLM(
        [text("one"), calls(change_mode("m1", "review")), text("three")],
        fail_on=3,  # the call after the mode change
    )
    pipeline, _ = make_pipeline(store, llm)
    _, first = await start(pipeline)

    failed = await pipeline.run(follow_on(first, "switch"), CALLER)

    assert not failed.successful
    assert [error.code for error in failed.result.errors] == [ErrorCode.PORT_FAILED]
    assert failed.mode_changes == ()
    assert failed.branch is None
    session = await session_of(store, first.session_id)
    assert (session.mode, session.mode_history) == ("general", [])
    later = await pipeline.run(follow_on(first, "again"), CALLER)
    assert ok(later.result).mode_display_name == "General"
    assert llm.script.requests[-1].mode == "general"
    assert "Math" in names(llm.script.requests[-1])


async def test_failing_set_session_mode_faults_the_turn(store: SessionStore) -> None:
    pipeline, llm = make_pipeline(
        ModeStoreDown(store), [calls(change_mode("m1", "review")), text("switched")]
    )

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert not report.successful
    assert report.states[-1] == "faulted"
    assert report.mode_changes == ()
    assert len(scripted(llm).requests) == 1  # the model is not told a store failure
    assert await stored_session(store, "session-1") is None


async def test_raising_mode_tool_executor_is_told_to_the_model(store: SessionStore) -> None:
    async def host_mode_tool(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        raise RuntimeError("mode service down")

    pipeline, llm = make_pipeline(
        store,
        [calls(change_mode("m1", "review")), text("staying")],
        tools={"agent_change_mode": host_mode_tool},
    )

    report, response = await start(pipeline)

    assert "mode service down" in tool_answer(scripted(llm).requests[1], "m1")["error"]
    assert response.mode_display_name == "General"
    assert report.mode_changes == ()
    assert (await session_of(store, response.session_id)).mode_history == []


async def test_initial_turn_with_mode_change_then_exhausted_script_stores_no_session(
    store: SessionStore,
) -> None:
    pipeline, _ = make_pipeline(store, [calls(change_mode("m1", "review"))])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert not report.successful
    assert report.states[-1] == "faulted"
    assert report.mode_changes == ()
    assert await stored_session(store, "session-1") is None


# === container design: expansion and checks ==============================================


@pytest.mark.decision("D30", "R9")
@pytest.mark.rule(CONTAINER, "holds")
@pytest.mark.rule(KNOWN, "holds")
@pytest.mark.rule(SCHEMA, "holds")
@pytest.mark.parametrize("no_arguments", [{}, ""], ids=["empty object", "empty text"])
async def test_container_expands_then_member_runs_server_side(
    store: SessionStore, no_arguments: Any
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(call("x1", "Math", no_arguments)),
            calls(call("a1", "Add", {"a": 2, "b": 3})),
            text("5"),
        ],
    )

    report, response = await start(pipeline)

    first, second, third = scripted(llm).requests
    assert "Add" not in names(first)
    assert {"Add", "Multiply"} <= set(names(second))
    expansion = tool_answer(second, "x1")
    assert expansion["expanded"] is True
    assert expansion["functions"] == ["Add", "Multiply"]
    assert tool_answer(third, "a1") == {"result": 5}
    assert [(c.name, c.side, c.outcome) for c in report.tool_calls] == [
        ("Math", "server", "expanded"),
        ("Add", "server", "executed"),
    ]
    assert response.kind is ResponseKind.FINAL
    add_results = [r for r in response.tool_results or [] if r.tool_call_id == "a1"]
    assert len(add_results) == 1
    assert json.loads(add_results[0].result_json or "null") == {"result": 5}
    assert add_results[0].error_message is None
    assert isinstance(add_results[0].execution_ms, int)
    assert add_results[0].execution_ms >= 0


@pytest.mark.decision("R9")
async def test_expanded_container_stays_expanded_across_a_continuation(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(call("x1", "Math")),
            calls(call("c1", "read_file", {"path": "a.py"})),
            calls(call("a1", "Multiply", {"a": 4, "b": 5})),
            text("20"),
        ],
    )
    _, pending = await start(pipeline)

    response = ok(await pipeline.execute(continuation(pending), CALLER))

    resumed = scripted(llm).requests[2]
    assert {"Add", "Multiply"} <= set(names(resumed))
    assert tool_answer(scripted(llm).requests[3], "a1") == {"result": 20}
    assert response.primary_output_text == "20"


@pytest.mark.rule(CONTAINER, "broken")
async def test_container_called_with_arguments_gets_the_container_error(
    store: SessionStore,
) -> None:
    attempted = {"function": "Add", "a": 5, "b": 10}
    pipeline, llm = make_pipeline(store, [calls(call("x1", "Math", attempted)), text("sorry")])

    report, _ = await start(pipeline)

    second = scripted(llm).requests[1]
    error = tool_answer(second, "x1")
    assert error["error_type"] == "container_invocation_error"
    assert error["container_name"] == "Math"
    assert error["attempted_parameters"] == attempted
    assert error["available_functions"] == ["Add", "Multiply"]
    assert "'Math' with NO arguments" in error["retry_guidance"]
    assert "Add, Multiply" in error["retry_guidance"]
    assert "Add" not in names(second)  # not expanded
    assert [(c.name, c.outcome, c.rule_id) for c in report.tool_calls] == [
        ("Math", "rejected", CONTAINER)
    ]


@pytest.mark.decision("D18")
@pytest.mark.rule(CONTAINER, "broken")
async def test_container_error_guidance_names_only_the_first_five_functions(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [calls(call("x1", "Math", {"a": 1})), text("sorry")],
        config=BIG_CONTAINER_CONFIG,
        tools=dict.fromkeys(SEVEN_FUNCTIONS, never_runs),
    )

    await start(pipeline)

    error = tool_answer(scripted(llm).requests[1], "x1")
    assert error["available_functions"] == SEVEN_FUNCTIONS
    assert "Add, Multiply, Abs, Square, Subtract, ..." in error["retry_guidance"]
    assert "Min" not in error["retry_guidance"]
    assert "SolveQuadratic" not in error["retry_guidance"]


@pytest.mark.decision("D30")
@pytest.mark.rule(KNOWN, "broken")
@pytest.mark.parametrize("name", ["Add", "delete_everything", "review_checklist"])
async def test_call_of_a_tool_not_advertised_is_a_validation_error(
    store: SessionStore, name: str
) -> None:
    ran: list[str] = []

    async def recording(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        ran.append(invocation.name)
        return "{}"

    pipeline, llm = make_pipeline(
        store,
        [calls(call("t1", name, {"a": 1, "b": 2})), text("sorry")],
        tools={"Add": recording, "review_checklist": recording},
    )

    report, response = await start(pipeline)

    error = tool_answer(scripted(llm).requests[1], "t1")
    assert error["error_type"] == "validation_error"
    assert [(e["property"], e["error_code"]) for e in error["errors"]] == [
        ("name", "UNKNOWN_FUNCTION")
    ]
    assert ran == []
    assert [(c.outcome, c.rule_id) for c in report.tool_calls] == [("rejected", KNOWN)]
    assert response.kind is ResponseKind.FINAL


INVALID_READ_FILE_ARGUMENTS = {
    "missing path": ({}, "path", "REQUIRED_FIELD"),
    "blank arguments": ("", "path", "REQUIRED_FIELD"),
    "extra property": ({"path": "a.py", "mode": "rb"}, "mode", "UNKNOWN_PROPERTY"),
    "wrong type": ({"path": 3}, "path", "INVALID_TYPE"),
    "empty path": ({"path": ""}, "path", "INVALID_LENGTH"),
}


@pytest.mark.decision("D30")
@pytest.mark.rule(SCHEMA, "broken")
@pytest.mark.parametrize(
    ("arguments", "prop", "code"),
    INVALID_READ_FILE_ARGUMENTS.values(),
    ids=INVALID_READ_FILE_ARGUMENTS.keys(),
)
async def test_invalid_client_tool_arguments_go_back_to_the_model_not_the_client(
    store: SessionStore, arguments: Any, prop: str, code: str
) -> None:
    pipeline, llm = make_pipeline(store, [calls(call("c1", "read_file", arguments)), text("oops")])

    report, response = await start(pipeline)

    error = tool_answer(scripted(llm).requests[1], "c1")
    assert error["error_type"] == "validation_error"
    assert [(e["property"], e["error_code"]) for e in error["errors"]] == [(prop, code)]
    assert error["retry_guidance"]
    assert [(c.name, c.side, c.outcome, c.rule_id) for c in report.tool_calls] == [
        ("read_file", "client", "rejected", SCHEMA)
    ]
    assert response.kind is ResponseKind.FINAL
    assert response.tool_calls is None


@pytest.mark.decision("D19")
@pytest.mark.rule(JSON_OBJECT, "broken")
@pytest.mark.parametrize(
    ("arguments", "code"),
    [("[1, 2]", "INVALID_TYPE"), ('"a.py"', "INVALID_TYPE"), ("{path: a.py", "INVALID_JSON")],
    ids=["array", "string", "malformed"],
)
async def test_non_object_arguments_are_refused(
    store: SessionStore, arguments: str, code: str
) -> None:
    pipeline, llm = make_pipeline(store, [calls(call("c1", "read_file", arguments)), text("oops")])

    report, response = await start(pipeline)

    error = tool_answer(scripted(llm).requests[1], "c1")
    assert error["error_type"] == "validation_error"
    assert [e["error_code"] for e in error["errors"]] == [code]
    assert [(c.outcome, c.rule_id) for c in report.tool_calls] == [("rejected", JSON_OBJECT)]
    assert response.kind is ResponseKind.FINAL


@pytest.mark.rule(SCHEMA, "holds")
@pytest.mark.rule(JSON_OBJECT, "holds")
@pytest.mark.rule(KNOWN, "holds")
async def test_valid_client_tool_call_goes_to_the_client(store: SessionStore) -> None:
    pipeline, _ = make_pipeline(store, [calls(call("c1", "read_file", {"path": "a.py"}))])

    report, response = await start(pipeline)

    assert response.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert [
        (c.tool_call_id, c.name, json.loads(c.arguments_json)) for c in response.tool_calls or []
    ] == [("c1", "read_file", {"path": "a.py"})]
    assert [(c.side, c.outcome, c.rule_id) for c in report.tool_calls] == [
        ("client", "client", None)
    ]


@pytest.mark.decision("D39")
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


@pytest.mark.decision("D39")
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


# === server tools that fail ================================================================


@pytest.mark.decision("D30")
async def test_raising_server_tool_is_an_error_for_the_model_not_a_fault(
    store: SessionStore,
) -> None:
    async def broken_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        raise RuntimeError("adder on fire")

    pipeline, llm = make_pipeline(
        store,
        [calls(call("x1", "Math")), calls(call("a1", "Add", {"a": 1, "b": 2})), text("failed")],
        tools={"Add": broken_add},
    )

    report, response = await start(pipeline)

    answer = tool_answer(scripted(llm).requests[2], "a1")
    assert set(answer) == {"error"}
    assert "adder on fire" in answer["error"]
    assert report.tool_calls[-1].outcome == "failed"
    assert response.kind is ResponseKind.FINAL
    results = [r for r in response.tool_results or [] if r.tool_call_id == "a1"]
    assert len(results) == 1
    assert results[0].result_json is None
    assert "adder on fire" in (results[0].error_message or "")


class AwaitedCatalog:
    """A catalog read only by awaiting, as a host's database-backed one is: building the
    pipeline cannot check its tools (``Pipeline.verify`` can), so a turn may meet a
    server tool that has no executor."""

    def __init__(self, inner: ConfigCatalog) -> None:
        self.inner = inner

    async def get_mode(self, mode: str) -> ModeSpec | None:
        return await self.inner.get_mode(mode)

    async def list_modes(self) -> list[ModeSpec]:
        return await self.inner.list_modes()

    async def get_agent_context(self, agent_context_id: str | None) -> AgentContext | None:
        return await self.inner.get_agent_context(agent_context_id)

    async def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> ConversationContext | None:
        return await self.inner.get_conversation_context(conversation_context_id)


@pytest.mark.decision("D30")
async def test_server_tool_without_executor_is_an_error_for_the_model(
    store: SessionStore,
) -> None:
    llm = ScriptedLLM([calls(call("w1", "weather")), text("no weather")])
    catalog = AwaitedCatalog(ConfigCatalog.from_toml(UNEXECUTABLE_CONFIG))
    pipeline = embedded_pipeline(
        llm=llm, store=store, catalog=catalog, clock=SteppingClock(), ids=SequentialIds()
    )

    report, response = await start(pipeline)

    answer = tool_answer(llm.requests[1], "w1")
    assert set(answer) == {"error"}
    assert "weather" in answer["error"]
    assert [(c.name, c.side, c.outcome) for c in report.tool_calls] == [
        ("weather", "server", "failed")
    ]
    assert response.primary_output_text == "no weather"


@pytest.mark.parametrize(
    ("limit", "succeeds"),
    [
        pytest.param(2, True, marks=pytest.mark.rule(ROUND_LIMIT, "holds"), id="within"),
        pytest.param(1, False, marks=pytest.mark.rule(ROUND_LIMIT, "broken"), id="past"),
    ],
)
async def test_server_tool_rounds_are_bounded(
    store: SessionStore, limit: int, succeeds: bool
) -> None:
    options = PipelineOptions(
        max_server_tool_rounds=limit, retry_wait_seconds=0, retry_max_wait_seconds=0
    )
    pipeline, llm = make_pipeline(
        store,
        [calls(call("x1", "Math")), calls(call("a1", "Add", {"a": 1, "b": 1})), text("2")],
        options=options,
    )

    report = await pipeline.run({"Instruction": "1+1"}, CALLER)

    assert report.successful is succeeds
    if succeeds:
        assert ok(report.result).primary_output_text == "2"
    else:
        assert rule_ids_of(report) == (ROUND_LIMIT,)
        assert len(scripted(llm).requests) == 2
        assert await stored_session(store, "session-1") is None


# === model tool-call ids (AGN-033 §5.1) ===============================================


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


@pytest.mark.decision("D41")
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


@pytest.mark.decision("D41")
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


@pytest.mark.decision("D41")
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


# === R5: a reply mixing server and client calls ===========================================


@pytest.mark.decision("R5")
@pytest.mark.parametrize("server_first", [True, False], ids=["server first", "client first"])
async def test_mixed_reply_runs_server_calls_and_emits_only_client_calls(
    store: SessionStore, server_first: bool
) -> None:
    ran: list[ToolInvocation] = []

    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        ran.append(invocation)
        return json.dumps({"checklist": ["tests?"]})

    server, client = call("s1", "review_checklist"), call("c1", "read_file", {"path": "a.py"})
    pipeline, llm = make_pipeline(
        store,
        [calls(*((server, client) if server_first else (client, server))), text("reviewed")],
        tools={"review_checklist": checklist},
    )

    report, pending = await start(pipeline, initial_mode="review")

    assert pending.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert [c.tool_call_id for c in pending.tool_calls or []] == ["c1"]
    assert [(i.tool_call_id, i.mode, i.turn_id) for i in ran] == [("s1", "review", pending.turn_id)]
    assert {(c.name, c.outcome) for c in report.tool_calls} == {
        ("review_checklist", "executed"),
        ("read_file", "client"),
    }

    final = ok(
        await pipeline.execute(
            continuation(
                pending, {"ToolCallId": "c1", "ExecutionMs": 3, "ResultJson": '"print(1)"'}
            ),
            CALLER,
        )
    )

    resumed = scripted(llm).requests[1]
    answered = after_last_assistant_call(resumed)
    if server_first:  # the reply's order, which is also the order the results came in
        assert answered == [("s1", "review_checklist"), ("c1", "read_file")]
    else:  # every call of the reply answered once, after it
        assert sorted(answered) == [("c1", "read_file"), ("s1", "review_checklist")]
    assert tool_answer(resumed, "s1") == {"checklist": ["tests?"]}
    assert tool_answer(resumed, "c1") == "print(1)"
    assert final.primary_output_text == "reviewed"
    assert len(ran) == 1  # the server call is not run again on the continuation


# === continuation ==========================================================================


@pytest.mark.rule(COUNT_MATCH, "holds")
@pytest.mark.rule(ORDER_MATCH, "holds")
@pytest.mark.rule(ID_MATCH, "holds")
@pytest.mark.rule(NAME_MATCH, "holds")
async def test_continuations_feed_results_in_manifest_order_until_final(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(call("c1", "read_file", {"path": "a.py"}), call("c2", "run_tests")),
            calls(call("c3", "read_file", {"path": "b.py"})),
            text("all good"),
        ],
    )
    _, first = await start(pipeline, "look at a.py")
    assert first.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert [c.tool_call_id for c in first.tool_calls or []] == ["c1", "c2"]

    second_report = await pipeline.run(
        continuation(
            first,
            {"ToolCallId": "c1", "ExecutionMs": 2, "ResultJson": '{"text": "a"}'},
            {"ToolCallId": "c2", "ExecutionMs": 9, "ResultJson": '{"passed": 12}'},
        ),
        CALLER,
    )

    second = ok(second_report.result)
    resumed = scripted(llm).requests[1]
    assert resumed.messages[1].role is ChatRole.USER
    assert "look at a.py" in resumed.messages[1].content
    assert after_last_assistant_call(resumed) == [("c1", "read_file"), ("c2", "run_tests")]
    assert tool_answer(resumed, "c1") == {"text": "a"}
    assert tool_answer(resumed, "c2") == {"passed": 12}
    assert "continuation_resolved" in second_report.states
    assert "agent_context_resolved" not in second_report.states
    assert "session_created" not in second_report.states
    assert second_report.llm_calls == 1
    # the continuation asks for more client tools: same turn
    assert second.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert (second.session_id, second.turn_id) == (first.session_id, first.turn_id)
    assert [c.tool_call_id for c in second.tool_calls or []] == ["c3"]

    third = ok(await pipeline.execute(continuation(second), CALLER))

    assert third.kind is ResponseKind.FINAL
    assert third.primary_output_text == "all good"
    assert (third.session_id, third.turn_id) == (first.session_id, first.turn_id)
    last = scripted(llm).requests[2]
    assert after_last_assistant_call(last) == [("c3", "read_file")]
    assert [m.tool_call_id for m in tool_messages(last)] == ["c1", "c2", "c3"]
    turn = await stored_turn(store, first.session_id, first.turn_id)
    assert turn is not None
    assert (turn.status, turn.pending_tool_calls) == (TurnStatus.COMPLETED, [])


@pytest.mark.decision("R3")
async def test_client_tool_failure_is_shown_to_the_model_as_an_error(
    store: SessionStore,
) -> None:
    pipeline, llm = make_pipeline(
        store, [calls(call("c1", "read_file", {"path": "gone.py"})), text("file is missing")]
    )
    _, pending = await start(pipeline)

    response = ok(
        await pipeline.execute(
            continuation(
                pending,
                {"ToolCallId": "c1", "ExecutionMs": 1, "ErrorMessage": "gone.py: no such file"},
            ),
            CALLER,
        )
    )

    assert tool_answer(scripted(llm).requests[1], "c1") == {"error": "gone.py: no such file"}
    assert response.kind is ResponseKind.FINAL
    assert response.primary_output_text == "file is missing"


@pytest.mark.decision("D31")
async def test_a_final_answer_reports_the_whole_turns_usage_and_server_tools(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(
        store,
        [
            {
                **calls(call("k1", "Math"), call("c1", "read_file", {"path": "a.py"})),
                "usage": {"input_tokens": 10, "output_tokens": 2},
            },
            {**text("done"), "usage": {"input_tokens": 20, "output_tokens": 3}},
        ],
    )
    _, pending = await start(pipeline)

    final = ok(await pipeline.execute(continuation(pending), CALLER))

    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 5)
    assert final.usage.total_tokens == 35
    assert [r.tool_call_id for r in final.tool_results or []] == []  # an expansion is no tool run


@pytest.mark.decision("D31")
async def test_a_final_answer_carries_server_results_from_before_the_client_round_trip(
    store: Store,
) -> None:
    pipeline, _ = make_pipeline(
        store,
        [
            calls(call("k1", "review_checklist"), call("c1", "read_file", {"path": "a.py"})),
            text("done"),
        ],
    )
    _, pending = await start(pipeline, initial_mode="review")

    final = ok(await pipeline.execute(continuation(pending), CALLER))

    assert [r.tool_call_id for r in final.tool_results or []] == ["k1"]


def _result(call_id: str) -> dict[str, Any]:
    return {"ToolCallId": call_id, "ExecutionMs": 1, "ResultJson": f'{{"for": "{call_id}"}}'}


MANIFEST_MISMATCHES = [
    pytest.param(
        [_result("c1")],
        COUNT_MATCH,
        "c2",
        "run_tests",
        id="too few",
        marks=pytest.mark.rule(COUNT_MATCH, "broken"),
    ),
    pytest.param(
        [_result("c1"), _result("c2"), _result("c9")],
        COUNT_MATCH,
        "c9",
        None,
        id="too many",
        marks=pytest.mark.rule(COUNT_MATCH, "broken"),
    ),
    pytest.param(
        [_result("c2"), _result("c1")],
        ORDER_MATCH,
        "c2",
        "run_tests",
        id="wrong order",
        marks=pytest.mark.rule(ORDER_MATCH, "broken"),
    ),
    pytest.param(
        [_result("cX"), _result("c2")],
        ID_MATCH,
        "cX",
        "read_file",
        id="unknown id",
        marks=pytest.mark.rule(ID_MATCH, "broken"),
    ),
]


@pytest.mark.parametrize(("results", "rule_id", "tool_id", "tool_name"), MANIFEST_MISMATCHES)
async def test_manifest_mismatch_is_a_hard_fault_that_changes_nothing(
    store: SessionStore,
    results: list[dict[str, Any]],
    rule_id: str,
    tool_id: str,
    tool_name: str | None,
) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(call("c1", "read_file", {"path": "a.py"}), call("c2", "run_tests")),
            text("done"),
        ],
    )
    _, pending = await start(pipeline)

    report = await pipeline.run(continuation(pending, *results), CALLER)

    assert not report.successful
    assert report.states[-1] == "faulted"
    assert report.faulted_step == "client_tool_continuation_resolver"
    assert rule_id in rule_ids_of(report)
    assert {error.code for error in report.result.errors} == {ErrorCode.TOOL_CALL_MANIFEST_INVALID}
    named = [
        error
        for error in report.result.errors
        if error.rule_id == rule_id
        and tool_id in f"{error.tool_call_id} {error.message}"
        and (tool_name is None or tool_name in f"{error.tool_name} {error.message}")
    ]
    assert named, [error.model_dump() for error in report.result.errors]
    assert len(scripted(llm).requests) == 1  # the model was not called
    turn = await stored_turn(store, pending.session_id, pending.turn_id)
    assert turn is not None
    assert turn.status is TurnStatus.AWAITING_CLIENT_TOOLS
    assert [c.tool_call_id for c in turn.pending_tool_calls] == ["c1", "c2"]

    response = ok(await pipeline.execute(continuation(pending), CALLER))

    assert response.primary_output_text == "done"
    assert after_last_assistant_call(scripted(llm).requests[1]) == [
        ("c1", "read_file"),
        ("c2", "run_tests"),
    ]
