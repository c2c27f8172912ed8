"""The ``aptix`` command line.

- ``aptix validate FILE...`` checks request files against AGN-034 and prints one
  ``InvokeResult`` per file. Exit codes: 0 when every file is a valid request, 1
  when any is not, 2 for a usage error (a missing file, an unknown option).
- ``aptix run REQUEST.json --llm-script SCRIPT.json`` runs one turn on the
  embedded defaults (SQLite file, built-in or TOML catalog, scripted model) and
  prints its ``InvokeResult``. Exit codes: 0 when Successful, 1 when not, 2 for a
  usage error (a missing file, a malformed script or configuration, a bad store).
  Turns of one session chain across separate ``aptix run`` calls that share the
  SQLite file.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Annotated

import typer

from aptix_pipeline import __version__
from aptix_pipeline.contracts import Caller
from aptix_pipeline.validators import parse_request

from .catalog_config import CatalogError
from .embedded import embedded_pipeline, open_store
from .scripted_llm import ScriptedLLM, ScriptError

__all__ = ["app", "main"]

app = typer.Typer(
    name="aptix",
    help="Run and inspect Aptix agent turns as a formal state machine.",
    no_args_is_help=True,
    add_completion=False,
)


def _version(show: bool) -> None:
    if show:
        typer.echo(f"aptix-pipeline {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Run and inspect Aptix agent turns."""


@app.command()
def validate(
    files: Annotated[
        list[Path],
        typer.Argument(exists=True, dir_okay=False, readable=True, help="Request JSON files."),
    ],
    compact: Annotated[bool, typer.Option(help="One line of JSON per file.")] = False,
) -> None:
    """Check AgentExecuteRequest files (AGN-034) and print an InvokeResult for each."""
    all_valid = True
    for path in files:
        result = parse_request(path.read_bytes())
        all_valid &= result.successful
        if len(files) > 1:
            typer.echo(f"# {path}")
        typer.echo(result.to_json(indent=None if compact else 2))
    raise typer.Exit(0 if all_valid else 1)


def _usage_error(message: str) -> typer.Exit:
    typer.echo(f"aptix run: {message}", err=True)
    return typer.Exit(2)


@app.command()
def run(
    request: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="Request JSON file.")
    ],
    llm_script: Annotated[
        Path,
        typer.Option(
            "--llm-script",
            exists=True,
            dir_okay=False,
            readable=True,
            help="ScriptedLLM replies for this turn (README: 'Scripted model').",
        ),
    ],
    store: Annotated[
        str, typer.Option(help="Session store: sqlite:PATH or memory.")
    ] = "sqlite:aptix.db",
    org: Annotated[str, typer.Option(help="The caller's org.")] = "local",
    user: Annotated[str, typer.Option(help="The caller's user.")] = "local",
    config: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, readable=True, help="Catalog TOML file."),
    ] = None,
    initial_mode: Annotated[
        str | None, typer.Option(help="Mode of a new session (default: general).")
    ] = None,
    report: Annotated[
        bool,
        typer.Option(help="Also print what the turn did (states, checks, tools, modes) to stderr."),
    ] = False,
    compact: Annotated[bool, typer.Option(help="One line of JSON.")] = False,
) -> None:
    """Run one agent turn (AGN-034 request in, AGN-033 response out) and print its InvokeResult."""
    if not org.strip() or not user.strip():
        raise _usage_error("--org and --user must not be empty")
    try:
        llm = ScriptedLLM.from_file(llm_script)
        session_store = open_store(store)
    except (ScriptError, ValueError, OSError, RuntimeError, sqlite3.Error) as error:
        raise _usage_error(f"{type(error).__name__}: {error}" if isinstance(error, sqlite3.Error)
                           else str(error)) from None  # fmt: skip
    try:
        pipeline = embedded_pipeline(llm=llm, store=session_store, config=config)
    except (CatalogError, OSError) as error:
        raise _usage_error(str(error)) from None
    try:
        outcome = asyncio.run(
            pipeline.run(
                request.read_bytes(), Caller(org=org, user=user), initial_mode=initial_mode
            )
        )
    finally:
        close = getattr(session_store, "close", None)
        if close is not None:
            close()
    typer.echo(outcome.result.to_json(indent=None if compact else 2))
    if report:
        summary = {key: value for key, value in outcome.to_dict().items() if key != "result"}
        typer.echo(json.dumps(summary, indent=None if compact else 2), err=True)
    raise typer.Exit(0 if outcome.successful else 1)


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
