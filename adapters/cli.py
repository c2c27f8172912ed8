"""The ``aptix`` command line.

- ``aptix validate FILE...`` checks request files against AGN-034 and prints one
  ``InvokeResult`` per file. Exit codes: 0 when every file is a valid request, 1
  when any is not, 2 for a usage error (a missing file, an unknown option).
- ``aptix run REQUEST.json --llm-script SCRIPT.json`` runs one turn on the
  embedded defaults (SQLite file, built-in or TOML catalog, scripted model) and
  prints its ``InvokeResult``. Exit codes: 0 when Successful, 1 when not, 2 for a
  usage error (a missing file, a malformed script or configuration, a bad store).
  Turns of one session chain across separate ``aptix run`` calls that share the
  SQLite file. ``--config`` takes the service configuration
  (``adapters/service_config.py``): its catalog, and its ``[model]``, ``[store]``
  and ``[engine]`` where ``--llm-script`` / ``--store`` are not given.
  ``--record DIR [--redact]`` records the turn for replay (else the config's
  ``[recording]``). ``--idempotency-key KEY`` makes a re-run of the same request
  (say, after a crash) print the answer its first run stored instead of running
  another turn; a resubmitted continuation is answered so without a key.
- ``aptix serve --config FILE`` runs the HTTP service (``adapters/http_app.py``)
  under uvicorn; ``--host``, ``--port``, ``--workers`` and ``--access-log`` override
  ``[server]``.
- ``aptix diagram [--format mermaid|dot|svg|png] [--out FILE]`` draws the pipeline
  from the machine definition (``engine/diagram.py``). Text formats go to stdout
  without ``--out``; svg/png (Graphviz's ``dot``) go to stdout only when it is not
  a terminal. ``--format`` defaults to the ``--out`` suffix, else mermaid. Exit
  codes: 0 drawn, 2 for a usage error (unknown suffix, svg/png to a terminal,
  Graphviz missing).
- ``aptix replay FILE|DIR... [--diagram OUT] [--spans]`` re-runs recorded turns
  (``engine/replay.py``) with ports answering from the recording, prints each
  trace and names the first divergence. ``--diagram`` draws the recorded turn's
  path. Exit codes: 0 every recording replays, 1 one diverges, 2 usage error.

Start-up: this module imports only the standard library at import time. Typer
and the Typer ``app`` are built on first use (``main()``, or ``cli.app``), and
each command imports what it needs when it runs: ``aptix --version`` answers
before anything else is imported, and no command loads FastAPI, the OpenAI SDK,
psycopg or the OpenTelemetry SDK unless it uses them (tests/test_startup.py).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from aptix_pipeline import __version__

if TYPE_CHECKING:
    import typer

    from .service_config import ServiceConfig

    app: typer.Typer  # built on first use: __getattr__

__all__ = ["app", "main"]

# The command functions below are plain functions: ``_build_app`` imports Typer (into
# this module's namespace, where Typer resolves their string annotations) and
# registers them. Their bodies import the engine and adapters they use.


class _Format(StrEnum):
    """``aptix diagram --format``: the values of ``engine.diagram.DiagramFormat``, which
    the CLI cannot import without the engine (tests/test_startup.py keeps them equal)."""

    MERMAID = "mermaid"
    DOT = "dot"
    SVG = "svg"
    PNG = "png"


def _version(show: bool) -> None:
    if show:
        typer.echo(f"aptix-pipeline {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Run and inspect Aptix agent turns."""


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


def _usage_error(message: str) -> typer.Exit:
    typer.echo(f"aptix run: {message}", err=True)
    return typer.Exit(2)


