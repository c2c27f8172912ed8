"""Every turn leaves its trace in the store, failed turns included (issue 33 part 2).

On the memory store, a SQLite file and a PostgreSQL database: a turn that ends
and one that faults each keep their state trace (``TraceLog``), newest first, the
failed one with its error and faulted step; a failed first turn, which leaves no
session, is kept under its owner. The trace holds no user content unless content
is captured; it is off with ``keep_traces=False``; expired traces are swept as
new ones are kept and purged by ``Pipeline.purge_traces``; a store that cannot keep
a trace does not change the turn's answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from engine_kit import (
    ALL_STORE_KINDS,
    CALLER,
    OTHER_USER,
    FailingLLM,
    follow_on,
    make_pipeline,
    ok,
    open_store_of_kind,
    text,
)
from replay_kit import recording_pipeline

from aptix_pipeline import PipelineOptions, StateTrace, Telemetry, replay
from aptix_pipeline.adapters import MemoryStore
from aptix_pipeline.contracts import KeptTrace, SessionStore, TraceLog

NO_WAIT = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)
SECRET = "the launch code is 0451"


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        yield opened


def _log(store: SessionStore) -> TraceLog:
    assert isinstance(store, TraceLog)
    return store


@pytest.mark.decision("D655")
async def test_a_done_turn_and_a_failed_one_each_keep_their_trace_newest_first(
    store: SessionStore,
) -> None:
    pipeline, _ = make_pipeline(store, FailingLLM([text("hi"), text("unused")], fail_on=2))
    first = ok(await pipeline.execute({"Instruction": "hello"}, CALLER))
    failed = await pipeline.run(follow_on(first), CALLER)
    assert not failed.result.successful

    kept = await _log(store).list_traces(CALLER.org, CALLER.user, first.session_id)

    assert [t.outcome for t in kept] == ["faulted", "done"]
    fault, done = kept
    assert (fault.session_id, fault.turn_id) == (first.session_id, None)  # no turn was stored
    assert (fault.error_code, fault.faulted_step) == ("port_failed", "llm_client")
    assert fault.error_message is not None
    assert "the model is gone" in fault.error_message
    assert fault.failed
    assert not done.failed
    assert (done.turn_id, done.error_code) == (first.turn_id, None)
    assert StateTrace.from_dict(_json(fault.trace)) == failed.trace
    assert StateTrace.from_dict(_json(done.trace)).states[-1] == "done"
    assert fault.at > done.at  # each turn's own time stamp
    assert done.expires_at == done.at + timedelta(days=30)


@pytest.mark.decision("D655")
async def test_a_failed_first_turn_is_kept_under_its_owner_without_a_session(
    store: SessionStore,
) -> None:
    pipeline, _ = make_pipeline(store, FailingLLM([], fail_on=1))
    report = await pipeline.run({"Instruction": "hello"}, CALLER)
    assert not report.result.successful

    kept = await _log(store).list_traces(CALLER.org, CALLER.user)

    assert [(t.session_id, t.turn_id, t.outcome) for t in kept] == [(None, None, "faulted")]
    assert kept[0].faulted_step == "llm_client"
    assert await _log(store).list_traces(OTHER_USER.org, OTHER_USER.user) == []


@pytest.mark.decision("D655")
async def test_list_traces_pages_and_filters_by_session(store: SessionStore) -> None:
    pipeline, _ = make_pipeline(store, [text("a"), text("b"), text("c")])
    one = ok(await pipeline.execute({"Instruction": "one"}, CALLER))
    ok(await pipeline.execute(follow_on(one), CALLER))
    other = ok(await pipeline.execute({"Instruction": "other"}, CALLER))
    log = _log(store)

    everything = await log.list_traces(CALLER.org, CALLER.user)
    page = await log.list_traces(CALLER.org, CALLER.user, limit=1, offset=1)
    of_one = await log.list_traces(CALLER.org, CALLER.user, one.session_id)

    assert [t.session_id for t in everything] == [other.session_id, *[one.session_id] * 2]
    assert page == [everything[1]]
    assert [t.id for t in of_one] == [t.id for t in everything[1:]]
    with pytest.raises(ValueError, match="limit"):
        await log.list_traces(CALLER.org, CALLER.user, limit=0)


@pytest.mark.decision("D656")
async def test_a_kept_trace_holds_no_user_content_unless_content_is_captured() -> None:
    plain, captured = MemoryStore(), MemoryStore()
    for store, telemetry in ((plain, Telemetry()), (captured, Telemetry(capture_content=True))):
        pipeline, _ = make_pipeline(store, [text(SECRET)], telemetry=telemetry)
        ok(await pipeline.execute({"Instruction": SECRET}, CALLER))

    (without,) = await plain.list_traces(CALLER.org, CALLER.user)
    (with_content,) = await captured.list_traces(CALLER.org, CALLER.user)
    assert SECRET not in without.trace
    assert SECRET in with_content.trace


@pytest.mark.decision("D656")
async def test_keep_traces_off_keeps_none() -> None:
    store = MemoryStore()
    options = PipelineOptions(keep_traces=False, retry_wait_seconds=0)
    pipeline, _ = make_pipeline(store, FailingLLM([], fail_on=1), options=options)

    await pipeline.run({"Instruction": "hello"}, CALLER)

    assert await store.list_traces(CALLER.org, CALLER.user) == []


@pytest.mark.decision("D657")
async def test_expired_traces_are_swept_as_traces_are_kept_and_purged_by_the_pipeline(
    store: SessionStore,
) -> None:
    # The stepping clock moves 1 ms a reading: a turn takes a few, so a 1 ms life
    # has ended by the next turn's time stamp.
    options = PipelineOptions(trace_ttl_seconds=0.001, retry_wait_seconds=0)
    pipeline, _ = make_pipeline(store, [text("a"), text("b")], options=options)
    first = ok(await pipeline.execute({"Instruction": "one"}, CALLER))
    ok(await pipeline.execute(follow_on(first), CALLER))
    log = _log(store)

    (left,) = await log.list_traces(CALLER.org, CALLER.user)  # the first was swept
    assert left.turn_id != first.turn_id
    assert await pipeline.purge_traces() == 1  # the clock has passed the second's end too
    assert await log.list_traces(CALLER.org, CALLER.user) == []


@pytest.mark.decision("D657")
async def test_purge_traces_keeps_those_without_an_end_and_those_not_yet_ended(
    store: SessionStore,
) -> None:
    log = _log(store)
    now = datetime(2026, 3, 1, tzinfo=UTC)
    for name, expires in (("forever", None), ("later", now + timedelta(1)), ("old", now)):
        await log.keep_trace(
            KeptTrace(
                name,
                "acme",
                "ana",
                None,
                None,
                now - timedelta(1),
                "done",
                "{}",
                None,
                expires_at=expires,
            )
        )

    assert await log.purge_traces(now) == 1
    assert [t.id for t in await log.list_traces("acme", "ana")] == ["later", "forever"]


@pytest.mark.decision("D657")
def test_trace_ttl_seconds_must_be_positive_or_none() -> None:
    with pytest.raises(ValueError, match="trace_ttl_seconds must be more than 0"):
        PipelineOptions(trace_ttl_seconds=0)
    assert PipelineOptions(trace_ttl_seconds=None).trace_ttl_seconds is None


class _RefusingTraceStore(MemoryStore):
    async def keep_trace(self, trace: KeptTrace) -> None:
        raise OSError("disk full")


@pytest.mark.decision("D655")
async def test_a_trace_that_cannot_be_kept_is_logged_and_the_answer_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline, _ = make_pipeline(_RefusingTraceStore(), [text("hi")])

    with caplog.at_level(logging.ERROR):
        result = await pipeline.execute({"Instruction": "hello"}, CALLER)

    assert ok(result).primary_output_text == "hi"
    assert "the turn's trace could not be kept" in caplog.text


def _json(text: str) -> dict[str, object]:
    data = json.loads(text)
    assert isinstance(data, dict)
    return data


@pytest.mark.decision("D655")
async def test_a_recorded_turn_keeps_its_trace_and_its_replay_still_agrees() -> None:
    store = MemoryStore()
    pipeline = recording_pipeline(store, [text("hi")])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    (kept,) = await store.list_traces(CALLER.org, CALLER.user)
    assert kept.turn_id == report.turn_id
    assert report.recording is not None
    assert (await replay(report.recording)).ok
    assert len(await store.list_traces(CALLER.org, CALLER.user)) == 1


@pytest.mark.decision("D647")
async def test_a_kept_trace_is_the_json_of_its_state_trace_turn_after_turn() -> None:
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, FailingLLM([text("hi"), text("yo"), text("x")], fail_on=3))
    first = ok(await pipeline.execute({"Instruction": "hello"}, CALLER))
    second = await pipeline.run(follow_on(first), CALLER)  # its checks' text is remembered
    failed = await pipeline.run(follow_on(first), CALLER)
    assert not failed.result.successful

    kept = await store.list_traces(CALLER.org, CALLER.user)

    assert len(kept) == 3
    for trace, report in zip(kept[:2], (failed, second), strict=True):
        assert report.trace is not None
        assert trace.trace == json.dumps(report.trace.to_dict(), ensure_ascii=False)
        assert json.loads(trace.steps)[0] == {"step": "request_handler", "to": "validated"}
