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
stderr as ``aptix: model call failed …`` (``stderr_retry_notices``); ``aptix
serve`` writes them to its log, next to uvicorn's lines (``log_retry_notices``).
"""

from __future__ import annotations

import logging
import sys
from typing import ClassVar, TextIO

from aptix_pipeline.contracts import scrubbed_logger
from aptix_pipeline.engine import ModelCallRetried, TurnEvent
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
    """

    event_types: ClassVar[frozenset[type[TurnEvent]]] = frozenset({ModelCallRetried})

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts

    def __call__(self, event: TurnEvent) -> None:
        """Tell a retry; every other event is not this listener's."""
        if isinstance(event, ModelCallRetried):
            failure = failure_text(event.error_type, event.exception)
            notice(retry_line(failure, event.attempt, self.attempts, event.wait_seconds))


class _Stderr(logging.Handler):
    """Lines to whatever ``sys.stderr`` is when each is written (as ``logging.lastResort``)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line to the current stderr."""
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def _install(handler: logging.Handler) -> None:
    """``handler`` as the retries logger's only one (a command installs it once)."""
    for old in list(_LOGGER.handlers):
        _LOGGER.removeHandler(old)
    _LOGGER.addHandler(handler)
    _LOGGER.setLevel(logging.WARNING)


def _listener(options: PipelineOptions | None) -> RetryNotices:
    return RetryNotices((options or PipelineOptions()).llm_attempts)


def stderr_retry_notices(
    options: PipelineOptions | None, *, stream: TextIO | None = None
) -> RetryNotices:
    """Retry lines on stderr (or ``stream``) as ``aptix: …``; the listener to add to the
    pipeline (with these ``options``) of a command that runs turns in the terminal."""
    handler = _Stderr() if stream is None else logging.StreamHandler(stream)
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
