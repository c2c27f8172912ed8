"""Events name the caller: one listener counts turns per tenant (docs/EVENTS.md).

``TurnStarted`` carries the caller's org and user; ``TurnIdentified`` the session
and turn ids once a step made or found them, with the caller; ``TurnFinished``
the caller too. A turn refused before its ids are known has no ``TurnIdentified``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from aptix_pipeline import (
    Caller,
    ScriptedLLM,
    TurnEvent,
    TurnFinished,
    TurnIdentified,
    TurnStarted,
    embedded_pipeline,
)

ANA = Caller(org="acme", user="ana")
BOB = Caller(org="globex", user="bob")


@pytest.mark.decision("D425")
async def test_one_listener_counts_turns_and_sessions_per_tenant() -> None:
    events: list[TurnEvent] = []
    pipeline = embedded_pipeline(llm=ScriptedLLM([{"text": "Hi."}] * 3), listeners=[events.append])

    first = await pipeline.execute({"Instruction": "Hello"}, ANA)
    await pipeline.execute({"Instruction": "Hello"}, BOB)
    assert first.result is not None
    follow = {"Instruction": "More", "SessionId": first.result.session_id}
    follow["TurnId"] = first.result.turn_id
    await pipeline.execute(follow, ANA)

    started = Counter((e.org, e.user) for e in events if isinstance(e, TurnStarted))
    assert started == {("acme", "ana"): 2, ("globex", "bob"): 1}
    identified = [e for e in events if isinstance(e, TurnIdentified)]
    assert (identified[0].org, identified[0].session_id) == ("acme", first.result.session_id)
    assert identified[0].turn_id == first.result.turn_id
    assert identified[2].session_id == first.result.session_id  # the follow-on's session
    assert identified[2].turn_id != first.result.turn_id  # its own turn
    finished = [(e.org, e.user) for e in events if isinstance(e, TurnFinished)]
    assert finished == [("acme", "ana"), ("globex", "bob"), ("acme", "ana")]
    runs = {e.run_id for e in identified}
    assert len(runs) == 3  # one per turn, each with its turn's run id


@pytest.mark.decision("D425")
async def test_a_turn_refused_before_its_ids_are_known_is_not_identified() -> None:
    events: list[TurnEvent] = []
    pipeline = embedded_pipeline(llm=ScriptedLLM([]), listeners=[events.append])

    result = await pipeline.execute({"Instruction": "Hi", "SessionId": "only-one-id"}, ANA)

    assert not result.successful
    assert [type(e) for e in events if isinstance(e, TurnStarted | TurnIdentified)] == [TurnStarted]
