"""``aptix validate PATH...``: request files checked against AGN-034, with a summary.

A path is a request file, a folder (its ``*.json`` files, in its subfolders too, in
name order) or ``-`` (one request read from standard input). Each request gets a line
— ``✓ FILE: valid, Initial`` or ``✗ FILE: refused`` followed by one indented line per
error, naming its rule and field — and a last line counts them: ``2 valid, 1 refused,
3 requests``. ``--json`` prints each request's ``InvokeResult`` instead (``# FILE``
before each when there are several), ``--compact`` as one line of JSON each.

Exit codes: 0 when every request is valid, 1 when any is refused, 2 for a usage
error (a path that does not exist, a folder without a ``.json`` file, an unknown
option).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from aptix_pipeline.contracts import AgentExecuteRequest, InvokeResult

__all__ = ["STDIN", "request_files", "validate"]

STDIN = "-"
"""The path that stands for standard input."""


def request_files(paths: list[str]) -> list[str]:
    """The request files ``paths`` name, in order: a file as given, a folder's ``*.json``
    files (subfolders included) in name order, ``-`` as is. Raises ``ValueError``
    naming a path that does not exist or a folder that holds no ``.json`` file."""
    found: list[str] = []
    for given in paths:
        path = Path(given)
        if given == STDIN:
            found.append(STDIN)
        elif path.is_dir():
            inside = sorted(str(file) for file in path.rglob("*.json") if file.is_file())
            if not inside:
                raise ValueError(f"{given}: a folder with no .json file in it")
            found += inside
        elif path.is_file():
            found.append(given)
        else:
            raise ValueError(f"{given}: no such file or folder")
    return found


def _read(name: str) -> bytes:
    return sys.stdin.buffer.read() if name == STDIN else Path(name).read_bytes()


def _summary(name: str, result: InvokeResult[AgentExecuteRequest]) -> str:
    """The request's lines of the human summary."""
    from aptix_pipeline.validators import classify_request

    shown = "(stdin)" if name == STDIN else name
    if result.successful and result.result is not None:
        kind = classify_request(result.result)
        return f"✓ {shown}: valid{f', {kind}' if kind is not None else ''}"
    lines = [f"✗ {shown}: refused"]
    for error in result.errors:
        where = f" [{error.field}]" if error.field else ""
        lines.append(f"    {error.rule_id or str(error.code)}{where}: {error.message}")
    return "\n".join(lines)


def validate(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH...",
            help="Request JSON files, folders of them, or - for standard input.",
            show_default=False,
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each request's InvokeResult as JSON.")
    ] = False,
    compact: Annotated[
        bool, typer.Option(help="Print each InvokeResult as one line of JSON (implies --json).")
    ] = False,
) -> None:
    """Check AgentExecuteRequest files (AGN-034): a line each, then a count."""
    from aptix_pipeline.validators import parse_request

    try:
        names = request_files(paths)
    except ValueError as error:
        typer.echo(f"aptix validate: {error}", err=True)
        raise typer.Exit(2) from None
    valid = 0
    for name in names:
        result = parse_request(_read(name))
        valid += result.successful
        if as_json or compact:
            if len(names) > 1:
                typer.echo(f"# {name}")
            typer.echo(result.to_json(indent=None if compact else 2))
        else:
            typer.echo(_summary(name, result))
    if not (as_json or compact):
        refused = len(names) - valid
        plural = "" if len(names) == 1 else "s"
        typer.echo(f"{valid} valid, {refused} refused, {len(names)} request{plural}")
    raise typer.Exit(0 if valid == len(names) else 1)
