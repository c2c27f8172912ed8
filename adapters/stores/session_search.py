"""Searching a store's sessions: ``SessionFilter``, ``SessionRow`` and ``SessionSearch``.

The turn browser's session list (``aptix ui``, docs/UI.md "Searching sessions") is one
read across every org and user: the sessions a ``SessionFilter`` matches, most recent
activity first (ties by id), a page at a time (``limit`` 1 to ``MAX_PAGE`` after
``offset``), each as a ``SessionRow``: its summary, the status of its latest turn, a
preview (its first message, cut to ``PREVIEW_CHARS``), its tokens (the sum of its
turns' ``usage.total_tokens``), its cost (the usage ledger's priced calls of the
session, by currency, where the store keeps one), and the outcome and first error of
its last kept trace (a ``TraceLog`` store, contracts/traces.py).

A row's shown status (``SessionRow.shown_status``) is ``faulted`` when its last kept
trace faulted (a failed turn stores no turn: its session's latest turn is the one
before), else its latest turn's status, ``none`` without turns.

A filter's fields are all optional and all must hold: ``org`` and ``user`` exactly,
``session`` a prefix of the session id, ``turn`` a turn id the session holds, ``mode``
the session's mode, ``status`` its shown status (a ``TurnStatus``, ``faulted`` or
``none``), ``since`` and ``until`` bound its last activity (``since`` included,
``until`` excluded). ``parse_filter`` reads one from text fields (the ``/sessions``
page's query string, ``aptix sessions list``'s options), naming the field that is wrong.

A store answers fast by implementing ``SessionSearch`` itself (the SQLite and
PostgreSQL stores do, each with one query a page); ``search_sessions`` answers for any
``SessionBrowser`` by reading every owner's sessions (correct, and slow on a big store).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, Protocol, runtime_checkable

from aptix_pipeline.contracts import TraceLog, Turn, TurnStatus

from .session_browser import MAX_PAGE, SessionBrowser, SessionSummary, check_page, message_text

__all__ = [
    "FAULTED",
    "FILTER_FIELDS",
    "NO_TURNS",
    "PREVIEW_CHARS",
    "STATUSES",
    "SessionFilter",
    "SessionRow",
    "SessionSearch",
    "SqlDialect",
    "parse_filter",
    "preview_of",
    "search_sessions",
    "search_where",
]

PREVIEW_CHARS: Final = 120
"""The most characters of a session's first message its row shows."""
NO_TURNS: Final = "none"
"""The ``status`` filter value matching sessions without turns."""
FAULTED: Final = "faulted"
"""The shown status of a session whose last kept trace faulted."""
STATUSES: Final = (*(s.value for s in TurnStatus), FAULTED, NO_TURNS)
"""Every shown status, in the order a form offers them."""
_STATUSES: Final = frozenset(STATUSES)
FILTER_FIELDS: Final = ("org", "user", "session", "turn", "mode", "status", "since", "until")
"""The fields ``parse_filter`` reads."""


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFilter:
    """Which sessions a search returns (module docstring); ``None`` fields match any."""

    org: str | None = None
    user: str | None = None
    session: str | None = None
    turn: str | None = None
    mode: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in _STATUSES:
            known = ", ".join(sorted(_STATUSES))
            raise ValueError(f"status must be one of {known}, not {self.status!r}")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError("since must be earlier than until")

    def is_empty(self) -> bool:
        """Whether the filter matches every session."""
        return all(getattr(self, f.name) is None for f in fields(self))

    def matches(self, row: SessionRow) -> bool:
        """Whether ``row`` is one the filter returns (the turn filter excepted: a row
        does not list its turns, so the caller checks that one)."""
        s = row.summary
        last = None if s.last_activity is None else _utc(s.last_activity)
        return (
            (self.org is None or s.org == self.org)
            and (self.user is None or s.user == self.user)
            and (self.session is None or s.id.startswith(self.session))
            and (self.mode is None or s.mode == self.mode)
            and (self.status is None or row.shown_status == self.status)
            and (self.since is None or (last is not None and last >= _utc(self.since)))
            and (self.until is None or (last is not None and last < _utc(self.until)))
        )


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One session as the search lists it (module docstring)."""

    summary: SessionSummary
    status: str | None
    """Its latest turn's status; ``None`` without turns."""
    preview: str | None
    """Its first message's text, at most ``PREVIEW_CHARS`` characters; ``None`` when empty."""
    tokens: int
    cost: tuple[tuple[str, Decimal], ...] = ()
    """(currency, amount) of its priced calls, by currency; empty when none or unknown."""
    outcome: str | None = None
    """Its last kept trace's outcome (``done``, ``faulted``); ``None`` when none was kept."""
    error_code: str | None = None
    """That trace's first error's code, if any."""
    error_message: str | None = None
    """That trace's first error's message, if any."""

    @property
    def shown_status(self) -> str:
        """``faulted`` when its last kept trace faulted, else its latest turn's status,
        else ``none`` (module docstring)."""
        if self.outcome == FAULTED:
            return FAULTED
        return self.status or NO_TURNS


