"""The turn browser page: sessions, turns, their paths on the pipeline diagram,
timelines and replays, as server-rendered HTML with a vendored htmx (``static/``).

May import the port rooms and config; never http or cli. The service mounts it
through ``http/turn_browser.py``; ``aptix ui`` serves it alone, behind ``guard.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .actions import fork_status
    from .app import UIAccess, create_ui_app
    from .guard import UIGuard, allowed_host_name, is_loopback
    from .live_events import EVENT_STREAM, KEEP_ALIVE, KEEPALIVE_SECONDS, SSE_HEADERS
    from .live_hub import LiveHub

_EXPORTS: dict[str, str] = {
    "create_ui_app": "app",
    "UIAccess": "app",
    "UIGuard": "guard",
    "allowed_host_name": "guard",
    "is_loopback": "guard",
    "LiveHub": "live_hub",
    "EVENT_STREAM": "live_events",
    "KEEPALIVE_SECONDS": "live_events",
    "KEEP_ALIVE": "live_events",
    "SSE_HEADERS": "live_events",
    "fork_status": "actions",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "EVENT_STREAM",
    "KEEPALIVE_SECONDS",
    "KEEP_ALIVE",
    "SSE_HEADERS",
    "LiveHub",
    "UIAccess",
    "UIGuard",
    "allowed_host_name",
    "create_ui_app",
    "fork_status",
    "is_loopback",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
