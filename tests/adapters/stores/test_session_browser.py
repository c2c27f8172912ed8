"""The browsing reads (``SessionBrowser``, adapters/stores/session_browser.py) on every store.

Each case runs on the memory store, a SQLite file and a PostgreSQL database of the
test server (tests/kits/pg_server.py; skipped where it cannot run, failed under CI), so
the three answer alike: owners by org then user, sessions by last activity, turns
in creation order, transcript pages with the turn of each message, every read
scoped to its org and user, and pages bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from engine_kit import ALL_STORE_KINDS, open_store_of_kind

from aptix_pipeline.adapters.stores.session_browser import MAX_PAGE, SessionBrowser
from aptix_pipeline.contracts import SessionStore, Turn, TurnStatus, Usage
from aptix_pipeline.testing.store_contract_cases import (
    assistant_says,
    sample_session,
    user_says,
)

ORG, USER = "acme", "ana"
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Browsable(SessionStore, SessionBrowser):
    """What these cases need of a store: the turn's port and the browsing reads."""


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Browsable]:
    """Each case on the memory store, a SQLite file and a PostgreSQL database."""
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        assert isinstance(opened, SessionBrowser)
        yield opened  # type: ignore[misc]


def turn(turn_id: str, session_id: str, minute: int, **fields: object) -> Turn:
    return Turn.model_validate(
        {
            "id": turn_id,
            "session_id": session_id,
            "mode": "general",
            "status": TurnStatus.COMPLETED,
            "created_at": T0 + timedelta(minutes=minute),
            **fields,
        }
    )


async def add_session(
    store: SessionStore,
    session_id: str,
    *,
    org: str = ORG,
    user: str = USER,
    minute: int = 0,
    turns: tuple[Turn, ...] = (),
) -> None:
    """Commit a session created at ``minute`` with ``turns``, each appending two messages."""
    tx = store.begin(org, user)
    session = sample_session(session_id, org=org, user=user)
    await tx.create_session(
        session.model_copy(update={"created_at": T0 + timedelta(minutes=minute)})
    )
    for each in turns:
        await tx.open_turn(each)
        await tx.append_transcript(
            session_id, each.id, [user_says(f"ask {each.id}"), assistant_says(f"answer {each.id}")]
        )
    await tx.commit()


async def test_every_store_is_a_session_browser(store: Browsable) -> None:
    assert isinstance(store, SessionBrowser)


@pytest.mark.decision("D349")
async def test_owners_are_listed_by_org_then_user_with_their_session_counts(
    store: Browsable,
) -> None:
    await add_session(store, "s1", org="globex", user="zed")
    await add_session(store, "s2")
    await add_session(store, "s3")
    await add_session(store, "s4", user="bob")

    owners = await store.list_owners()

    assert [(o.org, o.user, o.sessions) for o in owners] == [
        ("acme", "ana", 2),
        ("acme", "bob", 1),
        ("globex", "zed", 1),
    ]


@pytest.mark.decision("D349")
async def test_sessions_are_listed_by_last_activity_with_turn_counts(store: Browsable) -> None:
    await add_session(store, "quiet", minute=30)
    await add_session(
        store, "busy", minute=0, turns=(turn("t1", "busy", 5), turn("t2", "busy", 40))
    )
    await add_session(store, "early", minute=1, turns=(turn("t3", "early", 2),))

    sessions = await store.list_sessions(ORG, USER)

    assert [(s.id, s.turns) for s in sessions] == [("busy", 2), ("quiet", 0), ("early", 1)]
    busy = sessions[0]
    assert busy.last_activity == T0 + timedelta(minutes=40)
    assert busy.created_at == T0
    assert (busy.org, busy.user, busy.mode) == (ORG, USER, "general")
    assert sessions[1].last_activity == T0 + timedelta(minutes=30)


async def test_another_callers_sessions_are_neither_listed_nor_readable(store: Browsable) -> None:
    await add_session(store, "mine", turns=(turn("t1", "mine", 1),))
    await add_session(store, "theirs", org="globex", turns=(turn("t2", "theirs", 1),))

    listed = await store.list_sessions(ORG, USER)
    turns = await store.list_turns(ORG, USER, "theirs")
    transcript = await store.read_transcript_page(ORG, USER, "theirs")
    as_bob = await store.list_turns(ORG, "bob", "mine")

    assert [s.id for s in listed] == ["mine"]
    assert turns is None
    assert transcript is None
    assert as_bob is None


@pytest.mark.decision("D349")
async def test_turns_come_in_creation_order_with_what_the_store_holds(store: Browsable) -> None:
    usage = Usage(input_tokens=12, output_tokens=5, total_tokens=17)
    later = turn("t-b", "s1", 9, usage=usage)
    first = turn("t-z", "s1", 1, status=TurnStatus.AWAITING_CLIENT_TOOLS)
    await add_session(store, "s1", turns=(later, first))

    turns = await store.list_turns(ORG, USER, "s1")

    assert turns == [first, later]


async def test_a_session_without_turns_lists_none(store: Browsable) -> None:
    await add_session(store, "s1")

    assert await store.list_turns(ORG, USER, "s1") == []
    assert await store.read_transcript_page(ORG, USER, "s1") == []


@pytest.mark.decision("D349")
async def test_transcript_pages_number_messages_and_name_their_turn(store: Browsable) -> None:
    await add_session(store, "s1", turns=(turn("t1", "s1", 1), turn("t2", "s1", 2)))

    whole = await store.read_transcript_page(ORG, USER, "s1")
    page = await store.read_transcript_page(ORG, USER, "s1", limit=2, offset=1)

    assert whole is not None
    assert [(e.seq, e.turn_id, e.message.content) for e in whole] == [
        (1, "t1", "ask t1"),
        (2, "t1", "answer t1"),
        (3, "t2", "ask t2"),
        (4, "t2", "answer t2"),
    ]
    assert page == whole[1:3]


@pytest.mark.decision("D349")
async def test_pages_of_sessions_and_turns_follow_the_same_order(store: Browsable) -> None:
    turns = tuple(turn(f"t{n}", "s0", n) for n in range(5))
    await add_session(store, "s0", turns=turns)
    for n in range(1, 5):
        await add_session(store, f"s{n}", minute=10 + n)

    sessions = await store.list_sessions(ORG, USER, limit=2, offset=1)
    turn_page = await store.list_turns(ORG, USER, "s0", limit=2, offset=3)

    assert [s.id for s in sessions] == ["s3", "s2"]
    assert turn_page is not None
    assert [t.id for t in turn_page] == ["t3", "t4"]


@pytest.mark.decision("D349")
@pytest.mark.parametrize(
    ("limit", "offset", "named"), [(0, 0, "limit"), (MAX_PAGE + 1, 0, "limit"), (10, -1, "offset")]
)
async def test_a_page_out_of_bounds_is_refused_naming_the_argument(
    store: Browsable, limit: int, offset: int, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        await store.list_sessions(ORG, USER, limit=limit, offset=offset)
    with pytest.raises(ValueError, match=named):
        await store.list_owners(limit=limit, offset=offset)
