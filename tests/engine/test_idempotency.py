"""Retries answered once: single-flight, stored answers, idempotency keys (D180-D185)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from engine_kit import (
    CALLER,
    NOTHING_STORED,
    OTHER_ORG,
    OTHER_USER,
    continuation,
    make_pipeline,
    ok,
    scripted,
    stored,
)

from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import ErrorCode, LLMReply, LLMRequest
from aptix_pipeline.engine.idempotency import continuation_key
from aptix_pipeline.steps import PipelineOptions
from aptix_pipeline.validators import validate_idempotency_key

READ = {"tool_calls": [{"id": "call-1", "name": "read_file", "arguments": {"path": "a.py"}}]}


class GateLLM:
    """A scripted model that, once armed, holds every call until released; counts calls."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.inner = ScriptedLLM(replies)
        self.armed = False
        self.calls = 0
        self.gate = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        if self.armed:
            await self.gate.wait()
        return await self.inner.complete(request)


@pytest.mark.decision("D180")
async def test_25_identical_concurrent_continuations_cost_one_model_round() -> None:
    from aptix_pipeline.adapters.stores.memory import MemoryStore

    llm = GateLLM([READ] + [{"text": "done"}] * 30)
    pipeline, _ = make_pipeline(MemoryStore(), llm)
    pending = ok(await pipeline.execute({"Instruction": "Explain a.py."}, CALLER))
    assert llm.calls == 1
    llm.armed = True
    body = continuation(pending)
    # The same continuation, as dict and as JSON text with other key order and spacing.
    copies: list[Any] = [
        body if i % 2 else json.dumps(dict(reversed(body.items())), indent=i % 3) for i in range(25)
    ]
    tasks = [asyncio.ensure_future(pipeline.execute(c, CALLER)) for c in copies]
    for _ in range(5):
        await asyncio.sleep(0)
    llm.gate.set()
    results = await asyncio.gather(*tasks)

    assert llm.calls == 2  # the initial turn's round and one continuation round, not 25
    assert all(r.successful for r in results)
    assert len({r.to_json() for r in results}) == 1  # every copy got the same answer


@pytest.mark.decision("D181")
def test_continuation_key_is_canonical_and_scoped() -> None:
    body = {
        "SessionId": "s",
        "TurnId": "t",
        "ToolResults": [{"ToolCallId": "c", "ResultJson": "1"}],
    }
    text = '{ "ToolResults":[{"ResultJson":"1","ToolCallId":"c"}], "TurnId":"t","SessionId":"s"}'
    assert continuation_key(body, "acme", "ana") == continuation_key(text, "acme", "ana")
    assert continuation_key(body, "acme", "ana") != continuation_key(body, *OTHER_USER_KEY)
    other = {**body, "ToolResults": [{"ToolCallId": "c", "ResultJson": "2"}]}
    assert continuation_key(other, "acme", "ana") != continuation_key(body, "acme", "ana")
    assert continuation_key({"Instruction": "hi"}, "acme", "ana") is None
    assert continuation_key("[" * 5000, "acme", "ana") is None


OTHER_USER_KEY = (OTHER_USER.org, OTHER_USER.user)


def test_continuation_key_parses_no_user_turn_text_and_nothing_past_the_wire_depth(
    monkeypatch: Any,
) -> None:
    """The key is computed before the turn's own checks: it must not parse a body the
    turn would refuse first (DESIGN/limits/json-depth), nor every user turn's body."""

    def no_parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the request text was parsed")

    monkeypatch.setattr("aptix_pipeline.engine.idempotency.json.loads", no_parse)
    assert continuation_key(b'{"Instruction": "hi"}', "acme", "ana") is None
    assert continuation_key('{"Instruction": "hi"}', "acme", "ana") is None
    nested = "[" * 100 + "]" * 100
    deep = f'{{"SessionId":"s","TurnId":"t","ToolResults":[{{"ResultJson":"1","X":{nested}}}]}}'
    assert continuation_key(deep, "acme", "ana", max_depth=64) is None
    deep_body = {
        "SessionId": "s",
        "TurnId": "t",
        "ToolResults": [{"ResultJson": "1", "X": _nested_list(100)}],
    }
    assert continuation_key(deep_body, "acme", "ana", max_depth=64) is None


def _nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# --- stored answers: a retry after the first copy committed (D181-D185) ----------------------

FINAL = {"text": "a.py is fine."}
INITIAL = {"Instruction": "Explain a.py."}


