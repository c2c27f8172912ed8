"""Generate and check the committed pipeline diagrams.

``diagrams/pipeline.mmd`` and ``diagrams/pipeline.dot`` are ``aptix diagram``'s
output, and README.md's ``mermaid`` block (its section "The pipeline") is the same
text as ``pipeline.mmd``. ``python tests/kits/diagram_files.py --write`` (``make
diagrams``) rewrites all three; ``test_diagrams.py`` fails when any is stale.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from repo import ROOT

from aptix_pipeline.engine.diagram import DiagramFormat, diagram_text

__all__ = ["FILES", "README", "expected_files", "readme_block", "write"]

FILES = {
    ROOT / "diagrams" / "pipeline.mmd": DiagramFormat.MERMAID,
    ROOT / "diagrams" / "pipeline.dot": DiagramFormat.DOT,
}
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```mermaid\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def expected_files() -> dict[Path, str]:
    """Each committed diagram file and the text it must hold."""
    return {path: diagram_text(fmt) for path, fmt in FILES.items()}


def readme_block(readme: str) -> str | None:
    """The text of README.md's first ``mermaid`` code block, or ``None`` when it has none."""
    match = _BLOCK.search(readme)
    return match.group(1) if match else None


def write() -> None:
    """Rewrite the diagram files and README.md's ``mermaid`` block."""
    for path, text in expected_files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    mermaid = diagram_text(DiagramFormat.MERMAID)
    if readme_block(readme) is None:
        raise SystemExit("README.md has no ```mermaid block to update")
    updated = _BLOCK.sub(lambda _: f"```mermaid\n{mermaid}```\n", readme, count=1)
    README.write_text(updated, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/kits/diagram_files.py --write")
    write()
