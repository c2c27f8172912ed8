"""Single-flight for identical continuations in one process (issue 13 item 4).

A client that retries a continuation (AGN-033 §3, DESIGN.md R10) while the first
copy is still running must not pay for a second model round. ``SingleFlight``
keys a request by the caller's org and user and a canonical digest of the parsed
request (JSON with sorted keys and no whitespace, so key order and spacing of the
body do not matter): the first copy (the leader) runs the turn, every identical
copy that arrives while it runs awaits the leader's ``TurnReport`` and returns it
as its own, the same result, with no model call and nothing written. A leader
that fails hands its failure to its followers too (a failed turn stored nothing,
so a later retry runs again); a leader that is cancelled lets one follower take
over. Only requests carrying ``ToolResults`` (continuations) are keyed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aptix_pipeline.validators.json_text import text_depth_exceeds, value_depth_exceeds

__all__ = ["SingleFlight", "continuation_key"]

T = TypeVar("T")


def _as_mapping(request: object, max_depth: int) -> Mapping[str, Any] | None:
    if isinstance(request, Mapping):
        return request
    if isinstance(request, (str, bytes)):
        # Most requests are not continuations, and one nested past the wire limit is
        # refused before any work (DESIGN/limits/json-depth): neither is parsed here.
        # A key spelled with JSON escapes is missed, which only forgoes sharing a run.
        named = "ToolResults" in request if isinstance(request, str) else b"ToolResults" in request
        if not named or text_depth_exceeds(request, max_depth):
            return None
        try:
            parsed = json.loads(request)
        except Exception:
            return None
        return parsed if isinstance(parsed, dict) else None
    dump = getattr(request, "to_wire", None) or getattr(request, "model_dump", None)
    if callable(dump):
        try:
            wire = dump()
        except Exception:
            return None
        return wire if isinstance(wire, dict) else None
    return None


def continuation_key(
    request: object, org: str, user: str, *, max_depth: int = 64
) -> tuple[str, str, str] | None:
    """``(org, user, digest)`` of a continuation request; ``None`` for any other request.

    The digest is SHA-256 over the canonical JSON of the whole parsed request
    (SessionId, TurnId and ToolResults included), so two bodies that differ only in
    key order or whitespace are identical. A request nested deeper than ``max_depth``
    (the pipeline's ``max_json_depth``) gets no key: the turn refuses it first thing.
    """
    body = _as_mapping(request, max_depth)
    if body is None or not body.get("ToolResults"):
        return None
    if isinstance(request, Mapping) and value_depth_exceeds(body, max_depth):
        return None
    if not isinstance(body.get("SessionId"), str) or not isinstance(body.get("TurnId"), str):
        return None
    try:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    except Exception:
        return None
    return (org, user, hashlib.sha256(canonical.encode("ascii")).hexdigest())


class SingleFlight:
    """At most one run per key in flight; identical arrivals share its outcome."""

    def __init__(self) -> None:
        self._flights: dict[object, asyncio.Future[Any]] = {}

    async def run(self, key: object, work: Callable[[], Awaitable[T]]) -> T:
        """``work()`` once per key in flight; concurrent callers with ``key`` get its result."""
        while True:
            flight = self._flights.get(key)
            if flight is None:
                break
            try:
                result: T = await asyncio.shield(flight)
            except asyncio.CancelledError:
                if flight.cancelled():
                    continue  # the leader was cancelled: try to lead
                raise
            return result
        flight = asyncio.get_running_loop().create_future()
        self._flights[key] = flight
        try:
            outcome = await work()
        except asyncio.CancelledError:
            flight.cancel()
            raise
        except BaseException as error:
            flight.set_exception(error)
            flight.exception()  # retrieved: no "never retrieved" warning without followers
            raise
        else:
            flight.set_result(outcome)
            return outcome
        finally:
            del self._flights[key]