def run(
    request: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="Request JSON file.")
    ],
    llm_script: Annotated[
        Path | None,
        typer.Option(
            "--llm-script",
            exists=True,
            dir_okay=False,
            readable=True,
            help="ScriptedLLM replies for this turn (docs/MODELS.md: 'Scripted model'); "
            "default: the config's [model].",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            help="Session store: sqlite:PATH or memory; default: the config's [store], "
            "else sqlite:aptix.db."
        ),
    ] = None,
    org: Annotated[str, typer.Option(help="The caller's org.")] = "local",
    user: Annotated[str, typer.Option(help="The caller's user.")] = "local",
    config: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            readable=True,
            help="Configuration TOML: catalog tables, [model], [store], [engine] "
            "(docs/CONFIGURATION.md).",
        ),
    ] = None,
    initial_mode: Annotated[
        str | None, typer.Option(help="Mode of a new session (default: general).")
    ] = None,
    report: Annotated[
        bool,
        typer.Option(help="Also print what the turn did (states, checks, tools, modes) to stderr."),
    ] = False,
    trace: Annotated[
        bool,
        typer.Option(
            "--trace", help="Also print the turn's state trace, one line a step, to stderr."
        ),
    ] = False,
    compact: Annotated[bool, typer.Option(help="One line of JSON.")] = False,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            file_okay=False,
            help="Record the turn into this folder, one file per turn, for `aptix replay`; "
            "default: the config's [recording].",
        ),
    ] = None,
    redact: Annotated[
        bool, typer.Option("--redact", help="With --record: leave user content out.")
    ] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Re-running this request with this key prints the answer its first run "
            "stored, without another turn (1-255 visible ASCII characters; per --org/--user).",
        ),
    ] = None,
) -> None:
    """Run one agent turn (AGN-034 request in, AGN-033 response out) and print its InvokeResult.

    Spans go where OTEL_TRACES_EXPORTER says (console: JSON on stderr; otlp; none).
    """
    import asyncio
    import json
    import sqlite3

    from aptix_pipeline.contracts import LLM, Caller
    from aptix_pipeline.engine import RecordingOptions, Telemetry

    from .catalog_config import CatalogError
    from .embedded import DEFAULT_STORE_URL, embedded_pipeline, open_store
    from .scripted_llm import ScriptedLLM, ScriptError

    if redact and record is None:
        raise _usage_error("--redact applies to --record DIR")
    if not org.strip() or not user.strip():
        raise _usage_error("--org and --user must not be empty")
    from .telemetry_setup import TelemetrySetupError, configure_tracing

    try:
        provider = configure_tracing()
    except TelemetrySetupError as error:
        raise _usage_error(str(error)) from None
    service: ServiceConfig | None = None
    if config is not None:
        from .service_config import ConfigError, load_service_config

        try:
            service = load_service_config(config)
        except ConfigError as error:
            raise _usage_error(str(error)) from None
    model = service.model if service is not None else None
    if llm_script is None and model is None:
        raise _usage_error("give --llm-script, or a --config with a [model] table")
    try:
        llm: LLM
        if llm_script is not None:
            llm = ScriptedLLM.from_file(llm_script)
        else:
            from .service_config import build_llm

            assert model is not None
            llm = build_llm(model)
        session_store = open_store(
            store or (service.store_url if service else None) or DEFAULT_STORE_URL
        )
    except (ScriptError, ValueError, OSError, RuntimeError, ImportError, sqlite3.Error) as error:
        raise _usage_error(f"{type(error).__name__}: {error}" if isinstance(error, sqlite3.Error)
                           else str(error)) from None  # fmt: skip
    try:
        pipeline = embedded_pipeline(
            llm=llm,
            store=session_store,
            catalog=service.catalog if service else None,
            options=service.options if service else None,
            telemetry=Telemetry(tracer_provider=provider),
            recording=(
                RecordingOptions(directory=record, redact=redact)
                if record is not None
                else (service.recording if service else None)
            ),
        )
    except (CatalogError, OSError) as error:
        raise _usage_error(str(error)) from None
    try:
        outcome = asyncio.run(
            pipeline.run(
                request.read_bytes(),
                Caller(org=org, user=user),
                initial_mode=initial_mode,
                idempotency_key=idempotency_key,
            )
        )
    finally:
        close = getattr(session_store, "close", None)
        if close is not None:
            close()
        if provider is not None:
            provider.shutdown()  # flush the spans before the output
    typer.echo(outcome.result.to_json(indent=None if compact else 2))
    if trace and outcome.trace is not None:
        typer.echo("\n".join(outcome.trace.describe()), err=True)
    if report:
        # A mode change's reason is user content: shown with content capture only.
        shown = outcome.to_dict(content=bool(pipeline.telemetry.capture_content))
        summary = {key: value for key, value in shown.items() if key != "result"}
        typer.echo(json.dumps(summary, indent=None if compact else 2), err=True)
    raise typer.Exit(0 if outcome.successful else 1)


