"""The embedded ``Retriever``: SQLite FTS5 over a folder of documents (AGN-034 §4.4).

``build_index(folder, index)`` reads the folder (``adapters/retrieval/documents.py``)
into an SQLite file: one row per document (its id, title, metadata and what it
was read from) and one FTS5 row per passage. Indexing is explicit (``aptix index``,
``adapters/cli/index.py``) and incremental: a document whose file and sidecar
have the size and modification time the index holds is not read again; one that
changed is read, and its passages are replaced only when its SHA-256 differs; a
document gone from the folder leaves the index. One transaction: a run that fails
leaves the index as it was.

``FtsRetriever(index)`` answers a ``RetrievalQuery``
(docs/CONFORMANCE.md D335): the instruction's words (Unicode letters and digits;
everything else, FTS5's operators and quotes and NUL among them, only separates
words) each quoted as an FTS5 string and joined with ``OR``, so no user text is
read as query syntax; candidates in bm25 order (best first; ``Passage.score`` is
bm25 negated, so higher is better); those whose document meets the scope
conditions (``RetrievalQuery.admits``) kept until ``limit``. An instruction
without a word finds nothing. The query runs in a worker thread, off the event
loop.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aptix_pipeline.contracts import (
    AptixPipelineError,
    MetadataValue,
    Passage,
    PassageSource,
    RetrievalQuery,
)

from .documents import (
    DocumentError,
    FolderDocument,
    document_files,
    read_document,
    sidecar_of,
)

__all__ = [
    "INDEX_SCHEMA_VERSION",
    "MAX_QUERY_TERMS",
    "FtsRetriever",
    "IndexStats",
    "RetrievalIndexError",
    "build_index",
    "match_expression",
]

INDEX_SCHEMA_VERSION: Final = 1
"""``PRAGMA user_version`` of an index file this module writes and reads."""
MAX_QUERY_TERMS: Final = 64
"""The most distinct words of an instruction a query searches for (the first ones)."""

_WORD = re.compile(r"[^\W_]+")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    document_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    metadata TEXT NOT NULL,
    signature TEXT NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
    text, title, document UNINDEXED, tokenize = 'unicode61 remove_diacritics 2'
);
"""


class RetrievalIndexError(AptixPipelineError, ValueError):
    """The index cannot be built or read; the message is one line naming the path."""


@dataclass(frozen=True, slots=True)
class IndexStats:
    """What one ``build_index`` run did, document by document."""

    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0

    @property
    def documents(self) -> int:
        """The documents the index holds afterwards."""
        return self.added + self.updated + self.unchanged


Progress = Callable[[int, int], None]
"""Told ``(done, total)`` after each document a run looked at."""


def match_expression(instruction: str) -> str | None:
    """The FTS5 query for ``instruction``: its words, each quoted, joined with ``OR``;
    ``None`` when it has no word."""
    terms: dict[str, None] = {}
    for word in _WORD.findall(instruction.casefold()):
        terms.setdefault(word, None)
        if len(terms) == MAX_QUERY_TERMS:
            break
    quoted = ['"' + term.replace('"', '""') + '"' for term in terms]
    return " OR ".join(quoted) or None


