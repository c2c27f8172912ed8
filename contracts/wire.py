"""The base of every contract model: PascalCase on the wire, snake_case in Python.

AGN-033 §3.5 and AGN-034 §2.2 make absence meaningful: an optional field that is
absent (``None``) is *missing* from the serialized JSON, never ``null`` and never
an empty collection. An empty list that was set stays an empty list, so the two
remain distinguishable end to end.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_pascal

__all__ = ["FrozenWireModel", "WireModel"]


class WireModel(BaseModel):
    """Base model: DDR PascalCase aliases, unknown fields refused, absent fields omitted."""

    model_config = ConfigDict(
        alias_generator=to_pascal,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        use_enum_values=False,
    )

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # AGN-033 §3.5: "Absence of a bucket is meaningful" — None means absent.
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None}

    def to_json(self, *, indent: int | None = None) -> str:
        """The wire JSON: DDR names, absent fields omitted (AGN-033 §3.5)."""
        return self.model_dump_json(indent=indent)

    def to_wire(self) -> dict[str, Any]:
        """The wire form as plain JSON-compatible Python data."""
        return self.model_dump(mode="json")


class FrozenWireModel(WireModel):
    """A wire model whose instances are values: frozen, so they are shared, never copied.

    Sessions, turns, messages and the calls, results and usage inside them are read
    by many steps and kept by stores; frozen, a loaded one can be handed out as is.
    Code that needs a changed one builds a new one (``model_copy(update=...)``), and
    never changes a list field in place.
    """

    model_config = ConfigDict(frozen=True)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        # A value needs no copy: copying a context that holds one shares it.
        return self
