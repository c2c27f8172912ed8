"""An MCP tool's result as a server tool's answer (docs/MCP.md "Results").

- ``structuredContent`` is the result JSON; without it, the text blocks are (one
  block: its text, kept when it is JSON; several: a JSON list of them);
- images, audio and embedded resources are files the tool made (``ToolFile``,
  AGN-033 §6), kept by the pipeline's ``FileStore`` as any tool's files;
- resource links are listed in the result under ``"links"``;
- ``isError`` is a failed call (``McpToolError``): the model is told its text.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from typing import Any
from urllib.parse import urlsplit

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)

from aptix_pipeline.contracts import AptixPipelineError, ToolFile, ToolOutput

__all__ = ["McpToolError", "tool_answer"]


class McpToolError(AptixPipelineError):
    """An MCP tool answered ``isError``, or its server failed the call."""


def _file_name(tool: str, index: int, mime_type: str, uri: str | None = None) -> str:
    if uri:
        last = urlsplit(uri).path.rstrip("/").rpartition("/")[2]
        if last and last not in (".", ".."):
            return last
    extension = mimetypes.guess_extension(mime_type.split(";")[0].strip()) or ".bin"
    return f"{tool}-{index}{extension}"


def _decoded(data: str, tool: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise McpToolError(f"MCP tool {tool!r} returned content that is not base64") from None


def tool_answer(tool: str, result: CallToolResult) -> str | ToolOutput:
    """``result`` as a ``ToolExecutor``'s answer; raises ``McpToolError`` when it is an error."""
    texts: list[str] = []
    links: list[dict[str, Any]] = []
    files: list[ToolFile] = []
    for block in result.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            name = _file_name(tool, len(files) + 1, block.mime_type)
            files.append(
                ToolFile(name=name, mime_type=block.mime_type, content=_decoded(block.data, tool))
            )
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            mime = resource.mime_type or (
                "application/octet-stream"
                if isinstance(resource, BlobResourceContents)
                else "text/plain"
            )
            content = (
                _decoded(resource.blob, tool)
                if isinstance(resource, BlobResourceContents)
                else resource.text.encode("utf-8")
            )
            name = _file_name(tool, len(files) + 1, mime, str(resource.uri))
            files.append(
                ToolFile(name=name, mime_type=mime, content=content, description=str(resource.uri))
            )
        elif isinstance(block, ResourceLink):
            links.append({"uri": str(block.uri), "name": block.name, "mimeType": block.mime_type})
    if result.is_error:
        raise McpToolError(" ".join(texts).strip() or f"MCP tool {tool!r} reported an error")
    value: Any
    if result.structured_content is not None:
        value = result.structured_content
    elif len(texts) == 1 and not links:
        value = texts[0]
    else:
        value = {"content": texts} if texts else {}
    if links:
        value = {"result": value, "links": links}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if files:
        if isinstance(value, str):  # ToolOutput's result is JSON: the text as a JSON string
            try:
                json.loads(value)
            except ValueError:
                text = json.dumps(value, ensure_ascii=False)
        return ToolOutput(result_json=text, files=tuple(files))
    return text
