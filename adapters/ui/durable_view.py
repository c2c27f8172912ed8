"""Where a durable turn ran (docs/DURABLE.md, D537, D678): its Temporal workflow, the
workers that ran its activities, and each model call's, server tool's and commit's
activity with the worker that answered and on which attempt (a retry is an attempt
past the first), or how it failed. The facts come from the ``durable`` object of a
kept trace's JSON or of a recording."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .html import Markup, html, join

__all__ = ["durable_facts"]

_NAMES = {
    "aptix.llm.complete": "model call",
    "aptix.tool.call": "server tool call",
    "aptix.store.apply": "commit",
}


def _attempts(entry: Mapping[str, Any]) -> Markup:
    if "failed" in entry:
        return html(
            "<td class='error'>failed: {kind} ({state})</td>",
            kind=str(entry.get("failed")),
            state=str(entry.get("retry_state") or "-"),
        )
    attempt = entry.get("attempt", 1)
    retries = attempt - 1 if isinstance(attempt, int) else 0
    return html(
        "<td>attempt {n}{retried}</td>",
        n=attempt,
        retried=f" ({retries} {'retry' if retries == 1 else 'retries'})" if retries else "",
    )


def durable_facts(durable: Mapping[str, Any] | None) -> Markup | str:
    """The durable line and the table of activities; nothing for a turn run in process."""
    if not durable:
        return ""
    workers = [str(worker) for worker in durable.get("workers", ())]
    moved = " (it moved between workers)" if len(workers) > 1 else ""
    line = html(
        "<p class='durable'><span class='badge durable'>durable</span> Temporal workflow "
        "<code>{workflow}</code> on task queue <code>{queue}</code>; ran on {workers}{moved}</p>",
        workflow=str(durable.get("workflow_id", "-")),
        queue=str(durable.get("task_queue", "-")),
        workers=join((html("<code>{w}</code>", w=worker) for worker in workers), ", ")
        if workers
        else "no worker named",
        moved=moved,
    )
    activities = [a for a in durable.get("activities", ()) if isinstance(a, Mapping)]
    if not activities:
        return line
    rows = join(
        html(
            "<tr data-activity='{name}'><td>{n}</td><td>{what} <code>{name}</code></td>"
            "<td>{worker}</td>{attempts}</tr>",
            n=n,
            what=_NAMES.get(str(a.get("activity")), "activity"),
            name=str(a.get("activity", "-")),
            worker=str(a.get("worker", "-")),
            attempts=_attempts(a),
        )
        for n, a in enumerate(activities, 1)
    )
    return html(
        "{line}<table class='durable-activities' id='durable-activities'><thead><tr><th>#</th>"
        "<th>activity</th><th>worker</th><th>attempts</th></tr></thead><tbody>{rows}</tbody>"
        "</table>",
        line=line,
        rows=rows,
    )
