"""JSON Schemas of the wire contracts, as published in ``docs/schemas/``.

``python -m aptix_pipeline.contracts.schemas DIR`` (or ``make schemas``) writes
them; a test keeps the committed copies current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .request import AgentExecuteRequest
from .response import AgentExecuteResponse
from .result import InvokeResult

__all__ = ["SCHEMAS", "render_schemas", "write_schemas"]

SCHEMAS: dict[str, type[Any]] = {
    "agent-execute-request.schema.json": AgentExecuteRequest,
    "agent-execute-response.schema.json": AgentExecuteResponse,
    "invoke-result.schema.json": InvokeResult[AgentExecuteResponse],
}
"""File name → model of every published schema."""


def render_schemas() -> dict[str, str]:
    """File name → schema text (Draft 2020-12, wire names, stable formatting)."""
    rendered: dict[str, str] = {}
    for name, model in SCHEMAS.items():
        schema = model.model_json_schema(by_alias=True, mode="validation")
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
        rendered[name] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return rendered


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_schemas().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - exercised through `make schemas`
    for written_path in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas")):
        print(written_path)
