"""``aptix run REQUEST.json``: one turn on the embedded defaults, its ``InvokeResult`` printed.

``run`` reads as the command's steps: check the flags, start tracing, load the
configuration, open the model and the store, build the pipeline, run the turn,
close what it opened, print. A step that fails on what the user gave (a missing
file, a malformed script or configuration, a bad store) ends the command with
exit code 2 and one line on stderr; otherwise it exits 0 when the turn is
Successful, 1 when not. ``cli.py`` describes the options.

``--stream`` (or a request file with ``"Stream": true``, AGN-034 §4.7) delivers the
turn as it happens (``cli_stream.py``): the text live on stdout, progress on
stderr, then the same ``InvokeResult`` and exit code. The request file goes to the
pipeline as written: streaming is the CLI's way of delivering, never a field it
adds (a continuation may not carry ``Stream``, AGN-034 §2.2). Ctrl-C during a
streamed turn cancels it, stores nothing and exits 130.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeAlias

import typer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from aptix_pipeline.contracts import LLM, SessionStore
    from aptix_pipeline.engine import Pipeline, TurnReport

    from .service_config import ServiceConfig

__all__ = ["run"]

_INTERRUPTED = 130
"""The exit code of a turn Ctrl-C cancelled: 128 + SIGINT, as shells report it."""

# The options. Typer renders help text as rich markup, where "[model]" would be a
# style tag: a literal "[" is written "\\[".
_Request: TypeAlias = Annotated[
    Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="Request JSON file.")
]
_LlmScript: TypeAlias = Annotated[
    Path | None,
    typer.Option(
        "--llm-script",
        exists=True,
        dir_okay=False,
        readable=True,
        help="ScriptedLLM replies for this turn (docs/MODELS.md: 'Scripted model'); "
        "default: the config's \\[model].",
    ),
]
_Store: TypeAlias = Annotated[
    str | None,
    typer.Option(
        help="Session store: sqlite:PATH or memory; default: the config's \\[store], "
        "else sqlite:aptix.db."
    ),
]
_Org: TypeAlias = Annotated[str, typer.Option(help="The caller's org.")]
_User: TypeAlias = Annotated[str, typer.Option(help="The caller's user.")]
_Config: TypeAlias = Annotated[
    Path | None,
    typer.Option(
        exists=True,
        dir_okay=False,
        readable=True,
        help="Configuration TOML: catalog tables, \\[model], \\[store], \\[engine] "
        "(docs/CONFIGURATION.md).",
    ),
]
_InitialMode: TypeAlias = Annotated[
    str | None, typer.Option(help="Mode of a new session (default: general).")
]
_Report: TypeAlias = Annotated[
    bool,
    typer.Option(help="Also print what the turn did (states, checks, tools, modes) to stderr."),
]
_Trace: TypeAlias = Annotated[
    bool,
    typer.Option("--trace", help="Also print the turn's state trace, one line a step, to stderr."),
]
_Compact: TypeAlias = Annotated[bool, typer.Option(help="One line of JSON.")]
_Record: TypeAlias = Annotated[
    Path | None,
    typer.Option(
        "--record",
        file_okay=False,
        help="Record the turn into this folder, one file per turn, for `aptix replay`; "
        "default: the config's \\[recording].",
    ),
]
_Redact: TypeAlias = Annotated[
    bool, typer.Option("--redact", help="With --record: leave user content out.")
]
_Stream: TypeAlias = Annotated[
    bool | None,
    typer.Option(
        "--stream/--no-stream",
        help="Print the model's text as it is written and progress on stderr, then the "
        "InvokeResult (docs/CLI.md: 'Streaming'); default: the request's Stream flag.",
    ),
]
_IdempotencyKey: TypeAlias = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Re-running this request with this key prints the answer its first run "
        "stored, without another turn (1-255 visible ASCII characters; per --org/--user).",
    ),
]


def run(
    request: _Request,
    llm_script: _LlmScript = None,
    store: _Store = None,
    org: _Org = "local",
    user: _User = "local",
    config: _Config = None,
    initial_mode: _InitialMode = None,
    report: _Report = False,
    trace: _Trace = False,
    compact: _Compact = False,
    record: _Record = None,
    redact: _Redact = False,
    idempotency_key: _IdempotencyKey = None,
    stream: _Stream = None,
) -> None:
    """Run one agent turn (AGN-034 request in, AGN-033 response out) and print its InvokeResult.

    Spans go where OTEL_TRACES_EXPORTER says (console: JSON on stderr; otlp; none).
    """
    if redact and record is None:
        raise _usage_error("--redact applies to --record DIR")
    if not org.strip() or not user.strip():
        raise _usage_error("--org and --user must not be empty")
    provider = _start_tracing()
    service = _load_config(config)
    llm = _open_model(llm_script, service)
    session_store = _open_store(store, service)
    pipeline = _build_pipeline(llm, session_store, service, provider, record, redact=redact)
    try:
        body = request.read_bytes()
        if _streams(stream, body):
            outcome = _stream_turn(pipeline, body, org, user, initial_mode, idempotency_key)
        else:
            outcome = _run_turn(pipeline, body, org, user, initial_mode, idempotency_key)
    finally:
        _close(session_store, provider)
    if outcome is None:
        typer.echo("aptix run: interrupted: the turn was cancelled, nothing stored", err=True)
        raise typer.Exit(_INTERRUPTED)
    _print_outcome(outcome, pipeline, compact=compact, trace=trace, report=report)
    raise typer.Exit(0 if outcome.successful else 1)


def _usage_error(message: str) -> typer.Exit:
    """Say what is wrong on stderr; the exit (code 2) to raise."""
    typer.echo(f"aptix run: {message}", err=True)
    return typer.Exit(2)


def _start_tracing() -> TracerProvider | None:
    """The spans' provider as OTEL_TRACES_EXPORTER says (``None``: no spans are exported)."""
    from .telemetry_setup import TelemetrySetupError, configure_tracing

    try:
        return configure_tracing()
    except TelemetrySetupError as error:
        raise _usage_error(str(error)) from None


