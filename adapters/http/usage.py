"""``GET /v1/usage``: the caller's org's usage report (``engine/usage_reports.py``,
docs/BUDGETS.md "Reports").

The report is always of the org the caller's API key names. A query that names
another org (``?org=``) is refused 403 ``forbidden``: it never reads another org's
calls, and the caller learns that it asked for what it may not see rather than
getting its own org's figures under another name. The other query parameters narrow
and group as ``aptix usage`` does: ``user``, ``mode``, ``model``, ``session``, ``by``
(comma-separated, or repeated: org, user, mode, model, session, day), ``since`` and
``until`` (ISO 8601 date or date and time, UTC unless an offset is given) or
``window`` (``day``, ``month``, ``all``, ``24h``, ``7d``…; not with ``since``). A bad
parameter is a 400 ``invalid_request`` naming it. The answer is the ``UsageReport``
as JSON, amounts as exact decimal strings, with the standing of each configured
budget that applies (``PipelineOptions.budgets``). A service whose turns keep no
usage (``[engine] usage_ledger = false``, or a store that is no ``UsageLedger``)
answers 404 ``not_found``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from aptix_pipeline.contracts import UsageQuery
from aptix_pipeline.engine import (
    UsageGroupBy,
    report_moment,
    report_window,
    usage_report,
)

from .auth import authenticated_caller
from .errors import error_response, missing_key_response
from .execute import ServiceState
from .openapi import SECURITY

__all__ = ["USAGE_OPERATION", "USAGE_PATH", "add_usage_route"]

USAGE_PATH = "/v1/usage"

_PARAMETERS = [
    ("org", "The caller's org (optional): any other org is a 403."),
    ("user", "Only this user's calls."),
    ("mode", "Only calls in this mode."),
    ("model", "Only calls of this model."),
    ("session", "Only calls of this session."),
    ("by", "Group by these, comma-separated: org, user, mode, model, session, day."),
    ("since", "Calls at or after this ISO 8601 date or date and time (UTC by default)."),
    ("until", "Calls before this ISO 8601 date or date and time."),
    ("window", "Instead of since: day, month, all, or N s/m/h/d (24h, 7d)."),
]

USAGE_OPERATION: dict[str, Any] = {
    "summary": "The caller's org's usage, cost and budgets",
    "description": (
        "The usage report of the org the API key names (docs/BUDGETS.md): per group "
        "(`by`), model calls, tokens (input, output, cached, reasoning), cost per "
        "currency as exact decimal strings beside the calls it leaves out (unpriced "
        "or unreported), failed and reserved calls, tool calls and server-tool "
        "rounds; and each budget that applies with its window, limit, used and "
        "remaining. `org` naming another org is a 403."
    ),
    "openapi_extra": {
        "security": SECURITY,
        "parameters": [
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": description,
                "schema": {"type": "string"},
            }
            for name, description in _PARAMETERS
        ],
    },
    "responses": {
        200: {
            "description": "The UsageReport as JSON",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/UsageReport"}}
            },
        },
        400: {"description": "A query parameter is malformed (invalid_request)"},
        401: {"description": "No API key, or an unknown one (unauthorized)"},
        403: {"description": "The query names another org (forbidden)"},
        404: {"description": "The service keeps no usage (not_found)"},
        503: {"description": "The service is starting or stopping (unavailable)"},
    },
}
"""The documentation of ``GET /v1/usage``: keyword arguments of its route."""


class _BadParameterError(ValueError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def _by(values: list[str]) -> list[str]:
    fields = [part.strip() for value in values for part in value.split(",") if part.strip()]
    known = {member.value for member in UsageGroupBy}
    for field in fields:
        if field not in known:
            raise _BadParameterError(
                "by", f"by: unknown field {field!r}; known: {', '.join(sorted(known))}"
            )
    if len(set(fields)) != len(fields):
        raise _BadParameterError("by", "by: a field is given twice")
    return fields


def _query(org: str, request: Request, now: datetime) -> tuple[UsageQuery, list[str]]:
    params = request.query_params
    for name in params:
        if name not in {parameter for parameter, _ in _PARAMETERS}:
            raise _BadParameterError(name, f"{name}: unknown query parameter")
    since = until = None
    try:
        if params.get("since") is not None:
            if params.get("window") is not None:
                raise _BadParameterError("window", "give since or window, not both")
            since = report_moment(params["since"], "since")
        elif params.get("window") is not None:
            since = report_window(params["window"], now)
        if params.get("until") is not None:
            until = report_moment(params["until"], "until")
    except _BadParameterError:
        raise
    except ValueError as error:
        name = str(error).partition(":")[0]
        raise _BadParameterError(name, str(error)) from None
    query = UsageQuery(
        org=org,
        user=params.get("user") or None,
        mode=params.get("mode") or None,
        model=params.get("model") or None,
        session_id=params.get("session") or None,
        since=since,
        until=until,
    )
    return query, _by(params.getlist("by"))


def add_usage_route(app: FastAPI, service: ServiceState) -> None:
    """Declare ``GET /v1/usage`` on ``app`` (module docstring)."""

    @app.get(USAGE_PATH, response_class=Response, **USAGE_OPERATION)
    async def usage(request: Request) -> Response:
        caller = await authenticated_caller(service.authenticator, request.headers)
        if caller is None:
            return missing_key_response()
        pipeline = service.pipeline
        if pipeline is None:
            return error_response(503, "the service is starting or stopping")
        asked = request.query_params.get("org")
        if asked is not None and asked != caller.org:
            return error_response(403, "a usage report is of your own org only", field="org")
        ledger = pipeline.turn_ports.usage
        if ledger is None:
            return error_response(404, "this service keeps no usage")
        now = datetime.now(UTC)
        try:
            query, by = _query(caller.org, request, now)
        except _BadParameterError as error:
            return error_response(400, str(error), field=error.name)
        report = await usage_report(ledger, query, by=by, budgets=pipeline.options.budgets, now=now)
        return Response(report.to_json(), media_type="application/json")
