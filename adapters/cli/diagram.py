"""``aptix diagram [--format mermaid|dot|svg|png] [--out FILE]``: the pipeline, drawn.

The drawing comes from the machine definition (``engine/diagram.py``). Text
formats go to stdout without ``--out``; svg/png (Graphviz's ``dot``) go to stdout
only when it is not a terminal. ``--format`` defaults to the ``--out`` suffix, else
mermaid. Exit codes: 0 drawn, 2 for a usage error (unknown suffix, svg/png to a
terminal, Graphviz missing).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from aptix_pipeline.engine import DiagramFormat

__all__ = ["DiagramChoice", "diagram", "write_drawing"]


class DiagramChoice(StrEnum):
    """``aptix diagram --format``: the values of ``engine.diagram.DiagramFormat``, which
    the CLI cannot import without the engine (test_startup.py keeps them equal)."""

    MERMAID = "mermaid"
    DOT = "dot"
    SVG = "svg"
    PNG = "png"


def diagram(
    fmt_choice: Annotated[
        DiagramChoice | None,
        typer.Option(
            "--format", help="mermaid, dot, svg or png; default: from --out's suffix, else mermaid."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", dir_okay=False, help="Write here instead of stdout."),
    ] = None,
) -> None:
    """Draw the pipeline state machine (its steps, guards and exit hooks)."""
    from aptix_pipeline.engine import DiagramError, pipeline_diagram

    fmt = _diagram_format(fmt_choice, out)
    try:
        data = pipeline_diagram(fmt)
    except DiagramError as error:
        raise _refuse(str(error)) from None
    if out is None:
        typer.echo(data if _binary(fmt) else data.decode("utf-8"), nl=False)
    else:
        write_drawing(data, fmt, out, _refuse)


def _refuse(message: str) -> typer.Exit:
    """Say what is wrong on stderr; the exit (code 2) to raise."""
    typer.echo(f"aptix diagram: {message}", err=True)
    return typer.Exit(2)


def _binary(fmt: DiagramFormat) -> bool:
    """Whether the format's drawing is binary (svg, png) rather than text."""
    from aptix_pipeline.engine import DiagramFormat

    return fmt in (DiagramFormat.SVG, DiagramFormat.PNG)


def _diagram_format(fmt_choice: DiagramChoice | None, out: Path | None) -> DiagramFormat:
    """``--format``, else the one ``--out``'s suffix names, else mermaid; a binary format
    to a terminal is refused."""
    from aptix_pipeline.engine import DiagramFormat, format_for

    fmt = None if fmt_choice is None else DiagramFormat(fmt_choice.value)
    if fmt is None:
        try:
            fmt = format_for(out) if out is not None else DiagramFormat.MERMAID
        except ValueError as error:
            raise _refuse(f"{error}; or give --format") from None
    if out is None and _binary(fmt) and sys.stdout.isatty():
        raise _refuse(f"{fmt.value} is binary: give --out FILE or redirect stdout")
    return fmt


def write_drawing(
    data: bytes, fmt: DiagramFormat, out: Path, refuse: Callable[[str], typer.Exit]
) -> None:
    """The drawing written to ``out``; mermaid to a ``.md`` file as a Markdown block that
    renders (D104). A file that cannot be written ends the command through ``refuse``."""
    from aptix_pipeline.engine import DiagramFormat

    if out.suffix.lower() == ".md" and fmt is DiagramFormat.MERMAID:
        data = b"```mermaid\n" + data + b"```\n"
    try:
        out.write_bytes(data)
    except OSError as error:
        raise refuse(f"cannot write {out}: {error.strerror or error}") from None
