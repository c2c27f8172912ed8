"""Usage reports: what an org's model calls took and cost, and what its budgets have left
(issue 31, docs/BUDGETS.md "Reports").

``usage_report`` reads a ``UsageLedger``'s calls (``UsageLedger.usage_calls``) for a
``UsageQuery`` — any store that keeps usage, through the port only — and sums them,
grouped by any of ``UsageGroupBy`` (org, user, mode, model, session, UTC day):

- tokens (input, output, cached input, reasoning) of the calls that reported them;
- cost per currency, in exact ``Decimal`` arithmetic, beside the number of calls the
  cost leaves out (``unpriced_calls``: no price, or no reported usage), so a sum is
  never silently partial;
- the calls the model reported no usage for (``unreported_calls``), the calls that
  failed or were reserved and released without a call (``failed_calls``), the
  reservations still in flight (``reserved_calls``), tool calls and server-tool rounds.

``BudgetStanding`` is a budget as it stands at ``now``: its window, limit, what it has
counted (``used``, by ``BudgetCheck.counted``: the very sum a reservation is checked
against, reservations in flight included) and what remains. A budget counted per user
or per mode is reported for the user (mode) the query names, else for each user (mode)
its window's calls show; a per-turn budget starts afresh each turn, so it is reported
with its limit only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, field_serializer

from aptix_pipeline.contracts import (
    Budget,
    BudgetScope,
    BudgetWindow,
    Charge,
    UsageCall,
    UsageLedger,
    UsageQuery,
    WireModel,
)
from aptix_pipeline.steps import budget_checks

__all__ = [
    "BudgetStanding",
    "UsageGroup",
    "UsageGroupBy",
    "UsageReport",
    "UsageTotals",
    "report_moment",
    "report_window",
    "usage_report",
]


class _Value(WireModel):
    """A report's part: wire names (PascalCase), frozen."""

    model_config = ConfigDict(frozen=True)


class UsageGroupBy(StrEnum):
    """What a usage report groups calls by."""

    ORG = "org"
    USER = "user"
    MODE = "mode"
    MODEL = "model"
    SESSION = "session"
    DAY = "day"
    """The UTC calendar day the call was made (``2026-11-28``)."""


