"""``aptix run REQUEST.json``: one turn on the embedded defaults, its ``InvokeResult`` printed.

``run`` reads as the command's steps: check the flags, start tracing, load the
configuration, open the model and the store, build the pipeline, run the turn,
close what it opened, print. A step that fails on what the user gave (a missing
file, a malformed script or configuration, a bad store) ends the command with
exit code 2 and one line on stderr; otherwise it exits 0 when the turn is
Successful, 1 when not. ``cli/__init__.py`` describes the options.

``--stream`` (or a request file with ``"Stream": true``, AGN-034 §4.7) delivers the
turn as it happens (``cli/stream.py``): the text live on stdout, progress on
stderr, then the same ``InvokeResult`` and exit code. The request file goes to the
pipeline as written: streaming is the CLI's way of delivering, never a field it
adds (a continuation may not carry ``Stream``, AGN-034 §2.2). Ctrl-C during a
streamed turn cancels it, stores nothing and exits 130.

What the command is given is checked before the turn runs: ``--record`` must be a
folder it can write, ``--diagram`` a suffix it can draw (svg/png with Graphviz on
``PATH``), ``--store`` a scheme it knows. Only the secrets the command uses are
read (``secrets_for``, D364): the configuration's model key when no
``--llm-script`` stands in for it, its store's when no ``--store`` does, never
its API keys. Without a store, sessions go to the data folder's ``aptix.db``
(``config/data_dir.py``, D366). A script keyed by turn is played from the session's turn
(``cli/script.py``, D363). ``--report`` prints the turn's summary, each check once;
``--report-format full`` the whole ``TurnReport`` (D367). ``--after RESULT.json``
continues that result's session (D368).

``aptix chat`` (``cli/chat.py``) takes the same options (``ConfigOption`` and the
others) and opens its ports through the same steps (``load_config``,
``open_model``, ``open_session_store``, ``build_run_pipeline``, ``close_ports``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

import typer

from .logs import show_logs, shows_verbose

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from aptix_pipeline.adapters.config import ServiceConfig
    from aptix_pipeline.contracts import LLM, Caller, InvokeError, SessionStore
    from aptix_pipeline.engine import DiagramFormat, Pipeline, TurnReport

__all__ = [
    "COMMAND_NAME",
    "DEFAULT_ORG",
    "DEFAULT_USER",
    "ConfigOption",
    "InitialModeOption",
    "LlmScriptOption",
    "OrgOption",
    "ReportFormat",
    "StoreOption",
    "UserOption",
    "VerboseOption",
    "budget_refusal_line",
    "build_run_pipeline",
    "caller_of",
    "check_output_file",
    "check_record_folder",
    "close_ports",
    "config_script",
    "continue_after",
    "diagram_format",
    "draw_turn_path",
    "load_config",
    "open_model",
    "open_session_store",
    "open_turn_script",
    "report_summary",
    "run",
    "start_tracing",
    "usage_error",
]

Refuse: TypeAlias = Callable[[str], typer.Exit]
"""Says what is wrong on stderr and gives the exit (code 2) to raise: ``usage_error``."""

_INTERRUPTED = 130
"""The exit code of a turn Ctrl-C cancelled: 128 + SIGINT, as shells report it."""

# The options. Typer renders help text as rich markup, where "[model]" would be a
# style tag: a literal "[" is written "\\[".
_Request: TypeAlias = Annotated[
    Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="Request JSON file.")
]
LlmScriptOption: TypeAlias = Annotated[
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
StoreOption: TypeAlias = Annotated[
    str | None,
    typer.Option(
        help="Session store: sqlite:PATH, memory or postgresql://...; default: the config's "
        "\\[store], else aptix.db in the data folder ($APTIX_DATA_DIR, else "
        "$XDG_DATA_HOME/aptix, else ~/.local/share/aptix)."
    ),
]
OrgOption: TypeAlias = Annotated[str, typer.Option(help="The caller's org.")]
UserOption: TypeAlias = Annotated[str, typer.Option(help="The caller's user.")]
DEFAULT_ORG = "local"
"""The org of every command that acts as a caller (``run``, ``chat``, ``sessions show``)
when ``--org`` is not given (D390)."""
DEFAULT_USER = "local"
"""The user of every command that acts as a caller when ``--user`` is not given."""
ConfigOption: TypeAlias = Annotated[
    Path | None,
    typer.Option(
        exists=True,
        dir_okay=False,
        readable=True,
        help="Configuration TOML: catalog tables, \\[model], \\[store], \\[engine] "
        "(docs/CONFIGURATION.md).",
    ),
]
InitialModeOption: TypeAlias = Annotated[
    str | None, typer.Option(help="Mode of a new session (default: general).")
]
_Report: TypeAlias = Annotated[
    bool,
    typer.Option(help="Also print what the turn did (states, checks, tools, modes) to stderr."),
]


class ReportFormat(StrEnum):
    """``--report-format``: the summary (each check once) or the whole ``TurnReport``."""

    SUMMARY = "summary"
    FULL = "full"


_ReportFormat: TypeAlias = Annotated[
    ReportFormat | None,
    typer.Option(
        "--report-format",
        help="With --report: summary (the default; states, checks with their rule ids, "
        "tools, modes) or full (also the transitions and the state trace, as TurnReport "
        "gives them).",
    ),
]
_Diagram: TypeAlias = Annotated[
    Path | None,
    typer.Option(
        "--diagram",
        dir_okay=False,
        help="Draw the path this turn took on the pipeline diagram; format from the "
        "suffix (.svg and .png need Graphviz's dot; .dot, .gv, .mmd, .md need nothing).",
    ),
]
_After: TypeAlias = Annotated[
    Path | None,
    typer.Option(
        "--after",
        exists=True,
        dir_okay=False,
        readable=True,
        help="An earlier turn's printed InvokeResult: this request continues its session "
        "(its SessionId and TurnId go into the request, in place of the file's).",
    ),
]
_Trace: TypeAlias = Annotated[
    bool,
    typer.Option("--trace", help="Also print the turn's state trace, one line a step, to stderr."),
]
_Compact: TypeAlias = Annotated[bool, typer.Option(help="One line of JSON.")]
VerboseOption: TypeAlias = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Show whole log records on stderr, tracebacks included (else one line each).",
    ),
]
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
    llm_script: LlmScriptOption = None,
    store: StoreOption = None,
    org: OrgOption = DEFAULT_ORG,
    user: UserOption = DEFAULT_USER,
    config: ConfigOption = None,
    initial_mode: InitialModeOption = None,
    report: _Report = False,
    trace: _Trace = False,
    compact: _Compact = False,
    record: _Record = None,
    redact: _Redact = False,
    idempotency_key: _IdempotencyKey = None,
    stream: _Stream = None,
    report_format: _ReportFormat = None,
    diagram: _Diagram = None,
    after: _After = None,
    verbose: VerboseOption = False,
) -> None:
    """Run one agent turn (AGN-034 request in, AGN-033 response out) and print its InvokeResult.

    Spans go where OTEL_TRACES_EXPORTER says (console: JSON on stderr; otlp; none).
    """
    show_logs(verbose)
    if redact and record is None:
        raise usage_error("--redact applies to --record DIR")
    if not org.strip() or not user.strip():
        raise usage_error("--org and --user must not be empty")
    if record is not None:
        check_record_folder(record, usage_error)
    fmt = diagram_format(diagram, usage_error) if diagram is not None else None
    body = request.read_bytes()
    if after is not None:
        body = continue_after(body, after, usage_error)
    provider = start_tracing()
    service = load_config(config, model=llm_script is None, store=store is None)
    script = llm_script or config_script(service)
    llm = open_model(llm_script, service)
    session_store = open_session_store(store, service)
    try:
        caller = caller_of(org, user)
        if llm is None and script is not None:  # a script keyed by turn: the store says which
            llm = open_turn_script(script, session_store, caller, body)
        assert llm is not None
        pipeline = build_run_pipeline(llm, session_store, service, provider, record, redact=redact)
        if _streams(stream, body):
            outcome = _stream_turn(pipeline, body, caller, initial_mode, idempotency_key)
        else:
            outcome = _run_turn(pipeline, body, caller, initial_mode, idempotency_key)
    finally:
        close_ports(session_store, provider, service)
    if outcome is None:
        typer.echo("aptix run: interrupted: the turn was cancelled, nothing stored", err=True)
        raise typer.Exit(_INTERRUPTED)
    shown_report = (
        report_format if report_format is not None else (ReportFormat.SUMMARY if report else None)
    )
    _print_outcome(outcome, pipeline, compact=compact, trace=trace, report=shown_report)
    if script is not None:
        _hint_reused_script(outcome, body, script)
    if diagram is not None and fmt is not None:
        draw_turn_path(outcome, pipeline, fmt, diagram, usage_error)
    raise typer.Exit(0 if outcome.successful else 1)


COMMAND_NAME: ContextVar[str] = ContextVar("COMMAND_NAME", default="run")
"""The command whose ports these steps open (``run``; ``aptix chat`` sets ``chat``)."""


def usage_error(message: str) -> typer.Exit:
    """Say what is wrong on stderr, named by the command running (``aptix run``, or
    ``aptix chat``, which opens its ports with the same steps); the exit (code 2) to raise."""
    typer.echo(f"aptix {COMMAND_NAME.get()}: {message}", err=True)
    return typer.Exit(2)


def start_tracing() -> TracerProvider | None:
    """The spans' provider as OTEL_TRACES_EXPORTER says (``None``: no spans are exported)."""
    from aptix_pipeline.adapters.system import TelemetrySetupError, configure_tracing

    try:
        return configure_tracing()
    except TelemetrySetupError as error:
        raise usage_error(str(error)) from None


