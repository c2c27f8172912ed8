"""Retries answered once: stored answers, idempotency keys and single-flight.

A client that lost a response sends the request again. This module makes that
safe (docs/CONFORMANCE.md D180-D185):

- **Which requests have an answer key.** A continuation (AGN-034 §2.2) always
  does: ``continuation:<sha256>`` of its SessionId, TurnId and ToolCallIds, the
  tool calls it answers (DESIGN.md R10). Any request given an idempotency key
  (``Idempotency-Key`` over HTTP, ``idempotency_key=`` in the API) also has
  ``key:<the key>``. Keys are scoped to the caller's org and user.
- **What a retry gets.** A committed turn keeps its ``InvokeResult`` under its
  keys (``StoredOutcome``, saved in the turn's own commit: ``steps/completion.py``).
  Before a keyed request runs, ``AnswerBook.stored`` reads them: the same request
  (same ``request_digest``, the SHA-256 of its canonical JSON) gets the stored
  result again, without a model call or a write; a different request under the
  same key gets a conflict naming the turn (``stored_answer_conflict``).
- **Races.** Identical requests in flight at once in one process share one run
  (``SingleFlight``); across processes both may run, one commits, and the other,
  whose commit or PRE check then fails, reads the stored answer again and
  returns the winner's.

Nothing is stored for a turn that failed, so a retry of a failed request runs
again; a stored answer expires after ``PipelineOptions.idempotency_ttl_seconds``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    Clock,
    ContextType,
    InvokeError,
    InvokeResult,
    SessionStore,
    StoredOutcome,
)
from aptix_pipeline.steps import AnswerKeys
from aptix_pipeline.validators import (
    CONTINUATION_PREFIX,
    KEY_PREFIX,
    stored_answer_conflict,
    text_depth_exceeds,
    validate_idempotency_key,
    value_depth_exceeds,
)

__all__ = [
    "AnswerBook",
    "RequestKeys",
    "SingleFlight",
    "continuation_key",
    "request_keys",
]

T = TypeVar("T")

# Parametrized once and kept: pydantic rebuilds a generic whose class was collected.
_ResponseResult = InvokeResult[AgentExecuteResponse]


# Literal searches with ``re``: about twice as fast as ``in`` over a megabyte.
_NAMED = re.compile("ToolResults")
_NAMED_BYTES = re.compile(b"ToolResults")


def _as_mapping(request: object, max_depth: int, *, keyed: bool) -> Mapping[str, Any] | None:
    if isinstance(request, Mapping):
        return None if value_depth_exceeds(request, max_depth) else request
    if isinstance(request, (str, bytes)):
        # Most requests are neither keyed nor continuations, and one nested past the wire
        # limit is refused before any work (DESIGN/limits/json-depth): neither is parsed
        # here. A continuation whose key is spelled with JSON escapes is missed, which
        # only forgoes its stored answer: the turn itself refuses or runs it as usual.
        found = _NAMED.search(request) if isinstance(request, str) else _NAMED_BYTES.search(request)
        named = found is not None
        if not (named or keyed) or text_depth_exceeds(request, max_depth):
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


def _sha256(value: object) -> str | None:
    try:
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    except Exception:  # NaN, odd keys or values: such a request is refused by the turn
        return None
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _continuation_ids(body: Mapping[str, Any]) -> tuple[str, str, list[str]] | None:
    """SessionId, TurnId and the ToolCallIds of a continuation body, or ``None``."""
    session_id, turn_id, results = (
        body.get("SessionId"),
        body.get("TurnId"),
        body.get("ToolResults"),
    )
    if not isinstance(session_id, str) or not isinstance(turn_id, str):
        return None
    if not isinstance(results, list) or not results:
        return None
    ids: list[str] = []
    for result in results:
        call_id = result.get("ToolCallId") if isinstance(result, Mapping) else None
        if not isinstance(call_id, str):
            return None
        ids.append(call_id)
    return session_id, turn_id, ids


@dataclass(frozen=True, slots=True)
class RequestKeys:
    """A request's answer keys, its digest, and what it is (``request_keys``).

    ``flight`` keys ``SingleFlight``: the caller, the first answer key and the
    digest, so only identical requests share a run.
    """

    org: str
    user: str
    keys: tuple[str, ...]
    digest: str
    context_type: ContextType

    @property
    def flight(self) -> tuple[str, str, str, str]:
        """The single-flight key."""
        return (self.org, self.user, self.keys[0], self.digest)

    def answer_keys(self, ttl_seconds: float | None) -> AnswerKeys:
        """What the turn's commit saves (``steps/completion.py``)."""
        return AnswerKeys(self.keys, self.digest, ttl_seconds)


