"""Files server tools make (AGN-033 §6): ``LocalFileStore``, content-addressed blobs
behind HMAC-signed, expiring URLs.

May import contracts, validators, steps and engine; never another room of adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .local import FILES_PATH, MIN_SIGNING_KEY_BYTES, FileAccess, LocalFileStore

_EXPORTS: dict[str, str] = {
    "FileAccess": "local",
    "FILES_PATH": "local",
    "LocalFileStore": "local",
    "MIN_SIGNING_KEY_BYTES": "local",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "FILES_PATH",
    "MIN_SIGNING_KEY_BYTES",
    "FileAccess",
    "LocalFileStore",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
