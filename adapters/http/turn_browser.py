"""The turn browser page inside ``aptix serve``: ``[ui] enabled = true`` (docs/UI.md).

``mount_ui`` mounts ``ui_app.create_ui_app`` at ``[ui] path`` (default ``/ui``) on
the service's app, reading the service's own store (once it is open) and the
``[ui] recordings`` folder. It is behind the service's API keys: the browser
gives a key once, at ``/ui/login``, and the UI keeps it in a cookie scoped to its
path (HttpOnly, SameSite=Strict: no script reads it, no other site's form sends
it), checked by the service's ``Authenticator`` on every page. A page shows only
that key's org and user. Its watch view sends a request to the service's own
``POST /v1/agent/execute`` handler (``http_execute.run_turn``) as that caller,
asking for Server-Sent Events, so what the page shows is the service's own
stream. Its fork button forks through the service's ``Pipeline.fork`` as the key's
caller, as ``POST /v1/sessions/{id}/fork`` does, and its budgets are the service's.
Its live page (``/live``) follows each turn the service runs, as it runs, through
the service's ``LiveHub`` (``ServiceState.live``, ``ui/live_hub.py``).

Unlike ``aptix ui`` (``ui/guard.py``), it answers whatever ``Host`` a request names
(D418): a DNS-rebound name reads nothing here, since the key cookie is host-only (a
browser sends it to the name that set it, never to the rebound one) and every page
and API route needs a key; and a service is reached by the names it is deployed
under, which a loopback-only check would refuse.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from aptix_pipeline.adapters.config import UIConfig
from aptix_pipeline.adapters.stores import BrowsableStore, SessionBrowser
from aptix_pipeline.adapters.ui import UIAccess, create_ui_app
from aptix_pipeline.contracts import Budget, Caller, ErrorCode, InvokeError, InvokeResult, Session

from .auth import authenticated_caller
from .execute import EXECUTE_PATH, ServiceState, run_turn

__all__ = ["mount_ui"]


def mount_ui(app: FastAPI, service: ServiceState, ui: UIConfig) -> None:
    """Mount the turn browser on ``app`` at ``ui.path`` (module docstring)."""

    def store() -> BrowsableStore | None:
        pipeline = service.pipeline
        found = pipeline.ports.store if pipeline is not None else None
        return found if isinstance(found, SessionBrowser) else None

    async def caller_for_key(key: str) -> Caller | None:
        return await authenticated_caller(
            service.authenticator, Headers(headers={"authorization": f"Bearer {key}"})
        )

    async def watch(request: Request, key: str) -> Response:
        scope = dict(request.scope)
        kept = [(n, v) for n, v in request.scope["headers"] if n in (b"content-length", b"host")]
        scope["headers"] = [
            *kept,
            (b"authorization", f"Bearer {key}".encode("latin-1", "replace")),
            (b"accept", b"text/event-stream"),
            (b"content-type", b"application/json"),
        ]
        scope["path"] = EXECUTE_PATH
        return await run_turn(service, Request(scope, request.receive))

    async def fork(session_id: str, turn_id: str, caller: Caller) -> InvokeResult[Session]:
        pipeline = service.pipeline  # the fork button forks as POST /v1/sessions/{id}/fork does
        if pipeline is None:
            return InvokeResult[Session].failure(
                [
                    InvokeError(
                        code=ErrorCode.PORT_FAILED,
                        field="SessionStore",
                        message="the service is starting or stopping",
                    )
                ]
            )
        return await pipeline.fork(session_id, turn_id, caller)

    def budgets() -> tuple[Budget, ...] | None:
        pipeline = service.pipeline
        return pipeline.options.budgets if pipeline is not None else None

    access = UIAccess(caller_for_key=caller_for_key, watch=watch, live=service.live)
    app.mount(
        ui.path,
        create_ui_app(
            store,
            ui.recordings,
            store_name="the service's store",
            access=access,
            fork=fork,
            budgets=budgets,
        ),
    )
