"""``aptix replay FILE|DIR... [--live CONFIG [--live-model]] [--diagram OUT] [--spans]``.

Each recording is re-run (``engine/replay/replayer.py``) with the ports answering from it;
the command prints each trace and names the first divergence. ``--live CONFIG``
runs that configuration's catalog, server tools and retrieval index live instead, and with
``--live-model`` its ``[model]`` too (``LivePorts``, docs/RECORDING.md "Replaying
against your own code"), so a change of prompt, mode, tool or model shows as an
``answer`` divergence. ``--diagram`` draws the recorded turn's path. Exit codes: 0
every recording replays, 1 one diverges, 2 for a usage error.

``aptix eval CASES --config CANDIDATE`` (and ``aptix eval capture``) runs a folder of
recordings on a candidate configuration (``adapters/evals``, docs/EVALS.md): replay's
sibling for a candidate that may answer otherwise. Exit codes: 0 no case regresses, 1
one does, 2 for a usage error.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from aptix_pipeline.engine import DiagramFormat, Telemetry
    from aptix_pipeline.engine.replay import LivePorts, TurnRecording

__all__ = ["eval_app", "replay"]


def replay(
    files: Annotated[
        list[Path],
        typer.Argument(exists=True, readable=True, help="Recordings, or folders of them."),
    ],
    diagram_out: Annotated[
        Path | None,
        typer.Option(
            "--diagram",
            help="Draw the path the recorded turn took (one recording); "
            "format from the suffix (.mmd, .dot, .svg, .png).",
        ),
    ] = None,
    spans: Annotated[
        bool,
        typer.Option("--spans", help="Emit spans (OTEL_TRACES_EXPORTER); off by default."),
    ] = False,
    quiet: Annotated[bool, typer.Option(help="Only the verdict of each recording.")] = False,
    live: Annotated[
        Path | None,
        typer.Option(
            "--live",
            exists=True,
            dir_okay=False,
            readable=True,
            help="Run this configuration's catalog, tools and retriever live (docs/RECORDING.md).",
        ),
    ] = None,
    live_model: Annotated[
        bool,
        typer.Option("--live-model", help="With --live, run its \\[model] live too."),
    ] = False,
) -> None:
    """Re-run recorded turns against this code; name the first divergence of each.

    Ports answer from the recording and every call is checked against it; with
    --live, the configuration's catalog, server tools and retriever (and with --live-model
    its model) answer instead, and must answer as the recorded ones did. Exit
    codes: 0 when every recording replays, 1 when one diverges, 2 for a usage
    error (not a recording, an unknown format, a diagram that cannot be drawn, a
    configuration that does not load).
    """
    if live_model and live is None:
        raise _refuse("--live-model needs --live CONFIG")
    paths, recordings, fmt = _recordings(files, diagram_out)
    ports = _live_ports(live, live_model) if live is not None else None
    diverged = _replay_all(paths, recordings, spans=spans, quiet=quiet, live=ports)
    if diagram_out is not None and fmt is not None:
        _draw_path(recordings[0], fmt, diagram_out)
    if len(paths) > 1:
        typer.echo(f"{len(paths) - diverged} of {len(paths)} recordings replay; {diverged} diverge")
    raise typer.Exit(1 if diverged else 0)


def _refuse(message: str) -> typer.Exit:
    """Say what is wrong on stderr; the exit (code 2) to raise."""
    typer.echo(f"aptix replay: {message}", err=True)
    return typer.Exit(2)


def _recordings(
    files: list[Path], diagram_out: Path | None
) -> tuple[list[Path], list[TurnRecording], DiagramFormat | None]:
    """The recordings the files and folders hold, loaded, and the format ``--diagram``'s
    suffix names; refused when there are none, or more than one to draw, or a diagram
    that cannot be drawn or written (checked before anything replays, D391)."""
    from aptix_pipeline.engine.replay import TurnRecording, recordings_in

    from .run import diagram_format

    paths = recordings_in(*files)
    if not paths:
        raise _refuse("no recordings (*.json) found")
    if diagram_out is not None and len(paths) != 1:
        raise _refuse(f"--diagram draws one turn; {len(paths)} recordings given")
    try:
        recordings = [TurnRecording.load(path) for path in paths]
        fmt = diagram_format(diagram_out, _refuse) if diagram_out is not None else None
    except ValueError as error:
        raise _refuse(str(error)) from None
    return paths, recordings, fmt


def _live_ports(config: Path, model: bool) -> LivePorts:
    """The configuration's catalog, server tools and retriever (and model) as live ports."""
    from aptix_pipeline.adapters.config import (
        ConfigError,
        SecretTable,
        build_llm,
        load_service_config,
        open_retriever,
    )
    from aptix_pipeline.engine.replay import LivePorts

    try:
        # Only the model's secret, and only when it runs live (D364): no store, no API keys.
        uses: tuple[SecretTable, ...] = ("model",) if model else ()
        service = load_service_config(config, secrets_for=uses)
        if model and service.model is None:
            raise ConfigError(f"{config}: --live-model needs a [model] table")
        llm = build_llm(service.model) if model and service.model is not None else None
        retriever = open_retriever(service)  # [retrieval]'s index, when it has one
    except ConfigError as error:
        raise _refuse(str(error)) from None
    catalog = service.catalog
    host = service.host  # [host] extension: the host's rules, hooks and tools go live too
    return LivePorts(
        llm=llm,
        tools={**catalog.tools, **host.tools},
        modes=catalog,
        agents=catalog,
        retriever=retriever,
        hooks=host.hooks,
        rules=tuple(host.rules),
    )


