"""``aptix init [DIR]``: a minimal working configuration to start from (D372).

It writes three files into ``DIR`` (default: the working directory), made if
missing:

- ``aptix.toml`` — a scripted ``[model]`` playing ``replies.json``, with the
  OpenAI-compatible block beside it as comments; no ``[store]`` (sessions go to the
  data folder, ``config/data_dir.py``) and no ``[[auth.keys]]`` (``aptix serve`` asks for
  them), so ``aptix run`` and ``aptix chat`` work at once;
- ``replies.json`` — the scripted model's replies: a server tool round and an answer;
- ``request.json`` — an Initial request for ``aptix run``.

A file that exists is never overwritten without ``--force``: the command names
them and exits 2, writing nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

import typer

__all__ = ["FILES", "init"]

_CONFIG: Final = """\
# aptix configuration (docs/CONFIGURATION.md): `aptix run request.json --config aptix.toml`,
# `aptix chat --config aptix.toml`. Without [store], sessions go to aptix.db in the data
# folder ($APTIX_DATA_DIR, else $XDG_DATA_HOME/aptix, else ~/.local/share/aptix).

[model]
kind = "scripted"                  # plays replies.json: no model server needed
script = "replies.json"

# A real model: any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp).
# Replace the [model] table above with:
# [model]
# kind = "openai"
# base_url = "http://127.0.0.1:8000/v1"
# model = "qwen2.5-coder-7b-instruct"
# api_key_env = "OPENAI_API_KEY"   # the key comes from the environment, never this file

# `aptix serve --config aptix.toml` also needs API keys (docs/HTTP.md):
# [[auth.keys]]
# org = "local"
# user = "me"
# key_env = "APTIX_KEY"
"""

_REPLIES: Final = """\
{
  "turns": [
    [
      {"tool_calls": [{"id": "m1", "name": "Math", "arguments": {}}]},
      {"tool_calls": [{"id": "a1", "name": "Add", "arguments": {"a": 2, "b": 3}}]},
      {"text": "2 + 3 = 5."}
    ],
    [
      {"text": "This is turn 2 of replies.json: give each turn you script its own list of replies."}
    ]
  ]
}
"""

_REQUEST: Final = '{"Instruction": "What is 2 + 3?"}\n'

FILES: Final = {"aptix.toml": _CONFIG, "replies.json": _REPLIES, "request.json": _REQUEST}
"""The files ``init`` writes, by name."""


def init(
    directory: Annotated[
        Path, typer.Argument(file_okay=False, help="Where to write the files (made if missing).")
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that exist.")] = False,
) -> None:
    """Write a minimal working configuration: aptix.toml, replies.json, request.json.

    Then `aptix run request.json --config aptix.toml` runs a turn at once. Exit
    codes: 0 written, 2 when a file exists (without --force) or cannot be written.
    """
    existing = [name for name in FILES if (directory / name).exists()]
    if existing and not force:
        typer.echo(
            f"aptix init: {', '.join(existing)} already in {directory}: "
            "give --force to overwrite, or another folder",
            err=True,
        )
        raise typer.Exit(2)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in FILES.items():
            (directory / name).write_text(text, encoding="utf-8")
    except OSError as error:
        typer.echo(
            f"aptix init: cannot write into {directory}: {error.strerror or error}", err=True
        )
        raise typer.Exit(2) from None
    where = "" if directory == Path(".") else f"cd {directory} && "
    typer.echo(f"wrote {', '.join(FILES)} in {directory}")
    typer.echo(f"try: {where}aptix run request.json --config aptix.toml")
