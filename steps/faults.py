"""How a step stops the turn: ``StepFaultError`` carries the errors the host will see.

A step raises ``StepFaultError`` when the turn cannot go on — a session that is not the
caller's, a turn outside its session, a model that never settles. The engine
catches it, moves the machine to ``faulted`` and returns an unsuccessful
``InvokeResult`` holding these errors (DESIGN.md "What every part promises").
"""

from __future__ import annotations

from collections.abc import Iterable

from aptix_pipeline.contracts import InvokeError

__all__ = ["StepFaultError", "shown"]


class StepFaultError(Exception):
    """The turn cannot go on; ``errors`` say why, each naming its rule or field."""

    def __init__(self, errors: Iterable[InvokeError]) -> None:
        self.errors = tuple(errors)
        if not self.errors:
            raise ValueError("a StepFaultError names at least one error")
        super().__init__("; ".join(error.message for error in self.errors))


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters.

    Errors quote what the client sent; a megabyte-long id must not come back whole.
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
