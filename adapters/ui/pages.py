"""The bodies of the turn browser's pages (docs/UI.md), built with ``ui_html`` (escaped by default).

Links carry ids in query strings (``session?org=…&user=…&id=…``), URL-encoded, so an
id holding ``/`` or ``?`` still names its session. ``base`` is the UI's path prefix
(empty for ``aptix ui``, the mount path under ``aptix serve``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from urllib.parse import urlencode

from aptix_pipeline.adapters.stores import (
    OwnerSummary,
    SessionDetail,
    SessionRow,
    message_text,
)
from aptix_pipeline.contracts import KeptTrace, Turn
from aptix_pipeline.engine.replay import TurnRecording

from .durable_view import durable_facts
from .html import Markup, html, join
from .recordings import RecordingEntry
from .turn import (
    fault_banner,
    kept_trace_view,
    path_picture,
    request_and_response,
    timeline,
)

__all__ = [
    "index_body",
    "link",
    "login_body",
    "recording_body",
    "session_body",
    "stored_turn_body",
    "trace_body",
    "traces_table",
    "watch_body",
]


def link(base: str, route: str, **query: str) -> str:
    """The URL of a page of the UI, its query URL-encoded."""
    return f"{base}/{route}?{urlencode(query)}" if query else f"{base}/{route}"


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(sep=" ", timespec="seconds")


def _cost(row: SessionRow) -> str:
    return ", ".join(f"{amount} {currency}" for currency, amount in row.cost) or "-"


def session_rows_table(base: str, rows: Sequence[SessionRow], *, table_id: str) -> Markup:
    """Sessions as the search gives them, one row each: its org and user, mode, status
    (and a faulted one's last error), preview, turns, tokens, cost, last activity."""
    body = join(
        html(
            "<tr data-session='{id}' data-status='{status}'><td><a href='{href}'>{id}</a></td>"
            "<td>{org}</td><td>{user}</td><td>{mode}</td>"
            "<td><span class='badge {status}'>{status}</span>{error}</td>"
            "<td class='preview'>{preview}</td>"
            "<td>{turns}</td><td>{tokens}</td><td>{cost}</td><td>{last}</td></tr>",
            href=link(base, "session", org=r.summary.org, user=r.summary.user, id=r.summary.id),
            id=r.summary.id,
            org=r.summary.org,
            user=r.summary.user,
            mode=r.summary.mode or "-",
            status=r.shown_status,
            error=""
            if r.error_code is None or r.shown_status != "faulted"
            else html(
                "<div class='error last-error'>{code}: {message}</div>",
                code=r.error_code,
                message=r.error_message or "",
            ),
            preview=r.preview or "",
            turns=r.summary.turns,
            tokens=r.tokens,
            cost=_cost(r),
            last=(
                "-"
                if r.summary.last_activity is None
                else r.summary.last_activity.isoformat(sep=" ", timespec="seconds")
            ),
        )
        for r in rows
    )
    return html(
        "<table id='{id}'><thead><tr><th>session</th><th>org</th><th>user</th>"
        "<th>mode</th><th>status</th><th>preview</th><th>turns</th><th>tokens</th>"
        "<th>cost</th><th>last activity</th></tr></thead><tbody>{rows}</tbody></table>",
        id=table_id,
        rows=body,
    )


def _recording_row(base: str, entry: RecordingEntry) -> Markup:
    recording = entry.recording
    if recording is None:
        return html(
            "<tr><td>{name}</td><td colspan='5' class='error'>not a recording: {problem}</td></tr>",
            name=entry.name,
            problem=entry.problem,
        )
    trace = recording.trace
    ended = f"faulted at {trace.faulted_step}" if trace.faulted_step else trace.outcome
    return html(
        "<tr data-recording='{name}'><td><a href='{href}'>{name}</a></td><td>{org} / {user}</td>"
        "<td>{kind}</td><td>{session} / {turn}</td><td><span class='badge {outcome}'>{ended}"
        "</span></td><td>{redacted}{durable}</td></tr>",
        href=link(base, "recording", name=entry.name),
        name=entry.name,
        org=recording.caller.get("org"),
        user=recording.caller.get("user"),
        kind=trace.context_type or "unparsed request",
        session=trace.session_id or "-",
        turn=trace.turn_id or "-",
        outcome=trace.outcome,
        ended=ended,
        redacted="redacted" if recording.redacted else "",
        durable=" durable" if recording.durable else "",
    )


def recordings_table(base: str, entries: Sequence[RecordingEntry]) -> Markup:
    """The recordings, one row each: caller, kind of request, session and turn, how it ended."""
    return html(
        "<table id='recordings'><thead><tr><th>recording</th><th>caller</th><th>request</th>"
        "<th>session / turn</th><th>ended</th><th></th></tr></thead><tbody>{rows}</tbody></table>",
        rows=join(_recording_row(base, entry) for entry in entries),
    )


def index_body(
    base: str,
    owners: Sequence[tuple[OwnerSummary, Sequence[SessionRow]]],
    store_name: str | None,
    entries: Sequence[RecordingEntry],
    folder: str | None,
    *,
    more_owners: bool = False,
) -> Markup:
    """The first page: the sessions of each org and user, then the recordings;
    ``more_owners`` says the store holds owners past those listed."""
    if store_name is None:
        sessions = html("<p class='muted'>no store given (--store)</p>")
    elif not owners:
        sessions = html("<p class='muted'>no sessions in {store}</p>", store=store_name)
    else:
        sessions = join(
            html(
                "<h3>{org} / {user} <span class='muted'>({count} sessions · "
                "<a href='{traces}'>turn traces</a>)</span></h3>{table}{more}",
                traces=link(base, "traces", org=owner.org, user=owner.user),
                org=owner.org,
                user=owner.user,
                count=owner.sessions,
                table=session_rows_table(base, listed, table_id="sessions"),
                more=_more_sessions(owner, len(listed)),
            )
            for owner, listed in owners
        )
        if more_owners:
            sessions = html(
                "{sessions}<p class='muted more'>the first {shown} orgs and users are shown; "
                "<code>aptix sessions list --owners --offset {shown}</code> lists the rest</p>",
                sessions=sessions,
                shown=len(owners),
            )
    if folder is None:
        recordings = html("<p class='muted'>no recordings folder given (--recordings)</p>")
    elif not entries:
        recordings = html("<p class='muted'>no recordings in {folder}</p>", folder=folder)
    else:
        recordings = recordings_table(base, entries)
    return html(
        "<h1>Sessions</h1><p class='muted'>store: {store} · "
        "<a id='search-sessions' href='{base}/sessions'>search all sessions</a></p>{sessions}"
        "<h1>Recordings</h1><p class='muted'>folder: {folder}</p>{recordings}",
        store=store_name or "-",
        base=base,
        sessions=sessions,
        folder=folder or "-",
        recordings=recordings,
    )


def _more_sessions(owner: OwnerSummary, shown: int) -> Markup:
    """Where the page lists fewer sessions than the owner holds: which, and where the rest are."""
    if owner.sessions <= shown:
        return html("")
    return html(
        "<p class='muted more'>the {shown} most recently active of {count} are shown; "
        "<code>aptix sessions list --org {org} --user {user} --offset {shown}</code> "
        "lists the rest</p>",
        shown=shown,
        count=owner.sessions,
        org=owner.org,
        user=owner.user,
    )


def traces_table(base: str, traces: Sequence[KeptTrace]) -> Markup:
    """Kept turn traces, newest first: time, session, turn, how each ended and its error,
    each linked to its page (a failed turn that stored nothing included)."""
    rows = join(
        html(
            "<tr data-trace='{id}' class='{outcome}'><td><a href='{href}'>{at}</a></td>"
            "<td>{session}</td><td>{turn}</td><td><span class='badge {outcome}'>{ended}</span>"
            "</td><td>{error}</td></tr>",
            id=t.id,
            outcome=t.outcome,
            href=link(base, "trace", org=t.org, user=t.user, id=t.id),
            at=_time(t.at),
            session=t.session_id or "(none)",
            turn=t.turn_id or "-",
            ended=f"faulted at {t.faulted_step}" if t.faulted_step else t.outcome,
            error=f"{t.error_code}: {t.error_message or ''}" if t.error_code else "-",
        )
        for t in traces
    )
    return html(
        "<table class='traces'><thead><tr><th>time</th><th>session</th><th>turn</th>"
        "<th>ended</th><th>error</th></tr></thead><tbody>{rows}</tbody></table>",
        rows=rows,
    )


def trace_body(base: str, kept: KeptTrace) -> Markup:
    """The page of one kept trace: who, where, how it ended, and its view."""
    session = (
        html(
            "session <a href='{href}'><code>{id}</code></a>",
            href=link(base, "session", org=kept.org, user=kept.user, id=kept.session_id),
            id=kept.session_id,
        )
        if kept.session_id
        else html("no session (the turn stored nothing)")
    )
    return html(
        "<h1>turn trace <span class='badge {outcome}'>{outcome}</span></h1>"
        "<p>{org} / {user}; {session}; turn <code>{turn}</code>; {at} · "
        "<a href='{all}'>all traces of {org} / {user}</a></p>{view}",
        outcome=kept.outcome,
        org=kept.org,
        user=kept.user,
        session=session,
        turn=kept.turn_id or "-",
        at=_time(kept.at),
        all=link(base, "traces", org=kept.org, user=kept.user),
        view=kept_trace_view(kept),
    )


def _usage(turn: Turn) -> str:
    usage = turn.usage
    return "-" if usage is None else f"{usage.input_tokens} in / {usage.output_tokens} out"


def session_body(
    base: str,
    detail: SessionDetail,
    recorded: dict[str, list[RecordingEntry]],
    *,
    extras: Markup | None = None,
    turn_cell: Callable[[Turn], Markup] | None = None,
) -> Markup:
    """A session: its summary, ``extras`` (``ui/session_extras.py``), its turns (each
    linked, with ``turn_cell``'s cell last when given: the fork button) and its
    transcript."""
    s = detail.summary
    turns = join(
        html(
            "<tr data-turn='{id}'><td><a href='{href}'>{id}</a></td><td>{mode}</td>"
            "<td><span class='badge {status}'>{status}</span></td><td>{usage}</td>"
            "<td>{created}</td><td>{tools}</td><td>{recordings}</td>{cell}</tr>",
            href=link(base, "turn", org=s.org, user=s.user, session=s.id, id=turn.id),
            cell=turn_cell(turn) if turn_cell is not None else "",
            id=turn.id,
            mode=turn.mode or "-",
            status=turn.status.value,
            usage=_usage(turn),
            created=_time(turn.created_at),
            tools=len(turn.server_tool_results),
            recordings=len(recorded.get(turn.id, [])) or "-",
        )
        for turn in detail.turns
    )
    transcript = join(
        html(
            "<tr><td>{seq}</td><td>{turn}</td><td>{role}</td><td><pre>{content}</pre>{calls}</td></tr>",
            seq=entry.seq,
            turn=entry.turn_id,
            role=entry.message.role.value
            + (f" {entry.message.name}" if entry.message.name else ""),
            content=message_text(entry.message),
            calls=html(
                "<div class='muted'>calls {c}</div>",
                c=", ".join(f"{c.name} ({c.tool_call_id})" for c in entry.message.tool_calls),
            )
            if entry.message.tool_calls
            else "",
        )
        for entry in detail.transcript
    )
    history = join(
        html(
            "<li>{old} → {new} <span class='muted'>({turn})</span></li>",
            old=h.previous_mode,
            new=h.new_mode,
            turn=h.turn_id,
        )
        for h in detail.session.mode_history
    )
    return html(
        "<h1>session <code id='session-id'>{id}</code></h1>"
        "<p>org <strong>{org}</strong>, user <strong>{user}</strong>, mode <code>{mode}</code>, "
        "{count} turns, created {created}, last activity {last}</p>{extras}{history}"
        "<h2>Turns</h2><table id='turns'><thead><tr><th>turn</th><th>mode</th><th>status</th>"
        "<th>tokens</th><th>created</th><th>server tool results</th><th>recordings</th>{fork}</tr>"
        "</thead><tbody>{turns}</tbody></table>"
        "{traces}"
        "<h2>Transcript</h2><table id='transcript'><thead><tr><th>#</th><th>turn</th>"
        "<th>role</th><th>content</th></tr></thead><tbody>{transcript}</tbody></table>",
        id=s.id,
        org=s.org,
        user=s.user,
        fork=html("<th>fork</th>") if turn_cell is not None else "",
        mode=s.mode or "-",
        count=s.turns,
        created=_time(s.created_at),
        last=_time(s.last_activity),
        extras=extras or "",
        history=html("<h2>Mode history</h2><ul>{h}</ul>", h=history) if history else "",
        turns=turns,
        traces=html(
            "<h2 id='traces'>Turn traces</h2><p class='muted'>every turn, failed ones "
            "included, newest first · <a href='{all}'>all of {org} / {user}</a></p>{table}",
            all=link(base, "traces", org=s.org, user=s.user),
            org=s.org,
            user=s.user,
            table=traces_table(base, detail.traces),
        )
        if detail.traces
        else "",
        transcript=transcript,
    )


def durable_line(recording: TurnRecording) -> Markup | str:
    """Where a durable turn ran (docs/DURABLE.md, D537): its Temporal workflow, the
    workers that ran its calls, in the order they first ran one, and each call's
    attempts (``ui/durable_view.py``, D678); nothing in process."""
    return durable_facts(recording.durable)


def recording_view(base: str, entry: RecordingEntry, recording: TurnRecording) -> Markup:
    """One recorded request of a turn: picture, timeline, request and response, replay."""
    trace = recording.trace
    return html(
        "<section class='recorded-turn' data-recording='{name}'>"
        "<p class='muted'>recording <code>{name}</code>: {kind} request of "
        "<code>{org}</code> / <code>{user}</code>, session <code>{session}</code>, turn "
        "<code>{turn}</code>, {calls} port calls, aptix-pipeline {version}{redacted}</p>"
        "{durable}{banner}"
        "<form method='post' action='{replay}' hx-post='{replay}' hx-target='#replay-outcome' "
        "hx-swap='innerHTML'><button type='submit' id='replay'>replay</button> "
        "<span class='muted'>re-run this recording against this code (ports answer from it)"
        "</span></form><div id='replay-outcome'></div>"
        "<div class='turn-grid'><div><h2>Path</h2>{picture}</div>"
        "<div><h2>Timeline</h2>{timeline}</div></div>"
        "<h2>Request and response</h2>{exchange}</section>",
        name=entry.name,
        kind=trace.context_type or "unparsed",
        org=recording.caller.get("org"),
        user=recording.caller.get("user"),
        session=trace.session_id or "-",
        turn=trace.turn_id or "-",
        calls=len(recording.calls),
        version=recording.engine_version,
        redacted=", redacted" if recording.redacted else "",
        durable=durable_line(recording),
        banner=fault_banner(recording),
        replay=link(base, "recording/replay", name=entry.name),
        picture=path_picture(trace),
        timeline=timeline(recording),
        exchange=request_and_response(recording),
    )


def recording_body(base: str, entry: RecordingEntry, recording: TurnRecording) -> Markup:
    """The page of one recording."""
    trace = recording.trace
    org, user = recording.caller.get("org", ""), recording.caller.get("user", "")
    stored = (
        html(
            " · <a href='{href}'>its session</a>",
            href=link(base, "session", org=org, user=user, id=trace.session_id),
        )
        if trace.session_id
        else ""
    )
    return html(
        "<h1>{kind} turn <span class='badge {outcome}'>{outcome}</span></h1>"
        "<p><a href='{base}/'>all</a>{stored}</p>{view}",
        kind=trace.context_type or "unparsed",
        outcome=trace.outcome,
        base=base,
        stored=stored,
        view=recording_view(base, entry, recording),
    )


def stored_turn_body(
    base: str,
    detail: SessionDetail,
    turn: Turn,
    recordings: Sequence[RecordingEntry],
    folder: str | None,
) -> Markup:
    """A stored turn: what the store holds, its recordings, and the last one's view."""
    s = detail.summary
    results = join(
        html(
            "<li><code>{id}</code> {ms} ms: <pre>{body}</pre></li>",
            id=r.tool_call_id,
            ms=r.execution_ms,
            body=r.result_json if r.error_message is None else f"error: {r.error_message}",
        )
        for r in turn.server_tool_results
    )
    messages = join(
        html(
            "<tr><td>{seq}</td><td>{role}</td><td><pre>{content}</pre></td></tr>",
            seq=e.seq,
            role=e.message.role.value,
            content=message_text(e.message),
        )
        for e in detail.transcript
        if e.turn_id == turn.id
    )
    listed = join(
        html(
            "<li><a href='{href}'>{name}</a> ({kind})</li>",
            href=link(base, "recording", name=e.name),
            name=e.name,
            kind=e.recording.trace.context_type if e.recording else "-",
        )
        for e in recordings
    )
    if recordings and recordings[-1].recording is not None:
        last = recordings[-1]
        assert last.recording is not None
        view = recording_view(base, last, last.recording)
        recorded = html(
            "<h2>Recordings of this turn</h2><ul id='turn-recordings'>{l}</ul>{v}", l=listed, v=view
        )
    else:
        kept = [t for t in detail.traces if t.turn_id == turn.id]
        recorded = html(
            "<h2>Recordings of this turn</h2><p class='muted' id='turn-recordings'>none in {f}: "
            "the page shows what the store holds and the turn's kept trace (record turns "
            "with --record DIR or [recording] to see their port calls and replay them)</p>"
            "{view}",
            f=folder or "(no --recordings folder)",
            view=kept_trace_view(kept[0]) if kept else "",
        )
    return html(
        "<h1>turn <code id='turn-id'>{id}</code> <span class='badge {status}'>{status}</span></h1>"
        "<p>session <a href='{session_href}'><code>{session}</code></a> of {org} / {user}; "
        "mode <code>{mode}</code>; tokens {usage}; created {created}</p>"
        "{pending}{results}<h2>Messages this turn added</h2>"
        "<table><tbody>{messages}</tbody></table>{recorded}",
        id=turn.id,
        status=turn.status.value,
        session_href=link(base, "session", org=s.org, user=s.user, id=s.id),
        session=s.id,
        org=s.org,
        user=s.user,
        mode=turn.mode or "-",
        usage=_usage(turn),
        created=_time(turn.created_at),
        pending=html(
            "<p>awaits client tools: {calls}</p>",
            calls=", ".join(f"{c.name} ({c.tool_call_id})" for c in turn.pending_tool_calls),
        )
        if turn.pending_tool_calls
        else "",
        results=html("<h2>Server tool results</h2><ul>{r}</ul>", r=results) if results else "",
        messages=messages,
        recorded=recorded,
    )


def login_body(base: str, refused: bool) -> Markup:
    """The form that takes the API key once; the key is then kept in a cookie of the UI's path."""
    return html(
        "<h1>Sign in</h1>{refused}<form method='post' action='{base}/login'>"
        "<p><label>API key <input type='password' name='key' autocomplete='off' size='48' "
        "id='key'></label></p><p><button type='submit'>open the turn browser</button></p></form>"
        "<p class='muted'>The key is one of the service's <code>[[auth.keys]]</code>; it is kept "
        "in a cookie sent only to this page's path, and you see that key's sessions.</p>",
        refused=html("<p class='error' id='refused'>that key is not one of the service's</p>")
        if refused
        else "",
        base=base,
    )


_DEFAULT_WATCH_REQUEST = '{\n  "Instruction": "What is 2 + 3?",\n  "Stream": true\n}'


def watch_body(base: str, org: str, user: str) -> Markup:
    """The watch view: a request sent from the page, its progress events shown as they come."""
    return html(
        "<h1>Watch a turn</h1><p class='muted'>as <code>{org}</code> / <code>{user}</code>: the "
        "request goes to the service's <code>POST /v1/agent/execute</code> as a stream, and "
        "each Server-Sent Event is shown as it arrives.</p>"
        "<form id='watch-form' data-action='{action}'><textarea id='watch-request' rows='6'>"
        "{request}</textarea><p><button type='submit' id='watch-send'>send and watch</button></p>"
        "</form><ol class='timeline' id='events'></ol><div id='watch-result'></div>",
        org=org,
        user=user,
        action=f"{base}/watch/run",
        request=_DEFAULT_WATCH_REQUEST,
    )
