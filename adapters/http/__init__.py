"""The HTTP service (``aptix serve``): the FastAPI app, API keys, the execute route
and its Server-Sent Events, signed file downloads, the usage report, session forks,
OpenAPI, the errors' envelope, the read-timeout protocol, and the mount of the turn
browser.

May import the port rooms, config, ui and ``embedded``; never cli.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .app import CONFIG_ENV, ApiKeyAuthenticator, Authenticator, create_app
    from .protocol import PROTOCOL_PATH, ReadTimeoutProtocol

_EXPORTS: dict[str, str] = {
    "ApiKeyAuthenticator": "app",
    "CONFIG_ENV": "app",
    "Authenticator": "app",
    "create_app": "app",
    "PROTOCOL_PATH": "protocol",
    "ReadTimeoutProtocol": "protocol",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "CONFIG_ENV",
    "PROTOCOL_PATH",
    "ApiKeyAuthenticator",
    "Authenticator",
    "ReadTimeoutProtocol",
    "create_app",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