def _signature(path: Path) -> str:
    """Size and modification time of a document and its sidecar: unchanged, not read again."""
    parts = []
    for file in (path, sidecar_of(path)):
        try:
            stat = file.stat()
        except FileNotFoundError:
            parts.append("-")
            continue
        parts.append(f"{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


def _connect(index: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(index, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA foreign_keys = ON")
    return connection


def _check_version(connection: sqlite3.Connection, index: Path) -> None:
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    if version not in (0, INDEX_SCHEMA_VERSION):
        raise RetrievalIndexError(
            f"{index}: index schema version {version}, this aptix reads {INDEX_SCHEMA_VERSION}"
        )


def _store(connection: sqlite3.Connection, document: FolderDocument, signature: str) -> None:
    connection.execute(
        "INSERT INTO documents (document_id, title, metadata, signature, sha256) "
        "VALUES (?, ?, ?, ?, ?)",
        (
            document.document_id,
            document.title,
            json.dumps(document.metadata, ensure_ascii=False, sort_keys=True),
            signature,
            document.sha256,
        ),
    )
    (row_id,) = connection.execute("SELECT last_insert_rowid()").fetchone()
    connection.executemany(
        "INSERT INTO passages (text, title, document) VALUES (?, ?, ?)",
        [(text, document.title, row_id) for text in document.passages],
    )


def _forget(connection: sqlite3.Connection, row_id: int) -> None:
    connection.execute("DELETE FROM passages WHERE document = ?", (row_id,))
    connection.execute("DELETE FROM documents WHERE id = ?", (row_id,))


def build_index(folder: Path, index: Path, *, progress: Progress | None = None) -> IndexStats:
    """Build or refresh the index file ``index`` from ``folder``; see the module docstring.

    Raises ``RetrievalIndexError`` (one line, naming the path) for a folder that is not one,
    an index that cannot be written, or a document that cannot be read.
    """
    if not folder.is_dir():
        raise RetrievalIndexError(f"{folder}: not a folder of documents")
    if not index.parent.is_dir():
        raise RetrievalIndexError(f"{index}: its folder {index.parent} does not exist")
    files = list(document_files(folder))
    try:
        connection = _connect(index)
    except sqlite3.Error as error:
        raise RetrievalIndexError(f"{index}: cannot open the index: {error}") from None
    try:
        return _refresh(connection, folder, index, files, progress)
    except sqlite3.DatabaseError as error:
        raise RetrievalIndexError(f"{index}: {type(error).__name__}: {error}") from None
    finally:
        connection.close()


def _refresh(
    connection: sqlite3.Connection,
    folder: Path,
    index: Path,
    files: list[Path],
    progress: Progress | None,
) -> IndexStats:
    _check_version(connection, index)
    connection.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {INDEX_SCHEMA_VERSION}")
        known = {
            document_id: (row_id, signature, sha256)
            for row_id, document_id, signature, sha256 in connection.execute(
                "SELECT id, document_id, signature, sha256 FROM documents"
            )
        }
        added = updated = unchanged = 0
        for done, path in enumerate(files, start=1):
            document_id = path.relative_to(folder).as_posix()
            signature = _signature(path)
            found = known.pop(document_id, None)
            if found is not None and found[1] == signature:
                unchanged += 1
            else:
                document = read_document(folder, path)
                if found is not None and found[2] == document.sha256:
                    connection.execute(
                        "UPDATE documents SET signature = ? WHERE id = ?", (signature, found[0])
                    )
                    unchanged += 1
                else:
                    if found is not None:
                        _forget(connection, found[0])
                    _store(connection, document, signature)
                    added, updated = (added, updated + 1) if found else (added + 1, updated)
            if progress is not None:
                progress(done, len(files))
        for row_id, _, _ in known.values():
            _forget(connection, row_id)
        connection.execute("COMMIT")
    except BaseException as error:
        connection.execute("ROLLBACK")
        if isinstance(error, DocumentError):
            raise RetrievalIndexError(str(error)) from None
        raise
    return IndexStats(added=added, updated=updated, removed=len(known), unchanged=unchanged)


class FtsRetriever:
    """The ``Retriever`` on an index ``build_index`` wrote; see the module docstring.

    Opening checks the file is such an index (``RetrievalIndexError`` naming it otherwise:
    run ``aptix index``). ``collection`` names it on spans and in the state trace.
    """

    def __init__(self, index: str | Path, *, collection: str = "documents") -> None:
        self.index = Path(index)
        self.collection = collection
        if not self.index.is_file():
            raise RetrievalIndexError(f"{self.index}: no index here: build it with aptix index")
        try:
            self._connection = sqlite3.connect(
                f"file:{self.index}?mode=ro", uri=True, check_same_thread=False
            )
            _check_version(self._connection, self.index)
            self._connection.execute("SELECT count(*) FROM documents").fetchone()
        except sqlite3.DatabaseError as error:
            raise RetrievalIndexError(f"{self.index}: not a retrieval index: {error}") from None
        self._lock = threading.Lock()
        self._data_version: int | None = None
        self._sources: dict[int, tuple[PassageSource, dict[str, MetadataValue]]] = {}

    async def retrieve(self, query: RetrievalQuery) -> list[Passage]:
        """See ``Retriever``: the best passages for the query, in a worker thread."""
        expression = match_expression(query.instruction)
        if expression is None:
            return []
        return await asyncio.to_thread(self._search, expression, query)

    def _search(self, expression: str, query: RetrievalQuery) -> list[Passage]:
        """Rank the matching passages by bm25, keep the best ``limit`` whose document the
        scope admits, then read only their texts."""
        chosen: list[tuple[int, float, PassageSource]] = []
        admitted: dict[int, bool] = {}
        with self._lock:
            documents = self._documents_now()
            ranked = self._connection.execute(
                # rank is bm25() here, computed once a row (naming bm25 twice computes twice)
                "SELECT rowid, document, -rank FROM passages WHERE passages MATCH ? ORDER BY rank",
                (expression,),
            )
            for rowid, document, score in ranked:
                source, values = documents.get(document) or self._document(document)
                if admitted.setdefault(document, query.admits(values)):
                    chosen.append((rowid, float(score), source))
                    if len(chosen) == query.limit:
                        break
            ranked.close()
            marks = ",".join("?" * len(chosen))
            texts = dict(
                self._connection.execute(
                    f"SELECT rowid, text FROM passages WHERE rowid IN ({marks})",
                    [rowid for rowid, _, _ in chosen],
                )
            )
        return [
            Passage(text=texts[rowid], score=score, source=source)
            for rowid, score, source in chosen
        ]

    def _documents_now(self) -> dict[int, tuple[PassageSource, dict[str, MetadataValue]]]:
        """The documents read so far, forgotten when another connection has written the
        index since (``aptix index`` while a service runs: ``PRAGMA data_version``)."""
        (version,) = self._connection.execute("PRAGMA data_version").fetchone()
        if version != self._data_version:
            self._data_version = version
            self._sources.clear()
        return self._sources

    def _document(self, row_id: int) -> tuple[PassageSource, dict[str, MetadataValue]]:
        """One document's source and metadata, read once and kept."""
        document_id, title, metadata = self._connection.execute(
            "SELECT document_id, title, metadata FROM documents WHERE id = ?", (row_id,)
        ).fetchone()
        values: dict[str, MetadataValue] = json.loads(metadata)
        source = PassageSource(
            document_id=document_id, title=title, path=document_id, metadata=values
        )
        self._sources[row_id] = (source, values)
        return source, values

    def close(self) -> None:
        """Close the index file."""
        self._connection.close()
