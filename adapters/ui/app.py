"""The turn browser page: a Starlette app of server-rendered HTML (docs/UI.md).

``create_ui_app`` serves, under whatever path it is mounted at:

- ``/`` — the sessions of the store (org, user, mode, turns, last activity) and the
  recordings of the folder;
- ``/sessions?org=&user=&session=&turn=&mode=&status=&since=&until=&page=`` — the
  sessions of the store, searched and a page at a time (``ui/search.py``);
- ``/session?org=&user=&id=`` — a session: its turns and transcript, the budgets
  that apply and a fork button per settled turn; ``POST /session/fork`` forks
  (``ui/actions.py``) and sends the browser to the new session;
- ``/turn?org=&user=&session=&id=`` — a stored turn: what the store holds, and the
  view of its recordings (``ui/recordings.py`` says which are its);
- ``/recording?name=`` — a recorded turn: the pipeline diagram with its path, the
  timeline, request and response (``ui/turn.py``); ``POST /recording/replay?name=``
  replays it (``engine/replay``) and answers the outcome (an htmx fragment, or a
  whole page to a plain form post);
- ``/live`` — the newest turns of the store, read again every half second, so turns
  other processes store show as they are stored (``ui/live.py``); ``/live/feed`` is the
  fragment it polls for; ``/live/events`` streams the turns this service runs as they
  run, and the commits a PostgreSQL store announces (``ui/live_events.py``,
  ``ui/live_hub.py``);
- ``/static/…`` — htmx (vendored, with its licence), the page's stylesheet and the
  watch view's script, from the package; nothing is fetched from elsewhere.

Who sees what (``UIAccess``): standalone (``aptix ui``) the page is for the
operator of the store and shows every org and user, to a browser that names a
loopback host (or one the operator allowed) and holds the token of this start
(``UIGuard``, ``ui/guard.py``): ``?token=`` once, then the cookie that visit sets;
a request naming another ``Host`` is a 400, one without the token a 401, one
with a wrong token a 403, each a short page holding nothing of the store. Mounted in ``aptix serve``
(``[ui] enabled``) it shows the sessions and recordings of the caller whose API
key the browser gave once at ``/login`` (kept in an HttpOnly, SameSite=Strict
cookie whose path is the UI's), and ``/watch`` starts a turn as that caller and
shows its progress events as they stream.

Every page goes out with a Content-Security-Policy allowing scripts from the page's
own static folder only, so nothing a store or a recording holds can run as a script.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from aptix_pipeline.adapters.stores import (
    MAX_PAGE,
    BrowsableStore,
    OwnerSummary,
    SessionDetail,
    SessionFilter,
    SessionRow,
    TurnNotifier,
    read_session_detail,
    search_sessions,
)
from aptix_pipeline.contracts import (
    Budget,
    Caller,
    TraceLog,
    UsageCall,
    UsageLedger,
    UsageQuery,
)
from aptix_pipeline.engine import BudgetStanding, usage_report

from .actions import (
    FORM_TOKEN_FIELD,
    Forker,
    FormTokens,
    budgets_section,
    cross_site,
    fork_cell,
    fork_problem,
    fork_status,
)
from .guard import LOOPBACK_NAMES, TOKEN_PARAM, UIGuard, host_of
from .html import Markup, html, join, page, stylesheet
from .live import live_body, live_feed, recent_turns
from .live_events import LiveEventsResponse
from .live_hub import LiveHub
from .pages import (
    index_body,
    link,
    login_body,
    recording_body,
    session_body,
    stored_turn_body,
    trace_body,
    traces_table,
    watch_body,
)
from .recordings import RecordingEntry, RecordingShelf
from .search import PAGE_ROWS, SearchQuery, search_body, search_query
from .session_extras import lineage, usage_table
from .turn import replay_outcome

__all__ = ["KEY_COOKIE", "TOKEN_COOKIE", "UIAccess", "create_ui_app"]

KEY_COOKIE: Final = "aptix_ui_key"
"""The cookie the mounted UI keeps the browser's API key in (module docstring)."""
TOKEN_COOKIE: Final = "aptix_ui_token"
"""The cookie the standalone page keeps its token in, named with the port it listens
on (``aptix_ui_token_8090``): a browser sends 127.0.0.1's cookies to every port."""
_SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
_STATIC: Final = {
    "htmx.min.js": "text/javascript",
    "htmx.LICENSE": "text/plain",
    "ui_watch.js": "text/javascript",
    "ui_picture.js": "text/javascript",
    "ui_live.js": "text/javascript",
}
_OWNERS_SHOWN: Final = 100
"""Orgs and users the first page lists; each with its most recent sessions."""