def request_keys(
    request: object,
    org: str,
    user: str,
    *,
    idempotency_key: str | None = None,
    initial_mode: str | None = None,
    max_depth: int = 64,
) -> RequestKeys | InvokeError | None:
    """The answer keys of a request; an ``InvokeError`` for a malformed idempotency key.

    ``None`` when the request has none (a user turn without a key), or when it
    cannot be read (not JSON, nested past ``max_depth``, another org's fields):
    the turn then refuses or runs it as usual. The digest covers the whole parsed
    request (key order and spacing do not matter) and, for a new session, the
    ``initial_mode`` the host gave (AGN-011 §3.1, DESIGN.md R2).
    """
    if idempotency_key is not None:
        checked = validate_idempotency_key(idempotency_key)
        if not checked.successful:
            return checked.errors[0]
    if not org or not user:  # ValidateCore refuses the turn (AGN-036 §4.1)
        return None
    body = _as_mapping(request, max_depth, keyed=idempotency_key is not None)
    if body is None:
        return None
    keys: list[str] = []
    if idempotency_key is not None:
        keys.append(KEY_PREFIX + idempotency_key)
    continued = _continuation_ids(body)
    if continued is not None:
        context_type = ContextType.CLIENT_TOOL_CALL_CONTINUATION
        # Each id as a JSON string: no choice of ids can make two lists hash alike.
        calls = _sha256(list(continued))
        if calls is not None:
            keys.append(CONTINUATION_PREFIX + calls)
    elif body.get("SessionId"):
        context_type = ContextType.FOLLOW_ON
    else:
        context_type = ContextType.INITIAL
    if not keys:
        return None
    mode = initial_mode if context_type is ContextType.INITIAL else None
    digest = _sha256({"request": body, "initial_mode": mode})
    if digest is None:
        return None
    return RequestKeys(org, user, tuple(keys), digest, context_type)


def continuation_key(
    request: object, org: str, user: str, *, max_depth: int = 64
) -> tuple[str, str, str, str] | None:
    """The single-flight key of a continuation request; ``None`` for any other request."""
    keys = request_keys(request, org, user, max_depth=max_depth)
    return keys.flight if isinstance(keys, RequestKeys) else None


class AnswerBook:
    """Reads stored answers for ``RequestKeys`` and turns one into a result.

    ``store`` should report its own failures (the engine's ``GuardedStore``);
    ``clock`` is read only when a stored answer has an expiry, so a request with
    nothing stored reads no time (traces of first tries stay as they were).
    """

    def __init__(self, store: SessionStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def stored(self, keys: RequestKeys) -> StoredOutcome | None:
        """The first unexpired answer stored under one of the request's keys."""
        tx = self._store.begin(keys.org, keys.user)
        try:
            for key in keys.keys:
                found = await tx.load_outcome(key)
                if found is not None and (
                    found.expires_at is None or not found.expired(self._clock.now())
                ):
                    return found
            return None
        finally:
            await tx.rollback()

    @staticmethod
    def answer(keys: RequestKeys, stored: StoredOutcome) -> InvokeResult[AgentExecuteResponse]:
        """The stored result for the same request; a conflict naming the turn for another."""
        if stored.request_digest == keys.digest:
            return _ResponseResult.model_validate_json(stored.result_json)
        return _ResponseResult.failure([stored_answer_conflict(stored)])


class SingleFlight:
    """At most one run per key in flight; identical arrivals share its outcome.

    The first copy (the leader) runs; every copy with the same key that arrives
    while it runs awaits the leader's outcome and returns it as its own. A leader
    that fails hands its failure to its followers too; a leader that is cancelled,
    or whose outcome ``abandoned`` says its caller left (a stream's consumer gone),
    lets one follower take over.
    """

    def __init__(self) -> None:
        self._flights: dict[object, asyncio.Future[Any]] = {}

    async def run(
        self,
        key: object,
        work: Callable[[], Awaitable[T]],
        abandoned: Callable[[T], bool] | None = None,
    ) -> T:
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
            if abandoned is not None and abandoned(outcome):
                flight.cancel()  # not an answer to the request: a follower runs it
            else:
                flight.set_result(outcome)
            return outcome
        finally:
            del self._flights[key]
