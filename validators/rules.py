"""Rules as data: every validation rule has a stable id, a spec section and a message.

A rule id reads ``<DDR>/<section>/<PRE|POST/>requirement`` — e.g.
``AGN-036/4.2/PRE/session-null`` is the requirement "``ctx.Session == null``"
of AGN-036 §4.2's PRE set; the error it produces says the requirement was broken.
Each rule is declared once, in a module of this subpackage — next to the check
that enforces it, or in ``turn_work`` for the rules the steps and the runner
enforce while they work — and registered here, so the conformance table
(docs/CONFORMANCE.md) can be checked against the code. Importing any part of the
package imports this subpackage's ``__init__`` and with it every declaring
module, so ``all_rules()`` is the same full set whatever was imported.

The ``host/`` namespace belongs to a host's own rules (``host_rules.py``): they
are never registered here, and ``rule()`` refuses an id in it, so a host's rule
id never names one of the engine's and ``all_rules()`` stays the DDR set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from aptix_pipeline.contracts import ErrorCode, InvokeError, InvokeResult

__all__ = ["HOST_RULE_PREFIX", "OK", "Rule", "all_rules", "outcome", "rule"]

HOST_RULE_PREFIX = "host/"
"""The ids of a host's own rules start with it (``host_rules.py``); the engine's never do."""

_REGISTRY: dict[str, Rule] = {}

OK: InvokeResult[None] = InvokeResult[None].success()
"""The shared successful validation result (frozen, so safe to share)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One validation rule: id, spec section (``AGN-036 §4.2``), one-line message, error code.

    ``module`` is the module that declares it (for the conformance table).
    """

    id: str
    section: str
    message: str
    code: ErrorCode
    module: str = field(default="", compare=False)

    def error(
        self,
        detail: str | None = None,
        *,
        field: str | None = None,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
    ) -> InvokeError:
        """The error this rule reports; ``detail`` is appended to the one-line message."""
        message = self.message if detail is None else f"{self.message}: {detail}"
        return InvokeError(
            code=self.code,
            message=message,
            rule_id=self.id,
            field=field,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
        )


def rule(rule_id: str, section: str, message: str, code: ErrorCode, *, module: str) -> Rule:
    """Declare and register a rule; ids are unique across the package.

    ``module`` is the declaring module's ``__name__``, passed by the declaration; it
    must be a module of this subpackage, which every part of the package imports.
    """
    if module != __package__ and not module.startswith(f"{__package__}."):
        # Declared elsewhere, a rule would be missing until its module was imported.
        raise ValueError(f"rule {rule_id} must be declared in {__package__}, not {module}")
    if rule_id.startswith(HOST_RULE_PREFIX):
        raise ValueError(f"rule {rule_id}: the {HOST_RULE_PREFIX} namespace is the host's")
    if rule_id in _REGISTRY:
        raise ValueError(f"rule id declared twice: {rule_id}")
    declared = Rule(rule_id, section, message, code, module)
    _REGISTRY[rule_id] = declared
    return declared


def all_rules() -> Mapping[str, Rule]:
    """Every registered rule, by id (read-only view)."""
    return MappingProxyType(_REGISTRY)


def outcome(errors: Iterable[InvokeError]) -> InvokeResult[None]:
    """``OK`` when there are no errors, else an unsuccessful result carrying them."""
    collected = tuple(errors)
    return InvokeResult[None].failure(collected) if collected else OK
