"""What the package logs, as a command in a terminal shows it (D394).

A turn that faults logs why: the runner's record (``FAULT_RECORD``) holds the
traceback of what a port, tool or hook raised. The command already prints what
failed — the ``InvokeResult``, and for a port that failed one line on stderr naming
it (a model server's URL without its credentials) — so that record is shown only
with ``--verbose``, whole. Any other warning or error of the package is one line on
stderr (``aptix: …``), whole with ``--verbose``. The retry lines
(``aptix_pipeline.retries``) have a handler of their own (``models/retry_notices.py``)
and are not shown twice.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["show_logs", "shows_verbose"]

_PACKAGE = "aptix_pipeline"
_RETRIES = "aptix_pipeline.retries"


class _Terminal(logging.Handler):
    """Records to whatever ``sys.stderr`` is when each is written: the first line of
    each, or the whole record with ``verbose``."""

    def __init__(self, verbose: bool, fault_record: str) -> None:
        super().__init__(logging.WARNING)
        self.verbose = verbose
        self.fault_record = fault_record
        self.addFilter(self._shown)

    def _shown(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(_RETRIES):
            return False
        return self.verbose or not getattr(record, self.fault_record, False)

    def format(self, record: logging.LogRecord) -> str:
        """``aptix: `` and the record's first line, or all of it (traceback included)."""
        if self.verbose:
            return "aptix: " + logging.Formatter().format(record)
        lines = record.getMessage().strip().splitlines()
        return "aptix: " + (lines[0] if lines else record.levelname.lower())

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line(s)."""
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def show_logs(verbose: bool) -> None:
    """Show the package's warnings and errors on stderr, one line each unless
    ``verbose``; the command's only handler for them (called again, it replaces it)."""
    from aptix_pipeline.engine import FAULT_RECORD  # the engine: only a command that runs turns

    logger = logging.getLogger(_PACKAGE)
    for old in [h for h in logger.handlers if isinstance(h, _Terminal)]:
        logger.removeHandler(old)
    logger.addHandler(_Terminal(verbose, FAULT_RECORD))


def shows_verbose() -> bool:
    """Whether ``show_logs`` was told ``verbose`` (``--verbose``): what else a command
    shows whole, the retries of a model call (D641) among them."""
    handlers = logging.getLogger(_PACKAGE).handlers
    return any(isinstance(h, _Terminal) and h.verbose for h in handlers)
