"""How a step stops the turn: ``StepFaultError`` carries the errors the host will see.

A step raises ``StepFaultError`` when the turn cannot go on — a session that is not the
caller's, a turn outside its session, a model that never settles. The engine
catches it, moves the machine to ``faulted`` and returns an unsuccessful
``InvokeResult`` holding these errors (DESIGN.md "What every part promises").
"""

from __future__ import annotations

from collections.abc import Iterable

from aptix_pipeline.contracts import AptixPipelineError, InvokeError, scrub_urls
from aptix_pipeline.validators import utf8_text

__all__ = ["StepFaultError", "described", "described_text", "shown"]


class StepFaultError(AptixPipelineError):
    """The turn cannot go on; ``errors`` say why, each naming its rule or field."""

    def __init__(self, errors: Iterable[InvokeError]) -> None:
        self.errors = tuple(errors)
        if not self.errors:
            raise ValueError("a StepFaultError names at least one error")
        super().__init__("; ".join(error.message for error in self.errors))


def described(error: BaseException) -> str:
    """``"TypeName: message"`` of an exception, safe to put in a response or a store.

    Exception text comes from ports and tools the engine does not control; a lone
    surrogate in it is escaped (``utf8_text``) so the result can always be written,
    and credentials in any URL it quotes are masked (``scrub_urls``, D220).
    """
    return described_text(type(error).__name__, str(error))


def described_text(kind: str, message: str) -> str:
    """``"kind: message"``, made safe as ``described`` makes it."""
    return utf8_text(scrub_urls(f"{kind}: {message}"))


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters.

    Errors quote what the client sent; a megabyte-long id must not come back whole.
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
