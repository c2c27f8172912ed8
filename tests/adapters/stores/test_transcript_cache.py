"""The decoded transcripts a SQL store keeps (``adapters/stores/transcript_cache.py``).

First the cache alone: rows after the held ones, copies handed out, two reads of one
session at once, the budget (least recently read dropped first, a session larger than
the whole budget not kept, 0 keeps nothing) and where the newest image is. Then the
SQLite and PostgreSQL stores with it: a read sees what another store (another process)
appended since, a row already decoded is not read again (unless the cache is off), and
another caller reads nothing of a session that is held.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from aptix_pipeline.adapters.stores.postgres import PostgresStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.stores.transcript_cache import MESSAGE_OVERHEAD, TranscriptCache
from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ImagePart,
    SessionStore,
    Transcript,
)
from aptix_pipeline.testing.store_contract_cases import (
    assistant_says,
    sample_session,
    sample_turn,
    seed_store,
    user_says,
)

KEY = ("acme", "ana", "s1")
ORG, USER = "acme", "ana"


def rows(*texts: str, first: int = 1) -> list[tuple[int, str]]:
    """Transcript rows (seq, message JSON) of user messages, numbered from ``first``."""
    return [(first + n, user_says(text).model_dump_json()) for n, text in enumerate(texts)]


def read(
    cache: TranscriptCache, key: tuple[str, str, str], stored: list[tuple[int, str]]
) -> list[ChatMessage]:
    """One whole read against a table holding ``stored``: the rows after those held."""
    held, last_seq = cache.start(key)
    return cache.finish(key, held, last_seq, [row for row in stored if row[0] > last_seq])


def weight_of(texts: list[str]) -> int:
    return sum(len(user_says(text).model_dump_json()) + MESSAGE_OVERHEAD for text in texts)


# --- the cache alone -------------------------------------------------------------------------


@pytest.mark.decision("D466")
def test_a_second_read_asks_only_for_the_rows_after_those_held() -> None:
    cache = TranscriptCache()
    assert cache.start(KEY) == ([], 0)

    first = cache.finish(KEY, *cache.start(KEY), rows("a", "b"))
    held, last_seq = cache.start(KEY)
    assert (held, last_seq) == ([user_says("a"), user_says("b")], 2)
    second = cache.finish(KEY, held, last_seq, rows("c", first=3))

    assert first == [user_says("a"), user_says("b")]
    assert second == [user_says("a"), user_says("b"), user_says("c")]
    assert cache.start(KEY)[1] == 3


@pytest.mark.decision("D466")
def test_each_read_gets_its_own_list_of_the_same_messages() -> None:
    cache = TranscriptCache()
    first = read(cache, KEY, rows("a"))
    first.append(user_says("changed by the caller"))

    second = read(cache, KEY, rows("a"))

    assert second == [user_says("a")]
    assert second[0] is first[0]


@pytest.mark.decision("D466")
def test_of_two_reads_of_one_session_at_once_the_later_one_stores_nothing_twice() -> None:
    cache = TranscriptCache()
    read(cache, KEY, rows("a"))
    one, two = cache.start(KEY), cache.start(KEY)

    first = cache.finish(KEY, *one, rows("b", first=2))
    second = cache.finish(KEY, *two, rows("b", first=2))

    assert first == second == [user_says("a"), user_says("b")]
    assert read(cache, KEY, rows("a", "b", "c")) == [user_says(t) for t in "abc"]
    assert cache.weight == weight_of(["a", "b", "c"])


@pytest.mark.decision("D466")
def test_the_least_recently_read_session_is_dropped_first_when_over_budget() -> None:
    cache = TranscriptCache(budget=weight_of(["a", "b"]))
    one, two, three = KEY, ("acme", "ana", "s2"), ("acme", "ana", "s3")
    read(cache, one, rows("a"))
    read(cache, two, rows("b"))
    read(cache, one, rows("a"))  # read again: now the most recent

    read(cache, three, rows("c"))

    assert cache.start(one)[1] == 1
    assert cache.start(two) == ([], 0)
    assert cache.start(three)[1] == 1
    assert len(cache) == 2
    assert cache.weight == weight_of(["a", "c"])


@pytest.mark.decision("D466")
def test_a_session_larger_than_the_budget_is_not_kept_and_drops_no_other() -> None:
    cache = TranscriptCache(budget=weight_of(["a", "b"]))
    read(cache, KEY, rows("a"))
    big = ("acme", "ana", "big")

    whole = read(cache, big, rows("b", "c", "d"))

    assert whole == [user_says(t) for t in "bcd"]
    assert cache.start(big) == ([], 0)
    assert cache.start(KEY)[1] == 1
    assert cache.weight == weight_of(["a"])


@pytest.mark.decision("D466")
def test_a_budget_of_nothing_keeps_nothing() -> None:
    cache = TranscriptCache(budget=0)

    assert read(cache, KEY, rows("a", "b")) == [user_says("a"), user_says("b")]
    assert cache.start(KEY) == ([], 0)
    assert len(cache) == 0


@pytest.mark.decision("D466")
def test_a_negative_budget_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="transcript_cache_bytes must be 0 or more, not -1"):
        TranscriptCache(budget=-1)


@pytest.mark.decision("D467")
def test_the_cache_knows_where_the_newest_image_is_as_rows_arrive() -> None:
    image = ChatMessage.of_parts(ChatRole.USER, [ImagePart(mime_type="image/png", data=b"png")])
    cache = TranscriptCache()
    stored = [*rows("a"), (2, image.model_dump_json()), *rows("b", "c", first=3)]

    reads = [read(cache, KEY, stored[:end]) for end in (1, 2, 4)]

    assert all(isinstance(transcript, Transcript) for transcript in reads)
    assert [t.last_image for t in reads if isinstance(t, Transcript)] == [-1, 1, 1]
    assert reads[1][1] == image


# --- the SQL stores with it ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
async def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[SessionStore, SessionStore, Callable[[str], None]]]:
    """Two stores on one database (two processes, as far as each knows), and a way to
    overwrite the first message's JSON behind their backs."""
    if request.param == "sqlite":
        path = tmp_path / "aptix.db"
        first, second = SQLiteStore(path), SQLiteStore(path)

        def overwrite(text: str) -> None:
            with closing(sqlite3.connect(path)) as db:
                db.execute("UPDATE transcript SET message = ? WHERE seq = 1", (text,))
                db.commit()

        yield first, second, overwrite
        first.close()
        second.close()
        return
    url = request.getfixturevalue("postgres_db_url")

    def overwrite_pg(text: str) -> None:
        with psycopg.connect(url) as db:
            db.execute("UPDATE aptix_transcript SET message = %s WHERE seq = 1", (text,))

    async with PostgresStore(url, max_size=2) as one, PostgresStore(url, max_size=2) as other:
        yield one, other, overwrite_pg