def _other_results(response: Any) -> dict[str, Any]:
    """A continuation answering the same calls as ``continuation(response)``, other results."""
    results = [
        {"ToolCallId": c.tool_call_id, "ExecutionMs": 7, "ResultJson": '{"ok": false}'}
        for c in response.tool_calls or []
    ]
    return continuation(response, *results)


@pytest.mark.decision("D181")
async def test_a_continuation_resubmitted_after_success_gets_the_stored_answer(
    store: Any,
) -> None:
    pipeline, llm = make_pipeline(store, [READ, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL, CALLER))
    first = await pipeline.run(continuation(pending), CALLER)
    before = await stored(store)

    again = await pipeline.run(json.dumps(continuation(pending), indent=2), CALLER)

    assert first.successful
    assert not first.replayed
    assert again.replayed
    assert again.result == first.result
    assert again.to_dict()["replayed"] is True
    assert again.trace is not None
    assert again.trace.outcome == "replayed"
    assert (again.session_id, again.turn_id) == (pending.session_id, pending.turn_id)
    assert len(scripted(llm).requests) == 2  # the copy called no model
    assert await stored(store) == before


@pytest.mark.decision("D181")
@pytest.mark.rule("DESIGN/idempotency/continuation-conflict", "broken")
async def test_other_results_for_answered_calls_get_a_conflict_naming_the_turn(
    store: Any,
) -> None:
    pipeline, llm = make_pipeline(store, [READ, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL, CALLER))
    ok(await pipeline.execute(continuation(pending), CALLER))
    before = await stored(store)

    report = await pipeline.run(_other_results(pending), CALLER)

    assert not report.successful
    assert not report.replayed
    (error,) = report.result.errors
    assert error.code is ErrorCode.CONFLICT
    assert error.rule_id == "DESIGN/idempotency/continuation-conflict"
    assert error.field == "ToolResults"
    assert repr(pending.turn_id) in error.message
    assert repr(pending.session_id) in error.message
    assert report.trace is not None
    assert report.trace.outcome == "refused"
    assert len(scripted(llm).requests) == 2
    assert await stored(store) == before
    assert report.result.to_json()  # serializes


@pytest.mark.decision("D181")
@pytest.mark.rule("DESIGN/idempotency/continuation-conflict", "holds")
async def test_the_same_results_are_no_conflict_and_another_caller_gets_no_answer(
    store: Any,
) -> None:
    pipeline, _ = make_pipeline(store, [READ, FINAL, FINAL])
    pending = ok(await pipeline.execute(INITIAL, CALLER))
    first = await pipeline.execute(continuation(pending), CALLER)

    same = await pipeline.run(continuation(pending), CALLER)
    other = await pipeline.run(continuation(pending), OTHER_USER)

    assert same.replayed
    assert same.result == first
    assert not other.replayed  # answers are scoped to org and user: the session is not found
    assert other.result.rule_ids == ("AGN-033/3.1/session-found",)


@pytest.mark.decision("D182")
@pytest.mark.rule("DESIGN/idempotency/key-reused", "holds")
async def test_an_initial_turn_retried_with_its_key_returns_the_first_outcome(
    store: Any,
) -> None:
    pipeline, llm = make_pipeline(store, [FINAL, FINAL])
    first = await pipeline.run(INITIAL, CALLER, idempotency_key="req-1")
    before = await stored(store)

    again = await pipeline.run(json.dumps(INITIAL), CALLER, idempotency_key="req-1")

    assert again.replayed
    assert again.result == first.result
    assert len(scripted(llm).requests) == 1
    assert await stored(store) == before
    assert await store.read_session(CALLER.org, CALLER.user, "session-2") is None


@pytest.mark.decision("D182")
async def test_a_follow_on_retried_with_its_key_opens_no_second_turn(store: Any) -> None:
    pipeline, llm = make_pipeline(store, [FINAL, FINAL, FINAL])
    done = ok(await pipeline.execute(INITIAL, CALLER))
    request = {"SessionId": done.session_id, "TurnId": done.turn_id, "Instruction": "more"}
    first = ok(await pipeline.execute(request, CALLER, idempotency_key="f-1"))

    again = await pipeline.run(request, CALLER, idempotency_key="f-1")
    fresh = ok(await pipeline.execute(request, CALLER, idempotency_key="f-2"))

    assert again.replayed
    assert ok(again.result) == first
    assert first.turn_id == "turn-2"
    assert fresh.turn_id == "turn-3"
    assert len(scripted(llm).requests) == 3


