"""The files a server tool returned: kept, referenced, and named to the model (AGN-033 §6).

When a ``ToolExecutor`` answers with a ``ToolOutput``, the LLMClient
(``llm_client.py``) hands its files here, while the call runs:

- each file is checked (``validators.tool_file_problem``) and kept by the
  pipeline's ``FileStore``, which answers its URL and expiry;
- each becomes a ``FileRef`` (AGN-033 §6.3) that joins the turn's files, which
  only the final response carries (§6.2);
- the model's tool message names each file — name, MIME type, size, hash and
  description — and says it goes to the user with the answer; the bytes never
  reach the model (§6.1).

A file with a problem, a pipeline without a ``FileStore``, or a store that fails
(or answers a URL that is not absolute, AGN-033 §6.3) makes the call fail as a
tool that raised: the model is told, the turn goes on, and no file of that call
reaches the response (docs/FILES.md). Files kept before the failure stay in the
store: kept by content hash, they are harmless, and a store's own expiry or
clean-up removes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from aptix_pipeline.contracts import AptixPipelineError, FileRef, FileStore, StoredFile, ToolFile
from aptix_pipeline.validators import is_reference_url, strict_json_loads, tool_file_problem

__all__ = ["ToolFileError", "keep_files", "told_to_model"]

_NOTE = "These files go to the user with the final answer; their contents are not shown here."


class ToolFileError(AptixPipelineError, ValueError):
    """A server tool's files could not be kept; the call fails with this message."""


async def keep_files(
    store: FileStore | None, tool: str, files: Sequence[ToolFile]
) -> list[FileRef]:
    """Keep ``files`` (made by server tool ``tool``) in ``store``; their ``FileRef``s.

    Raises ``ToolFileError`` naming the tool and the file for a file with a
    problem, a missing store, or a store that fails or answers something else.
    """
    for index, file in enumerate(files):
        problem = tool_file_problem(file)
        if problem is not None:
            raise ToolFileError(f"server tool {tool!r} returned file #{index + 1}: {problem}")
    if not files:
        return []
    if store is None:
        raise ToolFileError(
            f"server tool {tool!r} returned {len(files)} file(s), but the pipeline has no "
            "FileStore to keep them (Ports.files)"
        )
    refs = []
    for index, file in enumerate(files):
        try:
            stored = await store.put(file)
        except Exception as error:
            raise ToolFileError(
                f"server tool {tool!r}: the FileStore could not keep file #{index + 1} "
                f"({file.name!r}): {type(error).__name__}: {error}"
            ) from error
        if not isinstance(stored, StoredFile):
            raise ToolFileError(
                f"server tool {tool!r}: the FileStore answered {type(stored).__name__} "
                f"for file #{index + 1}, not a StoredFile"
            )
        if not is_reference_url(stored.url):  # AGN-033 §6.3: absolute, never data:
            raise ToolFileError(
                f"server tool {tool!r}: the FileStore answered {stored.url[:80]!r} for file "
                f"#{index + 1}, not an absolute URL"
            )
        refs.append(
            FileRef(
                name=file.name,
                mime_type=file.mime_type,
                url=stored.url,
                size_bytes=file.size_bytes,
                content_hash=file.content_hash,
                description=file.description,
                content_expires=stored.expires,
            )
        )
    return refs


def told_to_model(result_json: str, refs: Sequence[FileRef]) -> str:
    """The tool message the model gets: the result, and each file named without its bytes.

    ``result_json`` is the tool's result as JSON text; with no files it is the
    message itself.
    """
    if not refs:
        return result_json
    named = []
    for ref in refs:
        entry: dict[str, object] = {
            "name": ref.name,
            "mime_type": ref.mime_type,
            "size_bytes": ref.size_bytes,
            "content_hash": ref.content_hash,
        }
        if ref.description is not None:
            entry["description"] = ref.description
        named.append(entry)
    return json.dumps(
        {"result": strict_json_loads(result_json), "files": named, "note": _NOTE},
        ensure_ascii=False,
    )
