"""The commit runs to its end however the turn's task is stopped (D201), without a task of
its own unless it waits (D442): ``engine/machine.py`` ``uninterrupted``."""

from __future__ import annotations

import asyncio
import logging

import pytest
from engine_kit import CALLER, make_pipeline, ok, stored, text

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.unit_of_work import TurnWrites
from aptix_pipeline.engine.machine import uninterrupted


class TaskNotingStore(MemoryStore):
    """A memory store that notes the task its commit runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.commit_tasks: list[asyncio.Task[object] | None] = []

    async def apply(self, writes: TurnWrites) -> None:
        self.commit_tasks.append(asyncio.current_task())
        await super().apply(writes)


@pytest.mark.decision("D442")
async def test_a_commit_that_never_waits_runs_in_the_turns_own_task() -> None:
    store = TaskNotingStore()
    pipeline, _ = make_pipeline(store, [text("kept")])

    turn = asyncio.ensure_future(pipeline.execute({"Instruction": "hi"}, CALLER))
    ok(await turn)

    assert store.commit_tasks == [turn]
    session, turns, _ = await stored(store)
    assert session is not None
    assert turns[0] is not None


@pytest.mark.decision("D442")
async def test_work_that_fails_before_it_waits_fails_its_caller_and_is_closed() -> None:
    finished: list[str] = []

    async def work() -> None:
        try:
            raise OSError("disk full")
        finally:
            finished.append("closed")

    with pytest.raises(OSError, match="disk full"):
        await uninterrupted(work())
    assert finished == ["closed"]


@pytest.mark.decision("D442")
async def test_waiting_work_gets_what_it_waited_for_and_its_failure_reaches_the_caller() -> None:
    got: list[int] = []

    async def work() -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.set_result, 7)
        got.append(await future)
        await asyncio.sleep(0)  # a bare yield to the loop, too
        got.append(8)
        raise OSError("lost the lock")

    with pytest.raises(OSError, match="lost the lock"):
        await uninterrupted(work())
    assert got == [7, 8]


@pytest.mark.decision("D442")
async def test_a_cancelled_caller_leaves_waiting_work_to_finish_and_its_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()
    steps: list[str] = []

    async def work() -> None:
        steps.append("began")
        await release.wait()
        steps.append("resumed")
        raise OSError("commit failed late")

    caller = asyncio.ensure_future(uninterrupted(work()))
    await asyncio.sleep(0)
    assert steps == ["began"]
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    with caplog.at_level(logging.ERROR):
        release.set()
        for _ in range(5):
            await asyncio.sleep(0)

    assert steps == ["began", "resumed"]
    assert "a cancelled turn's commit failed" in caplog.text


@pytest.mark.decision("D442")
async def test_waiting_work_whose_own_task_is_cancelled_sees_the_cancellation() -> None:
    """The loop's shutdown cancels every task left, the commit's own too: the work hears it
    where it waits, as a coroutine run as a task does."""
    heard: list[str] = []
    waiting = asyncio.Event()

    async def work() -> None:
        try:
            waiting.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            heard.append("cancelled")
            raise

    caller = asyncio.ensure_future(uninterrupted(work()))
    await waiting.wait()
    (own,) = [
        task
        for task in asyncio.all_tasks()
        if task is not caller and task is not asyncio.current_task()
    ]
    own.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller

    assert heard == ["cancelled"]