@pytest.mark.decision("D182")
@pytest.mark.rule("DESIGN/idempotency/key-reused", "broken")
async def test_a_key_reused_for_another_request_is_refused_and_changes_nothing(
    store: Any,
) -> None:
    pipeline, llm = make_pipeline(store, [FINAL, FINAL])
    first = ok(await pipeline.execute(INITIAL, CALLER, idempotency_key="req-1"))
    before = await stored(store)

    report = await pipeline.run({"Instruction": "Something else"}, CALLER, idempotency_key="req-1")

    (error,) = report.result.errors
    assert error.code is ErrorCode.CONFLICT
    assert error.rule_id == "DESIGN/idempotency/key-reused"
    assert error.field == "Idempotency-Key"
    assert "'req-1'" in error.message
    assert repr(first.session_id) in error.message
    assert len(scripted(llm).requests) == 1
    assert await stored(store) == before


@pytest.mark.decision("D182")
async def test_keys_are_scoped_to_org_and_user(store: Any) -> None:
    pipeline, llm = make_pipeline(store, [FINAL, FINAL, FINAL])
    mine = ok(await pipeline.execute(INITIAL, CALLER, idempotency_key="k"))

    other_user = ok(await pipeline.execute(INITIAL, OTHER_USER, idempotency_key="k"))
    other_org = ok(await pipeline.execute(INITIAL, OTHER_ORG, idempotency_key="k"))

    assert len({mine.session_id, other_user.session_id, other_org.session_id}) == 3
    assert len(scripted(llm).requests) == 3


@pytest.mark.decision("D182")
async def test_the_key_covers_the_initial_mode_the_host_gave(store: Any) -> None:
    pipeline, _ = make_pipeline(store, [FINAL, FINAL])
    ok(await pipeline.execute(INITIAL, CALLER, idempotency_key="k", initial_mode="general"))

    report = await pipeline.run(INITIAL, CALLER, idempotency_key="k", initial_mode="plan")

    assert report.result.rule_ids == ("DESIGN/idempotency/key-reused",)


BAD_KEYS = ["", " ", "a b", "tab\tkey", "line\n", "é", "\ud800", "x" * 256]


@pytest.mark.decision("D182")
@pytest.mark.rule("DESIGN/idempotency/key-format", "broken")
@pytest.mark.parametrize("key", BAD_KEYS, ids=lambda k: ascii(k)[:20])
async def test_a_malformed_key_is_refused_before_anything_runs(store: Any, key: str) -> None:
    pipeline, llm = make_pipeline(store, [FINAL])

    report = await pipeline.run(INITIAL, CALLER, idempotency_key=key)

    (error,) = report.result.errors
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.rule_id == "DESIGN/idempotency/key-format"
    assert error.field == "Idempotency-Key"
    assert len(error.message) < 300
    assert report.result.to_json().encode("utf-8")
    assert scripted(llm).requests == []
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D182")
@pytest.mark.rule("DESIGN/idempotency/key-format", "holds")
@pytest.mark.parametrize("key", ["!", "~" * 255, "0b6f9a2e-5c1d-4e8f-9a7b-3c2d1e0f9a8b"])
def test_keys_of_visible_ascii_up_to_255_characters_are_accepted(key: str) -> None:
    assert validate_idempotency_key(key).successful


@pytest.mark.decision("D182")
def test_validate_idempotency_key_refuses_what_is_not_text() -> None:
    assert validate_idempotency_key(12).rule_ids == ("DESIGN/idempotency/key-format",)
    assert validate_idempotency_key(None).rule_ids == ("DESIGN/idempotency/key-format",)


@pytest.mark.decision("D181")
async def test_a_failed_turn_keeps_no_answer_so_its_retry_runs_again(store: Any) -> None:
    pipeline, _ = make_pipeline(store, [FINAL])

    request = {"Instruction": "Explain a.py.", "AgentContextId": "no-such-agent"}
    failed = await pipeline.run(request, CALLER, idempotency_key="k")
    retried = await pipeline.run(INITIAL, CALLER, idempotency_key="k")

    assert not failed.successful
    assert not failed.replayed
    assert retried.successful
    assert not retried.replayed