async def transcript_of(store: SessionStore, org: str = ORG, user: str = USER) -> list[ChatMessage]:
    tx = store.begin(org, user)
    try:
        return await tx.load_transcript("s1")
    finally:
        await tx.rollback()


async def append(store: SessionStore, turn_id: str, *messages: ChatMessage) -> None:
    tx = store.begin(ORG, USER)
    await tx.open_turn(sample_turn(turn_id))
    await tx.append_transcript("s1", turn_id, messages)
    await tx.commit()


@pytest.mark.decision("D466")
async def test_a_read_sees_what_another_store_appended_after_it_kept_the_transcript(
    two_stores: tuple[SessionStore, SessionStore, Callable[[str], None]],
) -> None:
    one, other, _ = two_stores
    await seed_store(one, turns=[sample_turn("t1")], messages=[user_says("hi")])
    assert await transcript_of(one) == [user_says("hi")]

    await append(other, "t2", assistant_says("hello"), user_says("more"))
    await append(one, "t3", assistant_says("sure"))

    expected = [user_says("hi"), assistant_says("hello"), user_says("more"), assistant_says("sure")]
    assert await transcript_of(one) == expected
    assert await transcript_of(other) == expected


@pytest.mark.decision("D466")
async def test_a_row_already_decoded_is_not_read_again(
    two_stores: tuple[SessionStore, SessionStore, Callable[[str], None]],
) -> None:
    one, other, overwrite = two_stores
    await seed_store(one, turns=[sample_turn("t1")], messages=[user_says("hi")])
    assert await transcript_of(one) == [user_says("hi")]

    overwrite(user_says("rewritten").model_dump_json())
    await append(other, "t2", assistant_says("hello"))

    assert await transcript_of(one) == [user_says("hi"), assistant_says("hello")]
    assert await transcript_of(other) == [user_says("rewritten"), assistant_says("hello")]


@pytest.mark.decision("D466")
async def test_without_a_cache_every_read_decodes_every_row(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "aptix.db", transcript_cache_bytes=0) as store:
        await seed_store(store, turns=[sample_turn("t1")], messages=[user_says("hi")])
        assert await transcript_of(store) == [user_says("hi")]
        with closing(sqlite3.connect(store.path)) as db:
            db.execute(
                "UPDATE transcript SET message = ?", (user_says("rewritten").model_dump_json(),)
            )
            db.commit()

        assert await transcript_of(store) == [user_says("rewritten")]


@pytest.mark.decision("D466")
def test_a_negative_cache_budget_is_refused_by_the_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="transcript_cache_bytes"):
        SQLiteStore(tmp_path / "aptix.db", transcript_cache_bytes=-1)


@pytest.mark.decision("D466")
@pytest.mark.parametrize(("org", "user"), [("globex", USER), (ORG, "bob")])
async def test_another_caller_reads_nothing_of_a_kept_transcript(
    two_stores: tuple[SessionStore, SessionStore, Callable[[str], None]], org: str, user: str
) -> None:
    one, _, _ = two_stores
    await seed_store(one, sample_session(), turns=[sample_turn("t1")], messages=[user_says("hi")])
    assert await transcript_of(one) == [user_says("hi")]

    assert await transcript_of(one, org, user) == []
