"""Where the repository is, for tests that read its files (docs, examples, the README)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root folder: the one holding README.md and pyproject.toml."""

__all__ = ["ROOT"]
