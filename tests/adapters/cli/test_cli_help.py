"""``aptix COMMAND --help`` shows each help text as written.

Typer renders help as rich markup, where an unescaped ``[model]`` is taken for a
style tag and vanishes ("default: the config's ."). The commands write a literal
``[`` as ``\\[``; these tests render every command's help and look for the names.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from aptix_pipeline.adapters.cli import app

APTIX = Path(sys.executable).parent / "aptix"
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_BRACKETED = re.compile(r"\[[^\[\]\s]+\]")
_COMMANDS = tuple(typer.main.get_group(app).commands)


def _shown_help(*command: str) -> str:
    """``aptix COMMAND --help`` 200 columns wide, as one line of words: colours, box
    drawing and line breaks taken out, so the terminal's width does not matter."""
    env = {**os.environ, "COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    run = subprocess.run(
        [str(APTIX), *command, "--help"], capture_output=True, text=True, check=False, env=env
    )
    assert run.returncode == 0, run.stderr
    return " ".join(_ANSI.sub("", run.stdout).replace("│", " ").split())


def _written_help(name: str) -> str:
    """The help a command's source gives: its docstring and each parameter's help."""
    command = typer.main.get_group(app).commands[name]
    texts = [command.help or "", *(getattr(param, "help", None) or "" for param in command.params)]
    return " ".join(texts).replace("\\[", "[")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "run",
            [
                "default: the config's [model].",
                "default: the config's [store], else aptix.db in the data folder",
                "catalog tables, [model], [store], [engine] (docs/CONFIGURATION.md).",
                "default: the config's [recording].",
            ],
        ),
        (
            "serve",
            [
                "default [server].host.",
                "default [server].port.",
                "default [server].workers.",
                "default [server].access_log, off.",
            ],
        ),
    ],
)
def test_the_configuration_tables_a_help_names_are_shown_with_their_brackets(
    command: str, expected: list[str]
) -> None:
    shown = _shown_help(command)

    assert [text for text in expected if text not in shown] == []


@pytest.mark.parametrize("command", _COMMANDS)
def test_every_bracketed_name_a_commands_help_writes_is_shown(command: str) -> None:
    written = _BRACKETED.findall(_written_help(command))

    shown = _shown_help(command)

    assert [name for name in written if name not in shown] == []
    assert "\\[" not in shown


def test_the_root_help_lists_every_command() -> None:
    shown = _shown_help()

    assert [command for command in _COMMANDS if command not in shown] == []
    assert set(_COMMANDS) == {
        "init",
        "validate",
        "run",
        "chat",
        "serve",
        "worker",
        "diagram",
        "replay",
        "eval",
        "fork",
        "sessions",
        "ui",
        "index",
        "usage",
    }
