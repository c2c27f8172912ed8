"""Server-tool effects exactly once through the store's tool ledger (docs/TOOLS.md "Exactly once").

A client retries a continuation whose first attempt ran a server tool and then
died before its commit (the model failed after the tool: the turn rolled back).
On the memory store, a SQLite file and a PostgreSQL database: a done call is
answered from the ledger and never runs again; a call the first attempt started
and never finished follows the policy (a tool error ``tool_possibly_executed``)
unless its tool declares itself idempotent, which runs it again with the same key.
Then: the ledger turned off, the key the executor gets, and a recorded turn whose
call the ledger answered replays.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engine_kit import (
    ALL_STORE_KINDS,
    CALLER,
    READ_A,
    CommitFailingStore,
    FailingLLM,
    call,
    calls,
    continuation,
    make_pipeline,
    ok,
    open_store_of_kind,
    text,
    tool_messages,
)
from ledger_kit import LEDGER_CATALOG, CountingTool, ledger_tools
from replay_kit import recording_pipeline

from aptix_pipeline import PipelineOptions, TurnReport, replay, tool_call_key
from aptix_pipeline.adapters import MemoryStore, SteppingClock
from aptix_pipeline.contracts import SessionStore, ToolLedger

SEND = call("s1", "send_mail", {"to": "bo@example.com"})
NO_WAIT = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        yield opened


def _crash_after_tool(tool_call: dict[str, Any]) -> FailingLLM:
    """Initial: ``read_file`` for the client. Continuation, first attempt: ``tool_call``,
    then the model fails (the turn rolls back). The retry: the same call, then an answer."""
    return FailingLLM([calls(READ_A), calls(tool_call), calls(tool_call), text("Sent.")], fail_on=3)


async def _crash_then_retry(
    store: SessionStore,
    tool_call: dict[str, Any],
    tool: CountingTool,
    options: PipelineOptions = NO_WAIT,
) -> tuple[TurnReport, FailingLLM]:
    """An Initial turn, its continuation crashing after the tool, and the client's retry."""
    llm = _crash_after_tool(tool_call)
    pipeline, _ = make_pipeline(
        store,
        llm,
        config=LEDGER_CATALOG,
        tools=ledger_tools(tool_call["name"], tool),
        options=options,
    )
    first = ok(await pipeline.execute({"Instruction": "mail bo"}, CALLER))
    request = continuation(first)
    crashed = await pipeline.execute(request, CALLER)
    assert not crashed.successful  # the model failed after the tool: nothing was committed
    return await pipeline.run(request, CALLER), llm


@pytest.mark.decision("D520", "D521", "D522")
async def test_a_retried_continuation_never_runs_a_done_tool_call_again(
    store: SessionStore,
) -> None:
    tool = CountingTool()

    retried, llm = await _crash_then_retry(store, SEND, tool)

    response = ok(retried.result)
    assert tool.runs == 1
    first_answer = '{"sent": true, "to": "bo@example.com", "run": 1}'
    assert [r.result_json for r in response.tool_results or []] == [first_answer]
    told = tool_messages(llm.script.requests[-1], "s1")
    assert [message.content for message in told] == [first_answer]
    assert response.primary_output_text == "Sent."


@pytest.mark.decision("D520", "D524")
@pytest.mark.rule("DESIGN/ledger/possibly-executed", "broken")
async def test_a_call_an_earlier_attempt_started_and_never_finished_is_not_run_again(
    store: SessionStore,
) -> None:
    tool = CountingTool(fail_first=1)  # it acted, then raised: it stays reserved

    retried, llm = await _crash_then_retry(store, SEND, tool)

    response = ok(retried.result)
    assert tool.runs == 1
    (result,) = response.tool_results or []
    assert result.result_json is None
    assert result.error_message is not None
    assert result.error_message.startswith("ToolPossiblyExecutedError: tool_possibly_executed: ")
    assert "'send_mail'" in result.error_message
    told = tool_messages(llm.script.requests[-1], "s1")
    assert "tool_possibly_executed" in json.loads(told[0].content)["error"]
    (record,) = [r for r in retried.tool_calls if r.tool_call_id == "s1"]
    assert (record.outcome, record.rule_id) == ("failed", "DESIGN/ledger/possibly-executed")


@pytest.mark.decision("D523")
@pytest.mark.rule("DESIGN/ledger/possibly-executed", "holds")
@pytest.mark.parametrize(
    "tool_call",
    [call("s1", "send_mail_by_key", {"to": "bo@example.com"}), call("s1", "lookup", {})],
    ids=["by_key", "naturally"],
)
async def test_a_call_of_a_tool_declared_idempotent_runs_again_with_the_same_key(
    store: SessionStore, tool_call: dict[str, Any]
) -> None:
    tool = CountingTool(fail_first=1)

    retried, _ = await _crash_then_retry(store, tool_call, tool)

    response = ok(retried.result)
    assert tool.runs == 2
    assert [r.result_json for r in response.tool_results or []] == [
        json.dumps({"sent": True, "to": tool_call["arguments"].get("to"), "run": 2})
    ]
    keys = {invocation.idempotency_key for invocation in tool.invocations}
    assert len(keys) == 1
    assert [i.idempotent for i in tool.invocations] == [tool.invocations[0].idempotent] * 2
    assert tool.invocations[0].idempotent in ("by_key", "naturally")


