"""``aptix index --config FILE``: build or refresh the retrieval index of ``[retrieval]``.

Reads the configuration's documents folder into its SQLite FTS5 index
(``adapters/retrieval/fts.py``, docs/RETRIEVAL.md), incrementally: documents whose
files did not change are not read again. Progress goes to stderr, one line every
``--progress-every`` documents (default 100) when the folder holds more than that;
one summary line goes to stdout. Exit codes: 0 indexed, 2 for a usage error, one
line on stderr: a configuration that cannot be read or has no ``[retrieval]``, a
folder that is not one, an index that cannot be written, a document that cannot be
read (the index is then left as it was).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["index"]


def _refuse(message: str) -> typer.Exit:
    """Say what is wrong on stderr, on one line; the exit (code 2) to raise."""
    typer.echo(f"aptix index: {' '.join(message.split())}", err=True)
    return typer.Exit(2)


# Typer renders help text as rich markup: a literal "[" is written "\\[".
def index(
    config: Annotated[
        Path,
        typer.Option(help="Configuration TOML with a \\[retrieval] table (docs/RETRIEVAL.md)."),
    ],
    progress_every: Annotated[
        int, typer.Option(min=1, help="A progress line on stderr every N documents.")
    ] = 100,
) -> None:
    """Build or refresh the retrieval index from the \\[retrieval] folder (only changed files)."""
    from aptix_pipeline.adapters.config import ConfigError, load_service_config
    from aptix_pipeline.adapters.retrieval import RetrievalIndexError, build_index

    try:
        service = load_service_config(config, secrets_for=())
    except ConfigError as error:
        raise _refuse(str(error)) from None
    retrieval = service.retrieval
    if retrieval is None:
        raise _refuse(f"{config}: no [retrieval] table: nothing to index")

    def progress(done: int, total: int) -> None:
        if total > progress_every and (done % progress_every == 0 or done == total):
            typer.echo(f"aptix index: {done}/{total} documents", err=True)

    try:
        stats = build_index(retrieval.folder, retrieval.index, progress=progress)
    except RetrievalIndexError as error:
        raise _refuse(str(error)) from None
    typer.echo(
        f"indexed {stats.documents} documents of {retrieval.folder} into {retrieval.index}: "
        f"{stats.added} added, {stats.updated} updated, {stats.removed} removed, "
        f"{stats.unchanged} unchanged"
    )
