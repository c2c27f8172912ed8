"""Executors for the server tools of the built-in catalog (``default_config.toml``).

``Math`` is a container (container design): the engine expands it, so only its
members ``Add`` and ``Multiply`` have executors here: ``BUILTIN_TOOLS``. The demo
tool ``make_report`` makes a file (AGN-033 §6, docs/FILES.md); the built-in catalog
does not offer it, so it is among ``DEMO_TOOLS`` only: a catalog that declares it
(``MAKE_REPORT_TOOL``) gets its executor with the demo tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from aptix_pipeline.contracts import ToolExecutor, ToolFile, ToolInvocation, ToolOutput

__all__ = ["BUILTIN_TOOLS", "DEMO_TOOLS", "MAKE_REPORT_TOOL"]

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


MAKE_REPORT_TOOL: Mapping[str, Any] = MappingProxyType(
    {
        "name": "make_report",
        "description": "Write a short Markdown report for the user: a title and its points.",
        "executes_on": "server",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "points": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["title", "points"],
            "additionalProperties": False,
        },
    }
)
"""``make_report``'s ``[[server_tools]]`` entry, for a catalog that offers it."""


async def make_report(arguments: dict[str, Any], invocation: ToolInvocation) -> ToolOutput:
    """``make_report``: ``report.md``, the title as a heading and each point as an item."""
    title, points = arguments["title"], arguments["points"]
    text = f"# {title}\n\n" + "".join(f"- {point}\n" for point in points)
    report = ToolFile(
        name="report.md",
        mime_type="text/markdown",
        content=text.encode("utf-8"),
        description=f"Report: {title}",
    )
    return ToolOutput(
        result_json=json.dumps({"file": report.name, "points": len(points)}), files=(report,)
    )


BUILTIN_TOOLS: Mapping[str, ToolExecutor] = MappingProxyType(
    {"Add": add, "Multiply": multiply, "review_checklist": review_checklist}
)
"""Executors of the built-in catalog's server tools, by name."""

DEMO_TOOLS: Mapping[str, ToolExecutor] = MappingProxyType(
    {**BUILTIN_TOOLS, "make_report": make_report}
)
"""Every demo tool's executor by name: the built-in catalog's and ``make_report``."""
