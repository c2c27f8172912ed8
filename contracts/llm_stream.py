"""The LLM port's streaming form: a reply as it is written, and its assembly.

A model that streams (``StreamingLLM`` in ``contracts/ports.py``) answers an
``LLMRequest`` with an async iterator of chunks:

- ``ReplyTextDelta`` — the next piece of the reply's text;
- ``ReplyToolCallDelta`` — a piece of one tool call, named by its ``index`` in the
  reply: the first piece of a call carries its id and name, later ones more of
  its JSON arguments (the OpenAI streaming shape);
- ``ReplyFinished`` — at most one, last: usage, model, response id and finish
  reason, each when the model reports it.

``ReplyAssembler`` puts the chunks together into the same ``LLMReply`` that
``complete`` returns, so everything after the model call is the same whether the
reply was streamed or not (AGN-034 §4.7: "Streaming affects delivery only, not
request semantics").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from .errors import AptixPipelineError
from .llm import LLMReply
from .response import Usage
from .tools import ToolCall

__all__ = [
    "MalformedStreamError",
    "ReplyAssembler",
    "ReplyChunk",
    "ReplyFinished",
    "ReplyTextDelta",
    "ReplyToolCallDelta",
    "close_stream",
    "split_reply",
]


class MalformedStreamError(AptixPipelineError, ValueError):
    """A streamed reply cannot be put together: the message says which chunk and why."""


@dataclass(frozen=True, slots=True)
class ReplyTextDelta:
    """The next piece of the reply's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReplyToolCallDelta:
    """A piece of the tool call at ``index`` (0-based, in the reply's order).

    ``tool_call_id`` and ``name`` come with the call's first piece (a repeat of
    the same value is allowed); ``arguments`` is the next piece of its JSON text.
    """

    index: int
    tool_call_id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ReplyFinished:
    """What the model reports once its reply is complete (each part optional)."""

    usage: Usage | None = None
    model: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None


ReplyChunk: TypeAlias = ReplyTextDelta | ReplyToolCallDelta | ReplyFinished
"""One item of a streamed reply."""


class _CallParts:
    __slots__ = ("arguments", "name", "tool_call_id")

    def __init__(self) -> None:
        self.tool_call_id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


def _first(parts: _CallParts, field: str, what: str, value: str | None, index: int) -> int:
    """Keep a call's id or name from its first piece; a later piece may only repeat it."""
    if not value:
        return 0
    held = getattr(parts, field)
    if held is None:
        setattr(parts, field, value)
        return len(value)
    if held != value:
        raise MalformedStreamError(
            f"tool call #{index} was given a second {what}: {held!r} then {value!r}"
        )
    return 0


class ReplyAssembler:
    """Puts a streamed reply together, chunk by chunk (see the module docstring).

    ``add`` takes each chunk in order and returns the characters it added, so a
    caller can hold a reply to a size limit while it streams; ``reply`` gives the
    ``LLMReply``. A chunk that contradicts an earlier one (another id for the
    same call, a second ``ReplyFinished``, anything after it) raises
    ``MalformedStreamError``, as does a tool call left without an id or a name.
    """

    __slots__ = ("_calls", "_finished", "_text", "size")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        self._finished: ReplyFinished | None = None
        self.size = 0
        """The characters so far, counted as ``reply_size`` counts them."""

    @property
    def has_text(self) -> bool:
        """Whether any text has come."""
        return bool(self._text)

    def add(self, chunk: ReplyChunk) -> int:
        """Take the next chunk; the number of characters it added."""
        if self._finished is not None:
            raise MalformedStreamError(f"the stream went on after its end: {type(chunk).__name__}")
        if isinstance(chunk, ReplyTextDelta):
            text = chunk.text
            if not isinstance(text, str):
                raise MalformedStreamError(f"a text delta holds {type(text).__name__}, not text")
            self._text.append(text)
            self.size += len(text)
            return len(text)
        if isinstance(chunk, ReplyToolCallDelta):
            return self._add_call(chunk)
        if isinstance(chunk, ReplyFinished):
            self._finished = chunk
            return 0
        raise MalformedStreamError(f"a stream chunk is a {type(chunk).__name__}, not a ReplyChunk")

    def add_text(self, text: object) -> int:
        """Take the text of the next ``ReplyTextDelta`` (``add``'s checks, none of its
        dispatch); the reply's characters so far (``size``)."""
        if self._finished is not None:
            raise MalformedStreamError("the stream went on after its end: ReplyTextDelta")
        if not isinstance(text, str):
            raise MalformedStreamError(f"a text delta holds {type(text).__name__}, not text")
        self._text.append(text)
        self.size += len(text)
        return self.size

    def _add_call(self, chunk: ReplyToolCallDelta) -> int:
        index = chunk.index
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise MalformedStreamError(f"a tool call delta has index {index!r}")
        parts = self._calls.get(index)
        if parts is None:
            parts = self._calls[index] = _CallParts()
        added = _first(parts, "tool_call_id", "id", chunk.tool_call_id, index)
        added += _first(parts, "name", "name", chunk.name, index)
        if chunk.arguments:
            parts.arguments.append(chunk.arguments)
            added += len(chunk.arguments)
        self.size += added
        return added

    def reply(self) -> LLMReply:
        """The assembled reply: the text (``None`` when none came) and the tool calls in order."""
        calls = []
        for index in sorted(self._calls):
            parts = self._calls[index]
            if not parts.tool_call_id or not parts.name:
                missing = "an id" if not parts.tool_call_id else "a name"
                raise MalformedStreamError(f"tool call #{index} of the stream has no {missing}")
            calls.append(
                ToolCall(
                    tool_call_id=parts.tool_call_id,
                    name=parts.name,
                    arguments_json="".join(parts.arguments),
                )
            )
        finished = self._finished or ReplyFinished()
        return LLMReply(
            text="".join(self._text) if self._text else None,
            tool_calls=calls,
            usage=finished.usage,
            model=finished.model,
            response_id=finished.response_id,
            finish_reason=finished.finish_reason,
        )


def split_reply(reply: LLMReply, chunk_size: int) -> list[ReplyChunk]:
    """``reply`` as the chunks a model would stream it in: the inverse of ``ReplyAssembler``.

    Text comes first, ``chunk_size`` characters at a time; then each tool call, its
    id and name with its first ``chunk_size`` characters of arguments, the rest after;
    then one ``ReplyFinished``. Assembling the chunks gives ``reply`` back.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be 1 or more, not {chunk_size}")
    chunks: list[ReplyChunk] = []
    text = reply.text
    if text is not None:
        pieces = [text[at : at + chunk_size] for at in range(0, len(text), chunk_size)]
        chunks.extend(ReplyTextDelta(piece) for piece in pieces or [""])
    for index, call in enumerate(reply.tool_calls):
        arguments = call.arguments_json
        first = arguments[:chunk_size]
        chunks.append(ReplyToolCallDelta(index, call.tool_call_id, call.name, first))
        chunks.extend(
            ReplyToolCallDelta(index, arguments=arguments[at : at + chunk_size])
            for at in range(chunk_size, len(arguments), chunk_size)
        )
    chunks.append(ReplyFinished(reply.usage, reply.model, reply.response_id, reply.finish_reason))
    return chunks


async def close_stream(chunks: object) -> None:
    """Close a model's stream that is no longer read (``aclose``, when it has one).

    An async generator left unclosed keeps its HTTP response open until the garbage
    collector finds it; every reader of a ``StreamingLLM`` closes it this way.
    """
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()
