"""``GET /v1/files/{hash}``: the files of the service's ``LocalFileStore`` (AGN-033 §6.3).

A ``FileRef``'s ``Url`` points here. The signed URL is the credential
(``files/local.py``), so the route asks for no API key: whoever holds the URL
until it expires may fetch the file, as with a cloud store's presigned URL.
The answer to a URL:

- signed and current: 200, the bytes, ``Content-Type`` (the signed MIME type),
  ``Content-Length``, ``ETag`` (the content hash, quoted), ``Content-Disposition:
  attachment`` with the signed name, and ``X-Content-Type-Options: nosniff`` and
  ``Content-Security-Policy: sandbox`` so a file is never run as a page of the
  service;
- a signature that does not match (a changed hash, expiry, type or name): 403;
- signed but expired: 410;
- signed and current, but the file is gone from the store: 404;
- a service whose pipeline has no ``LocalFileStore``: 404 for every file.

Error answers have the service's ``{"error": ..., "message": ...}`` shape.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response

from aptix_pipeline.adapters.files import FILES_PATH, FileAccess, LocalFileStore

from .execute import ServiceState, problem

__all__ = ["FILES_PATH", "add_file_route"]

_REFUSALS = {
    FileAccess.FORBIDDEN: (403, "forbidden", "the file URL's signature does not match"),
    FileAccess.EXPIRED: (410, "expired", "the file URL has expired; ask for the turn again"),
    FileAccess.MISSING: (404, "not_found", "the file is no longer kept"),
}


def add_file_route(app: FastAPI, service: ServiceState) -> None:
    """Declare ``GET /v1/files/{content_hash}`` on ``app`` (module docstring)."""

    @app.get(
        FILES_PATH + "/{content_hash}",
        response_class=Response,
        summary="A file a turn made, by its signed URL (FileRef.Url)",
        responses={
            200: {"description": "The file's bytes"},
            403: {"description": "The signature does not match"},
            404: {"description": "No such file here"},
            410: {"description": "The URL has expired"},
        },
    )
    async def file(content_hash: str, request: Request) -> Response:
        pipeline = service.pipeline
        if pipeline is None:
            return problem(503, "starting", "the service is starting")
        store = pipeline.ports.files
        if not isinstance(store, LocalFileStore):
            return problem(404, "not_found", "this service keeps no files")
        query = request.query_params
        mime_type, name = query.get("type", ""), query.get("name", "")
        access = store.check(
            content_hash, query.get("expires", ""), mime_type, name, query.get("sig", "")
        )
        if access is not FileAccess.GRANTED:
            status, error, message = _REFUSALS[access]
            return problem(status, error, message)
        return FileResponse(
            store.path(content_hash),
            media_type=mime_type,
            filename=name,
            content_disposition_type="attachment",
            headers={
                "ETag": f'"{content_hash}"',
                "X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": "sandbox",
                "Cache-Control": "private, max-age=0, must-revalidate",
            },
        )
