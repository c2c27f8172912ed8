"""A real folder of documents with metadata, and its real SQLite FTS5 index, for the
retrieval tests.

``write_corpus`` writes four documents that all speak of deploying, so every one
matches the instruction ``"deploy"`` and only the scope conditions tell them apart:

========== ============================ =================================
document   metadata from                team / tags
========== ============================ =================================
web.md     front matter                 ``platform`` / ``[python, web]``
docker.md  front matter (block list)    ``ops`` / ``[docker]``
cli.md     sidecar ``cli.md.meta.json`` ``Platform-Tools`` / ``[python, cli]``
notes.txt  none                         — / —
========== ============================ =================================
"""

from __future__ import annotations

import json
from pathlib import Path

from aptix_pipeline.adapters.retrieval.fts import FtsRetriever, build_index

__all__ = ["CORPUS_IDS", "indexed_corpus", "write_corpus"]

CORPUS_IDS = frozenset({"web.md", "docker.md", "cli.md", "notes.txt"})


def write_corpus(folder: Path) -> Path:
    """Write the four documents of the module docstring into ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "web.md").write_text(
        "---\ntitle: Web service\nteam: platform\ntags: [python, web]\n---\n"
        "# Deploying the web service\n\nDeploy the web service with make deploy.\n",
        encoding="utf-8",
    )
    (folder / "docker.md").write_text(
        '---\nteam: "ops"\ntags:\n  - docker\n---\n'
        "# Docker images\n\nEach deploy builds a docker image first.\n",
        encoding="utf-8",
    )
    (folder / "cli.md").write_text(
        "# The command line\n\nThe CLI can deploy too: aptix deploy.\n", encoding="utf-8"
    )
    (folder / "cli.md.meta.json").write_text(
        json.dumps({"team": "Platform-Tools", "tags": ["python", "cli"]}), encoding="utf-8"
    )
    (folder / "notes.txt").write_text("Loose notes: we deploy on Fridays.\n", encoding="utf-8")
    return folder


def indexed_corpus(directory: Path, *, collection: str = "handbook") -> FtsRetriever:
    """The corpus written under ``directory/docs`` and indexed into ``directory/index.db``."""
    folder = write_corpus(directory / "docs")
    build_index(folder, directory / "index.db")
    return FtsRetriever(directory / "index.db", collection=collection)