def serve(
    config: Annotated[
        Path,
        typer.Option(
            exists=True,
            dir_okay=False,
            readable=True,
            help="Configuration TOML (docs/CONFIGURATION.md).",
        ),
    ],
    host: Annotated[str | None, typer.Option(help="Interface; default [server].host.")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port; default [server].port.")] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Worker processes; default [server].workers.")
    ] = None,
    access_log: Annotated[
        bool | None,
        typer.Option(
            "--access-log/--no-access-log",
            help="Log a line per request (uvicorn); default [server].access_log, off.",
        ),
    ] = None,
) -> None:
    """Serve POST /v1/agent/execute over HTTP (uvicorn) with the configuration's model and store."""
    import os

    from .service_config import ConfigError, load_service_config

    def refuse(message: str) -> typer.Exit:
        typer.echo(f"aptix serve: {message}", err=True)
        return typer.Exit(2)

    try:
        service = load_service_config(config)
    except ConfigError as error:
        raise refuse(str(error)) from None
    if service.model is None:
        raise refuse(f"{config}: a [model] table is required to serve")
    if not service.api_keys:
        raise refuse(f"{config}: no [[auth.keys]]: every request would be refused")
    try:
        import uvicorn

        from . import http_app, http_protocol
    except ImportError as error:
        raise refuse(f"{error}; install aptix-pipeline[http]") from None
    # Every worker process builds its own app from the same file (create_app()).
    os.environ[http_app.CONFIG_ENV] = str(config.resolve())
    uvicorn.run(
        f"{http_app.__name__}:create_app",
        factory=True,
        host=host or service.server.host,
        port=service.server.port if port is None else port,
        workers=workers or service.server.workers,
        access_log=service.server.access_log if access_log is None else access_log,
        http=http_protocol.PROTOCOL_PATH,  # with [server] read_timeout_seconds
    )


