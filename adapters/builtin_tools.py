"""Executors for the server tools of the built-in catalog (``default_config.toml``).

``Math`` is a container (container design): the engine expands it, so only its
members ``Add`` and ``Multiply`` have executors here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from aptix_pipeline.contracts import ToolExecutor, ToolInvocation

__all__ = ["BUILTIN_TOOLS"]

REVIEW_CHECKLIST = (
    "Does the change do what its description says?",
    "Is every new behaviour covered by a test that could fail?",
    "Are errors named and handled, not swallowed?",
)


async def add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """``Add``: a + b."""
    return json.dumps({"result": arguments["a"] + arguments["b"]})


async def multiply(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """``Multiply``: a * b."""
    return json.dumps({"result": arguments["a"] * arguments["b"]})


async def review_checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """``review_checklist``: the checklist."""
    return json.dumps({"checklist": list(REVIEW_CHECKLIST)})


BUILTIN_TOOLS: Mapping[str, ToolExecutor] = MappingProxyType(
    {"Add": add, "Multiply": multiply, "review_checklist": review_checklist}
)
"""Executors by server tool name."""