class UsageTotals(_Value):
    """What a set of model calls took (module docstring).

    ``calls`` counts every call of the ledger the set holds: made, failed, or reserved
    and not yet settled. Tokens are the reported ones; ``cost`` maps each currency to
    the exact sum of the priced calls' cost; ``unpriced_calls`` are the settled calls
    that cost leaves out (no price for their model, or no reported usage).
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost: dict[str, Decimal] = Field(default_factory=dict)
    unpriced_calls: int = 0
    unreported_calls: int = 0
    failed_calls: int = 0
    reserved_calls: int = 0
    tool_calls: int = 0
    server_tool_rounds: int = 0


class UsageGroup(_Value):
    """One group of a report: its key (the ``by`` fields and their values; ``None``
    for a call with no model) and its totals."""

    key: dict[str, str | None]
    totals: UsageTotals


class BudgetStanding(_Value):
    """A budget as it stands at the report's ``now`` (module docstring).

    ``user`` and ``mode`` say whose spending it counts here (``None``: everyone's);
    ``since`` is where its window began, ``window_ends_at`` when a day or month window
    ends. ``used`` and ``remaining`` are ``None`` for a per-turn budget.
    """

    budget_id: str
    metric: str
    window: str
    limit: Decimal
    used: Decimal | None = None
    remaining: Decimal | None = None
    currency: str | None = None
    user: str | None = None
    mode: str | None = None
    since: datetime | None = None
    window_ends_at: datetime | None = None

    @property
    def whose(self) -> tuple[str, ...]:
        """Whose spending it counts here, in words (``"user ana"``, ``"mode review"``);
        empty when everyone's. Not part of the JSON form."""
        parts = (f"user {self.user}" if self.user else "", f"mode {self.mode}" if self.mode else "")
        return tuple(part for part in parts if part)


class UsageReport(_Value):
    """A usage report: the query it read, the ``by`` fields, each group (ordered by
    key), the totals of every call read, and the budgets that apply."""

    query: UsageQuery
    by: tuple[UsageGroupBy, ...] = ()
    at: datetime
    groups: tuple[UsageGroup, ...] = ()
    total: UsageTotals
    budgets: tuple[BudgetStanding, ...] = ()

    @field_serializer("query", mode="wrap")
    def _query_as_given(
        self, query: UsageQuery, handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        # The query is a dataclass: its fields left open are absent, as a wire model's.
        data: dict[str, Any] = handler(query)
        return {key: value for key, value in data.items() if value is not None}


def _key_value(call: UsageCall, by: UsageGroupBy) -> str | None:
    if by is UsageGroupBy.ORG:
        return call.org
    if by is UsageGroupBy.USER:
        return call.user
    if by is UsageGroupBy.MODE:
        return call.mode
    if by is UsageGroupBy.MODEL:
        return call.model
    if by is UsageGroupBy.SESSION:
        return call.session_id
    return call.at.astimezone(UTC).date().isoformat()


class _Sum:
    """Running totals of calls (``UsageTotals`` once done)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(
            (
                "calls",
                "input_tokens",
                "output_tokens",
                "cached_input_tokens",
                "reasoning_tokens",
                "unpriced_calls",
                "unreported_calls",
                "failed_calls",
                "reserved_calls",
                "tool_calls",
                "server_tool_rounds",
            ),
            0,
        )
        self.cost: dict[str, Decimal] = {}

    def add(self, call: UsageCall) -> None:
        counts = self.counts
        counts["calls"] += 1
        if not call.settled:
            counts["reserved_calls"] += 1
            return
        if call.failed:
            counts["failed_calls"] += 1
            return
        counts["tool_calls"] += call.tool_calls
        counts["server_tool_rounds"] += int(call.server_tool_round)
        if call.reported:
            counts["input_tokens"] += call.input_tokens
            counts["output_tokens"] += call.output_tokens
            counts["cached_input_tokens"] += call.cached_input_tokens
            counts["reasoning_tokens"] += call.reasoning_tokens
        else:
            counts["unreported_calls"] += 1
        if call.cost is None or call.currency is None:
            counts["unpriced_calls"] += 1
        else:
            self.cost[call.currency] = self.cost.get(call.currency, Decimal(0)) + call.cost

    def totals(self) -> UsageTotals:
        return UsageTotals(cost=dict(sorted(self.cost.items())), **self.counts)


def _sorting(key: tuple[str | None, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((value is None, value or "") for value in key)


def _subjects(
    budget: Budget, query: UsageQuery, calls: Sequence[UsageCall]
) -> list[tuple[str | None, str | None]]:
    """Whose spending ``budget`` is reported for: (user, mode) pairs, ``None`` where it
    counts everyone's — the user (mode) the query names, else each one the window's
    calls show (module docstring)."""
    per = budget.per
    by_user = per in (BudgetScope.USER, BudgetScope.USER_MODE) and budget.user is None
    by_mode = per in (BudgetScope.MODE, BudgetScope.USER_MODE) and budget.mode is None
    if not by_user and not by_mode:
        return [(budget.user, budget.mode)]
    pairs = {
        (call.user if by_user else budget.user, call.mode if by_mode else budget.mode)
        for call in calls
        if (query.user is None or call.user == query.user)
        and (query.mode is None or call.mode == query.mode)
    }
    named = (
        query.user if by_user else budget.user,
        query.mode if by_mode else budget.mode,
    )
    named_whole = (not by_user or named[0] is not None) and (not by_mode or named[1] is not None)
    if not pairs and named_whole:
        pairs.add(named)  # the one the query names, with nothing spent yet
    return sorted(pairs, key=_sorting)


async def _standings(
    ledger: UsageLedger, query: UsageQuery, budgets: Iterable[Budget], now: datetime
) -> list[BudgetStanding]:
    """The standing of each budget that applies to the query's org (and its user and
    mode, when the query names them)."""
    standings: list[BudgetStanding] = []
    windows: dict[datetime | None, list[UsageCall]] = {}
    org = query.org
    for budget in budgets:
        user, mode = query.user or budget.user or "", query.mode or budget.mode or ""
        if not budget.applies(org, user, mode):
            continue
        since = budget.window_start(now)
        standing = BudgetStanding(
            budget_id=budget.id,
            metric=budget.metric.value,
            window=budget.describe_window(),
            limit=budget.limit,
            currency=budget.currency,
            since=since,
            window_ends_at=budget.window_end(now),
        )
        if budget.window is BudgetWindow.TURN:
            standings.append(standing)
            continue
        if since not in windows:
            windows[since] = await ledger.usage_calls(UsageQuery(org=org, since=since))
        calls = [call for call in windows[since] if call.at <= now]
        for whom, how in _subjects(budget, query, calls):
            (check,) = budget_checks(
                (budget,),
                org=org,
                user=whom or "",
                mode=how or "",
                turn_id="",
                now=now,
                charge=Charge(),
                currency=budget.currency,
            )
            used = sum((check.counted(call) for call in calls), Decimal(0))
            standings.append(
                standing.model_copy(
                    update={
                        "used": used,
                        "remaining": max(budget.limit - used, Decimal(0)),
                        "user": check.user,
                        "mode": check.mode,
                    }
                )
            )
    return standings


_ROLLING = re.compile(r"^([1-9][0-9]{0,9})([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def report_window(window: str, now: datetime) -> datetime | None:
    """Where a report's window begins at ``now``: ``day`` (this UTC day), ``month``
    (this UTC month), ``all`` (``None``: from the first call), or the last ``N``
    seconds, minutes, hours or days (``90s``, ``30m``, ``24h``, ``7d``).

    Raises ``ValueError`` naming the forms for anything else.
    """
    now = now.astimezone(UTC)
    if window == "day":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "month":
        return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if window == "all":
        return None
    found = _ROLLING.match(window)
    if found is None:
        raise ValueError(
            f"window: {window!r} is none of day, month, all, or N followed by s, m, h or d "
            "(such as 24h)"
        )
    return now - timedelta(seconds=int(found[1]) * _SECONDS[found[2]])


def report_moment(text: str, name: str) -> datetime:
    """``text`` as a moment of a report's ``since`` or ``until``: an ISO 8601 date
    (``2026-11-01``: its start, UTC) or date and time (UTC unless it names its offset).

    Raises ``ValueError`` naming ``name`` for anything else.
    """
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{name}: {text!r} is not an ISO 8601 date or date and time (2026-11-01, "
            "2026-11-01T12:00:00Z)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def usage_report(
    ledger: UsageLedger,
    query: UsageQuery,
    *,
    by: Sequence[UsageGroupBy | str] = (),
    budgets: Sequence[Budget] = (),
    now: datetime | None = None,
) -> UsageReport:
    """The usage report of the calls ``query`` reads from ``ledger``, grouped ``by`` those
    fields (none: the totals only), with the standing at ``now`` (default: the current
    time) of each of ``budgets`` that applies (module docstring).

    Raises ``ValueError`` for an unknown ``by`` field, or one given twice.
    """
    fields: list[UsageGroupBy] = []
    for name in by:
        try:
            field = UsageGroupBy(name)
        except ValueError:
            known = ", ".join(member.value for member in UsageGroupBy)
            raise ValueError(f"by: unknown field {name!r}; known: {known}") from None
        if field in fields:
            raise ValueError(f"by: {field.value!r} is given twice")
        fields.append(field)
    moment = now if now is not None else datetime.now(UTC)
    calls = await ledger.usage_calls(query)
    total = _Sum()
    groups: dict[tuple[str | None, ...], _Sum] = {}
    for call in calls:
        total.add(call)
        if fields:
            key = tuple(_key_value(call, field) for field in fields)
            groups.setdefault(key, _Sum()).add(call)
    names = [field.value for field in fields]
    return UsageReport(
        query=query,
        by=tuple(fields),
        at=moment,
        groups=tuple(
            UsageGroup(key=dict(zip(names, key, strict=True)), totals=groups[key].totals())
            for key in sorted(groups, key=_sorting)
        ),
        total=total.totals(),
        budgets=tuple(await _standings(ledger, query, budgets, moment)),
    )
