"""The turn browser's searchable session list, ``/sessions`` (docs/UI.md "Searching sessions").

``search_query`` reads a ``SessionFilter`` and a page number from the query string
(``org``, ``user``, ``session``, ``turn``, ``mode``, ``status``, ``since``, ``until``,
``page``), or says which field is wrong (``parse_filter``, which ``aptix sessions list``
shares); ``search_body`` is the page: the form, a table of ``PAGE_ROWS`` sessions (id,
owner, mode, status with the last error as its title, preview, turns, tokens, cost,
last activity) and links to the pages before and after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Final

from aptix_pipeline.adapters.stores import STATUSES, SessionFilter, SessionRow, parse_filter

from .html import Markup, html, join
from .pages import link, session_rows_table

__all__ = ["PAGE_ROWS", "SearchQuery", "search_body", "search_query"]

PAGE_ROWS: Final = 50
"""Sessions one page of the list shows."""
_TEXT_FIELDS: Final = ("org", "user", "session", "turn", "mode")


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """What ``/sessions`` was asked: the filter and the page (from 1)."""

    where: SessionFilter
    page: int = 1

    @property
    def offset(self) -> int:
        return (self.page - 1) * PAGE_ROWS


def search_query(params: Mapping[str, str]) -> SearchQuery:
    """The query ``params`` ask for; ``ValueError`` naming the field that is wrong.
    Empty fields are absent; a time without a zone is UTC."""
    where = parse_filter(params)
    page = params.get("page", "").strip() or "1"
    if not page.isdigit() or int(page) < 1:
        raise ValueError(f"page: a page number from 1, not {page!r}")
    return SearchQuery(where, int(page))


def _query_string(where: SessionFilter) -> dict[str, str]:
    query: dict[str, str] = {}
    for f in fields(where):
        value = getattr(where, f.name)
        if isinstance(value, datetime):
            query[f.name] = value.isoformat()
        elif value is not None:
            query[f.name] = str(value)
    return query


def _form(base: str, where: SessionFilter, fixed_owner: bool) -> Markup:
    inputs = join(
        html(
            "<label>{name} <input name='{name}' value='{value}' size='12'></label> ",
            name=name,
            value=getattr(where, name) or "",
        )
        for name in _TEXT_FIELDS
        if not (fixed_owner and name in ("org", "user"))
    )
    options = join(
        html(
            "<option value='{v}'{selected}>{label}</option>",
            v=value,
            label=value or "any",
            selected=Markup(" selected") if value == (where.status or "") else Markup(""),
        )
        for value in ("", *STATUSES)
    )
    times = join(
        html(
            "<label>{name} <input name='{name}' value='{value}' size='20' "
            "placeholder='2026-01-31T12:00'></label> ",
            name=name,
            value="" if getattr(where, name) is None else getattr(where, name).isoformat(),
        )
        for name in ("since", "until")
    )
    return html(
        "<form id='session-search' method='get' action='{base}/sessions'>{inputs}"
        "<label>status <select name='status'>{options}</select></label> {times}"
        "<button type='submit'>search</button> <a href='{base}/sessions'>clear</a></form>",
        base=base,
        inputs=inputs,
        options=options,
        times=times,
    )


def search_body(
    base: str,
    asked: SearchQuery,
    rows: Sequence[SessionRow],
    *,
    more: bool,
    store_name: str | None,
    problem: str | None = None,
    fixed_owner: bool = False,
) -> Markup:
    """The page: the form, the page of rows (``more``: a next page exists), the links."""
    form = _form(base, asked.where, fixed_owner)
    if problem is not None:
        return html(
            "<h1>Sessions</h1>{form}<p id='search-problem' class='error'>{problem}</p>",
            form=form,
            problem=problem,
        )
    if store_name is None:
        return html("<h1>Sessions</h1><p class='muted'>no store given (--store)</p>")
    query = _query_string(asked.where)
    pages = []
    if asked.page > 1:
        href = link(base, "sessions", **query, page=str(asked.page - 1))
        pages.append(html("<a rel='prev' href='{href}'>← newer</a>", href=href))
    if more:
        href = link(base, "sessions", **query, page=str(asked.page + 1))
        pages.append(html("<a rel='next' href='{href}'>older →</a>", href=href))
    shown = (
        html("<p class='muted'>no sessions match</p>")
        if not rows
        else session_rows_table(base, rows, table_id="session-rows")
    )
    first = asked.offset + 1
    return html(
        "<h1>Sessions</h1><p class='muted'>store: {store}</p>{form}"
        "<p class='muted' id='search-range'>page {page}: sessions {first} to {last}</p>{shown}"
        "<p id='search-pages'>{pages}</p>",
        store=store_name,
        form=form,
        page=asked.page,
        first=first if rows else 0,
        last=asked.offset + len(rows),
        shown=shown,
        pages=join(pages, " · "),
    )
