"""A script keyed by turn, played for every session a service holds (D393).

A ``ScriptedLLM`` plays its replies in order, one queue for the whole process: in a
service every new session would get the next session's replies, and the script
would run out. A script keyed by turn (``{"turns": [[...turn 1...], [...turn
2...]]}``, ``scripted.py``) says instead what the model answers in each turn of a
session, so ``TurnScript`` plays it for any number of sessions at once: each turn is
placed — which turn of its session, and how many of that turn's replies a
continuation already played — from the session's stored transcript
(``script_position``), as ``aptix run`` places a one-turn process (D363).

``TurnScript`` is both the model port and the interceptor that places each turn,
so a pipeline takes it twice: ``llm=script, interceptors=[script]``
(``build_pipeline`` does this for a ``[model] kind = "scripted"`` whose script is
keyed by turn). Being the port the turn runs on, its calls are recorded like any
model's. The position travels with the turn in a context variable, so concurrent
turns never see each other's. A call no interceptor placed (a durable turn's model
activity, on a worker apart from its workflow) is placed by its own messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    Caller,
    ChatRole,
    LLMReply,
    LLMRequest,
    ReplyChunk,
    SessionStore,
)

from .scripted import ScriptedLLM, ScriptError

if TYPE_CHECKING:
    from aptix_pipeline.engine import Proceed, RequestInput, TurnCall, TurnReport

__all__ = ["TurnScript", "request_bytes", "script_position", "session_of"]


def request_bytes(request: RequestInput) -> bytes:
    """The request as the JSON bytes of its wire form, whatever form the host gave."""
    if isinstance(request, bytes):
        return request
    if isinstance(request, str):
        return request.encode("utf-8", "surrogatepass")
    if isinstance(request, AgentExecuteRequest):
        return request.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")
    try:
        return json.dumps(dict(request)).encode("utf-8")
    except (TypeError, ValueError):
        return b""  # the turn refuses it; the script starts at its first turn


def session_of(body: bytes) -> tuple[str | None, bool]:
    """The request's ``SessionId`` (``None`` for an Initial request or a body that is not
    a JSON object) and whether it carries ``ToolResults`` (a continuation)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None, False
    if not isinstance(data, dict):
        return None, False
    session = data.get("SessionId")
    return (session if isinstance(session, str) and session else None), bool(
        data.get("ToolResults")
    )


async def script_position(store: SessionStore, caller: Caller, body: bytes) -> tuple[int, int]:
    """The request's turn of its session (from 0) and the model replies that turn has
    already played, read from the caller's stored transcript.

    - An Initial request is turn 1, nothing played.
    - A FollowOn is the turn after the last stored one: one user message a turn
      (``prompt_content_provider_initializer``), so the turn number is their count + 1.
    - A ClientToolCallContinuation goes on with the last stored turn, after the model
      replies it already played: the assistant messages stored since its user message
      (one a model call, ``llm_client``).
    """
    session_id, continuation = session_of(body)
    if session_id is None:
        return 0, 0
    transaction = store.begin(caller.org, caller.user)
    try:
        transcript = await transaction.load_transcript(session_id)
    finally:
        await transaction.rollback()
    users = [index for index, message in enumerate(transcript) if message.role is ChatRole.USER]
    if not continuation:
        return len(users), 0
    last = users[-1] if users else -1
    played = sum(message.role is ChatRole.ASSISTANT for message in transcript[last + 1 :])
    return max(len(users) - 1, 0), played


@dataclass(slots=True)
class _Place:
    """Where the running turn is in the script: its turn, and the replies played."""

    turn: int
    played: int


_PLACE: ContextVar[_Place | None] = ContextVar("aptix_turn_script_place", default=None)


def _placed_by(request: LLMRequest) -> _Place:
    """Where a model call stands that no interceptor placed, from its own messages.

    A durable turn's model call runs in an activity, apart from the workflow where its
    turn was placed (docs/DURABLE.md). Its messages are the session's transcript and
    the rounds so far: the turn is the count of user messages less one, the replies
    played the assistant messages since the last of them. Raises ``ScriptError`` for a
    request that holds no user message.
    """
    users = [i for i, message in enumerate(request.messages) if message.role is ChatRole.USER]
    if not users:
        raise ScriptError(
            "a TurnScript places each turn as an interceptor: give it to the pipeline "
            "as interceptors=[script] as well as llm=script"
        )
    since = request.messages[users[-1] + 1 :]
    return _Place(len(users) - 1, sum(m.role is ChatRole.ASSISTANT for m in since))


class TurnScript:
    """A script keyed by turn as a model port and a turn interceptor; see the module
    docstring. Raises ``ScriptError`` for a script that is not keyed by turn or that
    breaks the script format (every turn is checked at once)."""

    def __init__(self, text: str | bytes) -> None:
        if not ScriptedLLM.has_turns(text):
            raise ScriptError('a script for every session is keyed by turn: {"turns": [...]}')
        ScriptedLLM.from_json(text)  # every turn checked now, not at its first call
        self._text = text
        self.requests: list[LLMRequest] = []

    @classmethod
    def from_file(cls, path: str | Path) -> TurnScript:
        """The script in a JSON file."""
        return cls(Path(path).read_bytes())

    async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
        """Place the turn in the script from its session's transcript, then run it.

        A request the store cannot place (an unknown session, a store that fails)
        starts at the first turn: the turn itself then says what is wrong with it.
        """
        try:
            turn, played = await script_position(
                call.ports.store, call.caller, request_bytes(call.request)
            )
        except Exception:
            turn, played = 0, 0
        token = _PLACE.set(_Place(turn, played))
        try:
            return await proceed()
        finally:
            _PLACE.reset(token)

    def _next(self, request: LLMRequest) -> ScriptedLLM:
        place = _PLACE.get()
        if place is None:  # a call apart from its turn: a durable worker's model activity
            place = _placed_by(request)
        scripted = ScriptedLLM.from_json(self._text, turn=place.turn, played=place.played)
        place.played += 1
        self.requests.append(request)
        return scripted

    async def complete(self, request: LLMRequest) -> LLMReply:
        """The reply the script gives at this point of this turn."""
        return await self._next(request).complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """The same reply, in the chunks ``ScriptedLLM.stream`` makes."""
        async for chunk in self._next(request).stream(request):
            yield chunk
