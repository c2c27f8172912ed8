"""A cheap snapshot of the pipeline context, for AGN-036 §4.10's "PRE == POST" rule.

The ResponseBuilder may change nothing but ``Response`` (rule
``AGN-036/4.10/POST/context-unchanged``). Checking that needs the context as it
was at PRE; a deep copy of it costs far more than the step itself. A
``ContextSnapshot`` records only what could change in place:

- text, numbers, enums, dates and frozen models (sessions, turns, messages, tool
  definitions — values that are shared, never changed) are kept as they are;
- mutable models, lists and dicts are recorded as their type and the snapshot of
  each field or item, so an append inside the envelope or a changed attribute of
  a nested model shows as a difference.

Comparing two snapshots with ``==`` then tells which top-level fields differ.
Taking one never changes the context (AGN-036 §2).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from pydantic import BaseModel

from aptix_pipeline.contracts import PipelineContext

__all__ = ["ContextSnapshot", "snapshot_context"]

_AS_IS: dict[type, bool] = dict.fromkeys(
    (str, int, float, bool, bytes, type(None), datetime, date, time, timedelta), True
)
"""Types whose values are kept as they are: immutable (or frozen models, added on first sight)."""


def _kept_as_is(kind: type) -> bool:
    known = _AS_IS.get(kind)
    if known is None:
        if issubclass(kind, BaseModel):
            known = bool(kind.model_config.get("frozen"))
        else:
            known = not issubclass(kind, list | tuple | dict | set)
        _AS_IS[kind] = known
    return known


def _state(value: Any) -> Any:
    """What ``value`` holds now, as something that no later change in place can alter."""
    kind = type(value)
    as_is = _AS_IS.get(kind)
    if as_is if as_is is not None else _kept_as_is(kind):
        return value
    if kind is list or kind is tuple:
        return (kind, tuple(map(_state, value)))
    if issubclass(kind, BaseModel):
        return (kind, tuple(map(_state, value.__dict__.values())))
    if isinstance(value, dict):
        return (kind, tuple((key, _state(item)) for key, item in value.items()))
    if isinstance(value, set):
        return (kind, frozenset(value))
    return (kind, tuple(map(_state, value)))  # another list or tuple type


@dataclass(frozen=True, slots=True, eq=False)
class ContextSnapshot:
    """The pipeline context's fields as they were when the snapshot was taken.

    Pass it as ``before=`` to ``validate_post_step`` for the ResponseBuilder (AGN-036
    §4.10); ``changed_fields`` names the fields that differ now.
    """

    context_type: type[PipelineContext]
    states: tuple[tuple[str, Any], ...]

    def changed_fields(self, ctx: PipelineContext) -> list[str]:
        """Python names of ``ctx``'s fields whose value differs from the snapshot's, in
        field order; ``response`` is the ResponseBuilder's own and never counted."""
        values = ctx.__dict__
        return [name for name, state in self.states if _state(values.get(name)) != state]


def snapshot_context(ctx: PipelineContext) -> ContextSnapshot:
    """A ``ContextSnapshot`` of ``ctx``; far cheaper than a deep copy, and it never mutates."""
    states = tuple(
        (name, _state(value)) for name, value in ctx.__dict__.items() if name != "response"
    )
    return ContextSnapshot(type(ctx), states)