@dataclass(frozen=True, slots=True)
class UIAccess:
    """How the mounted UI knows its caller and starts turns (``None`` fields: standalone).

    ``caller_for_key`` names the caller an API key stands for (``None``: not a key);
    ``watch`` answers the watch view's request with the service's streamed answer,
    run as the caller of the key given; ``live`` publishes the turns the service
    runs, as they run, to the live page (``ui/live_hub.py``).
    """

    caller_for_key: Callable[[str], Awaitable[Caller | None]]
    watch: Callable[[Request, str], Awaitable[Response]] | None = None
    live: LiveHub | None = None


_StoreSource = Callable[[], BrowsableStore | None]
_BudgetSource = Callable[[], Sequence[Budget] | None]


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _html(body: Markup | str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(str(body), status_code=status, headers=_SECURITY_HEADERS)


def _static_file(name: str) -> bytes:
    return importlib.resources.files(__package__).joinpath("static", name).read_bytes()


class _UI:
    """The routes' shared state: where sessions and recordings come from, and who may look."""

    def __init__(
        self,
        store: _StoreSource,
        store_name: str | None,
        shelf: RecordingShelf,
        access: UIAccess | None,
        guard: UIGuard | None,
    ) -> None:
        self.store = store
        self.store_name = store_name
        self.shelf = shelf
        self.access = access
        self.guard = guard

    async def caller(self, request: Request) -> Caller | None:
        """The mounted UI's caller (from the key cookie); ``None`` when it has none."""
        assert self.access is not None
        key = request.cookies.get(KEY_COOKIE)
        return None if not key else await self.access.caller_for_key(key)

    def page(self, request: Request, title: str, body: Markup, **kwargs: Any) -> HTMLResponse:
        watch = self.access is not None and self.access.watch is not None
        status = kwargs.pop("status", 200)
        return _html(page(title, body, base=_base(request), watch=watch, **kwargs), status)

    def not_found(self, request: Request, what: str) -> HTMLResponse:
        body = html("<h1>Not found</h1><p id='not-found'>{what}</p>", what=what)
        return self.page(request, "not found", body, status=404)

    def allowed(self, caller: Caller | None, org: str, user: str) -> bool:
        """Standalone: any; mounted: only the caller's own org and user."""
        return self.access is None or (
            caller is not None and (caller.org, caller.user) == (org, user)
        )

    def visible(self, caller: Caller | None, entry: RecordingEntry) -> bool:
        return self.access is None or (
            caller is not None and entry.belongs_to(caller.org, caller.user)
        )


def _guarded(
    ui: _UI, handler: Callable[[Request, Caller | None], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """The handler, given the caller; a mounted UI without one sends the browser to ``/login``,
    a standalone one answers only a browser holding its token (``_with_token``)."""

    async def endpoint(request: Request) -> Response:
        if ui.access is None:
            assert ui.guard is not None
            return await _with_token(ui, ui.guard, request, handler)
        caller = await ui.caller(request)
        if caller is None:
            return RedirectResponse(f"{_base(request)}/login", status_code=303)
        return await handler(request, caller)

    return endpoint


def _token_cookie(request: Request) -> str:
    """``TOKEN_COOKIE`` named with the port the page listens on."""
    server = request.scope.get("server")
    return f"{TOKEN_COOKIE}_{server[1]}" if server and server[1] else TOKEN_COOKIE


async def _with_token(
    ui: _UI,
    guard: UIGuard,
    request: Request,
    handler: Callable[[Request, Caller | None], Awaitable[Response]],
) -> Response:
    """The standalone page's answer: ``?token=`` right answers and sets the cookie (the
    page itself, not a redirect: a SameSite=Strict cookie set on a redirect that another
    site started is not sent to its target); the cookie right answers; neither is a
    401, a wrong one a 403 (D416)."""
    cookie = _token_cookie(request)
    given = request.query_params.get(TOKEN_PARAM)
    if given is not None:
        if not guard.token_matches(given):
            return _token_refused(ui, request, 403, "the token in this URL is not this page's")
        response = await handler(request, None)
        response.set_cookie(
            cookie,
            guard.token,
            path=f"{_base(request)}/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response
    kept = request.cookies.get(cookie)
    if kept is None:
        return _token_refused(ui, request, 401, "this page needs the token aptix ui printed")
    if not guard.token_matches(kept):
        return _token_refused(
            ui, request, 403, "this browser holds the token of an earlier start of aptix ui"
        )
    return await handler(request, None)


def _token_refused(ui: _UI, request: Request, status: int, why: str) -> HTMLResponse:
    body = html(
        "<h1>Token needed</h1><p id='token-refused'>{why}: open the URL <code>aptix ui</code> "
        "printed when it started (<code>http://127.0.0.1:PORT/?token=…</code>); each start "
        "makes a new token. The page keeps it in a cookie afterwards.</p>",
        why=why,
    )
    return ui.page(request, "token needed", body, status=status)


class _HostCheck:
    """ASGI middleware: a request naming a ``Host`` the guard does not allow is answered
    400 with a page saying so, and reaches no route (D415)."""

    def __init__(self, app: ASGIApp, guard: UIGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("host")
        if self.guard.host_allowed(header):
            await self.app(scope, receive, send)
            return
        await _host_refused(self.guard, header)(scope, receive, send)


def _host_refused(guard: UIGuard, header: str | None) -> HTMLResponse:
    names = join(
        (html("<code>{n}</code>", n=n) for n in (*LOOPBACK_NAMES, *sorted(guard.allowed_hosts))),
        ", ",
    )
    asked = host_of(header) or header or "no host"
    document = html(
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<title>not this host · aptix</title></head><body><h1>Not this host</h1>"
        "<p id='host-refused'>This page answers only at {names} (any port), not at "
        "<code>{asked}</code>: a page that any host name reached could be read by any web "
        "site, through DNS rebinding. <code>aptix ui --allow-host NAME</code> adds a name."
        "</p></body></html>\n",
        names=names,
        asked=asked,
    )
    return _html(document, 400)


def _query(request: Request, *names: str) -> list[str] | None:
    values = [request.query_params.get(name) for name in names]
    return None if any(v is None or v == "" for v in values) else [str(v) for v in values]


def create_ui_app(
    store: BrowsableStore | _StoreSource | None,
    recordings: str | Path | None,
    *,
    store_name: str | None = None,
    access: UIAccess | None = None,
    guard: UIGuard | None = None,
    close_store: Callable[[], Awaitable[None]] | None = None,
    evals: str | Path | None = None,
    fork: Forker | None = None,
    budgets: Sequence[Budget] | _BudgetSource | None = None,
) -> Starlette:
    """The turn browser app (module docstring).

    ``fork`` forks a session (``Pipeline.fork``, or ``fork_session`` on the browsed
    store): given, each settled turn of a session's page has a fork button (D675).
    ``budgets`` are the configuration's ``[[budgets]]`` (or a function giving them:
    the service's, once its pipeline is built); ``None``: the page says "no budgets
    configured" (D677).

    ``evals`` is a folder of eval reports (``aptix eval --html FILE``): ``/evals`` lists
    its ``*.html`` files, ``/evals/{name}`` serves one as it was written (D625).

    ``store`` is a store (or a function giving the store when asked: the service's,
    once it is open), or ``None`` for recordings only; ``recordings`` the folder of
    recording files, or ``None``; ``store_name`` what the page calls the store;
    ``access`` makes it the mounted UI, ``guard`` the standalone one (exactly one of
    the two: ``ValueError`` otherwise); ``close_store`` runs when the app stops.
    """
    if (access is None) == (guard is None):
        raise ValueError(
            "create_ui_app: give access (the page mounted in a service) or guard "
            "(the standalone page: its token and host names), exactly one"
        )
    source: _StoreSource = store if callable(store) else (lambda: store)
    shelf = RecordingShelf(Path(recordings) if recordings is not None else None)
    ui = _UI(source, store_name, shelf, access, guard)
    served = access.live if access is not None else None
    hub = served or LiveHub()  # standalone: for the commits a store announces

    reports = Path(evals) if evals is not None else None
    budget_source: _BudgetSource = budgets if callable(budgets) else (lambda: budgets)
    form_tokens = FormTokens()

    def _form_identity(request: Request) -> str:
        """Whose form token a page holds: the browser's key mounted, the start standalone."""
        return request.cookies.get(KEY_COOKIE, "") if ui.access is not None else ""

    async def _standings(org: str, user: str) -> Sequence[BudgetStanding] | None:
        configured = budget_source()
        opened = ui.store()
        if not configured:
            return None
        if not isinstance(opened, UsageLedger):
            return ()
        now = datetime.now(UTC)
        # since=now: the report's totals read no call; each budget reads its own window
        asked = UsageQuery(org=org, user=user, since=now)
        report = await usage_report(opened, asked, budgets=configured, now=now)
        return report.budgets

    def _reports() -> list[Path]:
        if reports is None or not reports.is_dir():
            return []
        return sorted(reports.glob("*.html"), key=lambda p: (-p.stat().st_mtime, p.name))

    async def index(request: Request, caller: Caller | None) -> Response:
        opened = ui.store()
        owners: list[tuple[OwnerSummary, list[SessionRow]]] = []
        more_owners = False
        if opened is not None:
            if caller is not None:
                found = [OwnerSummary(caller.org, caller.user, 0)]
            else:
                found = await opened.list_owners(limit=_OWNERS_SHOWN + 1)
                more_owners = len(found) > _OWNERS_SHOWN
            for owner in found[:_OWNERS_SHOWN]:
                # the search's rows: each session's status and last error too (D659)
                where = SessionFilter(org=owner.org, user=owner.user)
                rows = await search_sessions(opened, where, limit=MAX_PAGE)
                if caller is not None:
                    owner = OwnerSummary(owner.org, owner.user, len(rows))
                if rows:
                    owners.append((owner, rows))
        entries = [e for e in ui.shelf.entries() if ui.visible(caller, e)]
        folder = str(ui.shelf.folder) if ui.shelf.folder is not None else None
        name = ui.store_name if opened is not None else None
        body = index_body(_base(request), owners, name, entries, folder, more_owners=more_owners)
        if reports is not None:
            body = html(
                "{body}<h1>Eval reports</h1><p id='eval-link'><a href='{base}/evals'>"
                "{count} eval reports</a> in {folder}</p>",
                body=body,
                base=_base(request),
                count=len(_reports()),
                folder=str(reports),
            )
        return ui.page(request, "sessions and recordings", body)

    async def sessions(request: Request, caller: Caller | None) -> Response:
        params = dict(request.query_params)
        params.pop(TOKEN_PARAM, None)
        if caller is not None:  # mounted: the caller's own sessions only
            params |= {"org": caller.org, "user": caller.user}
        try:
            asked = search_query(params)
        except ValueError as error:
            body = search_body(
                _base(request),
                SearchQuery(SessionFilter()),
                [],
                more=False,
                store_name=ui.store_name,
                problem=str(error),
                fixed_owner=caller is not None,
            )
            return ui.page(request, "sessions", body, status=400)
        opened = ui.store()
        rows: list[SessionRow] = []
        if opened is not None:
            rows = await search_sessions(
                opened, asked.where, limit=PAGE_ROWS + 1, offset=asked.offset
            )
        body = search_body(
            _base(request),
            asked,
            rows[:PAGE_ROWS],
            more=len(rows) > PAGE_ROWS,
            store_name=ui.store_name if opened is not None else None,
            fixed_owner=caller is not None,
        )
        return ui.page(request, "sessions", body)

    async def _detail(org: str, user: str, session_id: str) -> SessionDetail | None:
        opened = ui.store()
        return None if opened is None else await read_session_detail(opened, org, user, session_id)

    async def session(request: Request, caller: Caller | None) -> Response:
        asked = _query(request, "org", "user", "id")
        if asked is None or not ui.allowed(caller, asked[0], asked[1]):
            return ui.not_found(request, "no such session")
        return await _session_page(request, *asked)

    async def _session_page(
        request: Request,
        org: str,
        user: str,
        session_id: str,
        *,
        problem: Markup | None = None,
        status: int = 200,
    ) -> Response:
        detail = await _detail(org, user, session_id)
        if detail is None:
            return ui.not_found(request, f"no session {session_id} of {org} / {user}")
        recorded = {t.id: ui.shelf.for_turn(org, user, session_id, t.id) for t in detail.turns}
        opened = ui.store()
        calls: list[UsageCall] = (
            await opened.usage_calls(UsageQuery(org=org, user=user, session_id=session_id))
            if isinstance(opened, UsageLedger)
            else []
        )
        base = _base(request)
        extras = html(
            "{problem}{lineage}{usage}{budgets}",
            problem=problem or "",
            lineage=lineage(base, detail),
            usage=usage_table(detail, calls),
            budgets=budgets_section(await _standings(org, user), detail.traces, base),
        )
        token = form_tokens.issue(_form_identity(request))
        body = session_body(
            base,
            detail,
            recorded,
            extras=extras,
            turn_cell=None if fork is None else lambda t: fork_cell(base, detail.session, t, token),
        )
        return ui.page(request, f"session {session_id}", body, status=status)

    async def fork_here(request: Request, caller: Caller | None) -> Response:
        why = cross_site(
            request.headers.get("origin"),
            request.headers.get("sec-fetch-site"),
            request.headers.get("host"),
        )
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        given = {name: (form.get(name) or [""])[0] for name in ("org", "user", "session", "turn")}
        if why is None and not form_tokens.valid(
            _form_identity(request), (form.get(FORM_TOKEN_FIELD) or [""])[0]
        ):
            why = "the form holds no form token of this page: reload the session's page"
        if why is not None:
            body = html("<h1>Refused</h1><p id='post-refused'>{why}</p>", why=why)
            return ui.page(request, "refused", body, status=403)
        org, user, session_id, turn_id = (given[n] for n in ("org", "user", "session", "turn"))
        if fork is None or not org or not user or not ui.allowed(caller, org, user):
            return ui.not_found(request, "no such session")
        result = await fork(session_id, turn_id, caller or Caller(org=org, user=user))
        if result.result is not None:
            new = link(_base(request), "session", org=org, user=user, id=result.result.id)
            return RedirectResponse(new, status_code=303)
        return await _session_page(
            request,
            org,
            user,
            session_id,
            problem=fork_problem(result, turn_id),
            status=fork_status(result),
        )

    async def turn(request: Request, caller: Caller | None) -> Response:
        asked = _query(request, "org", "user", "session", "id")
        if asked is None or not ui.allowed(caller, asked[0], asked[1]):
            return ui.not_found(request, "no such turn")
        org, user, session_id, turn_id = asked
        detail = await _detail(org, user, session_id)
        found = next((t for t in detail.turns if t.id == turn_id), None) if detail else None
        if detail is None or found is None:
            return ui.not_found(request, f"no turn {turn_id} in session {session_id}")
        matched = ui.shelf.for_turn(org, user, session_id, turn_id)
        folder = str(ui.shelf.folder) if ui.shelf.folder is not None else None
        body = stored_turn_body(_base(request), detail, found, matched, folder)
        return ui.page(request, f"turn {turn_id}", body)

    async def kept_trace(request: Request, caller: Caller | None) -> Response:
        asked = _query(request, "org", "user", "id")
        if asked is None or not ui.allowed(caller, asked[0], asked[1]):
            return ui.not_found(request, "no such trace")
        org, user, trace_id = asked
        opened = ui.store()
        found = (
            await opened.read_trace(org, user, trace_id) if isinstance(opened, TraceLog) else None
        )
        if found is None:
            return ui.not_found(request, f"no trace {trace_id} of {org} / {user}")
        return ui.page(request, f"trace {trace_id}", trace_body(_base(request), found))

    async def kept_traces(request: Request, caller: Caller | None) -> Response:
        asked = _query(request, "org", "user")
        if asked is None or not ui.allowed(caller, asked[0], asked[1]):
            return ui.not_found(request, "no such org and user")
        org, user = asked
        opened = ui.store()
        if not isinstance(opened, TraceLog):
            return ui.not_found(request, "this store keeps no turn traces")
        listed = await opened.list_traces(org, user, limit=MAX_PAGE)
        body = html(
            "<h1>turn traces of {org} / {user}</h1>{budgets}<h2>Turn traces</h2>"
            "<p class='muted'>every turn, failed ones included (a failed first turn has no "
            "session), newest first; the newest {n} at most</p>{table}",
            org=org,
            user=user,
            budgets=budgets_section(await _standings(org, user), listed, _base(request)),
            n=MAX_PAGE,
            table=traces_table(_base(request), listed),
        )
        return ui.page(request, f"traces of {org} / {user}", body)

    def _recording(request: Request, caller: Caller | None) -> RecordingEntry | None:
        name = request.query_params.get("name")
        entry = ui.shelf.find(name) if name else None
        if entry is None or entry.recording is None or not ui.visible(caller, entry):
            return None
        return entry

    async def recording(request: Request, caller: Caller | None) -> Response:
        entry = _recording(request, caller)
        if entry is None or entry.recording is None:
            return ui.not_found(request, "no such recording")
        body = recording_body(_base(request), entry, entry.recording)
        return ui.page(request, entry.name, body)

    async def replay(request: Request, caller: Caller | None) -> Response:
        from aptix_pipeline.engine.replay import replay as replay_turn

        entry = _recording(request, caller)
        if entry is None or entry.recording is None:
            return ui.not_found(request, "no such recording")
        try:
            fragment = replay_outcome(await replay_turn(entry.recording))
        except ValueError as error:  # a recording this code cannot replay at all
            fragment = html("<div id='replay-result' data-verdict='error'>{e}</div>", e=str(error))
        if request.headers.get("hx-request") == "true":
            return _html(fragment)
        body = html("<h1>Replay of {name}</h1>{fragment}", name=entry.name, fragment=fragment)
        return ui.page(request, f"replay {entry.name}", body)

    async def _feed(request: Request, caller: Caller | None) -> Markup | None:
        opened = ui.store()
        if opened is None:
            return None
        owner = None if caller is None else (caller.org, caller.user)
        turns = await recent_turns(opened, owner)
        return live_feed(_base(request), turns, datetime.now(UTC))

    async def live(request: Request, caller: Caller | None) -> Response:
        followed = served is not None or isinstance(ui.store(), TurnNotifier)
        events = f"{_base(request)}/live/events" if followed else None
        body = live_body(_base(request), ui.store_name, await _feed(request, caller), events)
        return ui.page(request, "live", body, scripts=["ui_live.js"] if events else [])

    async def live_events(request: Request, caller: Caller | None) -> Response:
        owner = None if caller is None else (caller.org, caller.user)
        return LiveEventsResponse(hub, owner, ui.store(), _SECURITY_HEADERS)

    async def live_fragment(request: Request, caller: Caller | None) -> Response:
        feed = await _feed(request, caller)
        return _html(feed if feed is not None else html("<p>no store</p>"))

    async def eval_reports(request: Request, caller: Caller | None) -> Response:
        if reports is None:
            return ui.not_found(request, "no eval reports: aptix ui --evals DIR")
        base = _base(request)
        items = join(
            html("<li><a href='{base}/evals/{name}'>{name}</a></li>", base=base, name=p.name)
            for p in _reports()
        )
        body = html(
            "<h1>Eval reports</h1><p>{folder}</p><ul id='eval-reports'>{items}</ul>",
            folder=str(reports),
            items=items or html("<li>none yet (aptix eval … --html FILE)</li>"),
        )
        return ui.page(request, "eval reports", body)

    async def eval_report(request: Request, caller: Caller | None) -> Response:
        name = request.path_params["name"]
        found = next((p for p in _reports() if p.name == name), None)
        if found is None:
            return ui.not_found(request, f"no eval report {name}")
        return _html(found.read_text(encoding="utf-8"))

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "ui.css":
            return Response(stylesheet(), media_type="text/css", headers=_SECURITY_HEADERS)
        if name not in _STATIC:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(_static_file(name), media_type=_STATIC[name], headers=_SECURITY_HEADERS)

    routes = [
        Route("/", _guarded(ui, index)),
        Route("/session", _guarded(ui, session)),
        Route("/session/fork", _guarded(ui, fork_here), methods=["POST"]),
        Route("/sessions", _guarded(ui, sessions)),
        Route("/turn", _guarded(ui, turn)),
        Route("/trace", _guarded(ui, kept_trace)),
        Route("/traces", _guarded(ui, kept_traces)),
        Route("/recording", _guarded(ui, recording)),
        Route("/recording/replay", _guarded(ui, replay), methods=["POST"]),
        Route("/live", _guarded(ui, live)),
        Route("/live/feed", _guarded(ui, live_fragment)),
        Route("/live/events", _guarded(ui, live_events)),
        Route("/evals", _guarded(ui, eval_reports)),
        Route("/evals/{name}", _guarded(ui, eval_report)),
        Route("/static/{name}", static),
    ]
    if access is not None:
        routes.extend(_mounted_routes(ui, access))

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_store is not None:
                await close_store()

    middleware = [Middleware(_HostCheck, guard=guard)] if guard is not None else []
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def _mounted_routes(ui: _UI, access: UIAccess) -> list[Route]:
    """``/login`` and ``/logout``, and ``/watch`` when the service can start turns."""

    async def login_form(request: Request) -> Response:
        return ui.page(request, "sign in", login_body(_base(request), refused=False))

    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        key = (form.get("key") or [""])[0].strip()
        base = _base(request)
        if not key or await access.caller_for_key(key) is None:
            return ui.page(request, "sign in", login_body(base, refused=True), status=401)
        response = RedirectResponse(f"{base}/", status_code=303)
        response.set_cookie(
            KEY_COOKIE,
            key,
            path=f"{base}/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(request: Request) -> Response:
        base = _base(request)
        response = RedirectResponse(f"{base}/login", status_code=303)
        response.delete_cookie(KEY_COOKIE, path=f"{base}/")
        return response

    routes = [
        Route("/login", login_form),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
    watch = access.watch
    if watch is None:
        return routes

    async def watch_page(request: Request, caller: Caller | None) -> Response:
        assert caller is not None
        body = watch_body(_base(request), caller.org, caller.user)
        return ui.page(request, "watch a turn", body, scripts=["ui_watch.js"])

    async def watch_run(request: Request, caller: Caller | None) -> Response:
        return await watch(request, request.cookies[KEY_COOKIE])

    routes.extend(
        [
            Route("/watch", _guarded(ui, watch_page)),
            Route("/watch/run", _guarded(ui, watch_run), methods=["POST"]),
        ]
    )
    return routes
