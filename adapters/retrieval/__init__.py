"""Retrieval for the request's RAG scope (AGN-034 §4.4): the SQLite FTS5 retriever,
its index builder, and the document folder it reads.

May import contracts, validators, steps and engine; never another room of adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .fts import FtsRetriever, RetrievalIndexError, build_index

_EXPORTS: dict[str, str] = {
    "build_index": "fts",
    "FtsRetriever": "fts",
    "RetrievalIndexError": "fts",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "FtsRetriever",
    "RetrievalIndexError",
    "build_index",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
