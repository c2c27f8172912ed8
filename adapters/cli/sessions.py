"""``aptix sessions list|show``: what a store holds, read through ``SessionBrowser`` (docs/UI.md).

- ``aptix sessions list [--store URL] [--org ORG] [--user USER]`` searches that
  caller's sessions (``local``/``local`` unless given, D390; ``--all``: every org and
  user's, narrowed by ``--org``/``--user`` when given), as the turn browser's
  ``/sessions`` page does (``search_sessions``, ``parse_filter``): ``--session PREFIX``,
  ``--turn ID``, ``--mode``, ``--status`` (``faulted`` when its last turn failed),
  ``--since``/``--until`` (ISO 8601). A line a session, most recent activity first:
  id (and owner under ``--all``), mode, status, last activity, turns, tokens, cost,
  last error and preview; ``--limit``/``--page`` page through them (``--offset``
  skips rows before the page). ``--owners``
  lists the org and user pairs that hold sessions instead.
- ``aptix sessions show SESSION --store URL [--org ORG --user USER]`` prints the
  session, its turns (mode, status, usage, server tool results) and its transcript
  with the content of each message: the store is the operator's own. As for
  ``aptix run``, the caller is ``local``/``local`` unless given (D390).

  A fork says which session and turn it was forked from; a session with forks lists
  them (docs/FORKS.md). Then each kept trace of its turns, failed turns included:
  time, outcome, turn, error and the path of states (docs/UI.md "Every turn leaves
  its trace").
- ``aptix sessions traces [--session SESSION] [--org ORG --user USER]`` lists a
  caller's kept traces, newest first: failed first turns, which left no session,
  included; ``--limit``/``--offset`` page, ``--json`` prints each whole.
- ``aptix fork SESSION TURN [--store URL] [--config FILE] [--org ORG --user USER]``
  forks the session after that settled turn (``engine.fork_session``, what
  ``Pipeline.fork`` runs) and prints the new session's id; ``--json`` prints the
  new session. The store is ``aptix run``'s (``--store``, else the configuration's
  ``[store]``, else the data folder's file), and so is the caller (D390).

``--json`` prints the same as JSON. Reads are scoped to the org and user given,
as a turn's are: another caller's session is not found. Exit codes: 0 shown (or
forked), 1 no such session (or a fork refused: the error's message on stderr), 2
a usage error (a store that is missing, unknown or unreachable; a bad option value,
named).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from .run import (
    DEFAULT_ORG,
    DEFAULT_USER,
    ConfigOption,
    OrgOption,
    StoreOption,
    UserOption,
    close_ports,
    load_config,
    open_session_store,
)

if TYPE_CHECKING:
    from aptix_pipeline.adapters.stores import (
        BrowsableStore,
        OwnerSummary,
        SessionDetail,
        SessionRow,
    )
    from aptix_pipeline.contracts import KeptTrace

__all__ = ["fork", "sessions_app"]

T = TypeVar("T")

_Store = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="The store: sqlite:PATH or postgresql://USER@HOST/DB; default: aptix run's.",
    ),
]
_Org = Annotated[str | None, typer.Option("--org", help="The caller's org.")]
_User = Annotated[str | None, typer.Option("--user", help="The caller's user.")]
_Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]

sessions_app = typer.Typer(
    name="sessions",
    help="List and show the sessions a store holds, scoped to an org and user.",
    no_args_is_help=True,
)


def _refuse(message: str, code: int = 2) -> typer.Exit:
    """Say what is wrong on stderr; the exit to raise (2: usage, 1: not found)."""
    typer.echo(f"aptix sessions: {message}", err=True)
    return typer.Exit(code)


def _browse(store: str | None, read: Callable[[BrowsableStore], Awaitable[T]]) -> T:
    """Open the store, run ``read`` on it and close it; a store that fails is a usage error."""
    import asyncio
    import sqlite3

    from aptix_pipeline.adapters.config import default_store_path
    from aptix_pipeline.adapters.stores import (
        BrowseStoreError,
        close_browse_store,
        open_browse_store,
    )
    from aptix_pipeline.contracts import AptixPipelineError

    async def main() -> T:  # by default, where aptix run keeps sessions (never made here)
        opened = open_browse_store(store or f"sqlite:{default_store_path()}")
        try:
            return await read(opened)
        finally:
            await close_browse_store(opened)

    try:
        return asyncio.run(main())
    except BrowseStoreError as error:
        raise _refuse(str(error)) from None
    except (AptixPipelineError, sqlite3.Error, OSError) as error:
        raise _refuse(f"the store cannot be read: {error}") from None


def _time(moment: object) -> str:
    return "-" if moment is None else str(moment)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [header, *rows]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _print_owners(owners: list[OwnerSummary], as_json: bool) -> None:
    if as_json:
        typer.echo(
            json.dumps([{"org": o.org, "user": o.user, "sessions": o.sessions} for o in owners])
        )
        return
    if not owners:
        typer.echo("no sessions in this store")
        return
    rows = [[o.org, o.user, str(o.sessions)] for o in owners]
    typer.echo(_table(["ORG", "USER", "SESSIONS"], rows))
    typer.echo("(give --org and --user to list their sessions, --all for everyone's)")


def _error_text(code: str | None, message: str | None) -> str:
    """A turn's error as ``code: message``; ``-`` for none."""
    if code is None:
        return "-"
    return f"{code}: {message or ''}".rstrip(": ")


