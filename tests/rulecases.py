"""One way to turn a table of rule cases into marked pytest parameters.

Every rule table (core, steps, manifest, request, response, tool calls) holds
small frozen dataclasses with a ``rule_id`` and a ``variant``; ``rule_params``
gives each the id ``<rule id>|<variant>[|<more>]`` and the ``rule`` marker that
links it into docs/CONFORMANCE.md.
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
    """``pytest.param`` per case, marked ``rule(case.rule_id, outcome)``.

    ``id_fields`` name further case attributes to append to the test id.
    """
    return [
        pytest.param(
            case,
            id="|".join([case.rule_id, case.variant, *(str(getattr(case, f)) for f in id_fields)]),
            marks=pytest.mark.rule(case.rule_id, outcome),
        )
        for case in cases
    ]