def caller_of(org: str, user: str) -> Caller:
    """The caller ``--org``/``--user`` name."""
    from aptix_pipeline.contracts import Caller

    return Caller(org=org, user=user)


def _json_object(text: bytes) -> dict[str, Any] | None:
    """``text`` as a JSON object, else ``None``."""
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def continue_after(body: bytes, result_file: Path, refuse: Refuse) -> bytes:
    """The request ``body`` with the ``SessionId`` and ``TurnId`` of the ``InvokeResult``
    in ``result_file`` (D368); a file that holds no successful result, or a request that
    is not a JSON object, is refused."""
    import json

    text = result_file.read_bytes()
    result = _json_object(text)
    if result is None and text.strip():  # --stream --compact: the result is the last line
        result = _json_object(text.strip().splitlines()[-1])
    answer = result.get("Result") if result is not None else None
    if not isinstance(answer, dict) or not {"SessionId", "TurnId"} <= answer.keys():
        raise refuse(
            f"--after {result_file}: not the InvokeResult of a successful turn "
            "(aptix run's output, with Result.SessionId and Result.TurnId)"
        )
    request = _json_object(body)
    if request is None:
        raise refuse("--after: the request file must hold a JSON object")
    request.update(SessionId=answer["SessionId"], TurnId=answer["TurnId"])
    return json.dumps(request).encode("utf-8")


