"""Every store keeps every string exactly through whole turns (decision D221).

The contract kit (tests/adapters/stores/test_stores.py) round-trips NUL, astral characters,
combining marks, noncharacters, line and paragraph separators, bidi marks, long
strings, backslashes, quotes and a literal ``\\u0000`` through direct store calls.
Here the same strings go through a full turn, on the memory store, a SQLite file
and a PostgreSQL database alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engine_kit import ALL_STORE_KINDS, CALLER, make_pipeline, open_store_of_kind

from aptix_pipeline.contracts import SessionStore

pytestmark = pytest.mark.decision("D221")

EDGES = {
    "nul": "a\x00b\x00",
    "only-nul": "\x00",
    "emoji": "hi 👋🏽 𝄞",
    "combining": "e\u0301 n\u0303 \u0308",
    "noncharacters": "\uffff\ufffe\U0010ffff",
    "separators": "a\u2028b\u2029c",
    "bidi": "\u200f\u202eRTL\u202c\u200e",
    "long": "x" * 200_000 + "\x00" + "é" * 1000,
    "backslashes-quotes": '\\ \\\\ " \' \\n \\"',
    "literal-escape": "\\u0000 and \\x00",
    "control": "\x01\x1f\x7f\t\r\n",
}


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("text", EDGES.values(), ids=EDGES.keys())
async def test_a_full_turn_keeps_the_solution_context_and_the_reply_exactly(
    store: SessionStore, text: str
) -> None:
    pipeline, llm = make_pipeline(store, [{"text": text}, {"text": "ok"}])
    first = await pipeline.execute({"Instruction": text, "SolutionContextText": text}, CALLER)
    assert first.successful, first.errors
    assert first.result is not None
    session_id = first.result.session_id
    tx = store.begin(CALLER.org, CALLER.user)
    session = await tx.load_session(session_id)
    transcript = await tx.load_transcript(session_id)
    await tx.rollback()
    assert session is not None
    assert session.solution_context_text == text
    assert [m.content for m in transcript] == [text, text]
    follow = await pipeline.execute(
        {"Instruction": "more", "SessionId": session_id, "TurnId": first.result.turn_id}, CALLER
    )
    assert follow.successful, follow.errors
    assert llm is not None
    assert [m.content for m in llm.requests[-1].messages[1:3]] == [text, text]


@pytest.mark.decision("D47")
async def test_a_model_reply_holding_a_lone_surrogate_is_escaped_alike_on_every_store(
    store: SessionStore,
) -> None:
    # A lone surrogate is not UTF-8 and no store can keep it: the engine escapes it
    # (utf8_text) before the response and the store see it, the same on every store.
    pipeline, _ = make_pipeline(store, [{"text": "a\ud800b"}])
    result = await pipeline.execute({"Instruction": "hi"}, CALLER)
    assert result.successful, result.errors
    assert result.result is not None
    assert result.result.primary_output_text == "a\\ud800b"
    tx = store.begin(CALLER.org, CALLER.user)
    transcript = await tx.load_transcript(result.result.session_id)
    await tx.rollback()
    assert [m.content for m in transcript] == ["hi", "a\\ud800b"]