@pytest.mark.decision("D525")
async def test_with_the_ledger_off_a_retry_runs_the_call_again(store: SessionStore) -> None:
    tool = CountingTool()

    retried, _ = await _crash_then_retry(
        store, SEND, tool, PipelineOptions(retry_wait_seconds=0, tool_ledger=False)
    )

    ok(retried.result)
    assert tool.runs == 2
    assert tool.invocations[0].idempotency_key == tool.invocations[1].idempotency_key


@pytest.mark.decision("D520")
async def test_the_executor_gets_the_key_of_its_session_turn_call_and_arguments(
    store: SessionStore,
) -> None:
    tool = CountingTool()
    pipeline, _ = make_pipeline(
        store,
        [calls(SEND), text("Sent.")],
        config=LEDGER_CATALOG,
        tools=ledger_tools("send_mail", tool),
    )

    response = ok(await pipeline.execute({"Instruction": "mail bo"}, CALLER))

    (invocation,) = tool.invocations
    assert invocation.idempotency_key == tool_call_key(
        response.session_id or "", response.turn_id or "", "s1", {"to": "bo@example.com"}
    )
    assert invocation.idempotent is None
    assert isinstance(store, ToolLedger)
    entry = await store.reserve_tool_call(
        CALLER.org, CALLER.user, invocation.idempotency_key or "", SteppingClock().now()
    )
    assert entry is not None
    assert entry.done


@pytest.mark.decision("D526")
async def test_a_recorded_retry_whose_call_the_ledger_answered_replays(
    store: SessionStore,
) -> None:
    tool = CountingTool()
    pipeline = recording_pipeline(
        store, _crash_after_tool(SEND), config=LEDGER_CATALOG, tools=ledger_tools("send_mail", tool)
    )
    first = await pipeline.run({"Instruction": "mail bo"}, CALLER)
    request = continuation(ok(first.result))
    crashed = await pipeline.run(request, CALLER)
    retried = await pipeline.run(request, CALLER)

    ok(retried.result)
    assert tool.runs == 1
    recordings = [report.recording for report in (first, crashed, retried)]
    assert all(recording is not None for recording in recordings)
    for recording in recordings:
        assert recording is not None
        assert [c.call for c in recording.calls if c.port == "ToolExecutor"] == (
            [] if recording is recordings[0] else ["send_mail"]
        )
        outcome = await replay(recording)
        assert outcome.divergence is None, outcome.divergence


# --- old entries --------------------------------------------------------------------------


@pytest.mark.decision("D568")
@pytest.mark.parametrize(
    ("ttl", "left"),
    [(None, {"tk1-8d", "tk1-6d"}), (7 * 86_400.0, {"tk1-6d"}), (86_400.0, set())],
    ids=["kept-for-good", "default-seven-days", "one-day"],
)
async def test_the_pipeline_purges_ledger_entries_older_than_its_ttl(
    store: SessionStore, ttl: float | None, left: set[str]
) -> None:
    options = PipelineOptions(tool_ledger_ttl_seconds=ttl)
    pipeline, _ = make_pipeline(store, options=options)
    assert isinstance(store, ToolLedger)
    start = datetime(2026, 1, 1, tzinfo=UTC)  # make_pipeline's SteppingClock starts here
    for key, age in (("tk1-8d", timedelta(days=8)), ("tk1-6d", timedelta(days=6))):
        await store.reserve_tool_call(CALLER.org, CALLER.user, key, start - age)

    purged = await pipeline.purge_tool_ledger()

    assert purged == 2 - len(left)
    for key in ("tk1-8d", "tk1-6d"):
        held = await store.reserve_tool_call(CALLER.org, CALLER.user, key, start)
        assert (held is not None) is (key in left)


@pytest.mark.decision("D568")
async def test_the_default_ttl_is_seven_days_and_a_store_without_a_ledger_purges_nothing() -> None:
    store = MemoryStore()
    await store.reserve_tool_call("acme", "ana", "tk1-old", datetime(2000, 1, 1, tzinfo=UTC))
    pipeline, _ = make_pipeline(CommitFailingStore(store, RuntimeError("no commit")))

    assert PipelineOptions().tool_ledger_ttl_seconds == 7 * 86_400
    assert await pipeline.purge_tool_ledger() == 0
