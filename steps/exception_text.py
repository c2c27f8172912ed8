"""What the client is told of an exception raised by a host's code (a server tool, a hook).

A failing server tool's text reaches the client (``ToolResults[].ErrorMessage``,
AGN-033 §5.2) and the model (its tool message); ``PipelineOptions.tool_error_detail``
says how much of the exception it holds:

- ``"short"`` (the default): the exception's class and the first line of its
  message, cut to ``SHORT_ERROR_CHARS`` characters (``KeyError: 'T-7'``);
- ``"class"``: the class alone (``KeyError``), nothing of its message;
- ``"full"``: the class and the whole message.

Never a traceback: the traceback goes to the log and to the span
(docs/CONFORMANCE.md D289, D292). The text is made safe to store and send as
``described`` makes it: lone surrogates escaped, credentials in URLs masked.

``traceback_text`` is the traceback the log and the span hold. An exception's
message may quote user content, so without content capture it is left out — of
the exception and of each one in its chain — and the frames and classes stay
(DESIGN.md "Observability without leaks", D162).
"""

from __future__ import annotations

import traceback
from typing import Final, Literal, get_args

from aptix_pipeline.contracts import scrub_urls

from .faults import described

__all__ = [
    "SHORT_ERROR_CHARS",
    "TOOL_ERROR_DETAILS",
    "ToolErrorDetail",
    "error_text",
    "exception_type",
    "traceback_text",
]

_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"

ToolErrorDetail = Literal["short", "class", "full"]
"""How much of a failing tool's exception reaches the client (see the module docstring)."""
TOOL_ERROR_DETAILS: Final[tuple[ToolErrorDetail, ...]] = get_args(ToolErrorDetail)
SHORT_ERROR_CHARS: Final = 200
"""The longest ``"short"`` text, in characters (an ellipsis ends a text that was cut)."""


def error_text(error: BaseException, detail: ToolErrorDetail = "short") -> str:
    """The text of ``error`` that reaches the client, per ``detail`` (the module docstring)."""
    if detail == "class":
        return type(error).__name__
    text = described(error)
    if detail == "full":
        return text
    line = text.splitlines()[0] if text else text
    return line if len(line) <= SHORT_ERROR_CHARS else f"{line[: SHORT_ERROR_CHARS - 1]}…"


def exception_type(error: BaseException) -> str:
    """The exception's class as the OpenTelemetry conventions name it: ``module.Class``
    (``Class`` alone for a builtin)."""
    kind = type(error)
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", "") else f"{module}.{kind.__qualname__}"


def traceback_text(error: BaseException, *, messages: bool) -> str:
    """The traceback of ``error`` and of its chain, as Python prints it.

    Without ``messages`` each exception's line names its class alone: its frames
    and classes say where it failed, its message (which may quote user content)
    is not there. Credentials in URLs are masked either way.
    """
    if messages:
        return scrub_urls("".join(traceback.format_exception(error)))
    chain: list[tuple[BaseException, str]] = []
    current: BaseException | None = error
    link = ""
    while current is not None and all(current is not known for known, _ in chain):
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    parts: list[str] = []
    for exception, link in reversed(chain):  # the first cause first, as Python prints
        frames = "".join(traceback.format_tb(exception.__traceback__))
        parts.append(f"Traceback (most recent call last):\n{frames}{exception_type(exception)}\n")
        if link:
            parts.append(link)
    return scrub_urls("".join(parts))
