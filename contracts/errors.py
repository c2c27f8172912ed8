"""``AptixPipelineError``: the base of every exception this package raises on purpose.

A host that wants to tell the engine's own refusals (a bad configuration, a
diagram that cannot be drawn, a store conflict, a replay that diverged) from any
other failure catches this one class. Each public exception also keeps the
built-in base it had before (``ValueError``, ``TypeError``, ``RuntimeError``,
``AssertionError``), so code that catches those goes on catching it.

This module imports nothing of ours, so every layer may use it (DESIGN.md "Layout
and layers").
"""

from __future__ import annotations

__all__ = ["AptixPipelineError"]


class AptixPipelineError(Exception):
    """The base of the package's public exceptions (see the module docstring)."""
