"""``Pipeline.fork`` (engine/pipeline.py, docs/FORKS.md, D609).

A fork's result never raises: it names why it refused. A turn on a fork runs like any
turn — in process, streamed, recorded and replayed from its recording.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_kit import CALLER, make_pipeline, ok, text
from replay_kit import recording_pipeline

from aptix_pipeline import (
    ErrorCode,
    MemoryStore,
    Pipeline,
    SQLiteStore,
    StreamDelta,
    StreamResult,
    replay,
)
from aptix_pipeline.contracts import Session, SessionTransaction


async def four_turns(pipeline: Pipeline) -> tuple[str, list[str]]:
    """Four turns of one session (questions 1-4); its id and the turns' ids."""
    turns: list[str] = []
    session_id = ""
    for n in range(1, 5):
        request: dict[str, Any] = {"Instruction": f"question {n}"}
        if turns:
            request |= {"SessionId": session_id, "TurnId": turns[-1]}
        answer = ok(await pipeline.execute(request, CALLER))
        session_id = answer.session_id
        turns.append(answer.turn_id)
    return session_id, turns


def replies() -> list[dict[str, Any]]:
    return [text(f"answer {n}") for n in range(1, 8)]


def contents(messages: Any) -> list[str]:
    return [str(message.content) for message in messages if message.role.value != "system"]


@pytest.mark.decision("D609")
async def test_fork_takes_its_id_from_the_id_source_and_its_time_from_the_clock() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), replies())
    session_id, turns = await four_turns(pipeline)
    expected_id = pipeline.ports.ids.new_id("session")  # SequentialIds: the next one is taken
    expected_at = pipeline.ports.clock.now()

    forked = await pipeline.fork(session_id, turns[1], CALLER)

    assert forked.successful, forked.errors
    fork = forked.result
    assert isinstance(fork, Session)
    assert fork.id != expected_id
    assert fork.id.rsplit("-", 1)[0] == expected_id.rsplit("-", 1)[0]  # the session kind's ids
    assert fork.created_at is not None
    assert fork.created_at > expected_at
    assert fork.forked_from is not None
    assert (fork.forked_from.session_id, fork.forked_from.turn_id) == (session_id, turns[1])


@pytest.mark.decision("D609")
async def test_a_refused_fork_is_a_result_naming_the_code_and_field() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), replies())
    session_id, turns = await four_turns(pipeline)

    refusals = {
        "other user": await pipeline.fork(session_id, turns[0], {"org": "acme", "user": "bob"}),
        "no session": await pipeline.fork("nope", turns[0], CALLER),
        "no turn": await pipeline.fork(session_id, "nope", CALLER),
        "empty turn": await pipeline.fork(session_id, " ", CALLER),
        "empty session": await pipeline.fork("", turns[0], CALLER),
        "no caller": await pipeline.fork(session_id, turns[0], {}),
    }

    seen = {
        name: (result.successful, result.errors[0].code, result.errors[0].field)
        for name, result in refusals.items()
    }
    assert seen == {
        "other user": (False, ErrorCode.NOT_FOUND, "SessionId"),
        "no session": (False, ErrorCode.NOT_FOUND, "SessionId"),
        "no turn": (False, ErrorCode.NOT_FOUND, "TurnId"),
        "empty turn": (False, ErrorCode.INVALID_REQUEST, "TurnId"),
        "empty session": (False, ErrorCode.INVALID_REQUEST, "SessionId"),
        "no caller": (False, ErrorCode.INVALID_REQUEST, "Org"),
    }


class _OnlyASessionStore:
    """A host's store of the old protocol: ``SessionStore`` alone."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def begin(self, org: str, user: str) -> SessionTransaction:
        transaction: SessionTransaction = self.inner.begin(org, user)
        return transaction


class _FailingForks(MemoryStore):
    async def fork_session(self, *args: Any) -> Session:
        raise ConnectionError("the database went away")


@pytest.mark.decision("D609")
async def test_a_store_that_cannot_fork_or_fails_is_named_and_nothing_raises() -> None:
    old, _ = make_pipeline(_OnlyASessionStore(), replies())
    failing, _ = make_pipeline(_FailingForks(), replies())
    old_session, old_turns = await four_turns(old)  # turns run on it as ever
    session_id, turns = await four_turns(failing)

    cannot = await old.fork(old_session, old_turns[1], CALLER)
    failed = await failing.fork(session_id, turns[1], CALLER)

    assert (cannot.errors[0].code, cannot.errors[0].field) == (
        ErrorCode.INVALID_REQUEST,
        "SessionStore",
    )
    assert "_OnlyASessionStore" in cannot.errors[0].message
    assert "SessionForks" in cannot.errors[0].message
    assert (failed.errors[0].code, failed.errors[0].field) == (
        ErrorCode.PORT_FAILED,
        "SessionStore",
    )
    assert "the database went away" in failed.errors[0].message


@pytest.mark.decision("D609")
async def test_a_pending_turn_is_refused_as_a_conflict_naming_the_turn() -> None:
    read = {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}]}
    pipeline, _ = make_pipeline(MemoryStore(), [read])
    waiting = ok(await pipeline.execute({"Instruction": "read a.py"}, CALLER))

    refused = await pipeline.fork(waiting.session_id, waiting.turn_id, CALLER)

    error = refused.errors[0]
    assert (error.code, error.field) == (ErrorCode.CONFLICT, "TurnId")
    assert f"turn {waiting.turn_id!r}" in error.message
    assert "awaiting_client_tools" in error.message


@pytest.mark.decision("D609")
async def test_a_turn_on_a_fork_streams_like_any_turn(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "aptix.db")
    try:
        pipeline, llm = make_pipeline(store, replies())
        session_id, turns = await four_turns(pipeline)
        fork = (await pipeline.fork(session_id, turns[1], CALLER)).result
        assert fork is not None
        request = {"SessionId": fork.id, "TurnId": turns[1], "Instruction": "question 2b"}
        async with pipeline.stream(request, CALLER) as stream:
            items = [item async for item in stream]
    finally:
        await store.aclose()

    streamed = "".join(item.text for item in items if isinstance(item, StreamDelta))
    [last] = [item for item in items if isinstance(item, StreamResult)]
    assert streamed == "answer 5"
    assert ok(last.result).session_id == fork.id
    assert llm is not None
    assert contents(llm.requests[-1].messages)[-5:] == [
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
        "question 2b",
    ]


@pytest.mark.decision("D609")
async def test_a_turn_on_a_fork_is_recorded_and_replays_without_divergence() -> None:
    pipeline = recording_pipeline(MemoryStore(), replies())
    session_id, turns = await four_turns(pipeline)
    fork = (await pipeline.fork(session_id, turns[1], CALLER)).result
    assert fork is not None

    report = await pipeline.run(
        {"SessionId": fork.id, "TurnId": turns[1], "Instruction": "question 2b"}, CALLER
    )

    assert ok(report.result).session_id == fork.id
    assert report.recording is not None
    outcome = await replay(report.recording)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    assert ok(outcome.report.result).primary_output_text == "answer 5"