def diagram(
    fmt_choice: Annotated[
        _Format | None,
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
    from aptix_pipeline.engine.diagram import (
        DiagramError,
        DiagramFormat,
        format_for,
        pipeline_diagram,
    )

    fmt = None if fmt_choice is None else DiagramFormat(fmt_choice.value)

    def refuse(message: str) -> typer.Exit:
        typer.echo(f"aptix diagram: {message}", err=True)
        return typer.Exit(2)

    if fmt is None:
        try:
            fmt = format_for(out) if out is not None else DiagramFormat.MERMAID
        except ValueError as error:
            raise refuse(f"{error}; or give --format") from None
    binary = fmt in (DiagramFormat.SVG, DiagramFormat.PNG)
    if out is None and binary and sys.stdout.isatty():
        raise refuse(f"{fmt.value} is binary: give --out FILE or redirect stdout")
    try:
        data = pipeline_diagram(fmt)
    except DiagramError as error:
        raise refuse(str(error)) from None
    if out is None:
        typer.echo(data if binary else data.decode("utf-8"), nl=False)
        return
    if out.suffix.lower() == ".md" and fmt is DiagramFormat.MERMAID:
        data = b"```mermaid\n" + data + b"```\n"  # a Markdown file that renders (D104)
    try:
        out.write_bytes(data)
    except OSError as error:
        raise refuse(f"cannot write {out}: {error.strerror or error}") from None


def replay(
    files: Annotated[
        list[Path],
        typer.Argument(exists=True, readable=True, help="Recordings, or folders of them."),
    ],
    diagram_out: Annotated[
        Path | None,
        typer.Option(
            "--diagram",
            dir_okay=False,
            help="Draw the path the recorded turn took (one recording); "
            "format from the suffix (.mmd, .dot, .svg, .png).",
        ),
    ] = None,
    spans: Annotated[
        bool,
        typer.Option("--spans", help="Emit spans (OTEL_TRACES_EXPORTER); off by default."),
    ] = False,
    quiet: Annotated[bool, typer.Option(help="Only the verdict of each recording.")] = False,
) -> None:
    """Re-run recorded turns against this code; name the first divergence of each.

    Ports answer from the recording and every call is checked against it. Exit
    codes: 0 when every recording replays, 1 when one diverges, 2 for a usage
    error (not a recording, an unknown format, a diagram that cannot be drawn).
    """
    import asyncio
    from dataclasses import replace

    from aptix_pipeline.engine import Telemetry, TurnRecording, recordings_in
    from aptix_pipeline.engine import replay as replay_turn
    from aptix_pipeline.engine.diagram import DiagramError, format_for, pipeline_diagram

    def refuse(message: str) -> typer.Exit:
        typer.echo(f"aptix replay: {message}", err=True)
        return typer.Exit(2)

    paths = recordings_in(*files)
    if not paths:
        raise refuse("no recordings (*.json) found")
    if diagram_out is not None and len(paths) != 1:
        raise refuse(f"--diagram draws one turn; {len(paths)} recordings given")
    try:
        recordings = [TurnRecording.load(path) for path in paths]
        fmt = format_for(diagram_out) if diagram_out is not None else None
    except ValueError as error:
        raise refuse(str(error)) from None
    telemetry = None
    provider = None
    if spans:
        from .telemetry_setup import TelemetrySetupError, configure_tracing

        try:
            provider = configure_tracing()
        except TelemetrySetupError as error:
            raise refuse(str(error)) from None
        telemetry = Telemetry(tracer_provider=provider)
    diverged = 0
    try:
        for path, recording in zip(paths, recordings, strict=True):
            outcome = asyncio.run(replay_turn(recording, telemetry=telemetry))
            outcome = replace(outcome, source=path)
            lines = outcome.describe()
            typer.echo("\n".join([lines[0], lines[-1]] if quiet and outcome.ok else lines))
            diverged += not outcome.ok
    finally:
        if provider is not None:
            provider.shutdown()
    if diagram_out is not None and fmt is not None:
        try:
            diagram_out.write_bytes(pipeline_diagram(fmt, path=recordings[0].trace))
        except (DiagramError, ValueError) as error:
            raise refuse(str(error)) from None
        except OSError as error:
            raise refuse(f"cannot write {diagram_out}: {error.strerror or error}") from None
        typer.echo(f"path diagram: {diagram_out}")
    if len(paths) > 1:
        typer.echo(f"{len(paths) - diverged} of {len(paths)} recordings replay; {diverged} diverge")
    raise typer.Exit(1 if diverged else 0)


def _build_app() -> typer.Typer:
    """The Typer app: Typer imported, the commands above registered."""
    global typer  # the commands' annotations and bodies name it
    import typer

    built = typer.Typer(
        name="aptix",
        help="Run and inspect Aptix agent turns as a formal state machine.",
        no_args_is_help=True,
        add_completion=False,
    )
    built.callback()(_root)
    for command in (validate, run, serve, diagram, replay):
        built.command()(command)
    return built


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
    """Console-script entry point; ``aptix --version`` is answered before Typer is imported."""
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"aptix-pipeline {__version__}\n")
        sys.exit(0)
    sys.exit(__getattr__("app")())
