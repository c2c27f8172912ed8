"""``aptix run --stream``: one turn delivered as it happens (AGN-034 §4.7, DESIGN.md R11).

What goes where (docs/CLI.md "Streaming"):

- stdout: the model's text as it is written, flushed piece by piece, each model
  round's text ended by one newline; then the ``InvokeResult`` exactly as ``aptix
  run`` prints it (``cli_run``). With ``--compact`` the result is the last line and
  what stands before it is the streamed text, so a program reading the pipe can
  split the two. The text is provisional: the POST rules judge the assembled
  response, and the ``InvokeResult`` is the answer of record.
- stderr: progress, out-of-band as AGN-033 §1.3 and §3.1 want it — on an
  interactive terminal a rich status line (a spinner naming the step, the model
  round, the tool being run, a retry), taken down while text is written to the
  same screen and put back between rounds; elsewhere (not a terminal, or one rich
  does not animate: ``TERM=dumb``, ``TTY_INTERACTIVE=0``) one plain line an
  event, ``progress: ...``, without control codes.

Ctrl-C cancels the turn (``TurnStream.aclose``: it faults with
``DESIGN/streaming/consumer-gone`` and nothing of it is stored); ``stream_turn``
then answers ``None`` and ``cli_run`` exits 130.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final, TextIO

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from aptix_pipeline.contracts import Caller, ErrorCode
from aptix_pipeline.engine import (
    ModeChanged,
    ModelCallFinished,
    ModelCallRetried,
    ModelCallStarted,
    ModelFirstChunk,
    StepStarted,
    StreamDelta,
    StreamProgress,
    StreamResult,
    ToolCallHandled,
    ToolExecutionStarted,
    TurnEvent,
    TurnFaulted,
    TurnStarted,
    WarningRaised,
)

if TYPE_CHECKING:
    from aptix_pipeline.engine import Pipeline, StreamItem, TurnReport, TurnStream

__all__ = ["StreamPrinter", "describe_progress", "stream_turn"]

PLAIN_PREFIX: Final = "progress: "
"""What starts each plain progress line on a stderr that is not a terminal."""


def describe_progress(event: TurnEvent) -> str | None:
    """A progress event in a few words (no user content), or ``None`` for one not shown."""
    match event:
        case TurnStarted():
            return "turn started"
        case StepStarted(step=step):
            return f"step {step}"
        case ModelCallStarted(round=round_, model=model):
            return f"model round {round_}: waiting for {model or 'the model'}"
        case ModelCallRetried(round=round_, attempt=attempt, error_type=error, wait_seconds=wait):
            return f"model round {round_}: attempt {attempt} failed ({error}), next in {wait:.1f} s"
        case ModelFirstChunk(round=round_):
            return f"model round {round_}: streaming"
        case ModelCallFinished(call=call):
            if call.error is not None:
                return f"model round {call.round}: failed ({call.error})"
            calls = ", ".join(name for _, name in call.tool_calls)
            return f"model round {call.round}: " + (f"tool calls {calls}" if calls else "answered")
        case ToolExecutionStarted(name=name):
            return f"tool {name}: running"
        case ToolCallHandled(record=record):
            rule = f" ({record.rule_id})" if record.rule_id else ""
            return f"tool {record.name}: {record.outcome}{rule}"
        case ModeChanged(change=change):
            return f"mode {change.previous_mode} -> {change.new_mode}"
        case WarningRaised(warning=warning):
            return f"warning {warning.code}: {warning.message}"
        case TurnFaulted(fault=fault):
            return f"turn faulted in {fault.step}: {', '.join(fault.error_codes)}"
    return None


class StreamPrinter:
    """Shows one streamed turn: its text on ``out``, its progress on ``err``.

    Feed it the stream's items (``show``) and ``close`` it at the end, also after
    an interruption: it ends an open line of text and takes the status line down.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err
        console = Console(file=err, highlight=False)
        interactive = err.isatty() and console.is_interactive  # FORCE_COLOR makes no terminal
        self._console: Console | None = console if interactive else None
        """The status line's console: only on an interactive terminal."""
        self._shared_screen = self._console is not None and out.isatty()
        """Text and status line on one screen: the status line waits while text is written."""
        self._spinner = Spinner("dots", text="starting")
        self._live: Live | None = None
        self._open_round: int | None = None
        """The model round whose text was written last and not yet ended by a newline."""

    def show(self, item: StreamItem) -> None:
        """Write a delta's text, show a progress event; the result ends the display."""
        if isinstance(item, StreamDelta):
            self._write_text(item)
        elif isinstance(item, StreamProgress):
            if isinstance(item.event, ModelCallFinished | TurnFaulted):
                self._end_text()
            description = describe_progress(item.event)
            if description is not None:
                self._show_progress(description)
        elif isinstance(item, StreamResult):
            self.close()

    def close(self) -> None:
        """End the text's open line and take the status line down."""
        self._end_text()
        self._hide_status()

    def _write_text(self, delta: StreamDelta) -> None:
        if not delta.text:
            return
        if self._open_round is not None and self._open_round != delta.round:
            self._end_text()
        if self._shared_screen:
            self._hide_status()
        self._out.write(delta.text)
        self._out.flush()
        self._open_round = delta.round

    def _end_text(self) -> None:
        if self._open_round is not None:
            self._out.write("\n")
            self._out.flush()
            self._open_round = None

    def _show_progress(self, description: str) -> None:
        if self._console is None:
            self._err.write(f"{PLAIN_PREFIX}{description}\n")
            self._err.flush()
            return
        self._spinner.update(text=Text(description))  # Text: a tool's "[x]" is no markup
        if self._live is None and not (self._shared_screen and self._open_round is not None):
            self._live = Live(
                self._spinner,
                console=self._console,
                transient=True,
                refresh_per_second=12.5,
                redirect_stdout=False,  # the text is written to stdout itself, never through rich
                redirect_stderr=False,
            )
            self._live.start(refresh=True)

    def _hide_status(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()


def _cancelled(report: TurnReport) -> bool:
    return any(error.code == ErrorCode.CANCELLED for error in report.result.errors)


async def _consume(stream: TurnStream, printer: StreamPrinter) -> TurnReport:
    async with stream:
        async for item in stream:
            printer.show(item)
    if stream.report is None:
        raise RuntimeError("the turn's stream ended without its result")
    return stream.report


def stream_turn(
    pipeline: Pipeline,
    body: bytes,
    caller: Caller,
    *,
    initial_mode: str | None,
    idempotency_key: str | None,
    out: TextIO,
    err: TextIO,
) -> TurnReport | None:
    """Run the request ``body`` as a streamed turn, shown on ``out`` and ``err``.

    The turn's report, or ``None`` when Ctrl-C cancelled it. A Ctrl-C that lands
    once the turn has begun its commit leaves its answer standing: that report is
    returned (``TurnStop``).
    """
    stream = pipeline.stream(
        body, caller, initial_mode=initial_mode, idempotency_key=idempotency_key
    )
    printer = StreamPrinter(out, err)
    try:
        return asyncio.run(_consume(stream, printer))
    except KeyboardInterrupt:  # asyncio.run cancelled _consume, whose stream cancelled the turn
        report = stream.report
        return report if report is not None and not _cancelled(report) else None
    finally:
        printer.close()
