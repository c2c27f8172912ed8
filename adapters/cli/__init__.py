"""The ``aptix`` command line: one module per command in this room, the Typer app in
``commands.py``. The top of the house: it may import every room of adapters and
``embedded``, and nothing imports it.

- ``aptix init [DIR] [--force]`` writes a minimal working configuration
  (``aptix.toml`` with a scripted model, ``replies.json``, ``request.json``) that
  ``aptix run`` runs at once (``cli/init.py``). Exit codes: 0 written, 2 when a file
  exists (without ``--force``) or cannot be written.
- ``aptix validate PATH...`` checks request files, folders of them or stdin (``-``)
  against AGN-034: a line each and a count (``--json``: each ``InvokeResult``).
  Exit codes: 0 when every request is valid, 1 when any is not, 2 for a usage
  error (a missing path, a folder without requests, an unknown option).
- ``aptix run REQUEST.json --llm-script SCRIPT.json`` runs one turn on the
  embedded defaults (SQLite file, built-in or TOML catalog, scripted model) and
  prints its ``InvokeResult``. Exit codes: 0 when Successful, 1 when not, 2 for a
  usage error (a missing file, a malformed script or configuration, a bad store).
  Turns of one session chain across separate ``aptix run`` calls that share the
  store (``--after RESULT.json`` takes the session from an earlier result; a script
  keyed by turn plays each request's turn). Without ``--store`` or ``[store]`` the
  store is ``aptix.db`` in the data folder (``config/data_dir.py``). ``--report`` prints a
  summary (``--report-format full``: the whole report); ``--diagram OUT`` draws the
  turn's path. ``--config`` takes the service configuration
  (``adapters/config/service.py``): its catalog, and its ``[model]``, ``[store]``
  and ``[engine]`` where ``--llm-script`` / ``--store`` are not given.
  ``--record DIR [--redact]`` records the turn for replay (else the config's
  ``[recording]``). ``--stream`` prints the model's text as it comes, progress on
  stderr, then the result (``adapters/cli/stream.py``; a request file with
  ``"Stream": true`` streams unless ``--no-stream``). ``--idempotency-key KEY``
  makes a re-run of the same request (say, after a crash) print the answer its
  first run stored instead of running another turn; a resubmitted continuation is
  answered so without a key.
- ``aptix chat`` holds a session in the terminal (``cli/chat.py``): each line a turn,
  streamed; client tool calls answered by ``--handler TOOL=COMMAND`` (or
  ``[chat.handlers]``) or asked for. It takes ``aptix run``'s model, store, caller
  and configuration options. Exit codes: 0 ended (``/quit``, end of input), 2 usage
  error, 130 Ctrl-C while it waits for input.
- ``aptix serve --config FILE`` runs the HTTP service (``adapters/http/app.py``)
  under uvicorn; ``--host``, ``--port``, ``--workers`` and ``--access-log`` override
  ``[server]``. With ``[temporal]`` its turns run as Temporal workflows.
- ``aptix worker --config FILE`` runs those durable turns (``cli/serve.py``,
  docs/DURABLE.md): the configuration's pipeline as a ``DurableWorker`` until
  SIGINT/SIGTERM; ``--concurrency`` and ``--identity`` override ``[temporal]``.
  Exit codes: 0 stopped, 1 Temporal cannot be reached, 2 usage error.
- ``aptix diagram [--format mermaid|dot|svg|png] [--out FILE]`` draws the pipeline
  from the machine definition (``engine/diagram.py``). Text formats go to stdout
  without ``--out``; svg/png (Graphviz's ``dot``) go to stdout only when it is not
  a terminal. ``--format`` defaults to the ``--out`` suffix, else mermaid. Exit
  codes: 0 drawn, 2 for a usage error (unknown suffix, svg/png to a terminal,
  Graphviz missing).
- ``aptix replay FILE|DIR... [--diagram OUT] [--spans]`` re-runs recorded turns
  (``engine/replay/replayer.py``) with ports answering from the recording, prints each
  trace and names the first divergence; ``--live CONFIG [--live-model]`` runs that
  configuration's catalog, server tools (and model) live. ``--diagram`` draws the
  recorded turn's path. Exit codes: 0 every recording replays, 1 one diverges, 2
  usage error.
- ``aptix eval CASES --config CANDIDATE`` runs a folder of recordings on a candidate
  configuration's live model, prompts and tools and reports each case (a table,
  ``--json``, ``--junit FILE``, ``--html FILE``; ``--baseline`` side by side);
  ``aptix eval capture`` makes a case folder (``cli/replay.py``, ``adapters/evals``,
  docs/EVALS.md). Exit codes: 0 no case regresses, 1 one does, 2 usage error.
- ``aptix sessions list|show`` prints the sessions a store holds, scoped to
  ``--org``/``--user`` (``cli/sessions.py``); ``aptix ui`` serves the turn browser
  page on loopback (``cli/ui.py``, docs/UI.md).
- ``aptix usage [--config FILE] [--org ORG] [--by user,mode] [--window day] [--json]``
  prints an org's model calls, tokens, cost (with the calls it leaves out) and what
  its budgets have left, from the store's usage ledger (``cli/usage.py``,
  docs/BUDGETS.md). Exit codes: 0 shown, 2 usage error.
- ``aptix index --config FILE`` builds or refreshes the retrieval index of the
  configuration's ``[retrieval]`` folder (``cli/index.py``,
  docs/RETRIEVAL.md), progress on stderr. Exit codes: 0 indexed, 2 usage error.

Start-up: this module imports only the standard library at import time. Typer
and the Typer ``app`` (``commands.py``) are built on first use (``main()``, or
``cli.app``). Each command lives in its own module of this folder (``init``,
``validate``, ``run``, ``chat``, ``serve`` (and ``worker``), ``diagram``,
``replay``, ``index``, ``usage``, ``sessions``, ``ui``) and imports what it needs when it runs:
``aptix --version`` answers before anything else is imported, and no command loads
FastAPI, the OpenAI SDK, psycopg or the OpenTelemetry SDK unless it uses them
(tests/adapters/cli/test_startup.py). Typer renders help text as rich
markup, so the commands write a literal ``[`` in their help as ``\\[``
(tests/adapters/cli/test_cli_help.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from aptix_pipeline import __version__

if TYPE_CHECKING:
    import typer

    app: typer.Typer  # built on first use: __getattr__

__all__ = ["app", "main"]


def _build_app() -> typer.Typer:
    """The Typer app (``commands.py``): Typer and the command modules imported."""
    from .commands import build_app

    return build_app()


_app: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    """``app``, the Typer app, built on first use."""
    global _app
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _app is None:
        _app = _build_app()
    return _app


def main() -> None:
    """Console-script entry point; ``aptix --version`` is answered before Typer is imported.

    Typer and rich are dependencies of every install; where they are missing anyway
    (an install made with ``--no-deps``), the command says what to install in one
    line and exits 2 instead of a traceback.
    """
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"aptix-pipeline {__version__}\n")
        sys.exit(0)
    try:
        app = __getattr__("app")
    except ModuleNotFoundError as error:
        if error.name not in _COMMAND_DEPENDENCIES:
            raise
        sys.stderr.write(
            f"aptix: {error.name} is missing (installed without dependencies?): "
            "pip install aptix-pipeline\n"
        )
        sys.exit(2)
    sys.exit(app())


_COMMAND_DEPENDENCIES = frozenset({"typer", "rich", "click"})
"""What building the command imports beyond the engine: base dependencies of the package."""