def _cost_text(row: SessionRow) -> str:
    return ", ".join(f"{amount} {currency}" for currency, amount in row.cost) or "-"


def _row_json(row: SessionRow) -> dict[str, Any]:
    from aptix_pipeline.adapters.stores import summary_json

    return summary_json(row.summary) | {
        "status": row.shown_status,
        "turn_status": row.status,
        "outcome": row.outcome,
        "last_error": None
        if row.error_code is None
        else {"code": row.error_code, "message": row.error_message},
        "tokens": row.tokens,
        "cost": [{"currency": currency, "amount": str(amount)} for currency, amount in row.cost],
        "preview": row.preview,
    }


def _print_rows(rows: list[SessionRow], owners: bool, more: int | None, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([_row_json(row) for row in rows], ensure_ascii=False))
        return
    if not rows:
        typer.echo("no sessions match")
        return
    lines = []
    for row in rows:
        s = row.summary
        last = "-" if s.last_activity is None else s.last_activity.isoformat(" ", "seconds")
        lines.append(
            [
                s.id,
                *((s.org, s.user) if owners else ()),
                s.mode or "-",
                row.shown_status,
                last,
                str(s.turns),
                str(row.tokens),
                _cost_text(row),
                _error_text(row.error_code, row.error_message),
                row.preview or "-",
            ]
        )
    header = [
        "SESSION",
        *(("ORG", "USER") if owners else ()),
        *("MODE", "STATUS", "LAST ACTIVITY", "TURNS", "TOKENS", "COST", "LAST ERROR", "PREVIEW"),
    ]
    typer.echo(_table(header, lines))
    if more is not None:
        typer.echo(f"(more: --page {more})")


_Text = Annotated[str | None, typer.Option(show_default=False)]


@sessions_app.command("list")
def list_sessions(
    store: _Store = None,
    org: Annotated[
        str | None, typer.Option("--org", help="The caller's org (default: local).")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="The caller's user (default: local).")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every org and user (narrowed by --org/--user).")
    ] = False,
    owners: Annotated[
        bool, typer.Option("--owners", help="List the org and user pairs holding sessions.")
    ] = False,
    session: Annotated[
        str | None, typer.Option("--session", metavar="PREFIX", help="Session ids starting so.")
    ] = None,
    turn: Annotated[
        str | None, typer.Option("--turn", metavar="ID", help="Sessions holding this turn.")
    ] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="Sessions in this mode.")] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="completed, awaiting_client_tools, open, faulted (last turn failed) or none.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="TIME", help="Last active at or after (ISO 8601, UTC)."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", metavar="TIME", help="Last active before (ISO 8601, UTC)."),
    ] = None,
    as_json: _Json = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Sessions a page.")] = 50,
    page: Annotated[int, typer.Option(min=1, help="The page, from 1.")] = 1,
    offset: Annotated[int, typer.Option(min=0, help="Rows to skip before the page.")] = 0,
) -> None:
    """Search a caller's sessions, most recent activity first (--all: everyone's)."""
    from aptix_pipeline.adapters.stores import MAX_PAGE, parse_filter, search_sessions

    skip = offset + (page - 1) * limit
    if owners:
        found = _browse(store, lambda s: s.list_owners(limit=limit, offset=skip))
        _print_owners(found, as_json)
        return
    if not every:
        org, user = org or DEFAULT_ORG, user or DEFAULT_USER
    given = {"org": org, "user": user, "session": session, "turn": turn, "mode": mode}
    given |= {"status": status, "since": since, "until": until}
    try:
        where = parse_filter(given)
    except ValueError as error:  # the message starts with the field: the option's name
        raise _refuse(f"--{error}") from None
    read = min(limit + 1, MAX_PAGE)
    rows = _browse(store, lambda s: search_sessions(s, where, limit=read, offset=skip))
    more = page + 1 if len(rows) > limit else None
    _print_rows(rows[:limit], every, more, as_json)


