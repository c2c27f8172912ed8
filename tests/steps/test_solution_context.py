"""The session-latched ``SolutionContextText`` (AGN-034 §4.5, D38).

A FollowOn's ``SolutionContextText`` replaces the one the session stored, and the
model's system message shows it from then on, on that turn's continuations too;
a FollowOn without one keeps the stored text, and a failed FollowOn changes
nothing. Every scenario runs on the memory store and on a SQLite file.
"""

from __future__ import annotations

import pytest
from engine_kit import (
    CALLER,
    READ_A,
    calls,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    scripted,
    session_of,
    start,
    stored,
    system_text,
    text,
)

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore

Store = MemoryStore | SQLiteStore


@pytest.mark.decision("D38")
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


@pytest.mark.decision("D38")
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


@pytest.mark.decision("D38")
async def test_a_failed_follow_on_leaves_the_solution_context_as_it_was(store: Store) -> None:
    pipeline, _ = make_pipeline(store, [text("a")])  # the FollowOn finds the script empty
    _, first = await start(pipeline, {"Instruction": "hi", "SolutionContextText": "CTX-A"})
    before = await stored(store)

    report = await pipeline.run({**follow_on(first), "SolutionContextText": "CTX-B"}, CALLER)

    assert not report.successful
    assert await stored(store) == before
    assert (await session_of(store)).solution_context_text == "CTX-A"
