"""The ``aptix`` command line.

``aptix validate FILE...`` checks request files against AGN-034 and prints one
``InvokeResult`` per file. Exit codes: 0 when every file is a valid request, 1
when any is not, 2 for a usage error (a missing file, an unknown option).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from aptix_pipeline import __version__
from aptix_pipeline.validators import parse_request

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


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
