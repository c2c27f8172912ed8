"""The turn browser page: sessions, turns, their paths on the pipeline diagram,
timelines and replays, as server-rendered HTML with a vendored htmx (``static/``).

May import the port rooms and config; never http or cli. The service mounts it
through ``http/turn_browser.py``; ``aptix ui`` serves it alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .app import UIAccess, create_ui_app

_EXPORTS: dict[str, str] = {
    "create_ui_app": "app",
    "UIAccess": "app",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "UIAccess",
    "create_ui_app",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
