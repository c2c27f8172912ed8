"""``[host] extension``: a host's own code for the commands and the service.

A host that embeds the engine hands ``Pipeline`` its rules, hooks, listeners and
server tools in code. The same code reaches ``aptix serve``, ``aptix run``,
``aptix chat`` and ``aptix replay --live`` through one line of the configuration::

    [host]
    extension = "acme_host:EXTENSION"    # module:attribute

The attribute is a ``HostExtension``, or a function of no arguments that returns
one. The module is imported with the configuration file's folder first on
``sys.path``, so a ``acme_host.py`` beside ``aptix.toml`` is found; an installed
package is found as any import is. A name that cannot be imported, an attribute
that is missing, or an object that is not a ``HostExtension`` is a ``ConfigError``
naming ``[host].extension`` — the traceback of a module that raised on import is
logged (DEBUG), and its class and first line are in the error.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from aptix_pipeline.contracts import ToolExecutor, scrubbed_logger
from aptix_pipeline.engine import Listener
from aptix_pipeline.steps import Hooks, error_text
from aptix_pipeline.validators import HostRule, HostRules

__all__ = ["EXTENSION_PATTERN", "HostExtension", "load_extension"]

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
EXTENSION_PATTERN: Final = rf"^{_DOTTED}:{_DOTTED}$"
"""``module:attribute``, each a dotted Python name."""
_SPEC = re.compile(EXTENSION_PATTERN)

logger = scrubbed_logger(__name__)


@dataclass(frozen=True, slots=True)
class HostExtension:
    """A host's own code, as ``[host] extension`` names it (the module docstring).

    ``rules`` are host guard rules (``HostRule``); ``hooks`` the model and tool
    hooks (``Hooks``); ``listeners`` hear every event of every turn; ``tools`` are
    server tool executors by name, replacing the catalog's own of the same name.
    Bad values are refused with a ``TypeError`` or ``ValueError`` naming the field.
    """

    rules: Sequence[HostRule] = ()
    hooks: Hooks | None = None
    listeners: Sequence[Listener] = ()
    tools: Mapping[str, ToolExecutor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rules = _sequence("rules", self.rules)
        HostRules(rules)  # type: ignore[arg-type]  # refused unless each is a HostRule, once
        object.__setattr__(self, "rules", rules)
        if self.hooks is not None and not isinstance(self.hooks, Hooks):
            raise TypeError(f"HostExtension.hooks: a Hooks or None, not {self.hooks!r}")
        listeners = _sequence("listeners", self.listeners)
        for listener in listeners:
            if not callable(listener):
                raise TypeError(f"HostExtension.listeners: {listener!r} is not callable")
        object.__setattr__(self, "listeners", listeners)
        if not isinstance(self.tools, Mapping):
            raise TypeError("HostExtension.tools: a mapping of tool names to executors")
        for name, executor in self.tools.items():
            if not isinstance(name, str) or not name or not callable(executor):
                raise TypeError(f"HostExtension.tools[{name!r}]: a name and a ToolExecutor")
        object.__setattr__(self, "tools", dict(self.tools))


def _sequence(name: str, value: object) -> tuple[object, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"HostExtension.{name}: a list, not {type(value).__name__}")
    return tuple(value)


def load_extension(spec: str, base: Path, where: str = "[host].extension") -> HostExtension:
    """The ``HostExtension`` that ``spec`` (``module:attribute``) names, imported with
    ``base`` (the configuration's folder) first on ``sys.path``; ``ValueError`` naming
    ``where`` when it cannot be had."""
    if not isinstance(spec, str) or not _SPEC.fullmatch(spec):
        raise ValueError(f"{where}: {spec!r} is not module:attribute (acme_host:EXTENSION)")
    module_name, attribute = spec.split(":")
    folder = str(base)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # not found, or the host's module raised on import
        missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
        # the module named (or a package on its path), not one that module imports
        if missing is not None and (module_name + ".").startswith(missing + "."):
            raise ValueError(
                f"{where}: no module {module_name!r} (looked in {folder} and on sys.path)"
            ) from None
        logger.debug("importing %s failed", module_name, exc_info=True)
        raise ValueError(f"{where}: importing {module_name} failed: {error_text(error)}") from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"{where}: {module_name} has no attribute {attribute!r}")
        value = getattr(value, part)
    if not isinstance(value, HostExtension) and callable(value):
        made: Callable[[], object] = value
        try:
            value = made()
        except Exception as error:
            raise ValueError(f"{where}: {spec}() raised {error_text(error)}") from None
    if not isinstance(value, HostExtension):
        raise ValueError(
            f"{where}: {spec} is a {type(value).__name__}, not a HostExtension "
            "(or a function returning one)"
        )
    return value