def _detail_text(detail: SessionDetail) -> list[str]:
    from aptix_pipeline.adapters.stores import message_text

    s = detail.summary
    lines = [
        f"session {s.id}  org {s.org}  user {s.user}",
        f"  mode {s.mode or '-'}  turns {s.turns}  created {_time(s.created_at)}  "
        f"last activity {_time(s.last_activity)}",
    ]
    parent = detail.session.forked_from
    if parent is not None:
        lines.append(
            f"  forked from {parent.session_id} after turn {parent.turn_id} "
            f"({parent.messages} messages shared)"
        )
    lines.extend(
        f"  fork {fork.id} after turn {fork.forked_from.turn_id}"
        for fork in detail.forks
        if fork.forked_from is not None
    )
    for change in detail.session.mode_history:
        lines.append(
            f"  mode change {change.previous_mode} -> {change.new_mode} ({change.turn_id})"
        )
    lines.append("")
    lines.append("turns:")
    for turn in detail.turns:
        usage = turn.usage
        tokens = "-" if usage is None else f"{usage.input_tokens} in / {usage.output_tokens} out"
        lines.append(
            f"  {turn.id}  {turn.status.value}  mode {turn.mode or '-'}  tokens {tokens}  "
            f"created {_time(turn.created_at)}"
        )
        lines.extend(
            f"    server tool result {r.tool_call_id}: "
            f"{r.result_json if r.error_message is None else 'error: ' + r.error_message}"
            for r in turn.server_tool_results
        )
        lines.extend(
            f"    awaits client tool {call.name} ({call.tool_call_id})"
            for call in turn.pending_tool_calls
        )
    if detail.traces:
        lines.append("")
        lines.append("traces (newest first):")
        lines.extend(_trace_line(trace) for trace in detail.traces)
    lines.append("")
    lines.append("transcript:")
    for entry in detail.transcript:
        message = entry.message
        calls = ", ".join(f"{c.name}({c.tool_call_id})" for c in message.tool_calls or ())
        label = message.role.value + (f" {message.name}" if message.name else "")
        text = message_text(message) + (f" [calls {calls}]" if calls else "")
        lines.append(f"  {entry.seq:>3} {entry.turn_id}  {label}: {text}")
    return lines


def _trace_line(trace: KeptTrace) -> str:
    states = json.loads(trace.trace).get("states", [])
    error = (
        ""
        if trace.error_code is None
        else f"  {_error_text(trace.error_code, trace.error_message)}"
    )
    step = "" if trace.faulted_step is None else f"  at {trace.faulted_step}"
    return (
        f"  {_time(trace.at)}  {trace.outcome}  turn {trace.turn_id or '-'}{step}{error}\n"
        f"    path {' > '.join(states)}"
    )


@sessions_app.command("traces")
def list_traces(
    session_id: Annotated[
        str | None, typer.Option("--session", help="Only this session's turns.")
    ] = None,
    org: OrgOption = DEFAULT_ORG,
    user: UserOption = DEFAULT_USER,
    store: _Store = None,
    as_json: _Json = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Rows at most.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Rows to skip.")] = 0,
) -> None:
    """List a caller's kept turn traces, newest first, failed turns included."""
    from aptix_pipeline.adapters.stores import trace_json
    from aptix_pipeline.contracts import TraceLog

    async def read(opened: BrowsableStore) -> list[KeptTrace] | None:
        if not isinstance(opened, TraceLog):  # pragma: no cover - every store here keeps them
            return None
        return await opened.list_traces(org, user, session_id, limit=limit, offset=offset)

    traces = _browse(store, read)
    if traces is None:  # pragma: no cover - every store here keeps them
        raise _refuse("this store keeps no turn traces")
    if as_json:
        typer.echo(json.dumps([trace_json(t) for t in traces], ensure_ascii=False, indent=2))
        return
    if not traces:
        typer.echo("no kept traces for this org and user")
        return
    for trace in traces:
        typer.echo(f"{trace.session_id or '(no session)'}{_trace_line(trace)[1:]}")


@sessions_app.command("show")
def show_session(
    session_id: Annotated[str, typer.Argument(metavar="SESSION", help="The session's id.")],
    org: OrgOption = DEFAULT_ORG,
    user: UserOption = DEFAULT_USER,
    store: _Store = None,
    as_json: _Json = False,
) -> None:
    """Print a session: its turns (status, usage, server tool results) and its transcript."""
    from aptix_pipeline.adapters.stores import detail_json, read_session_detail

    detail = _browse(store, lambda s: read_session_detail(s, org, user, session_id))
    if detail is None:
        raise _refuse(f"no session {session_id!r} for org {org!r} and user {user!r}", code=1)
    if as_json:
        data: dict[str, Any] = detail_json(detail)
        typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    typer.echo("\n".join(_detail_text(detail)))


def fork(
    session_id: Annotated[str, typer.Argument(metavar="SESSION", help="The session to fork.")],
    turn_id: Annotated[
        str, typer.Argument(metavar="TURN", help="The settled turn to fork it after.")
    ],
    org: OrgOption = DEFAULT_ORG,
    user: UserOption = DEFAULT_USER,
    store: StoreOption = None,
    config: ConfigOption = None,
    as_json: _Json = False,
) -> None:
    """Fork a session after one of its settled turns; print the new session's id."""
    import asyncio

    from aptix_pipeline.adapters.system import RandomIds, SystemClock
    from aptix_pipeline.engine import fork_session

    service = load_config(config, model=False, store=store is None)
    session_store = open_session_store(store, service)
    try:
        result = asyncio.run(
            fork_session(
                session_store,
                RandomIds(),
                SystemClock(),
                session_id,
                turn_id,
                {"org": org, "user": user},
            )
        )
    finally:
        close_ports(session_store, None, service)
    if result.result is None:
        for error in result.errors:
            typer.echo(f"aptix fork: {error.code}: {error.message}", err=True)
        raise typer.Exit(1)
    if as_json:
        typer.echo(result.result.to_json(indent=2))
        return
    typer.echo(result.result.id)