def _moment(name: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{name}: not a date and time (2026-01-31 or 2026-01-31T12:00)") from None
    return _utc(moment)


def parse_filter(given: Mapping[str, str | None]) -> SessionFilter:
    """The filter ``given`` text fields ask for (``FILTER_FIELDS``; others are ignored,
    empty ones absent); ``since``/``until`` are ISO 8601, UTC without an offset.
    ``ValueError`` whose message starts with the field that is wrong."""
    texts = {name: (given.get(name) or "").strip() or None for name in FILTER_FIELDS}
    since, until = texts.pop("since"), texts.pop("until")
    return SessionFilter(
        since=None if since is None else _moment("since", since),
        until=None if until is None else _moment("until", until),
        **texts,
    )


@dataclass(frozen=True, slots=True)
class SqlDialect:
    """How a store's search statement spells what ``search_where`` needs: ``p`` the
    placeholder; the session table's alias ``s`` with its ``org``/``user``/``mode``
    columns; the latest turn's ``status`` and whether there is one (``no_turns``); the
    last kept trace's ``outcome``; ``activity`` (with ``{op}`` and the placeholder) the
    last activity compared to a bound, which ``moment`` turns into a parameter."""

    p: str
    org: str
    user: str
    mode: str
    session_id: str
    turns: str
    prefix: str
    no_turns: str
    status: str
    not_faulted: str
    activity: str
    moment: Callable[[datetime], Any] | None = None


def search_where(where: SessionFilter, sql: SqlDialect) -> tuple[str, list[Any]]:
    """The ``WHERE`` condition of a store's one-statement search and its parameters,
    for the memory store's meaning of each field (``SessionFilter``)."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in ((sql.org, where.org), (sql.user, where.user), (sql.mode, where.mode)):
        if value is not None:
            clauses.append(f"{column} = {sql.p}")
            params.append(value)
    if where.session is not None:
        clauses.append(sql.prefix)
        params.extend((len(where.session), where.session))
    if where.turn is not None:
        clauses.append(
            f"EXISTS (SELECT 1 FROM {sql.turns} x WHERE x.session_id = {sql.session_id} "
            f"AND x.id = {sql.p})"
        )
        params.append(where.turn)
    if where.status == FAULTED:
        clauses.append(f"k.outcome = {sql.p}")
        params.append(FAULTED)
    elif where.status is not None:
        clauses.append(sql.not_faulted)
        params.append(FAULTED)
        if where.status == NO_TURNS:
            clauses.append(sql.no_turns)
        else:
            clauses.append(f"{sql.status} = {sql.p}")
            params.append(where.status)
    for bound, operator in ((where.since, ">="), (where.until, "<")):
        if bound is not None:
            clauses.append(sql.activity.format(op=operator))
            params.append(bound if sql.moment is None else sql.moment(bound))
    return " AND ".join(clauses), params


def preview_of(text: str | None) -> str | None:
    """``text`` on one line, cut to ``PREVIEW_CHARS`` (an ellipsis where cut)."""
    if not text:
        return None
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


@runtime_checkable
class SessionSearch(Protocol):
    """A store that searches its own sessions (the SQLite store)."""

    async def search_sessions(
        self, where: SessionFilter, *, limit: int = 50, offset: int = 0
    ) -> list[SessionRow]:
        """The sessions ``where`` matches, most recent activity first."""


async def search_sessions(
    store: SessionBrowser, where: SessionFilter, *, limit: int = 50, offset: int = 0
) -> list[SessionRow]:
    """The sessions of ``store`` that ``where`` matches, most recent activity first: the
    store's own search where it has one, else by reading every owner's sessions."""
    check_page(limit, offset)
    if isinstance(store, SessionSearch):
        return await store.search_sessions(where, limit=limit, offset=offset)
    rows: list[SessionRow] = []
    owners_read = 0
    while owners := await store.list_owners(limit=MAX_PAGE, offset=owners_read):
        owners_read += len(owners)
        for owner in owners:
            if (where.org is not None and owner.org != where.org) or (
                where.user is not None and owner.user != where.user
            ):
                continue
            summaries: list[SessionSummary] = []
            while page := await store.list_sessions(
                owner.org, owner.user, limit=MAX_PAGE, offset=len(summaries)
            ):
                summaries.extend(page)
                if len(page) < MAX_PAGE:
                    break
            for summary in summaries:
                turns: list[Turn] = []
                while turn_page := await store.list_turns(
                    summary.org, summary.user, summary.id, limit=MAX_PAGE, offset=len(turns)
                ):
                    turns.extend(turn_page)
                    if len(turn_page) < MAX_PAGE:
                        break
                if where.turn is not None and all(t.id != where.turn for t in turns):
                    continue
                first = await store.read_transcript_page(
                    summary.org, summary.user, summary.id, limit=1
                )
                last = (
                    await store.list_traces(summary.org, summary.user, summary.id, limit=1)
                    if isinstance(store, TraceLog)
                    else []
                )
                row = SessionRow(
                    summary,
                    turns[-1].status.value if turns else None,
                    preview_of(message_text(first[0].message)) if first else None,
                    sum(t.usage.total_tokens for t in turns if t.usage is not None),
                    outcome=last[0].outcome if last else None,
                    error_code=last[0].error_code if last else None,
                    error_message=last[0].error_message if last else None,
                )
                if where.matches(row):
                    rows.append(row)
        if len(owners) < MAX_PAGE:
            break
    rows.sort(key=lambda row: row.summary.sort_key())
    return rows[offset : offset + limit]
