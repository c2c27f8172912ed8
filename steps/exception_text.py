"""What the caller is told of an exception raised by a host's code.

A host's code — a server tool, a hook, a host rule, a listener, the retriever,
the store, the catalogs, the model adapter, a step override — may raise anything,
with any text: a password, a megabyte, a traceback. One policy,
``PipelineOptions.error_detail``, says how much of it reaches the caller, in an
error's message (``InvokeResult.Errors``), a failing tool's
``ToolResults[].ErrorMessage`` (AGN-033 §5.2) and the model's tool message:

- ``"short"`` (the default): the exception's class and the first line of its
  message, cut to ``SHORT_ERROR_CHARS`` characters (``KeyError: 'T-7'``);
- ``"class"``: the class alone (``KeyError``), nothing of its message;
- ``"full"``: the class and the whole message.

An ``internal`` fault — a hook's failure, a step that raised — names the class
alone unless the policy is ``"full"`` (``internal_text``): it is a bug, and its
text is for the log. A host rule's own words (the string its check returns) are
the host's to give, bounded to ``MAX_RULE_DETAIL_CHARS`` (``bounded``).

``PROPAGATED`` are the exceptions that pass through every boundary around a
host's code: cancellation (``asyncio.CancelledError``, ``KeyboardInterrupt``)
and a generator's close (``GeneratorExit``). Any other ``BaseException`` a host's
code raises (``SystemExit``, a class of its own) is a failure of that code like
an ``Exception``: it faults the turn and never escapes ``Pipeline.execute``
(docs/EXTENDING.md "When your code fails").

Never a traceback: the traceback goes to the log and to the span
(docs/CONFORMANCE.md D289, D292). The text is made safe to store and send as
``described`` makes it: lone surrogates escaped, credentials in URLs masked.

``traceback_text`` is the traceback the log and the span hold. An exception's
message may quote user content, so without content capture it is left out — of
the exception and of each one in its chain — and the frames and classes stay
(DESIGN.md "Observability without leaks", D162).
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Final, Literal, get_args

from aptix_pipeline.contracts import ErrorCode, InvokeError, scrub_urls

from .faults import StepFaultError, described, described_text

__all__ = [
    "ERROR_DETAILS",
    "MAX_RULE_DETAIL_CHARS",
    "PROPAGATED",
    "SHORT_ERROR_CHARS",
    "TOOL_ERROR_DETAILS",
    "ErrorDetail",
    "ToolErrorDetail",
    "bounded",
    "error_text",
    "exception_type",
    "internal_text",
    "port_failed",
    "propagate_also",
    "runtime_error_in",
    "traceback_text",
]

_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"

ErrorDetail = Literal["short", "class", "full"]
"""How much of a host's exception reaches the caller (see the module docstring)."""
ERROR_DETAILS: Final[tuple[ErrorDetail, ...]] = get_args(ErrorDetail)
ToolErrorDetail = ErrorDetail
"""The former name of ``ErrorDetail``, when the policy covered server tools alone."""
TOOL_ERROR_DETAILS: Final = ERROR_DETAILS
SHORT_ERROR_CHARS: Final = 200
"""The longest ``"short"`` text, in characters (an ellipsis ends a text that was cut)."""
MAX_RULE_DETAIL_CHARS: Final = 1024
"""The longest text a host rule's check may add to its error (``bounded``)."""
PROPAGATED: Final = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)
"""What passes through every boundary around a host's code (the module docstring)."""


_RUNTIME_ERRORS: list[type[BaseException]] = []
"""Errors of the runtime that hosts the turn, registered by ``propagate_also``."""


def propagate_also(*kinds: type[BaseException]) -> None:
    """Make the engine re-raise errors of ``kinds`` instead of faulting the turn with them.

    A runtime that hosts the engine registers its own control errors here: the
    durable adapter registers Temporal's (a workflow's nondeterminism, a sandbox
    refusal), which must fail the workflow task so that Temporal retries it on a
    worker, not end the turn as ``internal`` (docs/DURABLE.md, D531). Registering a
    kind twice is harmless; nothing registers one by default.
    """
    for kind in kinds:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(f"not an exception class: {kind!r}")
        if kind not in _RUNTIME_ERRORS:
            _RUNTIME_ERRORS.append(kind)


def runtime_error_in(error: BaseException) -> BaseException | None:
    """The first error in ``error``'s chain (itself, its causes and contexts) of a kind
    given to ``propagate_also``; ``None`` when there is none."""
    if not _RUNTIME_ERRORS:
        return None
    kinds = tuple(_RUNTIME_ERRORS)
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return current
        seen.add(id(current))
        if current.__cause__ is not None or current.__suppress_context__:
            current = current.__cause__
        else:
            current = current.__context__
    return None


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis ending a text that was cut."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def error_text(error: BaseException, detail: ErrorDetail = "short") -> str:
    """The text of ``error`` that reaches the caller, per ``detail`` (the module docstring)."""
    if detail == "class":
        return type(error).__name__
    if detail == "full":
        return described(error)
    # Only the first line is looked at: a megabyte of message costs what its line costs.
    message = str(error)
    end = message.find("\n")
    line = described_text(type(error).__name__, message if end < 0 else message[:end])
    return bounded(line.rstrip("\r"), SHORT_ERROR_CHARS)


def internal_text(error: BaseException, detail: ErrorDetail = "short") -> str:
    """What an ``internal`` fault says of ``error``: the class alone, unless ``"full"``."""
    return described(error) if detail == "full" else type(error).__name__


def port_failed(
    port: str, call: str, error: BaseException, detail: ErrorDetail = "short"
) -> StepFaultError:
    """The ``port_failed`` fault of ``port.call`` raising ``error``, told per ``detail``:
    the engine's port guards (``engine/guarded_ports.py``) and the steps that call a
    port themselves (the model, the retriever, the mode change) fault alike."""
    return StepFaultError(
        [
            InvokeError(
                code=ErrorCode.PORT_FAILED,
                field=port,
                message=f"{port}.{call} failed: {error_text(error, detail)}",
            )
        ]
    )


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
