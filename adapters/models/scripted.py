"""``ScriptedLLM``: an LLM port that plays replies from a JSON script.

It drives the tests, the demo, and anyone without a model. A script is a JSON
list of replies, or an object ``{"replies": [...]}``; each reply is

- ``{"text": "..."}`` — a final answer, or
- ``{"tool_calls": [{"id": "call_1", "name": "read_file", "arguments": {...}}]}`` —
  tool calls (``arguments`` as an object or as JSON text), optionally with
  ``"text"`` as well — arguments are played as given, malformed or not, so a
  script can show how the engine answers a model's bad call,

and may add ``"usage": {"input_tokens": 10, "output_tokens": 5}`` and ``"model"``.
A script's usage may also give ``cached_input_tokens`` and ``reasoning_tokens``; left
out, they are unknown (``None``), as from a model that does not report them.
Replies are played in order, one per model call, across turns; a call after the
last reply fails with ``ScriptExhaustedError``. ``requests`` keeps every request the
script answered, so tests can check what the model was shown.

A reply's text may hold ``{received}``: it is played as a summary of the parts of
the newest user message the model was sent — ``received: text 'look at this',
image img1 image/png 68 bytes`` — so a demo shows what reached the model (an
image the model was not shown reads as the text of its described reference).
A script for a session run one turn a process (``aptix run``, D363) groups its
replies by turn: ``{"turns": [[...turn 1...], [...turn 2...]]}``. ``from_json(text,
turn=k, played=n)`` plays turn ``k``'s replies (counted from 0) after the ``n`` its
earlier requests played (a continuation's); a flat script ignores both and plays
from its first reply. ``ScriptedLLM.has_turns`` says which shape a script has.

It streams too (``StreamingLLM``, AGN-034 §4.7): a streamed turn gets each reply
in chunks of ``chunk_size`` characters (default 16), ``chunk_delay_seconds``
apart (default 0: as fast as the loop runs), in the shape ``split_reply`` makes.
A script object sets both: ``{"replies": [...], "chunk_size": 4,
"chunk_delay_seconds": 0.05}``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from aptix_pipeline.contracts import (
    AptixPipelineError,
    ChatRole,
    ImagePart,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    ReplyChunk,
    ToolCall,
    Usage,
    split_reply,
)

__all__ = ["RECEIVED", "ScriptError", "ScriptExhaustedError", "ScriptedLLM", "received"]

RECEIVED = "{received}"
"""In a reply's text, played as ``received(request)``."""
_QUOTED = 60


class ScriptError(AptixPipelineError, ValueError):
    """The script is not a list of replies in the documented shape."""


class ScriptExhaustedError(PermanentPortError):
    """The model was called more times than the script has replies."""


_REPLY_KEYS = {"text", "tool_calls", "usage", "model"}
_SCRIPT_KEYS = frozenset({"replies", "chunk_size", "chunk_delay_seconds"})
_TURN_SCRIPT_KEYS = frozenset({"turns", "chunk_size", "chunk_delay_seconds"})
_CALL_KEYS = {"id", "name", "arguments"}
_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
)


