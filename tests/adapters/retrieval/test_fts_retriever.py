"""The SQLite FTS5 retriever: documents and their metadata read from a real folder,
an incremental index in a real SQLite file, and queries that user text cannot break."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from knowledge_kit import CORPUS_IDS, indexed_corpus, write_corpus

from aptix_pipeline.adapters.retrieval.documents import read_document
from aptix_pipeline.adapters.retrieval.fts import (
    FtsRetriever,
    IndexStats,
    RetrievalIndexError,
    build_index,
    match_expression,
)
from aptix_pipeline.contracts import RagOperator, RagScopeCondition, RetrievalQuery


@pytest.fixture
def retriever(tmp_path: Path) -> Iterator[FtsRetriever]:
    found = indexed_corpus(tmp_path)
    yield found
    found.close()


async def _ids(
    retriever: FtsRetriever, instruction: str, *conditions: RagScopeCondition
) -> set[str]:
    query = RetrievalQuery(instruction=instruction, limit=10, conditions=list(conditions))
    return {passage.source.document_id for passage in await retriever.retrieve(query)}


@pytest.mark.decision("D336")
def test_front_matter_gives_metadata_and_title_and_the_text_after_it_is_the_passages(
    tmp_path: Path,
) -> None:
    folder = write_corpus(tmp_path / "docs")

    web = read_document(folder, folder / "web.md")
    docker = read_document(folder, folder / "docker.md")

    assert web.metadata == {"title": "Web service", "team": "platform", "tags": ["python", "web"]}
    assert web.title == "Web service"
    assert web.passages == (
        "# Deploying the web service\n\nDeploy the web service with make deploy.",
    )
    assert docker.metadata == {"team": "ops", "tags": ["docker"]}
    assert docker.title == "Docker images"  # the first heading, without a title key


@pytest.mark.decision("D336")
def test_a_sidecar_file_gives_metadata_and_its_keys_replace_the_front_matters(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("---\nteam: web\nlevel: 1\n---\nText.\n", encoding="utf-8")
    (folder / "a.md.meta.json").write_text(
        json.dumps({"team": "ops", "draft": True, "version": [1, "beta"]}), encoding="utf-8"
    )

    document = read_document(folder, folder / "a.md")

    assert document.metadata == {
        "team": "ops",
        "level": "1",
        "draft": "true",
        "version": ["1", "beta"],
    }
    assert document.title == "a"  # no title key and no heading: the file name


@pytest.mark.decision("D336")
@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("---\nteam: ops\n  nested: value\n---\nText.\n", "line 3"),
        ("---\njust words\n---\nText.\n", "line 2"),
        ("---\nteam: ops\nText without an end.\n", "line 3"),
        ("---\nteam: ops\n", "not closed"),
    ],
)
def test_front_matter_outside_the_subset_is_an_error_naming_the_file_and_line(
    tmp_path: Path, text: str, where: str
) -> None:
    (tmp_path / "bad.md").write_text(text, encoding="utf-8")

    with pytest.raises(ValueError, match=where) as raised:
        read_document(tmp_path, tmp_path / "bad.md")

    assert str(tmp_path / "bad.md") in str(raised.value)


@pytest.mark.decision("D337")
def test_reindexing_reads_only_what_changed(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path / "docs")
    index = tmp_path / "index.db"
    first = build_index(folder, index)

    again = build_index(folder, index)
    os.utime(folder / "notes.txt", ns=(1, 1))  # touched, same bytes
    touched = build_index(folder, index)
    (folder / "web.md").write_text("# Web\n\nRewritten: deploy with care.\n", encoding="utf-8")
    (folder / "cli.md.meta.json").write_text(json.dumps({"team": "cli"}), encoding="utf-8")
    (folder / "docker.md").unlink()
    (folder / "new.md").write_text("Brand new deploy guide.\n", encoding="utf-8")
    changed = build_index(folder, index)

    assert first == IndexStats(added=4)
    assert again == IndexStats(unchanged=4)
    assert touched == IndexStats(unchanged=4)
    assert changed == IndexStats(added=1, updated=2, removed=1, unchanged=1)


@pytest.mark.decision("D337")
async def test_a_reindexed_document_is_found_by_its_new_text_and_metadata(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path / "docs")
    index = tmp_path / "index.db"
    build_index(folder, index)
    (folder / "cli.md.meta.json").write_text(json.dumps({"team": "ops"}), encoding="utf-8")
    (folder / "notes.txt").write_text("Nothing about shipping here.\n", encoding="utf-8")

    build_index(folder, index)
    retriever = FtsRetriever(index)
    try:
        ops = RagScopeCondition(key="team", operator=RagOperator.EQUALS, values=["ops"])
        found = await _ids(retriever, "deploy", ops)
        shipping = await _ids(retriever, "shipping")
    finally:
        retriever.close()

    assert found == {"docker.md", "cli.md"}
    assert shipping == {"notes.txt"}


@pytest.mark.decision("D337")
async def test_a_broken_document_fails_the_run_and_leaves_the_index_as_it_was(
    tmp_path: Path,
) -> None:
    folder = write_corpus(tmp_path / "docs")
    index = tmp_path / "index.db"
    build_index(folder, index)
    (folder / "web.md").write_text("Only the web text changed: deploy.\n", encoding="utf-8")
    (folder / "zz-broken.md").write_bytes(b"\xff\xfe not UTF-8")

    with pytest.raises(RetrievalIndexError, match=r"zz-broken\.md: not UTF-8"):
        build_index(folder, index)
    retriever = FtsRetriever(index)
    try:
        found = await _ids(retriever, "make")  # the web page's old text
    finally:
        retriever.close()

    assert found == {"web.md"}


@pytest.mark.decision("D343")
def test_hidden_files_and_other_suffixes_are_not_documents(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path / "docs")
    (folder / ".hidden.md").write_text("deploy\n", encoding="utf-8")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD.md").write_text("deploy\n", encoding="utf-8")
    (folder / "image.png").write_bytes(b"\x89PNG")

    stats = build_index(folder, tmp_path / "index.db")

    assert stats.documents == len(CORPUS_IDS)


@pytest.mark.decision("D337")
@pytest.mark.parametrize(
    ("folder", "index", "message"),
    [
        ("missing", "index.db", "not a folder of documents"),
        ("docs", "nowhere/index.db", "does not exist"),
        ("docs", "docs/web.md", "DatabaseError"),
    ],
)
def test_bad_paths_are_one_line_errors_naming_the_path(
    tmp_path: Path, folder: str, index: str, message: str
) -> None:
    write_corpus(tmp_path / "docs")

    with pytest.raises(RetrievalIndexError, match=message) as raised:
        build_index(tmp_path / folder, tmp_path / index)

    assert "\n" not in str(raised.value)


def test_a_retriever_needs_a_built_index(tmp_path: Path) -> None:
    (tmp_path / "plain.db").write_bytes(b"")
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()

    with pytest.raises(RetrievalIndexError, match="no index here"):
        FtsRetriever(tmp_path / "missing.db")
    with pytest.raises(RetrievalIndexError, match="not a retrieval index"):
        FtsRetriever(tmp_path / "other.db")


HOSTILE = [
    '"',
    '" OR "',
    '"deploy',
    'deploy"; DROP TABLE documents; --',
    "NEAR(deploy docker, 2)",
    "deploy AND NOT docker",
    "deploy OR",
    "* deploy*",
    "-deploy",
    "^deploy",
    "title:deploy",
    "{text title}: deploy",
    "(((deploy",
    "deploy\x00docker",
    "\x00",
    "",
    "   ",
    "🚀 \uff24\uff25\uff30\uff2c\uff2f\uff39",  # DEPLOY in full-width letters
    "deploy " * 500,
]


@pytest.mark.decision("D335")
@pytest.mark.parametrize("instruction", HOSTILE, ids=range(len(HOSTILE)))
async def test_hostile_instruction_text_never_breaks_the_query(
    retriever: FtsRetriever, instruction: str
) -> None:
    found = await _ids(retriever, instruction)

    assert found <= CORPUS_IDS
    assert bool(found) == ("deploy" in instruction.casefold())


@pytest.mark.decision("D335")
def test_every_word_is_quoted_so_fts_keywords_are_plain_words() -> None:
    assert match_expression('NEAR(a "b") OR c*') == '"near" OR "a" OR "b" OR "or" OR "c"'
    assert match_expression(" \x00 ;:- ") is None


async def test_accents_are_ignored_both_ways(retriever: FtsRetriever) -> None:
    assert await _ids(retriever, "déploy") == CORPUS_IDS


async def test_the_documents_still_match_after_the_retriever_reopens(tmp_path: Path) -> None:
    first = indexed_corpus(tmp_path)
    first.close()
    second = FtsRetriever(tmp_path / "index.db", collection="again")
    try:
        found = await _ids(second, "deploy")
    finally:
        second.close()

    assert found == CORPUS_IDS
    assert second.collection == "again"