def _telemetry(spans: bool) -> tuple[Telemetry | None, TracerProvider | None]:
    """With ``--spans``, telemetry exporting as OTEL_TRACES_EXPORTER says, and its
    provider to flush; without, neither."""
    if not spans:
        return None, None
    from aptix_pipeline.adapters.system import TelemetrySetupError, configure_tracing
    from aptix_pipeline.engine import Telemetry

    try:
        provider = configure_tracing()
    except TelemetrySetupError as error:
        raise _refuse(str(error)) from None
    return Telemetry(tracer_provider=provider), provider


def _replay_all(
    paths: list[Path],
    recordings: list[TurnRecording],
    *,
    spans: bool,
    quiet: bool,
    live: LivePorts | None = None,
) -> int:
    """Replay each recording and print its trace (with ``--quiet``, only the first and last
    line of one that replays); how many diverge.

    One event loop replays them all, each recording in a task of its own (its own copy
    of the context, as a loop of its own would give it): a loop per recording cost
    more than most replays (D475).
    """
    import asyncio

    telemetry, provider = _telemetry(spans)
    try:
        return asyncio.run(_replay_each(paths, recordings, quiet, telemetry, live))
    finally:
        if provider is not None:
            provider.shutdown()


async def _replay_each(
    paths: list[Path],
    recordings: list[TurnRecording],
    quiet: bool,
    telemetry: Telemetry | None,
    live: LivePorts | None,
) -> int:
    """``_replay_all``'s loop: replay and print each recording in turn; how many diverge."""
    import asyncio
    from dataclasses import replace

    from aptix_pipeline.engine.replay import replay as replay_turn

    diverged = 0
    for path, recording in zip(paths, recordings, strict=True):
        try:
            outcome = await asyncio.create_task(
                replay_turn(recording, telemetry=telemetry, live=live)
            )
        except ValueError as error:  # a live model or tool for a redacted recording
            raise _refuse(f"{path}: {error}") from None
        outcome = replace(outcome, source=path)
        lines = list(outcome.describe())
        if outcome.ok:
            lines[-1] = _verdict(recording, outcome.report.result.rule_ids, lines[-1])
        typer.echo("\n".join([lines[0], lines[-1]] if quiet and outcome.ok else lines))
        diverged += not outcome.ok
    return diverged


def _verdict(recording: TurnRecording, rule_ids: Sequence[str], line: str) -> str:
    """The ``ok`` line of a recording that replays; for a turn that faulted, it names the
    step and rule it faulted at, so ``ok`` never reads as a turn that went well (D369)."""
    trace = recording.trace
    if trace.outcome != "faulted":
        return line
    rules = ", ".join(dict.fromkeys(rule_ids)) or ", ".join(trace.error_codes) or "none named"
    detail = line.removeprefix("ok: ").removeprefix("ok")
    return f"ok, the turn faulted at {trace.faulted_step} (rule {rules}): {detail}".rstrip(": ")


def _draw_path(recording: TurnRecording, fmt: DiagramFormat, out: Path) -> None:
    """The path the recorded turn took, drawn into ``out``."""
    from aptix_pipeline.engine import DiagramError, pipeline_diagram

    try:
        out.write_bytes(pipeline_diagram(fmt, path=recording.trace))
    except (DiagramError, ValueError) as error:
        raise _refuse(str(error)) from None
    except OSError as error:
        raise _refuse(f"cannot write {out}: {error.strerror or error}") from None
    typer.echo(f"path diagram: {out}")


# --- aptix eval (docs/EVALS.md) -----------------------------------------------------------