def _load_config(config: Path | None) -> ServiceConfig | None:
    """The ``--config`` file, loaded; ``None`` without one."""
    if config is None:
        return None
    from .service_config import ConfigError, load_service_config

    try:
        return load_service_config(config)
    except ConfigError as error:
        raise _usage_error(str(error)) from None


@contextmanager
def _opening_port() -> Iterator[None]:
    """A model or store that cannot be opened, as a usage error (SQLite's named by its class)."""
    import sqlite3

    from .scripted_llm import ScriptError

    try:
        yield
    except (ScriptError, ValueError, OSError, RuntimeError, ImportError, sqlite3.Error) as error:
        sqlite = isinstance(error, sqlite3.Error)
        raise _usage_error(f"{type(error).__name__}: {error}" if sqlite else str(error)) from None


def _open_model(llm_script: Path | None, service: ServiceConfig | None) -> LLM:
    """The model: ``--llm-script``'s scripted replies, else the configuration's ``[model]``."""
    model = service.model if service is not None else None
    if llm_script is None and model is None:
        raise _usage_error("give --llm-script, or a --config with a [model] table")
    with _opening_port():
        if llm_script is not None:
            from .scripted_llm import ScriptedLLM

            return ScriptedLLM.from_file(llm_script)
        from .service_config import build_llm

        assert model is not None
        return build_llm(model)


def _open_store(store: str | None, service: ServiceConfig | None) -> SessionStore:
    """The session store: ``--store``, else the configuration's ``[store]``, else the default
    SQLite file (``sqlite:aptix.db``)."""
    from .embedded import DEFAULT_STORE_URL, open_store

    with _opening_port():
        return open_store(store or (service.store_url if service else None) or DEFAULT_STORE_URL)


def _build_pipeline(
    llm: LLM,
    session_store: SessionStore,
    service: ServiceConfig | None,
    provider: TracerProvider | None,
    record: Path | None,
    *,
    redact: bool,
) -> Pipeline:
    """The embedded pipeline on this model and store, with the configuration's catalog and
    ``[engine]`` options, recording as ``--record`` says, else as ``[recording]`` does."""
    from aptix_pipeline.engine import Telemetry
    from aptix_pipeline.engine.replay import RecordingOptions

    from .catalog_config import CatalogError
    from .embedded import embedded_pipeline
    from .retry_notices import stderr_retry_notices
    from .service_config import ConfigError, open_retriever

    try:
        return embedded_pipeline(
            llm=llm,
            store=session_store,
            retriever=open_retriever(service) if service else None,
            catalog=service.catalog if service else None,
            options=service.options if service else None,
            telemetry=Telemetry(tracer_provider=provider),
            recording=(
                RecordingOptions(directory=record, redact=redact)
                if record is not None
                else (service.recording if service else None)
            ),
            listeners=(stderr_retry_notices(service.options if service else None),),
        )
    except (CatalogError, ConfigError, OSError) as error:
        raise _usage_error(str(error)) from None


def _streams(stream: bool | None, body: bytes) -> bool:
    """``--stream``/``--no-stream`` as given, else the request's own ``"Stream": true``
    (``asks_to_stream``: any other body runs as given, and the pipeline names what is
    wrong with it)."""
    if stream is not None:
        return stream
    from aptix_pipeline.engine import asks_to_stream

    return asks_to_stream(body)


def _run_turn(
    pipeline: Pipeline,
    body: bytes,
    org: str,
    user: str,
    initial_mode: str | None,
    idempotency_key: str | None,
) -> TurnReport:
    """Run the request file's turn for the caller ``--org``/``--user``."""
    import asyncio

    from aptix_pipeline.contracts import Caller

    return asyncio.run(
        pipeline.run(
            body,
            Caller(org=org, user=user),
            initial_mode=initial_mode,
            idempotency_key=idempotency_key,
        )
    )


def _stream_turn(
    pipeline: Pipeline,
    body: bytes,
    org: str,
    user: str,
    initial_mode: str | None,
    idempotency_key: str | None,
) -> TurnReport | None:
    """Run the turn streamed (``cli_stream.py``); ``None`` when Ctrl-C cancelled it."""
    import sys

    from aptix_pipeline.contracts import Caller

    from .cli_stream import stream_turn

    return stream_turn(
        pipeline,
        body,
        Caller(org=org, user=user),
        initial_mode=initial_mode,
        idempotency_key=idempotency_key,
        out=sys.stdout,
        err=sys.stderr,
    )


def _close(session_store: SessionStore, provider: TracerProvider | None) -> None:
    """Close the store, and flush the spans before the output."""
    close = getattr(session_store, "close", None)
    if close is not None:
        close()
    if provider is not None:
        provider.shutdown()


def _print_outcome(
    outcome: TurnReport, pipeline: Pipeline, *, compact: bool, trace: bool, report: bool
) -> None:
    """The ``InvokeResult`` on stdout; on stderr, the state trace (``--trace``) and what
    else the turn did (``--report``)."""
    import json

    typer.echo(outcome.result.to_json(indent=None if compact else 2))
    if trace and outcome.trace is not None:
        typer.echo("\n".join(outcome.trace.describe()), err=True)
    if report:
        # A mode change's reason is user content: shown with content capture only.
        shown = outcome.to_dict(content=bool(pipeline.telemetry.capture_content))
        summary = {key: value for key, value in shown.items() if key != "result"}
        typer.echo(json.dumps(summary, indent=None if compact else 2), err=True)
