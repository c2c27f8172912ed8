"""Names a package exports but imports on first use.

``import aptix_pipeline`` must stay cheap, and an adapter's optional dependency
(psycopg, openai, FastAPI) must load only for a host that uses that adapter; the
engine's diagram renderers only for a host that draws. Each such ``__init__`` keeps
a table of its names and the submodule each comes from, and hands it here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``namespace`` is its globals.

    ``exports`` maps each name to its submodule, relative to ``package``. A name is
    imported once, then kept in ``namespace``; any other name is an
    ``AttributeError`` naming the package, as for any module.
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's __getattr__
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807 - a module's __dir__
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