class _EvalGroup(TyperGroup):
    """``aptix eval CASES ...`` is ``aptix eval run CASES ...``; ``capture`` is a command."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    name="eval",
    cls=_EvalGroup,
    help="Run recorded turns on a candidate configuration and report each case "
    "(aptix eval CASES --config candidate.toml); make a case folder (aptix eval capture).",
    no_args_is_help=True,
)


def _eval_refuse(message: str) -> typer.Exit:
    typer.echo(f"aptix eval: {message}", err=True)
    return typer.Exit(2)


@eval_app.command("run")
def eval_run(
    cases: Annotated[
        Path,
        typer.Argument(
            exists=True, file_okay=False, help="A folder of recordings (and expectations.toml)."
        ),
    ],
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            exists=True,
            dir_okay=False,
            help="The candidate: its \\[model], catalog and tools run live, its \\[prices] "
            "price the calls.",
        ),
    ],
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline", exists=True, dir_okay=False, help="A second candidate, side by side."
        ),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Cases run at once.")] = 4,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.001, help="Seconds a case may take.")
    ] = 300.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (aptix.eval-report/1).")
    ] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", dir_okay=False, help="Write JUnit XML here.")
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", dir_okay=False, help="Write the HTML report here.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Evaluate each recorded turn of CASES on the candidate's live model, prompts and tools.

    The store, clock and ids answer from each recording. Each case passes or fails by
    its expectations (without any: when it does what its recording did), names its
    first divergence, and shows tokens, cost and model time against the recording's.
    Exit codes: 0 no case regresses, 1 one does, 2 for a usage error.
    """
    import asyncio
    import json
    import sys

    from aptix_pipeline.adapters.config import ConfigError
    from aptix_pipeline.adapters.evals import (
        Candidate,
        load_cases,
        report_html,
        report_json,
        report_junit,
        report_table,
        run_evals,
    )

    try:
        loaded = load_cases(cases)
        candidate = Candidate.load(config)
    except (ConfigError, ValueError) as error:
        raise _eval_refuse(str(error)) from None
    try:
        other = Candidate.load(baseline) if baseline is not None else None
    except (ConfigError, ValueError) as error:
        candidate.close()
        raise _eval_refuse(str(error)) from None
    bar = None if quiet or not sys.stderr.isatty() else _ProgressBar()
    try:
        report = asyncio.run(
            run_evals(loaded, candidate, baseline=other, jobs=jobs, timeout=timeout, progress=bar)
        )
    finally:
        candidate.close()
        if other is not None:
            other.close()
        if bar is not None:
            bar.done()
    try:
        if junit is not None:
            junit.write_text(report_junit(report), encoding="utf-8")
        if html is not None:
            html.write_text(report_html(report), encoding="utf-8")
    except OSError as error:
        raise _eval_refuse(f"cannot write {error.filename}: {error.strerror or error}") from None
    if as_json:
        typer.echo(json.dumps(report_json(report), indent=2, ensure_ascii=False))
    else:
        typer.echo(report_table(report))
    raise typer.Exit(1 if report.regressions else 0)


class _ProgressBar:
    """``[#####.....] 3/10 cases`` on stderr, redrawn in place."""

    def __call__(self, done: int, total: int) -> None:
        import sys

        filled = 30 * done // max(total, 1)
        sys.stderr.write(f"\raptix eval [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
        sys.stderr.flush()

    def done(self) -> None:
        import sys

        sys.stderr.write("\n")
        sys.stderr.flush()


@eval_app.command("capture")
def eval_capture(
    source: Annotated[
        Path, typer.Argument(exists=True, help="A recordings folder (or a recording).")
    ],
    out: Annotated[Path, typer.Option("--out", file_okay=False, help="The new case folder.")],
    session: Annotated[
        str | None, typer.Option("--session", help="The session whose turns to take.")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Turns begun at or after (ISO 8601, with zone).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Turns begun before (ISO 8601, with zone).")
    ] = None,
) -> None:
    """Copy the recordings of a session or a time window into a new case folder.

    Beside them, expectations.toml holds what each recorded turn did (its final
    kind, the tools it called), for you to edit. Exit codes: 0 captured, 2 usage
    error.
    """
    from datetime import datetime

    from aptix_pipeline.adapters.evals import CaptureError, capture_cases

    try:
        window = [
            None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))
            for text in (since, until)
        ]
    except ValueError as error:
        raise _eval_refuse(f"--since/--until: not an ISO 8601 time: {error}") from None
    try:
        copied = capture_cases(source, out, session=session, since=window[0], until=window[1])
    except CaptureError as error:
        raise _eval_refuse(str(error)) from None
    typer.echo(f"{len(copied)} cases in {out} (expectations: {out / 'expectations.toml'})")
