"""A folder of documents for retrieval: their text, title, metadata and passages.

What the SQLite FTS5 retriever indexes (``adapters/retrieval/fts.py``,
docs/RETRIEVAL.md). A document is a file under the folder ending in ``.md``,
``.markdown`` or ``.txt``; hidden files and folders (a name starting with ``.``) are
left out. Its id is its path relative to the folder, with ``/`` separators.

Metadata (docs/CONFORMANCE.md D336) comes from

- front matter, a Markdown file's first lines between ``---`` lines, in a small
  subset of YAML read here: ``key: value`` (a value in matching single or double
  quotes loses them), ``key: [a, b, "c, d"]`` (a list), or ``key:`` followed by
  ``- item`` lines (a list); blank lines and ``#`` comments are skipped; any other
  line is an error naming the file and the line;
- a sidecar file beside the document, ``NAME.meta.json`` (``guide.md.meta.json``):
  a JSON object whose values are strings, numbers, booleans or lists of them
  (numbers and booleans as their JSON text, ``3``, ``true``); its keys replace the
  front matter's.

The title is the metadata's ``title`` when it is a string, else the first Markdown
``#`` heading, else the file name without its suffix. The text after the front
matter is cut into passages at headings and blank lines, paragraphs joined until
a passage would pass ``PASSAGE_CHARS`` characters (a longer paragraph stays whole).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aptix_pipeline.contracts import AptixPipelineError, MetadataValue

__all__ = [
    "DOCUMENT_SUFFIXES",
    "PASSAGE_CHARS",
    "SIDECAR_SUFFIX",
    "DocumentError",
    "FolderDocument",
    "document_files",
    "read_document",
    "sidecar_of",
]

DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt")
SIDECAR_SUFFIX = ".meta.json"
PASSAGE_CHARS = 1000
"""About how long a passage grows before the next paragraph starts another."""

_KEY_LINE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(?:\s+(.*))?$")
_ITEM_LINE = re.compile(r"^\s*-\s+(.*)$")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


class DocumentError(AptixPipelineError, ValueError):
    """A document or its metadata cannot be read; the message names the file (and line)."""


@dataclass(frozen=True, slots=True)
class FolderDocument:
    """One document read from the folder: what the index keeps of it."""

    document_id: str
    path: Path
    title: str
    metadata: dict[str, MetadataValue]
    passages: tuple[str, ...]
    sha256: str


def document_files(folder: Path) -> Iterator[Path]:
    """The documents under ``folder``, in path order (hidden names and sidecars left out)."""
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.suffix.lower() in DOCUMENT_SUFFIXES and path.is_file():
            yield path


def sidecar_of(path: Path) -> Path:
    """The sidecar metadata file of a document (``guide.md`` → ``guide.md.meta.json``)."""
    return path.with_name(path.name + SIDECAR_SUFFIX)


def read_document(folder: Path, path: Path) -> FolderDocument:
    """Read one document: its metadata, title and passages; ``DocumentError`` if it cannot."""
    document_id = path.relative_to(folder).as_posix()
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as error:
        raise DocumentError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise DocumentError(f"{path}: not UTF-8 text: {error.reason}") from None
    text = text.replace("\r\n", "\n").replace("\x00", "")
    metadata, body = _front_matter(text, path) if path.suffix.lower() != ".txt" else ({}, text)
    digest = hashlib.sha256(raw)
    sidecar = sidecar_of(path)
    if sidecar.is_file():
        sidecar_raw = _sidecar_bytes(sidecar)
        digest.update(b"\x00" + sidecar_raw)
        metadata.update(_sidecar(sidecar, sidecar_raw))
    title = metadata.get("title")
    if not isinstance(title, str) or not title.strip():
        title = _first_heading(body) or path.stem
    return FolderDocument(
        document_id=document_id,
        path=path,
        title=title,
        metadata=metadata,
        passages=tuple(_passages(body)),
        sha256=digest.hexdigest(),
    )


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _inline_list(value: str, where: str) -> list[str]:
    inner = value[1:-1]
    items: list[str] = []
    current, quote = "", ""
    for char in inner:
        if quote:
            if char == quote:
                quote = ""
            else:
                current += char
        elif char in "'\"" and not current.strip():
            quote, current = char, ""
        elif char == ",":
            items.append(current.strip())
            current = ""
        else:
            current += char
    if quote:
        raise DocumentError(f"{where}: a quote in the list is not closed")
    if current.strip() or items:
        items.append(current.strip())
    return [item for item in items if item]


def _front_matter(text: str, path: Path) -> tuple[dict[str, MetadataValue], str]:
    """The front matter's metadata and the text after it (the whole text without one)."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return {}, text
    metadata: dict[str, MetadataValue] = {}
    listing: str | None = None  # the key whose "- item" lines follow
    for number, line in enumerate(lines[1:], start=2):
        where = f"{path}: line {number}"
        stripped = line.strip()
        if stripped in ("---", "..."):
            return metadata, "\n".join(lines[number:])
        if not stripped or stripped.startswith("#"):
            continue
        item = _ITEM_LINE.match(line)
        if item is not None and listing is not None:
            values = metadata[listing]
            assert isinstance(values, list)
            values.append(_unquoted(item.group(1)))
            continue
        matched = _KEY_LINE.match(line)
        if matched is None or line[:1].isspace():
            raise DocumentError(
                f"{where}: front matter holds `key: value`, `key: [a, b]` or `- item` "
                f"lines, not {stripped[:40]!r}"
            )
        key, value = matched.group(1), (matched.group(2) or "").strip()
        listing = None
        if not value:
            metadata[key] = []
            listing = key
        elif value.startswith("[") and value.endswith("]"):
            metadata[key] = _inline_list(value, where)
        else:
            metadata[key] = _unquoted(value)
    raise DocumentError(f"{path}: the front matter opened on line 1 is not closed by `---`")


def _sidecar_bytes(sidecar: Path) -> bytes:
    try:
        return sidecar.read_bytes()
    except OSError as error:
        raise DocumentError(f"{sidecar}: cannot read: {error.strerror or error}") from None


def _scalar(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return None


def _sidecar(sidecar: Path, raw: bytes) -> dict[str, MetadataValue]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise DocumentError(f"{sidecar}: not a JSON object: {error}") from None
    if not isinstance(data, dict):
        raise DocumentError(f"{sidecar}: not a JSON object: {type(data).__name__}")
    metadata: dict[str, MetadataValue] = {}
    for key, value in data.items():
        scalar = _scalar(value)
        if scalar is not None:
            metadata[key] = scalar
            continue
        items = [_scalar(item) for item in value] if isinstance(value, list) else None
        if items is None or any(item is None for item in items):
            raise DocumentError(
                f"{sidecar}: {key!r}: a value is a string, number, boolean or a list of them"
            )
        metadata[key] = [item for item in items if item is not None]
    return metadata


def _first_heading(body: str) -> str | None:
    for line in body.split("\n"):
        heading = _HEADING.match(line)
        if heading is not None:
            return heading.group(1)
    return None


def _passages(body: str) -> Iterator[str]:
    current: list[str] = []
    size = 0
    for block in re.split(r"\n\s*\n", body):
        paragraph = block.strip()
        if not paragraph:
            continue
        starts_section = _HEADING.match(paragraph.split("\n", 1)[0]) is not None
        if current and (starts_section or size + len(paragraph) > PASSAGE_CHARS):
            yield "\n\n".join(current)
            current, size = [], 0
        current.append(paragraph)
        size += len(paragraph) + 2
    if current:
        yield "\n\n".join(current)
