"""What a session's page adds for acting on it and for what it may spend (docs/UI.md
"Forking from the page", "Budgets on the page"):

- the **fork button**: each settled turn's form posts to ``/session/fork``, which forks
  through ``Pipeline.fork`` (``fork_session`` on the browsed store in ``aptix ui``, the
  service's pipeline in ``aptix serve``, D675). The post is refused unless it comes
  from the page itself (D676): a request whose ``Origin`` names another host, or
  whose ``Sec-Fetch-Site`` is ``cross-site``, is a 403, and so is a form without this
  start's form token (``FormTokens``: an HMAC of the browser's key, or of the
  standalone page's start, under a secret made at start);
- the **budgets** that apply to the session's org and user, as ``usage_report`` stands
  them (D677), and the turns refused for budget, from the kept traces.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from aptix_pipeline.contracts import (
    Caller,
    ErrorCode,
    InvokeResult,
    KeptTrace,
    Session,
    Turn,
    TurnStatus,
)
from aptix_pipeline.engine import BudgetStanding

from .guard import host_of
from .html import Markup, html, join
from .pages import link

__all__ = [
    "BUDGET_EXCEEDED",
    "FORM_TOKEN_FIELD",
    "Forker",
    "FormTokens",
    "budgets_section",
    "cross_site",
    "fork_cell",
    "fork_problem",
    "fork_status",
]

Forker = Callable[[str, str, Caller], Awaitable[InvokeResult[Session]]]
"""Forks ``(session_id, turn_id, caller)``: ``Pipeline.fork``, or ``fork_session`` on a store."""

FORM_TOKEN_FIELD: Final = "form_token"
"""The hidden field the page's forms carry their form token in."""
BUDGET_EXCEEDED: Final = "budget_exceeded"

_STATUS: Final[dict[str, int]] = {
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.PORT_FAILED: 502,
}


class FormTokens:
    """Form tokens of one start of the page: ``issue(identity)`` is an HMAC-SHA256 of
    ``identity`` (the browser's API key in ``aptix serve``, empty standalone) under a
    secret made when the app is built, so a page from another start, another key or
    another site holds none that matches."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def issue(self, identity: str) -> str:
        digest = hmac.new(self._secret, identity.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def valid(self, identity: str, given: str | None) -> bool:
        if not given:
            return False
        return hmac.compare_digest(given.encode("utf-8"), self.issue(identity).encode("ascii"))


def cross_site(origin: str | None, fetch_site: str | None, host: str | None) -> str | None:
    """Why a post is not the page's own (``None`` when nothing says so): an ``Origin``
    whose host and port are not the request's ``Host``, or ``Sec-Fetch-Site: cross-site``."""
    if fetch_site is not None and fetch_site.strip().lower() == "cross-site":
        return "the browser says this post came from another site (Sec-Fetch-Site)"
    if origin is None:
        return None
    named = origin.strip().split("://", 1)
    if origin.strip() == "null" or len(named) != 2:
        return f"the post came from origin {origin!r}, not from this page"
    if host is None or named[1].rstrip("/").lower() != host.strip().lower():
        return f"the post came from {origin}, not from this page ({host_of(host) or '-'})"
    return None


def fork_status(result: InvokeResult[Session]) -> int:
    """The HTTP status of a fork's result: 201 when forked; for a refusal, the status
    of the page and of ``POST /v1/sessions/{id}/fork`` alike (the engine's error
    code's; 501 for a store that cannot fork)."""
    if result.successful:
        return 201
    error = result.errors[0]
    if error.code is ErrorCode.INVALID_REQUEST and error.field == "SessionStore":
        return 501
    return _STATUS.get(str(error.code), 500)