def _whole(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ScriptError(f"{where} must be a whole number, 0 or more")
    return value


def _usage(data: object, where: str) -> Usage:
    if not isinstance(data, Mapping):
        raise ScriptError(f"{where}.usage must be an object")
    unknown = set(data) - set(_USAGE_KEYS)
    if unknown:
        raise ScriptError(f"{where}.usage has unknown keys {sorted(unknown)}")
    given = _usage_counts(data, where)
    counts = {key: given.get(key) or 0 for key in ("input_tokens", "output_tokens")}
    total = given.get("total_tokens")
    return Usage(
        input_tokens=counts["input_tokens"],
        output_tokens=counts["output_tokens"],
        total_tokens=counts["input_tokens"] + counts["output_tokens"] if total is None else total,
        cached_input_tokens=given.get("cached_input_tokens"),
        reasoning_tokens=given.get("reasoning_tokens"),
    )


def _usage_counts(data: Mapping[str, object], where: str) -> dict[str, int]:
    """The counts a script's usage gives, each checked; the ones it leaves out are absent."""
    return {key: _whole(data[key], f"{where}.usage.{key}") for key in _USAGE_KEYS if key in data}


def _tool_call(data: object, where: str) -> ToolCall:
    if not isinstance(data, Mapping):
        raise ScriptError(f"{where} must be an object with id, name and arguments")
    unknown = set(data) - _CALL_KEYS
    if unknown:
        raise ScriptError(f"{where} has unknown keys {sorted(unknown)}")
    call_id, name = data.get("id"), data.get("name")
    if not isinstance(call_id, str) or not call_id.strip():
        raise ScriptError(f"{where}.id must be non-empty text")
    if not isinstance(name, str) or not name:
        raise ScriptError(f"{where}.name must be non-empty text")
    arguments = data.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(tool_call_id=call_id, name=name, arguments_json=text)


def _quoted(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= _QUOTED else flat[: _QUOTED - 1] + "…")


def received(request: LLMRequest) -> str:
    """What the newest user message of ``request`` held, part by part.

    ``received: text 'look at this', image img1 image/png 68 bytes``; a message
    without parts is one text. An image names its clipboard ``Id`` or artifact path.
    """
    message = next((m for m in reversed(request.messages) if m.role is ChatRole.USER), None)
    if message is None:
        return "received: no user message"
    described = [
        f"image {part.clipboard_image_id or part.relative_path or '-'} "
        f"{part.mime_type} {part.size_bytes} bytes"
        if isinstance(part, ImagePart)
        else f"text {_quoted(part.text)}"
        for part in message.parts or ()
    ]
    return "received: " + ", ".join(described or [f"text {_quoted(message.content)}"])


def parse_reply(data: object, index: int) -> LLMReply:
    """One scripted reply as an ``LLMReply``; ``ScriptError`` names what is wrong."""
    where = f"replies[{index}]"
    if not isinstance(data, Mapping):
        raise ScriptError(f"{where} must be an object")
    unknown = set(data) - _REPLY_KEYS
    if unknown:
        raise ScriptError(f"{where} has unknown keys {sorted(unknown)}; use {sorted(_REPLY_KEYS)}")
    text, calls = data.get("text"), data.get("tool_calls")
    if text is None and calls is None:
        raise ScriptError(f'{where} needs "text" or "tool_calls"')
    if text is not None and not isinstance(text, str):
        raise ScriptError(f"{where}.text must be text")
    if calls is not None and (not isinstance(calls, list) or not calls):
        raise ScriptError(f"{where}.tool_calls must be a non-empty list")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise ScriptError(f"{where}.model must be text")
    return LLMReply(
        text=text,
        tool_calls=[_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls or [])],
        usage=_usage(data["usage"], where) if "usage" in data else None,
        model=model or "scripted",
        response_id=f"scripted-{index}",
        finish_reason="tool_calls" if calls else "stop",
    )


