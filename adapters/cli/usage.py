"""``aptix usage``: an org's model calls, their tokens and cost, and what its budgets have
left (``engine/usage_reports.py``, docs/BUDGETS.md "Reports").

It reads the store's ``UsageLedger`` — ``--store``, else the configuration's
``[store]``, else ``aptix run``'s default store — and prints the report as a table
(``--json``: the ``UsageReport`` JSON ``GET /v1/usage`` answers). ``--org`` defaults
to ``local``, the org of ``aptix run`` and ``aptix chat`` (D390); ``--user``,
``--mode``, ``--model`` and ``--session`` narrow the calls, ``--by`` groups them
(comma-separated or repeated: org, user, mode, model, session, day), ``--since`` /
``--until`` (ISO 8601) or ``--window`` (day, month, all, 24h, 7d…) bound them. The
budgets shown are the configuration's ``[[budgets]]``.

Exit codes: 0 shown, 2 a usage error (a bad option, a store that cannot be opened
or keeps no usage).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated

import typer

from .run import (
    COMMAND_NAME,
    DEFAULT_ORG,
    ConfigOption,
    StoreOption,
    close_ports,
    load_config,
    usage_error,
)

if TYPE_CHECKING:
    from aptix_pipeline.contracts import Budget, UsageLedger, UsageQuery
    from aptix_pipeline.engine import UsageReport, UsageTotals

__all__ = ["usage"]

_PIPED_WIDTH = 200
"""The table's width when stdout is no terminal."""


def _query(
    org: str,
    user: str | None,
    mode: str | None,
    model: str | None,
    session: str | None,
    since: str | None,
    until: str | None,
    window: str | None,
    now: datetime,
) -> UsageQuery:
    from aptix_pipeline.contracts import UsageQuery
    from aptix_pipeline.engine import report_moment, report_window

    if since is not None and window is not None:
        raise usage_error("give --since or --window, not both")
    try:
        start = (
            report_moment(since, "--since")
            if since is not None
            else (report_window(window, now) if window is not None else None)
        )
        end = report_moment(until, "--until") if until is not None else None
    except ValueError as error:
        raise usage_error(str(error) if window is None else f"--{error}") from None
    return UsageQuery(
        org=org, user=user, mode=mode, model=model, session_id=session, since=start, until=end
    )


def _cost(totals: UsageTotals) -> str:
    cost = ", ".join(f"{amount} {currency}" for currency, amount in totals.cost.items()) or "0"
    if totals.unpriced_calls:  # a sum is never silently partial
        cost += f" (+{totals.unpriced_calls} unpriced)"
    return cost


def _amount(value: Decimal | None) -> str:
    return "-" if value is None else str(value)


def _print(report: UsageReport) -> None:
    from rich.console import Console
    from rich.table import Table

    # piped, the table keeps every column whole (rich would fit 80 columns)
    console = Console(width=None if sys.stdout.isatty() else _PIPED_WIDTH)
    query = report.query
    bounds = f"since {query.since or 'the first call'}" + (
        f", until {query.until}" if query.until else ""
    )
    table = Table(title=f"usage of org {query.org} ({bounds})")
    keys = [field.value for field in report.by]
    for key in keys:
        table.add_column(key.upper())
    for column in ("CALLS", "INPUT", "OUTPUT", "CACHED", "REASONING", "COST"):
        table.add_column(column, justify="right" if column != "COST" else "left")
    for column in ("UNREPORTED", "FAILED", "RESERVED", "TOOL CALLS", "ROUNDS"):
        table.add_column(column, justify="right")
    rows = [([group.key[name] or "-" for name in keys], group.totals) for group in report.groups]
    rows.append((["total", *[""] * (len(keys) - 1)] if keys else [], report.total))
    for cells, totals in rows:
        table.add_row(
            *cells,
            str(totals.calls),
            str(totals.input_tokens),
            str(totals.output_tokens),
            str(totals.cached_input_tokens),
            str(totals.reasoning_tokens),
            _cost(totals),
            str(totals.unreported_calls),
            str(totals.failed_calls),
            str(totals.reserved_calls),
            str(totals.tool_calls),
            str(totals.server_tool_rounds),
        )
    console.print(table)
    if not report.budgets:
        console.print("no budgets apply (the configuration's \\[\\[budgets]])")
        return
    budgets = Table(title="budgets")
    for column in ("BUDGET", "METRIC", "WINDOW", "WHOSE", "LIMIT", "USED", "REMAINING"):
        budgets.add_column(column)
    for standing in report.budgets:
        unit = f" {standing.currency}" if standing.currency else ""
        budgets.add_row(
            standing.budget_id,
            standing.metric,
            standing.window,
            ", ".join(standing.whose) or "org",
            f"{standing.limit}{unit}",
            _amount(standing.used),
            _amount(standing.remaining) + ("" if standing.remaining is None else unit),
        )
    console.print(budgets)


async def _report(
    ledger: UsageLedger,
    query: UsageQuery,
    by: list[str],
    budgets: tuple[Budget, ...],
    now: datetime,
) -> UsageReport:
    from aptix_pipeline.engine import usage_report

    return await usage_report(ledger, query, by=by, budgets=budgets, now=now)


def usage(
    config: ConfigOption = None,
    store: StoreOption = None,
    org: Annotated[
        str, typer.Option(help="The org whose usage to show (default: aptix run's, local).")
    ] = DEFAULT_ORG,
    user: Annotated[str | None, typer.Option(help="Only this user's calls.")] = None,
    mode: Annotated[str | None, typer.Option(help="Only calls in this mode.")] = None,
    model: Annotated[str | None, typer.Option(help="Only calls of this model.")] = None,
    session: Annotated[str | None, typer.Option(help="Only calls of this session.")] = None,
    by: Annotated[
        list[str] | None,
        typer.Option(help="Group by: org, user, mode, model, session, day (comma-separated)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Calls from this ISO 8601 date or time (UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Calls before this ISO 8601 date or time (UTC).")
    ] = None,
    window: Annotated[
        str | None, typer.Option(help="Instead of --since: day, month, all, or 24h, 7d…")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Show an org's model calls, tokens and cost, and what its budgets have left."""
    from aptix_pipeline.contracts import UsageLedger
    from aptix_pipeline.engine import UsageGroupBy

    from .run import open_session_store

    COMMAND_NAME.set("usage")
    now = datetime.now(UTC)
    fields = [part.strip() for value in by or () for part in value.split(",") if part.strip()]
    known = [member.value for member in UsageGroupBy]
    for field in fields:
        if field not in known:
            raise usage_error(f"--by: unknown field {field!r}; known: {', '.join(known)}")
    if len(set(fields)) != len(fields):
        raise usage_error("--by: a field is given twice")
    query = _query(org, user, mode, model, session, since, until, window, now)
    service = load_config(config, model=False, store=store is None)
    opened = open_session_store(store, service)
    try:
        if not isinstance(opened, UsageLedger):
            raise usage_error(
                f"the store ({type(opened).__name__}) keeps no usage: budgets and reports "
                "need a store that is a UsageLedger (docs/BUDGETS.md)"
            )
        budgets = service.options.budgets if service is not None else ()
        report = asyncio.run(_report(opened, query, fields, budgets, now))
    finally:
        close_ports(opened, None, service)
    if as_json:
        typer.echo(report.to_json(indent=2))
        return
    _print(report)