def check_record_folder(folder: Path, refuse: Refuse) -> None:
    """``--record``'s folder, made if missing; one that cannot be made or written is
    refused through ``refuse(message)`` (a ``typer.Exit`` to raise) before any turn runs."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = error.strerror or error
        raise refuse(f"--record {folder}: cannot make the folder: {reason}") from None
    refused = _cannot_write(folder)
    if refused is not None:
        raise refuse(f"--record {folder}: the folder is not writable ({refused})")


def _cannot_write(folder: Path, out: Path | None = None) -> str | None:
    """Why a file cannot be written in ``folder`` (``out``, when given and there, opened
    to append, which changes nothing), or ``None``: tried, not judged from permission
    bits, which say yes to root on a read-only or virtual file system."""
    import tempfile

    try:
        if out is not None and out.exists():
            with out.open("ab"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".aptix-check-"):
                pass
    except OSError as error:
        return str(error.strerror or error)
    return None


def check_output_file(out: Path, option: str, refuse: Refuse) -> None:
    """Refuse, before anything is run or stored, an output file that cannot be written:
    a folder, or a file whose folder does not exist or is not writable (D391)."""
    if out.is_dir():
        raise refuse(f"{option} {out}: is a folder, not a file")
    folder = out.parent
    if not folder.is_dir():
        raise refuse(f"{option} {out}: the folder {folder} does not exist")
    reason = _cannot_write(folder, out)
    if reason is not None:
        raise refuse(f"{option} {out}: not writable ({reason})")


def diagram_format(out: Path, refuse: Refuse) -> DiagramFormat:
    """The format ``--diagram``'s suffix names; an unknown suffix, svg/png without
    Graphviz's ``dot`` on ``PATH``, or a file that cannot be written is refused before
    the turn runs."""
    import shutil

    from aptix_pipeline.engine import DiagramFormat, format_for

    try:
        fmt = format_for(out)
    except ValueError as error:
        raise refuse(f"--diagram: {error}") from None
    check_output_file(out, "--diagram", refuse)
    if fmt in (DiagramFormat.SVG, DiagramFormat.PNG) and shutil.which("dot") is None:
        raise refuse(
            f"--diagram {out}: {fmt.value} needs Graphviz's 'dot' program, which is not on "
            "PATH: install Graphviz, or draw a .dot or .mmd file, which need nothing"
        )
    return fmt


def draw_turn_path(
    outcome: TurnReport, pipeline: Pipeline, fmt: DiagramFormat, out: Path, refuse: Refuse
) -> None:
    """The path the turn took, drawn on the pipeline diagram into ``out`` (a Markdown
    ``mermaid`` block for ``.md``); ``refuse`` ends the command when it cannot be."""
    from aptix_pipeline.engine import DiagramError, pipeline_diagram

    from .diagram import write_drawing

    if outcome.trace is None:
        raise refuse(f"--diagram {out}: the turn left no trace to draw")
    try:
        data = pipeline_diagram(fmt, path=outcome.trace, rules=pipeline.rules)
    except (DiagramError, ValueError) as error:
        raise refuse(f"--diagram {out}: {error}") from None
    write_drawing(data, fmt, out, lambda message: refuse(f"--diagram: {message}"))
    typer.echo(f"path diagram: {out}", err=True)


def load_config(config: Path | None, *, model: bool, store: bool) -> ServiceConfig | None:
    """The ``--config`` file, loaded, with the secrets of the model and the store only
    when the command uses them (never the API keys), and ``[files]``'s signing key
    when it has that table (its tools' files are kept as ``aptix serve`` keeps them);
    ``None`` without one."""
    if config is None:
        return None
    from aptix_pipeline.adapters.config import ConfigError, SecretTable, load_service_config

    uses: set[SecretTable] = {"files"}
    if model:
        uses.add("model")
    if store:
        uses.add("store")
    try:
        return load_service_config(config, secrets_for=uses)
    except ConfigError as error:
        raise usage_error(str(error)) from None


def config_script(service: ServiceConfig | None) -> Path | None:
    """The script of the configuration's ``[model] kind = "scripted"``, if it has one."""
    from aptix_pipeline.adapters.config import ScriptedModelConfig

    model = service.model if service is not None else None
    return model.script if isinstance(model, ScriptedModelConfig) else None


@contextmanager
def _opening_port() -> Iterator[None]:
    """A model or store that cannot be opened, as a usage error (SQLite's named by its class)."""
    import sqlite3

    from aptix_pipeline.adapters.models import ScriptError

    try:
        yield
    except (ScriptError, ValueError, OSError, RuntimeError, ImportError, sqlite3.Error) as error:
        sqlite = isinstance(error, sqlite3.Error)
        raise usage_error(f"{type(error).__name__}: {error}" if sqlite else str(error)) from None


def open_model(llm_script: Path | None, service: ServiceConfig | None) -> LLM | None:
    """The model: ``--llm-script``'s scripted replies, else the configuration's ``[model]``;
    ``None`` for a script keyed by turn, checked here and opened once the store can say
    which turn the request is (``open_turn_script``)."""
    from aptix_pipeline.adapters.models import ScriptedLLM

    model = service.model if service is not None else None
    if llm_script is None and model is None:
        raise usage_error("give --llm-script, or a --config with a [model] table")
    script = llm_script or config_script(service)
    with _opening_port():
        if script is not None:
            text = script.read_bytes()
            scripted = ScriptedLLM.from_json(text)  # every turn of a keyed script checked
            return None if ScriptedLLM.has_turns(text) else scripted
        from aptix_pipeline.adapters.config import build_llm

        assert model is not None
        return build_llm(model)


def open_turn_script(script: Path, session_store: SessionStore, caller: Caller, body: bytes) -> LLM:
    """A script keyed by turn, at the request's turn of its session (``cli/script.py``)."""
    from .script import open_script

    with _opening_port():
        return open_script(script, session_store, caller, body)


def open_session_store(store: str | None, service: ServiceConfig | None) -> SessionStore:
    """The session store: ``--store``, else the configuration's ``[store]``, else the data
    folder's SQLite file (``config/data_dir.py``), said on stderr when it is created."""
    from aptix_pipeline.adapters.config import default_store_url
    from aptix_pipeline.adapters.embedded import open_store

    with _opening_port():
        return open_store(store or (service.store_url if service else None) or default_store_url())


def build_run_pipeline(
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
    from aptix_pipeline.adapters.config import CatalogError, HostExtension

    # [files] keeps the tools' files as `aptix serve` does, its URLs expiring by this clock.
    from aptix_pipeline.adapters.embedded import embedded_pipeline, open_file_store
    from aptix_pipeline.adapters.models import stderr_retry_notices
    from aptix_pipeline.adapters.system import SystemClock
    from aptix_pipeline.engine import SpanMode, Telemetry

    clock = SystemClock()
    retriever = None
    if service is not None:  # only with --config: a run without one never loads service_config
        from aptix_pipeline.adapters.config import ConfigError, open_retriever

        try:
            retriever = open_retriever(service)
        except ConfigError as error:
            raise usage_error(str(error)) from None
    # [host] extension: the host's rules, hooks, listeners and tools, as `aptix serve` runs them
    host = service.host if service is not None else HostExtension()
    recording = service.recording if service else None
    if record is not None:  # the replay tooling is loaded only for a run that records
        from aptix_pipeline.engine.replay import RecordingOptions

        recording = RecordingOptions(directory=record, redact=redact)
    try:
        return embedded_pipeline(
            llm=llm,
            store=session_store,
            retriever=retriever,
            tools=host.tools,
            hooks=host.hooks,
            rules=host.rules,
            catalog=service.catalog if service else None,
            files=open_file_store(service.files if service else None, clock),
            clock=clock,
            options=service.options if service else None,
            telemetry=Telemetry(
                tracer_provider=provider,
                span_mode=service.span_mode if service else SpanMode.FULL,
            ),
            recording=recording,
            listeners=(
                *host.listeners,
                stderr_retry_notices(
                    service.options if service else None, quiet=not shows_verbose()
                ),
            ),
            mcp=service.mcp if service else None,
        )
    except (CatalogError, OSError, ValueError) as error:  # ValueError: budgets with no ledger
        raise usage_error(str(error)) from None


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
    caller: Caller,
    initial_mode: str | None,
    idempotency_key: str | None,
) -> TurnReport:
    """Run the request file's turn for the caller ``--org``/``--user``."""
    import asyncio

    return asyncio.run(
        pipeline.run(
            body,
            caller,
            initial_mode=initial_mode,
            idempotency_key=idempotency_key,
        )
    )


def _stream_turn(
    pipeline: Pipeline,
    body: bytes,
    caller: Caller,
    initial_mode: str | None,
    idempotency_key: str | None,
) -> TurnReport | None:
    """Run the turn streamed (``cli/stream.py``); ``None`` when Ctrl-C cancelled it."""
    import sys

    from .stream import stream_turn

    return stream_turn(
        pipeline,
        body,
        caller,
        initial_mode=initial_mode,
        idempotency_key=idempotency_key,
        out=sys.stdout,
        err=sys.stderr,
    )


def close_ports(
    session_store: SessionStore,
    provider: TracerProvider | None,
    service: ServiceConfig | None = None,
) -> None:
    """Close the store and the configuration's MCP servers, and flush the spans before
    the output."""
    if service is not None:
        service.close()
    close = getattr(session_store, "close", None)
    if close is not None:
        close()
    if provider is not None:
        provider.shutdown()


_FULL_ONLY = frozenset({"result", "transitions", "trace"})
"""What the summary report leaves out: the answer (on stdout), the transitions (the
``states`` say the same) and the state trace, which repeats every check's rule ids
(``--trace`` prints it)."""


def report_summary(outcome: TurnReport, *, content: bool, full: bool = False) -> dict[str, Any]:
    """What ``--report`` prints (D367): the ``TurnReport`` without its result; unless
    ``full``, also without the transitions and the state trace, each check given as its
    step, phase, number of rules and failed ones, and every rule id checked listed once
    under ``rule_ids`` (a guard may check again what an exit hook checked)."""
    shown = outcome.to_dict(content=content)
    if full:
        return {key: value for key, value in shown.items() if key != "result"}
    summary = {key: value for key, value in shown.items() if key not in _FULL_ONLY}
    summary["checks"] = [
        {
            "step": check["step"],
            "phase": check["phase"],
            "rules": len(check["rule_ids"]),
            "failed": check["failed"],
            "deferred": check["deferred"],
        }
        for check in shown["checks"]
    ]
    summary["rule_ids"] = list(
        dict.fromkeys(rule for check in shown["checks"] for rule in check["rule_ids"])
    )
    return summary


def budget_refusal_line(error: InvokeError) -> str:
    """A ``budget_exceeded`` error in one line: which budget, what remains, and when to
    try again (docs/BUDGETS.md)."""
    budget = error.budget
    retry = ""
    if budget is not None and budget.retry_after_seconds is not None:
        retry = f"; try again in {budget.retry_after_seconds} s"
    return f"budget exceeded, the model was not called: {error.message}{retry}"


def _print_outcome(
    outcome: TurnReport,
    pipeline: Pipeline,
    *,
    compact: bool,
    trace: bool,
    report: ReportFormat | None,
) -> None:
    """The ``InvokeResult`` on stdout; on stderr, the state trace (``--trace``) and what
    else the turn did (``--report``)."""
    import json

    from aptix_pipeline.contracts import ErrorCode

    typer.echo(outcome.result.to_json(indent=None if compact else 2))
    for error in outcome.result.errors:  # a model or store that failed: said in one line
        if error.code is ErrorCode.PORT_FAILED:
            first = error.message.strip().splitlines()[0] if error.message.strip() else ""
            typer.echo(f"aptix {COMMAND_NAME.get()}: {first} (--verbose: the traceback)", err=True)
        elif error.code is ErrorCode.BUDGET_EXCEEDED:  # the model call was not made
            typer.echo(f"aptix {COMMAND_NAME.get()}: {budget_refusal_line(error)}", err=True)
    if trace and outcome.trace is not None:
        typer.echo("\n".join(outcome.trace.describe()), err=True)
    if report is not None:
        # A mode change's reason is user content: shown with content capture only.
        summary = report_summary(
            outcome,
            content=bool(pipeline.telemetry.capture_content),
            full=report is ReportFormat.FULL,
        )
        typer.echo(json.dumps(summary, indent=None if compact else 2), err=True)


def _hint_reused_script(outcome: TurnReport, body: bytes, script: Path) -> None:
    """Say on stderr when a flat script replayed its first reply into its session."""
    from .script import reused_script_hint

    hint = reused_script_hint(outcome, body, script)
    if hint is not None:
        typer.echo(f"aptix run: {hint}", err=True)
