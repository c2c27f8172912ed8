"""Every public exception of the package derives from ``AptixPipelineError``.

A host catches the engine's own refusals with that one class; each exception keeps
its built-in base too (``ValueError``, ``TypeError``…), so what catches it today
goes on catching it. "Public" is what a module's ``__all__`` names, in every module
of every subpackage, adapters included; each is named by its class name alone, so a
module may move without this file changing.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import aptix_pipeline
from aptix_pipeline.contracts import AptixPipelineError

SUBPACKAGES = ("contracts", "validators", "steps", "engine", "adapters")


def _modules() -> list[ModuleType]:
    modules = [aptix_pipeline]
    for name in SUBPACKAGES:
        package = importlib.import_module(f"aptix_pipeline.{name}")
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            modules.append(importlib.import_module(info.name))
    return modules


def _public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _modules():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert found.setdefault(value.__qualname__, value) is value, value.__qualname__
    return dict(sorted(found.items()))


PUBLIC = _public_exceptions()


@pytest.mark.decision("D254")
def test_the_walk_finds_the_public_exceptions() -> None:
    assert {
        "PermanentPortError",
        "StepFaultError",
        "MachineCompileError",
        "GraphvizMissingError",
        "ConfigError",
        "ScriptExhaustedError",
        "ReplayDivergenceError",
    } <= set(PUBLIC)


@pytest.mark.decision("D254")
@pytest.mark.parametrize("name", list(PUBLIC))
def test_each_public_exception_derives_from_the_base(name: str) -> None:
    assert issubclass(PUBLIC[name], AptixPipelineError)


@pytest.mark.decision("D254")
@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("MachineCompileError", TypeError),
        ("SchemaVersionError", RuntimeError),
        ("PostgresStoreError", RuntimeError),
        ("ConfigError", ValueError),
        ("CatalogError", ValueError),
        ("ScriptError", ValueError),
        ("TelemetrySetupError", ValueError),
        ("ReplayDivergenceError", AssertionError),
    ],
)
def test_each_keeps_its_builtin_base(name: str, builtin: type[Exception]) -> None:
    assert issubclass(PUBLIC[name], builtin)


@pytest.mark.decision("D254")
def test_the_base_is_exported_where_hosts_look() -> None:
    assert aptix_pipeline.AptixPipelineError is AptixPipelineError
