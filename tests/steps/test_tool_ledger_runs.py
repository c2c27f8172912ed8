"""``run_ledgered`` on a real ledger (a memory store and a SQLite file): the key recipe,
what a done call answers, a pause, a failure, a racing second attempt (docs/TOOLS.md)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from engine_kit import make_store
from ledger_kit import CountingTool

from aptix_pipeline import (
    LedgeredTool,
    ToolInvocation,
    ToolLedger,
    ToolPossiblyExecutedError,
    run_ledgered,
    tool_call_key,
)
from aptix_pipeline.adapters import MemoryStore, SteppingClock
from aptix_pipeline.contracts import ToolFile, ToolOutput, ToolPause
from aptix_pipeline.steps import TOOL_CALL_KEY_PREFIX, decode_ledger_result, encode_ledger_result

ARGUMENTS = {"to": "bo@example.com", "cc": ["al", "é"], "n": 1.5}


@pytest.fixture(params=["memory", "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ToolLedger]:
    for store in make_store(request.param, tmp_path):
        assert isinstance(store, ToolLedger)
        yield store


def invocation(key: str | None = "tk1-k", idempotent: Any = None) -> ToolInvocation:
    return ToolInvocation(
        tool_call_id="s1",
        name="send_mail",
        session_id="session-1",
        turn_id="turn-1",
        mode="general",
        org="acme",
        user="ana",
        idempotency_key=key,
        idempotent=idempotent,
    )


@pytest.mark.decision("D520")
def test_the_key_is_the_documented_recipe_and_changes_with_each_part() -> None:
    key = tool_call_key("session-1", "turn-1", "s1", ARGUMENTS)
    reordered = {"n": 1.5, "cc": ["al", "é"], "to": "bo@example.com"}
    digest = hashlib.sha256(
        json.dumps(ARGUMENTS, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    named = json.dumps(["session-1", "turn-1", "s1", digest], separators=(",", ":"))

    assert key == "tk1-" + hashlib.sha256(named.encode()).hexdigest()[:40]
    assert key.startswith(TOOL_CALL_KEY_PREFIX)
    assert len(key) == 44
    assert tool_call_key("session-1", "turn-1", "s1", reordered) == key
    others = {
        tool_call_key("session-2", "turn-1", "s1", ARGUMENTS),
        tool_call_key("session-1", "turn-2", "s1", ARGUMENTS),
        tool_call_key("session-1", "turn-1", "s2", ARGUMENTS),
        tool_call_key("session-1", "turn-1", "s1", {**ARGUMENTS, "n": 2}),
    }
    assert key not in others
    assert len(others) == 4


@pytest.mark.decision("D522")
async def test_a_done_call_answers_its_recorded_answer_without_running(
    ledger: ToolLedger,
) -> None:
    tool, clock = CountingTool(), SteppingClock()

    first = await run_ledgered(tool, ARGUMENTS, invocation(), ledger=ledger, clock=clock)
    second = await run_ledgered(tool, ARGUMENTS, invocation(), ledger=ledger, clock=clock)

    assert tool.runs == 1
    assert second == first


@pytest.mark.decision("D527")
async def test_a_done_tool_output_comes_back_with_its_files_bytes(ledger: ToolLedger) -> None:
    runs = 0
    made = ToolOutput(
        result_json='{"report": "made"}',
        files=(
            ToolFile(name="r.md", mime_type="text/markdown", content=b"# R\x00\xff"),
            ToolFile(name="a.png", mime_type="image/png", content=b"\x89PNG", description="d"),
        ),
    )

    async def report(arguments: dict[str, Any], invocation: ToolInvocation) -> ToolOutput:
        nonlocal runs
        runs += 1
        return made

    clock = SteppingClock()
    await run_ledgered(report, {}, invocation(), ledger=ledger, clock=clock)
    again = await run_ledgered(report, {}, invocation(), ledger=ledger, clock=clock)

    assert runs == 1
    assert isinstance(again, ToolOutput)
    assert again.result_json == made.result_json
    assert [(f.name, f.mime_type, f.description, f.content) for f in again.files] == [
        (f.name, f.mime_type, f.description, f.content) for f in made.files
    ]
    assert [f.content_hash for f in again.files] == [f.content_hash for f in made.files]


@pytest.mark.decision("D522")
@pytest.mark.parametrize("answer", ['{"a": 1}', "plain words", "a\x00b \ud800"])
def test_a_text_answer_is_kept_exactly(answer: str) -> None:
    kept = encode_ledger_result(answer)

    assert kept.isascii()
    assert decode_ledger_result(kept) == answer


@pytest.mark.decision("D522")
async def test_a_pause_releases_the_reservation_so_the_resumed_call_runs(
    ledger: ToolLedger,
) -> None:
    answers: list[str | ToolPause] = [ToolPause(name="ask_user", arguments_json="{}"), '"sent"']
    runs = 0

    async def asks_first(arguments: dict[str, Any], invocation: ToolInvocation) -> str | ToolPause:
        nonlocal runs
        runs += 1
        return answers.pop(0)

    clock = SteppingClock()
    paused = await run_ledgered(asks_first, {}, invocation(), ledger=ledger, clock=clock)
    resumed = await run_ledgered(asks_first, {}, invocation(), ledger=ledger, clock=clock)
    answered = await run_ledgered(asks_first, {}, invocation(), ledger=ledger, clock=clock)

    assert isinstance(paused, ToolPause)
    assert (resumed, answered, runs) == ('"sent"', '"sent"', 2)


@pytest.mark.decision("D522", "D524")
async def test_a_call_that_raised_stays_reserved_and_is_not_run_again(
    ledger: ToolLedger,
) -> None:
    tool, clock = CountingTool(fail_first=1), SteppingClock()

    with pytest.raises(ConnectionResetError):
        await run_ledgered(tool, {}, invocation(), ledger=ledger, clock=clock)
    with pytest.raises(ToolPossiblyExecutedError, match=r"^tool_possibly_executed: .*'s1'"):
        await run_ledgered(tool, {}, invocation(), ledger=ledger, clock=clock)

    assert tool.runs == 1


@pytest.mark.decision("D524")
async def test_of_two_racing_attempts_at_one_call_one_runs_and_the_other_is_refused(
    ledger: ToolLedger,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    runs = 0

    async def slow(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()
        return '"done"'

    tool = LedgeredTool(slow, ledger, SteppingClock())
    first = asyncio.create_task(tool({}, invocation()))
    await started.wait()
    with pytest.raises(ToolPossiblyExecutedError):
        await tool({}, invocation())
    release.set()

    assert await first == '"done"'
    assert runs == 1


@pytest.mark.decision("D522")
async def test_without_a_key_or_a_ledger_the_tool_just_runs() -> None:
    tool, clock, store = CountingTool(), SteppingClock(), MemoryStore()

    await run_ledgered(tool, {}, invocation(key=None), ledger=store, clock=clock)
    await run_ledgered(tool, {}, invocation(key=None), ledger=store, clock=clock)
    await run_ledgered(tool, {}, invocation(), ledger=None, clock=clock)

    assert tool.runs == 3


class _DoneFails(MemoryStore):
    async def complete_tool_call(
        self, org: str, user: str, key: str, result: str, now: datetime
    ) -> None:
        raise ConnectionError("the database went away")


@pytest.mark.decision("D522")
async def test_a_failure_to_record_done_keeps_the_answer_and_the_reservation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tool, store, clock = CountingTool(), _DoneFails(), SteppingClock()

    with caplog.at_level(logging.WARNING):
        answer = await run_ledgered(tool, {}, invocation(), ledger=store, clock=clock)
    entry = await store.reserve_tool_call("acme", "ana", "tk1-k", clock.now())

    assert json.loads(answer)["sent"] is True  # type: ignore[arg-type]
    assert entry is not None
    assert not entry.done
    assert "recording server tool 'send_mail' call 's1' as done failed" in caplog.text
