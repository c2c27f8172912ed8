"""``quick_init``: a frozen record that is as quick to make as a mutable one.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
(its own ``__setattr__`` refuses), which costs about eight times a plain
assignment per field. A turn makes a handful of wide frozen records — its
``TurnReport``, its ``StateTrace``, each model call's ``LLMCallRecord``, its events
— and that cost was a tenth of the engine's own work on a turn (issue 28).

``quick_init`` gives such a class an ``__init__`` with the same parameters, in the
same order with the same defaults, that stores each field through its slot
directly. Everything else is the dataclass's own: a record is still frozen, equal,
hashed, printed, replaced (``dataclasses.replace``) and pickled as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["quick_init"]

R = TypeVar("R")


def quick_init(cls: type[R]) -> type[R]:
    """Give the frozen, slotted dataclass ``cls`` a quicker ``__init__`` (module docstring).

    Refuses, with a ``TypeError`` naming the class, what it does not reproduce: a
    class that is not a frozen dataclass with slots, a default factory, a field
    left out of ``__init__``, keyword-only fields and ``__post_init__``.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"quick_init takes a frozen dataclass with slots, not {cls.__name__}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init: {cls.__name__} has a __post_init__")
    namespace: dict[str, Any] = {}
    parameters: list[str] = []
    body: list[str] = []
    for index, field in enumerate(dataclasses.fields(cls)):  # type: ignore[arg-type]
        if not field.init or field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(
                f"quick_init: {cls.__name__}.{field.name} is not a plain positional field"
            )
        namespace[f"_set{index}"] = getattr(cls, field.name).__set__  # the slot's descriptor
        if field.default is dataclasses.MISSING:
            parameters.append(field.name)
        else:
            namespace[f"_default{index}"] = field.default
            parameters.append(f"{field.name}=_default{index}")
        body.append(f"    _set{index}(self, {field.name})")
    source = f"def __init__(self, {', '.join(parameters)}):\n" + ("\n".join(body) or "    pass")
    exec(source, namespace)
    init = namespace["__init__"]
    generated = cls.__init__
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(getattr(generated, "__annotations__", {}))
    setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses assigning a method
    return cls
