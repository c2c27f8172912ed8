"""Every store keeps every string exactly (decision D221).

NUL, astral characters, combining marks, noncharacters, line and paragraph
separators, bidi marks, long strings, backslashes, quotes and a literal ``\\u0000``
round-trip through direct store calls and through a full turn, on the memory store,
a SQLite file and a PostgreSQL database alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engine_kit import ALL_STORE_KINDS, CALLER, make_pipeline, open_store_of_kind
from test_stores import ORG, USER, entry, make_session, make_turn, snapshot

from aptix_pipeline.contracts import ChatMessage, ChatRole, SessionStore, ToolCall

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
async def test_every_stored_text_field_round_trips_exactly(store: SessionStore, text: str) -> None:
    session = make_session().model_copy(
        update={
            "solution_context_text": text,
            "mode_history": [entry("general", "review").model_copy(update={"reason": text})],
        }
    )
    call = ToolCall(tool_call_id="call_1", name="read_file", arguments_json=text)
    turn = make_turn(pending=[call])
    messages = [
        ChatMessage(role=ChatRole.USER, content=text),
        ChatMessage(role=ChatRole.ASSISTANT, content=text, tool_calls=[call]),
        ChatMessage(role=ChatRole.TOOL, content=text, tool_call_id="call_1"),
    ]
    tx = store.begin(ORG, USER)
    await tx.create_session(session)
    await tx.open_turn(turn)
    await tx.append_transcript(session.id, turn.id, messages)
    await tx.commit()

    loaded, [loaded_turn, _], transcript = await snapshot(store)
    assert loaded is not None
    assert loaded.solution_context_text == text
    assert loaded.mode_history[0].reason == text
    assert loaded_turn is not None
    assert loaded_turn.pending_tool_calls == [call]
    assert transcript == messages

    # an update (not only a creation) keeps it too, and takes it away again
    tx = store.begin(ORG, USER)
    await tx.set_solution_context("s1", text + "!")
    await tx.set_session_mode(
        "s1", entry("general", "review", minute=1).model_copy(update={"reason": text})
    )
    await tx.commit()
    again, _, _ = await snapshot(store)
    assert again is not None
    assert again.solution_context_text == text + "!"
    assert [e.reason for e in again.mode_history] == [text, text]


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
