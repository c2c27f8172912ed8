"""A module of ``bench/`` loaded from its file for a test (``bench/`` is no package):
with ``bench/`` on ``sys.path`` while it loads, so its sibling modules (``rounds``,
``send_turn``, ``turns``) import whichever test runs first."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from repo import ROOT

__all__ = ["BENCH", "bench_module"]

BENCH = ROOT / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` as the module ``bench_<name>``."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))
