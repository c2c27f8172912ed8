"""``aptix validate FILE...``: request files checked against AGN-034, one ``InvokeResult`` each.

Exit codes: 0 when every file is a valid request, 1 when any is not, 2 for a usage
error (a missing file, an unknown option).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["validate"]


def validate(
    files: Annotated[
        list[Path],
        typer.Argument(exists=True, dir_okay=False, readable=True, help="Request JSON files."),
    ],
    compact: Annotated[bool, typer.Option(help="One line of JSON per file.")] = False,
) -> None:
    """Check AgentExecuteRequest files (AGN-034) and print an InvokeResult for each."""
    from aptix_pipeline.validators import parse_request

    all_valid = True
    for path in files:
        result = parse_request(path.read_bytes())
        all_valid &= result.successful
        if len(files) > 1:
            typer.echo(f"# {path}")
        typer.echo(result.to_json(indent=None if compact else 2))
    raise typer.Exit(0 if all_valid else 1)
