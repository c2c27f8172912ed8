"""What a session's page shows from the other features (docs/UI.md "What it shows"):
its lineage (the session it was forked from, docs/FORKS.md, and its own forks) and
its usage and cost turn by turn, from the usage ledger (docs/BUDGETS.md) where the
store keeps one.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from aptix_pipeline.adapters.stores import SessionDetail
from aptix_pipeline.contracts import UsageCall

from .html import Markup, html, join
from .pages import link

__all__ = ["lineage", "usage_table"]


def lineage(base: str, detail: SessionDetail) -> Markup:
    """The parent link and the list of forks; empty for a session with neither."""
    s = detail.session
    parts: list[Markup] = []
    if s.forked_from is not None:
        parts.append(
            html(
                "<p id='forked-from'>forked from <a href='{href}'>{parent}</a> after turn "
                "<a href='{turn}'>{turn_id}</a> ({messages} messages shared)</p>",
                href=link(base, "session", org=s.org, user=s.user, id=s.forked_from.session_id),
                parent=s.forked_from.session_id,
                turn=link(
                    base,
                    "turn",
                    org=s.org,
                    user=s.user,
                    session=s.forked_from.session_id,
                    id=s.forked_from.turn_id,
                ),
                turn_id=s.forked_from.turn_id,
                messages=s.forked_from.messages,
            )
        )
    forks = [f for f in detail.forks if f.forked_from is not None]
    if forks:
        items = join(
            html(
                "<li><a href='{href}'>{id}</a> <span class='muted'>after turn {turn}</span></li>",
                href=link(base, "session", org=f.org, user=f.user, id=f.id),
                id=f.id,
                turn=f.forked_from.turn_id if f.forked_from is not None else "-",
            )
            for f in forks
        )
        parts.append(html("<h2>Forks</h2><ul id='forks'>{items}</ul>", items=items))
    return join(parts)


def _money(sums: dict[str, Decimal]) -> str:
    return ", ".join(f"{amount} {currency}" for currency, amount in sorted(sums.items())) or "-"


def usage_table(detail: SessionDetail, calls: Sequence[UsageCall]) -> Markup:
    """Each turn's settled model calls, tokens and cost, and the session's total; empty
    when the ledger holds no call of the session."""
    settled = [c for c in calls if c.settled]
    if not settled:
        return Markup("")
    order = {turn.id: n for n, turn in enumerate(detail.turns)}
    by_turn: dict[str, list[UsageCall]] = {}
    for call in settled:
        by_turn.setdefault(call.turn_id, []).append(call)

    def row(label: str, group: Sequence[UsageCall], attrs: str) -> Markup:
        cost: dict[str, Decimal] = {}
        for c in group:
            if c.priced and c.cost is not None and c.currency is not None:
                cost[c.currency] = cost.get(c.currency, Decimal(0)) + c.cost
        unpriced = sum(1 for c in group if not c.priced)
        return html(
            "<tr {attrs}><td>{label}</td><td>{calls}</td><td>{tin}</td><td>{tout}</td>"
            "<td>{cost}</td><td>{unpriced}</td></tr>",
            attrs=Markup(attrs),
            label=label,
            calls=len(group),
            tin=sum(c.input_tokens for c in group),
            tout=sum(c.output_tokens for c in group),
            cost=_money(cost),
            unpriced=unpriced or "-",
        )

    turns = sorted(by_turn, key=lambda t: (order.get(t, len(order)), t))
    rows = join(
        row(turn_id, by_turn[turn_id], html("data-usage-turn='{t}'", t=turn_id))
        for turn_id in turns
    )
    total = row("session", settled, "data-usage-total class='total'")
    return html(
        "<h2>Usage and cost</h2><table id='usage'><thead><tr><th>turn</th><th>model calls</th>"
        "<th>input tokens</th><th>output tokens</th><th>cost</th><th>unpriced calls</th></tr>"
        "</thead><tbody>{rows}{total}</tbody></table>",
        rows=rows,
        total=total,
    )
