"""``Check``: a named group of rules evaluated against one subject.

A check knows the ids of the rules it may report (so a trace can say which rules
ran) and returns the errors it found. ``requirement`` builds the common case: one
rule whose predicate must hold, optionally only when a condition applies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from aptix_pipeline.contracts import InvokeError

from .rules import Rule

__all__ = ["Check", "requirement", "run_checks"]

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Check(Generic[S]):
    """Rules (by id) and the function that reports their failures for a subject."""

    rule_ids: tuple[str, ...]
    run: Callable[[S], list[InvokeError]]


def requirement(
    rule: Rule,
    holds: Callable[[S], bool],
    *,
    field: str | None = None,
    when: Callable[[S], bool] | None = None,
) -> Check[S]:
    """A check of one rule: ``holds(subject)`` must be true (where ``when`` applies)."""

    def run(subject: S) -> list[InvokeError]:
        if when is not None and not when(subject):
            return []
        return [] if holds(subject) else [rule.error(field=field)]

    return Check((rule.id,), run)


def run_checks(checks: Sequence[Check[S]], subject: S) -> list[InvokeError]:
    """All errors the checks report for ``subject``, in check order."""
    errors: list[InvokeError] = []
    for check in checks:
        errors.extend(check.run(subject))
    return errors
