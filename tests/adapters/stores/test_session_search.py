"""Searching sessions (``search_sessions``, adapters/stores/session_search.py) on every store.

The memory store is searched by ``search_sessions`` reading its ``SessionBrowser``
reads; the SQLite and PostgreSQL stores answer with their own query. Each case runs
on all three (PostgreSQL skipped where the test server cannot run), so they agree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from engine_kit import ALL_STORE_KINDS, open_store_of_kind
from store_kit import postgres_at_version

from aptix_pipeline.adapters.stores.postgres import PostgresStore
from aptix_pipeline.adapters.stores.session_browser import SessionBrowser
from aptix_pipeline.adapters.stores.session_search import (
    PREVIEW_CHARS,
    SessionFilter,
    SessionRow,
    SessionSearch,
    parse_filter,
    search_sessions,
)
from aptix_pipeline.contracts import (
    Charge,
    KeptTrace,
    SessionStore,
    TraceLog,
    Turn,
    TurnStatus,
    Usage,
    UsageCall,
)
from aptix_pipeline.testing.store_contract_cases import assistant_says, sample_session, user_says

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Browsable(SessionStore, SessionBrowser):
    """What these cases need of a store."""


@pytest.fixture(params=ALL_STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Browsable]:
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        assert isinstance(opened, SessionBrowser)
        yield opened  # type: ignore[misc]


def _turn(turn_id: str, session_id: str, minute: int, status: TurnStatus, tokens: int) -> Turn:
    return Turn.model_validate(
        {
            "id": turn_id,
            "session_id": session_id,
            "mode": "general",
            "status": status,
            "created_at": T0 + timedelta(minutes=minute),
            "usage": Usage(input_tokens=tokens, total_tokens=tokens),
        }
    )


async def _add(
    store: SessionStore,
    session_id: str,
    *,
    org: str = "acme",
    user: str = "ana",
    mode: str = "general",
    minute: int = 0,
    turns: tuple[tuple[str, int, TurnStatus], ...] = (),
    first: str = "hello",
) -> None:
    """A session created at ``minute`` with ``turns`` (id, minute, status), 10 tokens each."""
    tx = store.begin(org, user)
    session = sample_session(session_id, org=org, user=user, mode=mode)
    created = T0 + timedelta(minutes=minute)
    await tx.create_session(session.model_copy(update={"created_at": created}))
    for index, (turn_id, at, status) in enumerate(turns):
        await tx.open_turn(_turn(turn_id, session_id, at, status, 10))
        said = first if index == 0 else f"ask {turn_id}"
        await tx.append_transcript(session_id, turn_id, [user_says(said), assistant_says("ok")])
    await tx.commit()


async def _fill(store: Browsable) -> None:
    done, open_ = TurnStatus.COMPLETED, TurnStatus.AWAITING_CLIENT_TOOLS
    await _add(store, "s-old", minute=0, turns=(("t1", 1, done),), first="the oldest one")
    mid = (("t2", 3, done), ("t3", 4, open_))
    await _add(store, "s-mid", user="bob", mode="research", minute=2, turns=mid)
    await _add(store, "s-new", org="globex", minute=5, turns=(("t4", 6, done),))
    await _add(store, "x-empty", minute=7)


def _ids(rows: list[SessionRow]) -> list[str]:
    return [row.summary.id for row in rows]


@pytest.mark.decision("D670")
async def test_a_search_lists_every_session_of_every_owner_newest_first(store: Browsable) -> None:
    await _fill(store)

    rows = await search_sessions(store, SessionFilter())

    assert _ids(rows) == ["x-empty", "s-new", "s-mid", "s-old"]
    by_id = {row.summary.id: row for row in rows}
    assert (by_id["s-mid"].status, by_id["s-mid"].tokens, by_id["s-mid"].summary.turns) == (
        "awaiting_client_tools",
        20,
        2,
    )
    assert by_id["s-mid"].summary.last_activity == T0 + timedelta(minutes=4)
    assert by_id["s-old"].preview == "the oldest one"
    assert (by_id["x-empty"].status, by_id["x-empty"].preview, by_id["x-empty"].tokens) == (
        None,
        None,
        0,
    )


@pytest.mark.decision("D670")
@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (SessionFilter(org="acme"), ["x-empty", "s-mid", "s-old"]),
        (SessionFilter(org="acme", user="bob"), ["s-mid"]),
        (SessionFilter(session="s-"), ["s-new", "s-mid", "s-old"]),
        (SessionFilter(turn="t3"), ["s-mid"]),
        (SessionFilter(mode="research"), ["s-mid"]),
        (SessionFilter(status="completed"), ["s-new", "s-old"]),
        (SessionFilter(status="awaiting_client_tools"), ["s-mid"]),
        (SessionFilter(status="none"), ["x-empty"]),
        (SessionFilter(since=T0 + timedelta(minutes=4)), ["x-empty", "s-new", "s-mid"]),
        (SessionFilter(until=T0 + timedelta(minutes=4)), ["s-old"]),
        (
            SessionFilter(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=7)),
            ["s-new", "s-mid", "s-old"],
        ),
        (SessionFilter(org="acme", status="completed", session="s-o"), ["s-old"]),
        (SessionFilter(turn="no-such-turn"), []),
    ],
)
async def test_each_filter_narrows_the_search(
    store: Browsable, where: SessionFilter, expected: list[str]
) -> None:
    await _fill(store)

    assert _ids(await search_sessions(store, where)) == expected


@pytest.mark.decision("D670")
async def test_a_search_is_read_a_page_at_a_time(store: Browsable) -> None:
    await _fill(store)

    first = await search_sessions(store, SessionFilter(), limit=3)
    second = await search_sessions(store, SessionFilter(), limit=3, offset=3)

    assert _ids(first) + _ids(second) == ["x-empty", "s-new", "s-mid", "s-old"]
    with pytest.raises(ValueError, match="limit must be between"):
        await search_sessions(store, SessionFilter(), limit=0)


@pytest.mark.decision("D670")
async def test_the_preview_is_the_first_message_on_one_line_and_cut(store: Browsable) -> None:
    long = "word\n" * 100
    await _add(store, "s1", turns=(("t1", 1, TurnStatus.COMPLETED),), first=long)

    (row,) = await search_sessions(store, SessionFilter())

    assert row.preview is not None
    assert len(row.preview) == PREVIEW_CHARS
    assert row.preview.startswith("word word")
    assert row.preview.endswith("…")
    assert "\n" not in row.preview


@pytest.mark.decision("D670")
def test_a_filter_refuses_an_unknown_status_and_an_empty_window() -> None:
    with pytest.raises(ValueError, match=r"status must be one of .*completed"):
        SessionFilter(status="failed-ish")
    with pytest.raises(ValueError, match="since must be earlier than until"):
        SessionFilter(since=T0, until=T0)


@pytest.mark.decision("D671")
@pytest.mark.decision("D643")
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_sql_stores_search_with_their_own_query_and_sum_cost(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with open_store_of_kind(kind, request, tmp_path) as store:
        assert isinstance(store, SessionSearch)
        await _add(store, "s1", turns=(("t1", 1, TurnStatus.COMPLETED),))
        await _add(store, "s2", turns=(("t2", 2, TurnStatus.COMPLETED),))
        calls = [
            UsageCall(
                id=f"c{n}",
                org="acme",
                user="ana",
                session_id="s1",
                turn_id="t1",
                mode="general",
                at=T0,
                settled=True,
                charge=Charge(tokens=10, model_calls=1),
                priced=True,
                cost=Decimal(cost),
                currency=currency,
            )
            for n, (cost, currency) in enumerate([("0.10", "USD"), ("0.25", "USD"), ("1.5", "EUR")])
        ]
        await store.settle_usage(calls)

        rows = {row.summary.id: row for row in await store.search_sessions(SessionFilter())}

        assert rows["s1"].cost == (("EUR", Decimal("1.5")), ("USD", Decimal("0.35")))
        assert rows["s2"].cost == ()


async def _keep(store: object, session_id: str, n: int, error: str | None = None) -> None:
    """Keep the ``n``th trace of ``session_id`` (acme/ana): faulted with ``error``, else done."""
    assert isinstance(store, TraceLog)
    await store.keep_trace(
        KeptTrace(
            id=f"{session_id}-k{n}",
            org="acme",
            user="ana",
            session_id=session_id,
            turn_id=None,
            at=T0 + timedelta(minutes=10 + n),
            outcome="done" if error is None else "faulted",
            trace="{}",
            error_code=None if error is None else "port_failed",
            error_message=error,
        )
    )


@pytest.mark.decision("D644")
async def test_a_row_shows_its_last_kept_traces_outcome_and_error(store: Browsable) -> None:
    await _fill(store)
    await _keep(store, "s-old", 1, "the model is gone")  # then a turn that did well
    await _keep(store, "s-old", 2)
    await _keep(store, "x-empty", 3, "the model is gone")  # its last turn failed

    rows = {row.summary.id: row for row in await search_sessions(store, SessionFilter())}

    failed = rows["x-empty"]
    assert (failed.outcome, failed.error_code, failed.error_message) == (
        "faulted",
        "port_failed",
        "the model is gone",
    )
    assert failed.shown_status == "faulted"
    assert (rows["s-old"].outcome, rows["s-old"].error_code) == ("done", None)
    assert rows["s-old"].shown_status == "completed"
    assert (rows["s-new"].outcome, rows["s-new"].shown_status) == (None, "completed")
    assert _ids(await search_sessions(store, SessionFilter(status="faulted"))) == ["x-empty"]
    assert _ids(await search_sessions(store, SessionFilter(status="none"))) == []
    assert _ids(await search_sessions(store, SessionFilter(status="completed"))) == [
        "s-new",
        "s-old",
    ]


@pytest.mark.decision("D644")
def test_parse_filter_reads_text_fields_and_names_the_one_that_is_wrong() -> None:
    where = parse_filter({"org": " acme ", "user": "", "status": "faulted", "since": "2026-01-02"})

    assert where == SessionFilter(
        org="acme", status="faulted", since=datetime(2026, 1, 2, tzinfo=UTC)
    )
    with pytest.raises(ValueError, match=r"^until: not a date and time"):
        parse_filter({"until": "yesterday"})
    with pytest.raises(ValueError, match=r"^status must be one of .*faulted"):
        parse_filter({"status": "broken"})
    with pytest.raises(ValueError, match=r"^since must be earlier than until"):
        parse_filter({"since": "2026-02-01", "until": "2026-01-01T00:00+00:00"})


@pytest.mark.decision("D643")
async def test_postgres_migration_8_fills_the_turn_columns_the_search_reads(
    postgres_db_url: str,
) -> None:
    naive = (T0 + timedelta(minutes=9)).replace(tzinfo=None)  # a time without a zone is UTC
    turns = [
        _turn("t1", "s1", 1, TurnStatus.COMPLETED, 7),
        _turn("t2", "s1", 3, TurnStatus.AWAITING_CLIENT_TOOLS, 5),
        _turn("t3", "s2", 2, TurnStatus.COMPLETED, 4).model_copy(update={"created_at": naive}),
    ]
    with psycopg.connect(postgres_db_url, autocommit=True) as raw:  # a database at version 7
        postgres_at_version(raw, 7)
        for session_id in ("s1", "s2"):
            raw.execute(
                "INSERT INTO aptix_sessions (id, org, user_name, mode, created_at, version) "
                "VALUES (%s, 'acme', 'ana', 'general', %s, 1)",
                (session_id, T0),
            )
        for turn in turns:
            raw.execute(
                "INSERT INTO aptix_turns (session_id, id, status, data) VALUES (%s, %s, %s, %s)",
                (turn.session_id, turn.id, turn.status.value, turn.model_dump_json()),
            )

    async with PostgresStore(postgres_db_url) as store:
        assert await store.schema_version() == 8
        rows = await store.search_sessions(SessionFilter())

    assert [row.summary.id for row in rows] == ["s2", "s1"]
    s2, s1 = rows
    assert s2.summary.last_activity == T0 + timedelta(minutes=9)
    assert (s2.tokens, s2.status) == (4, "completed")
    assert (s1.tokens, s1.status, s1.summary.turns) == (12, "awaiting_client_tools", 2)
    assert s1.summary.last_activity == T0 + timedelta(minutes=3)