def fork_problem(result: InvokeResult[Session], turn_id: str) -> Markup:
    """The refusal shown above the session: each error's code, field and message."""
    return html(
        "<div class='error' id='fork-refused' role='alert'><strong>not forked after turn "
        "<code>{turn}</code>; nothing was written</strong><ul>{errors}</ul></div>",
        turn=turn_id,
        errors=join(
            html(
                "<li data-code='{code}' data-field='{field}'><code>{code}</code> "
                "(<code>{field}</code>): {message}</li>",
                code=str(e.code),
                field=e.field or "-",
                message=e.message,
            )
            for e in result.errors
        ),
    )


def fork_cell(base: str, session: Session, turn: Turn, token: str) -> Markup:
    """The fork button of a settled turn; a pending one cannot be forked after (docs/FORKS.md)."""
    if turn.status is not TurnStatus.COMPLETED:
        return html("<td class='muted'>pending</td>")
    return html(
        "<td><form method='post' action='{action}' class='fork'>"
        "<input type='hidden' name='org' value='{org}'>"
        "<input type='hidden' name='user' value='{user}'>"
        "<input type='hidden' name='session' value='{session}'>"
        "<input type='hidden' name='turn' value='{turn}'>"
        "<input type='hidden' name='{field}' value='{token}'>"
        "<button type='submit' data-fork-turn='{turn}'>fork here</button></form></td>",
        action=link(base, "session/fork"),
        org=session.org,
        user=session.user,
        session=session.id,
        turn=turn.id,
        field=FORM_TOKEN_FIELD,
        token=token,
    )


def _amount(standing: BudgetStanding, value: object) -> str:
    if value is None:
        return "-"
    return f"{value} {standing.currency}" if standing.currency else str(value)


def budgets_section(
    standings: Sequence[BudgetStanding] | None, traces: Sequence[KeptTrace], base: str
) -> Markup:
    """The budgets that apply (limit, used, remaining), or "no budgets configured" when
    the page was given none (``standings is None``; empty: none of them applies here),
    and the turns of ``traces`` refused for budget, with their error."""
    if standings is None:
        table = html(
            "<p class='muted' id='no-budgets'>no budgets configured (the configuration's "
            "<code>[[budgets]]</code>: <code>aptix ui --config FILE</code> reads them)</p>"
        )
    elif not standings:
        table = html(
            "<p class='muted' id='no-budgets'>no configured budget applies to this org and user</p>"
        )
    else:
        rows = join(
            html(
                "<tr data-budget='{id}'><td>{id}</td><td>{metric}</td><td>{window}</td>"
                "<td>{whose}</td><td>{limit}</td><td>{used}</td><td>{remaining}</td></tr>",
                id=s.budget_id,
                metric=s.metric,
                window=s.window,
                whose=" · ".join(s.whose) or "everyone's",
                limit=_amount(s, s.limit),
                used=_amount(s, s.used) if s.used is not None else "per turn",
                remaining=_amount(s, s.remaining)
                if s.remaining is not None
                else "each turn afresh",
            )
            for s in standings
        )
        table = html(
            "<table id='budgets'><thead><tr><th>budget</th><th>metric</th><th>window</th>"
            "<th>whose spending</th><th>limit</th><th>used</th><th>remaining</th></tr></thead>"
            "<tbody>{rows}</tbody></table>",
            rows=rows,
        )
    refused = [t for t in traces if t.error_code == BUDGET_EXCEEDED]
    listed = (
        html(
            "<h3>Refused for budget</h3><ul id='budget-refusals'>{items}</ul>",
            items=join(
                html(
                    "<li class='failed' data-refused-trace='{id}'><a href='{href}'>{at}</a> turn "
                    "<code>{turn}</code>: <code>budget_exceeded</code> {message}</li>",
                    id=t.id,
                    href=link(base, "trace", org=t.org, user=t.user, id=t.id),
                    at=t.at.isoformat(sep=" ", timespec="seconds"),
                    turn=t.turn_id or "(none stored)",
                    message=t.error_message or "",
                )
                for t in refused
            ),
        )
        if refused
        else ""
    )
    return html("<h2 id='budgets-heading'>Budgets</h2>{table}{listed}", table=table, listed=listed)