@pytest.mark.decision("D183")
async def test_an_answer_past_its_time_is_forgotten_and_the_key_runs_afresh(
    store: Any,
) -> None:
    # The stepping clock moves 1 ms a reading: an answer kept 0.5 ms has expired by the retry.
    options = PipelineOptions(
        retry_wait_seconds=0, retry_max_wait_seconds=0, idempotency_ttl_seconds=0.0005
    )
    pipeline, llm = make_pipeline(store, [FINAL, FINAL, FINAL], options=options)
    first = ok(await pipeline.execute(INITIAL, CALLER, idempotency_key="k"))

    second = await pipeline.run(INITIAL, CALLER, idempotency_key="k")
    other = await pipeline.run({"Instruction": "another"}, CALLER, idempotency_key="k")

    assert not second.replayed
    assert ok(second.result).session_id != first.session_id
    assert other.successful  # the key's second answer has expired too: any request may use it
    assert not other.replayed
    assert len(scripted(llm).requests) == 3
    kept = await store.read_outcome(CALLER.org, CALLER.user, "key:k")
    assert kept is not None
    assert kept.session_id == ok(other.result).session_id  # the newest answer replaced it


@pytest.mark.decision("D183")
async def test_without_a_time_limit_answers_are_kept_for_good(store: Any) -> None:
    options = PipelineOptions(
        retry_wait_seconds=0, retry_max_wait_seconds=0, idempotency_ttl_seconds=None
    )
    pipeline, _ = make_pipeline(store, [FINAL, FINAL], options=options)
    first = await pipeline.run(INITIAL, CALLER, idempotency_key="k")
    outcome = await store.read_outcome(CALLER.org, CALLER.user, "key:k")

    again = await pipeline.run(INITIAL, CALLER, idempotency_key="k")

    assert outcome is not None
    assert outcome.expires_at is None
    assert again.replayed
    assert again.result == first.result


@pytest.mark.decision("D183")
def test_the_time_limit_must_be_positive_or_none() -> None:
    for bad in (0, -1, float("nan"), 1e12, float("inf")):
        with pytest.raises(ValueError, match="idempotency_ttl_seconds"):
            PipelineOptions(idempotency_ttl_seconds=bad)


@pytest.mark.decision("D180")
async def test_identical_keyed_requests_in_flight_share_one_run() -> None:
    from aptix_pipeline.adapters.stores.memory import MemoryStore

    llm = GateLLM([FINAL] * 10)
    llm.armed = True
    pipeline, _ = make_pipeline(MemoryStore(), llm)
    tasks = [
        asyncio.ensure_future(pipeline.execute(INITIAL, CALLER, idempotency_key="k"))
        for _ in range(10)
    ]
    for _ in range(5):
        await asyncio.sleep(0)
    llm.gate.set()
    results = await asyncio.gather(*tasks)

    assert llm.calls == 1
    assert len({r.to_json() for r in results}) == 1


@pytest.mark.decision("D184")
async def test_two_requests_racing_on_one_key_keep_one_answer_and_nothing_of_the_other(
    store: Any,
) -> None:
    llm = GateLLM([FINAL] * 4)
    llm.armed = True
    pipeline, _ = make_pipeline(store, llm)
    tasks = [
        asyncio.ensure_future(pipeline.run({"Instruction": text}, CALLER, idempotency_key="k"))
        for text in ("one", "two")
    ]
    while llm.calls < 2:
        await asyncio.sleep(0.001)
    llm.gate.set()
    reports = await asyncio.gather(*tasks)

    winners = [r for r in reports if r.successful]
    (loser,) = [r for r in reports if not r.successful]
    assert len(winners) == 1
    assert [e.code for e in loser.result.errors] == [ErrorCode.CONFLICT]
    kept = [await store.read_session(CALLER.org, CALLER.user, f"session-{n}") for n in (1, 2)]
    assert [s is not None for s in kept].count(True) == 1  # the loser's session was not kept
    won, lost = ("one", "two") if reports[0].successful else ("two", "one")
    again = await pipeline.run({"Instruction": won}, CALLER, idempotency_key="k")
    refused = await pipeline.run({"Instruction": lost}, CALLER, idempotency_key="k")
    assert again.replayed
    assert again.result == winners[0].result
    assert refused.result.rule_ids == ("DESIGN/idempotency/key-reused",)


@pytest.mark.decision("D184")
async def test_the_loser_of_a_race_between_processes_answers_with_the_winners_answer(
    tmp_path: Path,
) -> None:
    """Two pipelines (two processes' worth: each its own SQLite store on one file) run the
    same continuation at once; both call the model, one commits, and the other's commit
    conflicts: it answers with the stored answer of the winner."""
    from aptix_pipeline.adapters.stores.sqlite import SQLiteStore

    path = tmp_path / "shared.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        first = GateLLM([READ, {"text": "from one"}])
        pipeline_one, _ = make_pipeline(one, first)
        pending = ok(await pipeline_one.execute(INITIAL, CALLER))
        second = GateLLM([{"text": "from two"}])
        pipeline_two, _ = make_pipeline(two, second)
        first.armed = second.armed = True
        body = continuation(pending)
        tasks = [
            asyncio.ensure_future(pipeline_one.run(body, CALLER)),
            asyncio.ensure_future(pipeline_two.run(body, CALLER)),
        ]
        while first.calls < 2 or second.calls < 1:  # both turns are at the model
            await asyncio.sleep(0.001)
        first.gate.set()
        winner = await tasks[0]
        second.gate.set()
        loser = await tasks[1]

    assert winner.successful
    assert not winner.replayed
    assert loser.replayed
    assert loser.result == winner.result
    assert ok(loser.result).primary_output_text == "from one"


