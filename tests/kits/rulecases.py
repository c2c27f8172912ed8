"""One way to turn a table of rule cases into marked pytest parameters.

Every rule table (core, steps, manifest, request, response, tool calls) holds
small frozen dataclasses with a ``rule_id`` and a ``variant``; ``rule_params``
gives each the id ``<rule id>|<variant>[|<more>]`` and the ``rule`` marker that
links it into docs/CONFORMANCE.md, and, for a case with ``decisions`` (ids of
docs/decisions.toml), the ``decision`` marker too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import pytest


class RuleCase(Protocol):
    """A case of a rule table."""

    @property
    def rule_id(self) -> str: ...

    @property
    def variant(self) -> str: ...


def rule_params(
    cases: Sequence[RuleCase], outcome: Literal["holds", "broken"], *id_fields: str
) -> list[Any]:
    """``pytest.param`` per case, marked ``rule(case.rule_id, outcome)``, and
    ``decision(*case.decisions)`` when the case has decisions.

    ``id_fields`` name further case attributes to append to the test id.
    """
    return [
        pytest.param(
            case,
            id="|".join([case.rule_id, case.variant, *(str(getattr(case, f)) for f in id_fields)]),
            marks=_marks(case, outcome),
        )
        for case in cases
    ]


def _marks(case: RuleCase, outcome: Literal["holds", "broken"]) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.rule(case.rule_id, outcome)]
    decisions: tuple[str, ...] = getattr(case, "decisions", ())
    if decisions:
        marks.append(pytest.mark.decision(*decisions))
    return marks