class ScriptedLLM:
    """Plays scripted replies in order; see the module docstring."""

    def __init__(
        self,
        replies: Sequence[Mapping[str, Any]] | Sequence[LLMReply],
        *,
        chunk_size: int = 16,
        chunk_delay_seconds: float = 0.0,
    ) -> None:
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
            raise ScriptError(f"chunk_size must be a whole number, 1 or more, not {chunk_size!r}")
        if (
            not isinstance(chunk_delay_seconds, int | float)
            or isinstance(chunk_delay_seconds, bool)
            or not math.isfinite(chunk_delay_seconds)
            or chunk_delay_seconds < 0
        ):
            raise ScriptError(
                f"chunk_delay_seconds must be a number, 0 or more, not {chunk_delay_seconds!r}"
            )
        self._replies = [
            reply if isinstance(reply, LLMReply) else parse_reply(reply, index)
            for index, reply in enumerate(replies)
        ]
        self._next = 0
        self.chunk_size = chunk_size
        self.chunk_delay_seconds = float(chunk_delay_seconds)
        self.requests: list[LLMRequest] = []

    @staticmethod
    def has_turns(text: str | bytes) -> bool:
        """Whether the JSON script groups its replies by turn (``{"turns": [...]}``)."""
        try:
            data = json.loads(text)
        except ValueError:
            return False
        return isinstance(data, Mapping) and "turns" in data

    @classmethod
    def from_json(cls, text: str | bytes, *, turn: int = 0, played: int = 0) -> ScriptedLLM:
        """A script from JSON text: a list of replies, ``{"replies": [...]}``, or
        ``{"turns": [[...], ...]}`` of which turn ``turn``'s replies after the first
        ``played`` are played (see the module docstring)."""
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ScriptError(f"the script is not JSON: {error}") from None
        options: dict[str, Any] = {}
        if isinstance(data, Mapping) and "turns" in data:
            return cls._turn_of(data, turn, played)
        if isinstance(data, Mapping):
            if "replies" not in data or not set(data) <= _SCRIPT_KEYS:
                raise ScriptError(
                    'a script object has the key "replies", and may have '
                    '"chunk_size" and "chunk_delay_seconds"'
                )
            options = {key: data[key] for key in _SCRIPT_KEYS - {"replies"} if key in data}
            data = data["replies"]
        if not isinstance(data, list):
            raise ScriptError('a script is a list of replies or {"replies": [...]}')
        if not data:
            raise ScriptError("the script has no replies")
        return cls(data, **options)

    @classmethod
    def _turn_of(cls, data: Mapping[str, Any], turn: int, played: int) -> ScriptedLLM:
        """Turn ``turn``'s replies after the first ``played``, from ``{"turns": [...]}``;
        every turn is checked, so a mistake in a later one is named at once."""
        if not set(data) <= _TURN_SCRIPT_KEYS:
            raise ScriptError(
                'a script object has "turns" (or "replies"), and may have '
                '"chunk_size" and "chunk_delay_seconds"'
            )
        turns = data["turns"]
        if not isinstance(turns, list) or not turns:
            raise ScriptError('"turns" is a non-empty list, one list of replies a turn')
        options = {key: data[key] for key in _TURN_SCRIPT_KEYS - {"turns"} if key in data}
        scripts: list[ScriptedLLM] = []
        for index, replies in enumerate(turns):
            if not isinstance(replies, list) or not replies:
                raise ScriptError(f"turns[{index}] must be a non-empty list of replies")
            try:
                scripts.append(cls(replies, **options))
            except ScriptError as error:
                raise ScriptError(f"turns[{index}]: {error}") from None
        if turn >= len(turns):
            raise ScriptError(
                f"the script has replies for {len(turns)} turn(s) and this request is the "
                f'session\'s turn {turn + 1}: add a list of replies for it to "turns"'
            )
        chosen = scripts[turn]
        if played >= chosen.remaining:
            raise ScriptError(
                f"turn {turn + 1} of the script has {chosen.remaining} replies and the "
                f"session's turn {turn + 1} has played {played}: add the replies its "
                "continuation needs"
            )
        chosen._next = played
        return chosen

    @classmethod
    def from_file(cls, path: str | Path, *, turn: int = 0, played: int = 0) -> ScriptedLLM:
        """A script from a JSON file (``from_json``)."""
        return cls.from_json(Path(path).read_bytes(), turn=turn, played=played)

    @property
    def remaining(self) -> int:
        """How many replies are left."""
        return len(self._replies) - self._next

    async def complete(self, request: LLMRequest) -> LLMReply:
        """The next scripted reply."""
        return self._play(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """The next scripted reply, in chunks (see the module docstring)."""
        reply = self._play(request)
        delay = self.chunk_delay_seconds
        for index, chunk in enumerate(split_reply(reply, self.chunk_size)):
            if delay and index:
                await asyncio.sleep(delay)
            yield chunk

    def _play(self, request: LLMRequest) -> LLMReply:
        if self._next >= len(self._replies):
            raise ScriptExhaustedError(
                f"the script has {len(self._replies)} replies and all were played"
            )
        self.requests.append(request)
        reply = self._replies[self._next]
        self._next += 1
        if reply.text is not None and RECEIVED in reply.text:
            echoed = reply.text.replace(RECEIVED, received(request))
            return reply.model_copy(update={"text": echoed})
        return reply  # a frozen value: the script cannot be changed through it
