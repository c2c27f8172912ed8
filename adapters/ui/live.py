"""The live view: the turns a store holds, newest first, read afresh at each poll.

The live page (``/live``, docs/UI.md "The live view") asks for this list every
``POLL_MS`` milliseconds, so a turn another process commits to the store shows within
a second, whatever the store is: a turn is in the store once its unit of work
commits (AGN-033 §6.1), so a turn that awaits client tools shows as ``open`` and then
as ``completed`` once its continuation commits. Polling needs nothing of the store
beyond the ``SessionBrowser`` reads, so the memory, SQLite and PostgreSQL stores and a
host's own store all work alike, with no schema change (D685). ``live_body`` is the
page, ``live_feed`` the fragment it polls for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from aptix_pipeline.adapters.stores import MAX_PAGE, BrowsableStore, SessionSummary
from aptix_pipeline.contracts import Turn

from .html import Markup, html, join
from .pages import link

__all__ = ["LIVE_TURNS", "POLL_MS", "LiveTurn", "live_body", "live_feed", "recent_turns"]

POLL_MS: Final = 500
"""How often the live page reads the store again: half the one second it promises."""
LIVE_TURNS: Final = 50
"""How many of the newest turns the live page lists."""
_OWNERS_READ: Final = 100
_NO_TIME: Final = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class LiveTurn:
    """A turn as the live view lists it, with the session and caller it belongs to."""

    org: str
    user: str
    session_id: str
    turn: Turn

    @property
    def created_at(self) -> datetime | None:
        """When the turn was created (the store's clock)."""
        return self.turn.created_at


async def recent_turns(
    store: BrowsableStore, owner: tuple[str, str] | None = None, limit: int = LIVE_TURNS
) -> list[LiveTurn]:
    """The ``limit`` newest turns of the store, newest first (ties by id), of every
    caller, or of ``owner`` (org, user) only.

    Only the ``limit`` most recently active sessions can hold them (a session's last
    activity is its newest turn's creation time), and of each only its last ``limit``
    turns, so a poll reads a bounded number of rows however large the store is.
    """
    if owner is not None:
        owners = [owner]
    else:
        found = await store.list_owners(limit=_OWNERS_READ)
        owners = [(o.org, o.user) for o in found]
    sessions: list[SessionSummary] = []
    for org, user in owners:
        sessions.extend(await store.list_sessions(org, user, limit=min(limit, MAX_PAGE)))
    sessions.sort(key=SessionSummary.sort_key)
    turns: list[LiveTurn] = []
    for summary in sessions[:limit]:
        offset = max(0, summary.turns - limit)
        listed = await store.list_turns(
            summary.org, summary.user, summary.id, limit=min(limit, MAX_PAGE), offset=offset
        )
        turns.extend(LiveTurn(summary.org, summary.user, summary.id, t) for t in listed or ())
    turns.sort(key=_newest_first, reverse=True)
    return turns[:limit]


def _newest_first(live: LiveTurn) -> tuple[datetime, str]:
    moment = live.created_at
    if moment is None:
        return _NO_TIME, live.turn.id
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)), live.turn.id


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(sep=" ", timespec="seconds")


def _tokens(turn: Turn) -> str:
    usage = turn.usage
    return "-" if usage is None else f"{usage.input_tokens} in / {usage.output_tokens} out"


def live_feed(base: str, turns: list[LiveTurn], read_at: datetime) -> Markup:
    """The fragment the live page polls for: the newest turns, and when the store was read."""
    rows = join(
        html(
            "<tr data-turn='{id}' data-status='{status}'><td>{created}</td><td>{org} / {user}"
            "</td><td><a href='{session_href}'>{session}</a></td><td><a href='{turn_href}'>"
            "{id}</a></td><td>{mode}</td><td><span class='badge {status}'>{status}</span>"
            "</td><td>{tokens}</td></tr>",
            id=live.turn.id,
            status=live.turn.status.value,
            created=_time(live.created_at),
            org=live.org,
            user=live.user,
            session=live.session_id,
            session_href=link(base, "session", org=live.org, user=live.user, id=live.session_id),
            turn_href=link(
                base, "turn", org=live.org, user=live.user, session=live.session_id, id=live.turn.id
            ),
            mode=live.turn.mode or "-",
            tokens=_tokens(live.turn),
        )
        for live in turns
    )
    empty = html("<tr><td colspan='7' class='muted'>no turns yet</td></tr>")
    return html(
        "<p class='muted' id='live-read-at'>read at {read_at}; the page reads again every "
        "{poll} ms</p><table id='live-turns'><thead><tr><th>created</th><th>caller</th>"
        "<th>session</th><th>turn</th><th>mode</th><th>status</th><th>tokens</th></tr></thead>"
        "<tbody>{rows}</tbody></table>",
        read_at=read_at.isoformat(sep=" ", timespec="milliseconds"),
        poll=POLL_MS,
        rows=rows or empty,
    )


def live_body(
    base: str, store_name: str | None, feed: Markup | None, events: str | None = None
) -> Markup:
    """The live page: ``feed`` now, replaced by a fresh one every ``POLL_MS`` (htmx polls);
    ``None`` when the page has no store. With ``events`` (the ``/live/events`` stream:
    the service's own turns, a store's commit notices) the running turns show above it
    as they run (``static/ui_live.js``), and a commit reads the feed at once."""
    if feed is None:
        return html("<h1>Live</h1><p id='live-no-store'>No store to watch: aptix ui --store …</p>")
    running = html("")
    if events is not None:
        running = html(
            "<section id='live-running' data-events='{events}'><h2>Running here</h2>"
            "<p class='muted'>the turns this service runs, event by event, their text as "
            "it is written</p><ol id='live-runs'></ol></section><span id='live-notify' "
            "hx-get='{href}' hx-target='#live' hx-swap='innerHTML' "
            "hx-trigger='live-stored from:body'></span>",
            events=events,
            href=f"{base}/live/feed",
        )
    return html(
        "<h1>Live</h1><p>The newest turns of {store}, of any process that writes to it, as "
        "they are stored.</p>{running}<div id='live' hx-get='{href}' hx-trigger='every {poll}ms' "
        "hx-swap='innerHTML'>{feed}</div>",
        store=store_name or "the store",
        href=f"{base}/live/feed",
        poll=POLL_MS,
        feed=feed,
        running=running,
    )