class _FailingOutcomeReads(MemoryStore):
    async def read_outcome(self, org: str, user: str, key: str) -> Any:
        raise OSError("disk gone")


@pytest.mark.decision("D181")
async def test_a_store_that_cannot_be_read_for_answers_fails_the_call_without_raising() -> None:
    store = _FailingOutcomeReads()
    pipeline, llm = make_pipeline(store, [READ, FINAL])
    pending = ok(await pipeline.execute(INITIAL, CALLER))

    result = await pipeline.execute(continuation(pending), CALLER)

    (error,) = result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert "load_outcome" in error.message
    assert "disk gone" in error.message
    assert len(scripted(llm).requests) == 1


class _CorruptAnswers(MemoryStore):
    async def read_outcome(self, org: str, user: str, key: str) -> Any:
        stored = await super().read_outcome(org, user, key)
        return None if stored is None else stored.model_copy(update={"result_json": "{not"})


@pytest.mark.decision("D181")
async def test_a_stored_answer_that_does_not_parse_fails_the_call_without_raising() -> None:
    store = _CorruptAnswers()
    pipeline, llm = make_pipeline(store, [FINAL, FINAL])
    ok(await pipeline.execute(INITIAL, CALLER, idempotency_key="k"))

    result = await pipeline.execute(INITIAL, CALLER, idempotency_key="k")

    (error,) = result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert "SessionStore.load_outcome" in error.message
    assert "ValidationError" in error.message
    assert len(scripted(llm).requests) == 1


@pytest.mark.decision("D185", "D401")
async def test_a_keyed_turn_records_its_key_and_replays(tmp_path: Path) -> None:
    from replay_kit import recording_pipeline

    from aptix_pipeline import RecordingOptions, replay
    from aptix_pipeline.adapters.stores.memory import MemoryStore

    for redact in (False, True):
        pipeline = recording_pipeline(
            MemoryStore(), [READ, FINAL], recording=RecordingOptions(redact=redact)
        )
        first = await pipeline.run(INITIAL, CALLER, idempotency_key="rec-1")
        second = await pipeline.run(continuation(ok(first.result)), CALLER, idempotency_key="rec-2")
        for report, key, answers in ((first, "rec-1", 1), (second, "rec-2", 2)):
            assert report.recording is not None
            assert report.recording.idempotency_key == ("redacted" if redact else key)
            saved = [c for c in report.recording.calls if c.call == "save_outcome"]
            assert len(saved) == answers  # the key's, and a continuation's own
            outcome = await replay(report.recording)
            assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


@pytest.mark.decision("D181")
async def test_a_call_answered_without_a_turn_leaves_one_span_saying_so() -> None:
    from span_kit import Recorded

    recorded = Recorded()
    pipeline, _ = make_pipeline(MemoryStore(), [READ, FINAL], telemetry=recorded.telemetry())
    pending = ok(await pipeline.execute(INITIAL, CALLER))
    ok(await pipeline.execute(continuation(pending), CALLER))
    recorded.clear()

    await pipeline.execute(continuation(pending), CALLER)
    await pipeline.execute(_other_results(pending), CALLER)
    await pipeline.execute(INITIAL, CALLER, idempotency_key="no spaces please")

    replayed, refused, bad_key = recorded.spans
    assert [span.name for span in recorded.spans] == ["aptix.stored_answer"] * 3
    assert bad_key.attributes is not None
    assert bad_key.attributes["error.type"] == "invalid_request"
    assert replayed.attributes is not None
    assert refused.attributes is not None
    assert replayed.attributes["aptix.replayed"] is True
    assert replayed.attributes["aptix.turn.id"] == pending.turn_id
    assert refused.attributes["aptix.replayed"] is False
    assert refused.attributes["error.type"] == "conflict"
    assert not any("ok" in str(value) for value in refused.attributes.values())
    recorded.shutdown()
