"""Say what is being retried while a model call waits: one line per retry (AGN-036 §4.9).

A model that cannot be reached makes a turn wait through its retries, up to minutes
with the OpenAI-compatible adapter's budget. Each retry is told as one line on the
``aptix_pipeline.retries`` logger, at WARNING:

    model call failed (APIConnectionError: Connection error.); attempt 2 of 4 in 0.6 s

Two layers retry, and both tell: the engine's retry loop (``steps/llm_client.py``),
whose ``ModelCallRetried`` events ``RetryNotices`` — a listener — turns into lines,
and the OpenAI-compatible adapter's own retries (``models/openai_compatible.py``), which log the
same line themselves. The message is the exception's first line, cut to 200
characters.

Where the lines go is the host's choice, as with any logger. The commands choose:
``aptix run`` (and every command that runs turns in the terminal) writes them to
stderr as ``aptix: model call failed …`` (``stderr_retry_notices``) with
``--verbose``; without it (``quiet``) a failure is one line when the turn ends
(D641), so a retry is shown only on a terminal, as a status line that the next
retry replaces and that is wiped when the call settles (its reply, its first
chunk, its failure), and not at all in a pipe or a file. ``aptix serve`` writes
them to its log, next to uvicorn's lines (``log_retry_notices``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import ClassVar, TextIO

from aptix_pipeline.contracts import scrubbed_logger
from aptix_pipeline.engine import (
    ModelCallFinished,
    ModelCallRetried,
    ModelFirstChunk,
    TurnEvent,
    TurnFinished,
)
from aptix_pipeline.steps import PipelineOptions

__all__ = [
    "LOGGER_NAME",
    "RetryNotices",
    "failure_text",
    "log_retry_notices",
    "notice",
    "retry_line",
    "stderr_retry_notices",
]

LOGGER_NAME = "aptix_pipeline.retries"
"""The logger the retry lines go to."""

_LOGGER = scrubbed_logger(LOGGER_NAME)  # a model's URL in a message loses its credentials
_MESSAGE_CHARS = 200


def failure_text(error_type: str, message: object) -> str:
    """``Type: message``, the message's first line cut to 200 characters (the type alone
    when there is no message)."""
    lines = str(message).strip().splitlines() if message is not None else []
    first = lines[0] if lines else ""
    if len(first) > _MESSAGE_CHARS:
        first = first[: _MESSAGE_CHARS - 1] + "…"
    return f"{error_type}: {first}" if first else error_type


def retry_line(failure: str, attempt: int, attempts: int, wait_seconds: float) -> str:
    """The line telling that attempt ``attempt`` of ``attempts`` failed with ``failure``
    (``failure_text``) and when the next one starts."""
    return (
        f"model call failed ({failure}); attempt {attempt + 1} of {attempts} "
        f"in {wait_seconds:.1f} s"
    )


def notice(line: str) -> None:
    """Log one retry line (the adapters' own retry loops call this)."""
    _LOGGER.warning(line)


class RetryNotices:
    """A listener: each ``ModelCallRetried`` of a turn as one line on the retries logger.

    ``attempts`` is the engine's ``PipelineOptions.llm_attempts``, the most it tries.
    ``settled``, when given, is called when a model call settles (it answered, its
    stream began, it failed) and when the turn ends: a terminal's status line is
    wiped then (``stderr_retry_notices``).
    """

    event_types: ClassVar[frozenset[type[TurnEvent]]] = frozenset(
        {ModelCallRetried, ModelCallFinished, ModelFirstChunk, TurnFinished}
    )

    def __init__(self, attempts: int, settled: Callable[[], None] | None = None) -> None:
        self.attempts = attempts
        self.settled = settled

    def __call__(self, event: TurnEvent) -> None:
        """Tell a retry; say when a call settled."""
        if isinstance(event, ModelCallRetried):
            failure = failure_text(event.error_type, event.exception)
            notice(retry_line(failure, event.attempt, self.attempts, event.wait_seconds))
        elif self.settled is not None:
            self.settled()


class _Stderr(logging.Handler):
    """Lines to whatever ``sys.stderr`` is when each is written (as ``logging.lastResort``)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line to the current stderr."""
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


_WIPE = "\r\x1b[K"
"""Back to the start of the terminal's line, and clear it."""


class _StatusLine(logging.Handler):
    """On a terminal: each line replaces the one before, on one line with no newline,
    until ``wipe`` clears it (D641)."""

    def __init__(self) -> None:
        super().__init__()
        self.shown = False

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line over the last one."""
        try:
            sys.stderr.write(_WIPE + self.format(record))
            sys.stderr.flush()
            self.shown = True
        except Exception:
            self.handleError(record)

    def wipe(self) -> None:
        """Clear the status line, if one is shown."""
        if self.shown:
            self.shown = False
            sys.stderr.write(_WIPE)
            sys.stderr.flush()


def _install(handler: logging.Handler) -> None:
    """``handler`` as the retries logger's only one (a command installs it once)."""
    for old in list(_LOGGER.handlers):
        _LOGGER.removeHandler(old)
    _LOGGER.addHandler(handler)
    _LOGGER.setLevel(logging.WARNING)


def _listener(options: PipelineOptions | None) -> RetryNotices:
    return RetryNotices((options or PipelineOptions()).llm_attempts)


def stderr_retry_notices(
    options: PipelineOptions | None, *, stream: TextIO | None = None, quiet: bool = False
) -> RetryNotices:
    """Retry lines on stderr (or ``stream``) as ``aptix: …``; the listener to add to the
    pipeline (with these ``options``) of a command that runs turns in the terminal.

    ``quiet`` (a command without ``--verbose``, D641): on a terminal (not
    ``TERM=dumb``), one status line that each retry replaces and that is wiped when the
    call settles; elsewhere none.
    """
    handler: logging.Handler
    if not quiet:
        handler = _Stderr() if stream is None else logging.StreamHandler(stream)
    elif stream is None and sys.stderr.isatty() and os.environ.get("TERM") != "dumb":
        status = _StatusLine()
        status.setFormatter(logging.Formatter("aptix: %(message)s"))
        _install(status)
        return RetryNotices(_listener(options).attempts, settled=status.wipe)
    else:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter("aptix: %(message)s"))
    _install(handler)
    return _listener(options)


def log_retry_notices(options: PipelineOptions | None) -> RetryNotices:
    """Retry lines in the service's log on stderr, in uvicorn's form (``WARNING:  …``);
    the listener to add to the service's pipeline (with these ``options``)."""
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(levelname)s:  %(message)s"))
    _install(handler)
    return _listener(options)
