"""A host's own guard rules: ids under ``host/``, error codes under ``host.``.

A host adds rules of its own to a step's guard (``Pipeline(ports, rules=[...])``)::

    HostRule(
        id="host/no-weekend",
        step=PipelineStep.REASONER,
        message="the agent does not work at weekends",
        code="host.closed",
        check=lambda ctx: ...,  # True when the rule holds; False, or why not
    )

A host rule is data with an id, like the engine's (``rules.py``): its id shows in
the errors it reports (``RuleId``), in the state trace's guard record, on the
step's span and in the diagram's label, next to the DDR rules of the same guard.
It runs after the step's AGN-036 PRE rules have passed (it may rely on what they
check) and before the step; like a validator it reads the context and never
changes it.

Namespaces never clash: a host rule's id is ``host/`` and a lowercase name
(``host/billing/quota`` too), and ``rule()`` refuses that prefix for the engine's
own rules (``AGN-…``, ``DESIGN/…``); its code is ``host.`` and a lowercase name, a
``HostErrorCode``, which no ``ErrorCode`` value starts with. ``HostRules`` is the
set of one pipeline's rules: it refuses a rule given twice and two rules with one
id. The engine's rule table (``all_rules()``, docs/CONFORMANCE.md) holds the DDR
rules only; a host lists its own with ``HostRules.table()`` (docs/CONFORMANCE.md
D290).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from aptix_pipeline.contracts import (
    HOST_ERROR_CODE_PATTERN,
    InvokeError,
    PipelineContext,
    PipelineStep,
)

from .rules import HOST_RULE_PREFIX

__all__ = ["HOST_RULE_ID_PATTERN", "HostCheck", "HostRule", "HostRules"]

HOST_RULE_ID_PATTERN: Final = r"^host(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+$"
"""A host rule's id: ``host/`` and one or more lowercase names, ``/`` between them."""
_ID = re.compile(HOST_RULE_ID_PATTERN)
_CODE = re.compile(HOST_ERROR_CODE_PATTERN)

HostCheck = Callable[[PipelineContext], bool | str]
"""A host rule's check: ``True`` when it holds; ``False``, or a string saying why, when not."""


@dataclass(frozen=True, slots=True)
class HostRule:
    """One rule of the host's, in ``step``'s guard; see the module docstring.

    ``message`` is the one-line requirement (an error says it was broken, with the
    check's string after a colon); ``code`` the error code its errors carry;
    ``http_status`` the status the HTTP service answers a turn it refused with (a
    4xx or 5xx; default 500, as for the engine's own rules). Bad values are
    refused with a ``ValueError`` naming the field.
    """

    id: str
    step: PipelineStep
    message: str
    code: str
    check: HostCheck = field(compare=False)
    http_status: int = 500

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.fullmatch(self.id):
            raise ValueError(
                f"HostRule.id {self.id!r} is outside the host namespace: it must be "
                f"{HOST_RULE_PREFIX!r} and a lowercase name (host/no-weekend); the engine's "
                "ids (AGN-…, DESIGN/…) are its own"
            )
        try:
            step = PipelineStep(self.step)
        except ValueError:
            raise ValueError(
                f"HostRule.step of {self.id}: {self.step!r} is not a PipelineStep"
            ) from None
        if step is PipelineStep.REQUEST_HANDLER:
            raise ValueError(
                f"HostRule.step of {self.id}: request_handler has no guard (AGN-036 §4.1: "
                "PRE is N/A, the context is made by the step); give a later step"
            )
        object.__setattr__(self, "step", step)
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValueError(f"HostRule.message of {self.id} must be a one-line text")
        if "\n" in self.message or "\r" in self.message:
            raise ValueError(f"HostRule.message of {self.id} must be one line")
        if not isinstance(self.code, str) or not _CODE.fullmatch(self.code):
            raise ValueError(
                f"HostRule.code of {self.id}: {self.code!r} is outside the host namespace: it "
                "must be 'host.' and a lowercase name (host.closed), never an ErrorCode"
            )
        if not callable(self.check):
            raise TypeError(f"HostRule.check of {self.id} must be a function of the context")
        status = self.http_status
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(
                f"HostRule.http_status of {self.id}: {status!r} is not an error status (400-599)"
            )

    def error(self, detail: str | None = None) -> InvokeError:
        """The error this rule reports; ``detail`` is appended to the one-line message."""
        message = self.message if not detail else f"{self.message}: {detail}"
        return InvokeError(code=self.code, message=message, rule_id=self.id)


class HostRules:
    """The host rules of one pipeline, by step, in the order given; see the module docstring."""

    __slots__ = ("_by_step", "_rules", "_statuses")

    def __init__(self, rules: Iterable[HostRule] = ()) -> None:
        given: list[HostRule] = []
        seen: dict[str, HostRule] = {}
        for rule in rules:
            if not isinstance(rule, HostRule):
                raise TypeError(f"a host rule is a HostRule, not {rule!r}")
            if rule.id in seen:
                again = "given twice" if seen[rule.id] is rule else "used by two rules"
                raise ValueError(f"host rule id {rule.id} is {again}; each rule has its own id")
            seen[rule.id] = rule
            given.append(rule)
        self._rules = tuple(given)
        statuses: dict[str, int] = {}
        for rule in self._rules:
            known = statuses.setdefault(rule.code, rule.http_status)
            if known != rule.http_status:
                raise ValueError(
                    f"host error code {rule.code} is given HTTP status {known} and "
                    f"{rule.http_status} (by {rule.id}); one code answers one status"
                )
        self._statuses: Mapping[str, int] = MappingProxyType(statuses)
        by_step: dict[PipelineStep, tuple[HostRule, ...]] = {}
        for rule in self._rules:
            by_step[rule.step] = (*by_step.get(rule.step, ()), rule)
        self._by_step: Mapping[PipelineStep, tuple[HostRule, ...]] = MappingProxyType(by_step)

    def __iter__(self) -> Iterator[HostRule]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __bool__(self) -> bool:
        return bool(self._rules)

    def __repr__(self) -> str:
        return f"HostRules({[rule.id for rule in self._rules]!r})"

    @property
    def by_step(self) -> Mapping[PipelineStep, tuple[HostRule, ...]]:
        """Each step that has host rules, and its rules in the order given."""
        return self._by_step

    @property
    def http_statuses(self) -> Mapping[str, int]:
        """Each host error code and the HTTP status a turn refused with it answers."""
        return self._statuses

    def ids(self, step: PipelineStep) -> tuple[str, ...]:
        """The ids of ``step``'s host rules, in order (empty when it has none)."""
        return tuple(rule.id for rule in self._by_step.get(PipelineStep(step), ()))

    def table(self) -> str:
        """The host's own rule table (Markdown), in AGN-036 step order.

        The engine's table (docs/CONFORMANCE.md) lists the DDR rules; this one lists
        a host's, for the host's own documentation: id, step, requirement, code.
        """
        lines = ["| Rule id | Step (guard) | Requirement | Code |", "|---|---|---|---|"]
        for step in PipelineStep:
            for rule in self._by_step.get(step, ()):
                message = rule.message.replace("|", "\\|")
                lines.append(f"| `{rule.id}` | `{step}` | {message} | `{rule.code}` |")
        return "\n".join(lines) + "\n"
