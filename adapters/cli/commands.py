"""The Typer app of the ``aptix`` command: its ``--version`` option and its commands.

``cli/__init__.py`` builds it on first use. Each command lives in its own module
(``cli_init``, ``cli_validate``, ``cli_run``, ``cli_chat``, ``cli_serve`` (with
``aptix worker``), ``cli_diagram``, ``cli_replay`` (with ``aptix eval``),
``cli_sessions``, ``cli_ui``, ``cli_index``, ``cli_usage``),
which imports Typer and the standard library only: building the app (``aptix
--help``) loads no engine, and each command imports what it uses when it runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from aptix_pipeline import __version__

from .chat import chat
from .diagram import diagram
from .index import index
from .init import init
from .replay import eval_app, replay
from .run import run
from .serve import serve, worker
from .sessions import fork, sessions_app
from .ui import ui
from .usage import usage
from .validate import validate

__all__ = ["build_app"]


def _version(show: bool) -> None:
    """``--version``: print the version and stop before any command runs."""
    if show:
        typer.echo(f"aptix-pipeline {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Run and inspect Aptix agent turns."""


def build_app() -> typer.Typer:
    """The Typer app: the root options, then the commands in the order ``--help`` lists them."""
    built = typer.Typer(
        name="aptix",
        help="Run and inspect Aptix agent turns as a formal state machine.",
        no_args_is_help=True,
        add_completion=False,
    )
    built.callback()(_root)
    for command in (init, validate, run, chat, serve, worker, diagram, replay, index, usage):
        built.command()(command)
    built.add_typer(eval_app)
    built.add_typer(sessions_app)
    built.command()(fork)
    built.command()(ui)
    return built
