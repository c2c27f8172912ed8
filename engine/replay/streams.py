"""Streamed model calls in a recording: how one is logged, and what its replay yields.

A streamed turn (AGN-034 §4.7) asks the model for its reply chunk by chunk
(``StreamingLLM.stream``, ``contracts/llm_stream.py``). A recording holds such a
call as one port call, ``LLM.stream``, whose answer is the reply its chunks put
together (``ReplyAssembler``): the same JSON as a ``complete`` call's answer, so
redaction treats the two alike. How the stream ended is in the call's other keys
(``records.py``, docs/RECORDING.md "Streamed model calls"):

- it ended: ``answer`` only (the reply);
- it raised: ``error``, and ``answer`` the reply of the chunks read before, when
  any came (``StreamLog.so_far``);
- the engine stopped reading it (the reply-size limit crossed, or a chunk it could
  not put together): ``answer`` the reply of the chunks before the last one it
  read, and ``last_chunk`` that chunk (``chunk_json``), so a replay crosses the
  limit at the same chunk, by the same number of characters;
- the turn was stopped while the stream ran: ``cancelled``, and the reply so far.

A stream cut short after it had sent its end (``ReplyFinished``) also has
``ended``: its replay sends the end again before what comes after it.

A replay yields the recorded reply again as chunks (``replayed_chunks``: the
``split_reply`` pieces, ``REPLAY_CHUNK_SIZE`` characters at most), so the engine
puts it together again and the replay can check what it made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from aptix_pipeline.contracts import (
    LLMReply,
    MalformedStreamError,
    ReplyAssembler,
    ReplyFinished,
    ReplyTextDelta,
    ReplyToolCallDelta,
    Usage,
    split_reply,
)
from aptix_pipeline.engine.deep_json import encode_value

from .port_tap import decode_answer
from .records import RecordedError

__all__ = [
    "REPLAY_CHUNK_SIZE",
    "StreamLog",
    "chunk_json",
    "chunk_of",
    "replayed_chunks",
]

REPLAY_CHUNK_SIZE = 64
"""The most characters of text or of a tool call's arguments one replayed chunk holds."""

_REPLY: TypeAdapter[LLMReply] = TypeAdapter(LLMReply)
_USAGE: TypeAdapter[Usage | None] = TypeAdapter(Usage | None)


def chunk_json(chunk: object) -> dict[str, Any]:
    """One chunk as JSON: ``{"Text"}``, ``{"Index", "ToolCallId", "Name", "ArgumentsJson"}``,
    ``{"Finished": {"Usage", "Model", "ResponseId", "FinishReason"}}``.

    The keys are those of the reply's own JSON, so redaction treats a chunk's text
    and arguments as it treats a reply's. Anything else a model yielded is kept as
    ``{"Type": its class name}``: its content is the model's and unknown.
    """
    if isinstance(chunk, ReplyTextDelta):
        return {"Text": encode_value(chunk.text)}
    if isinstance(chunk, ReplyToolCallDelta):
        return {
            "Index": encode_value(chunk.index),
            "ToolCallId": encode_value(chunk.tool_call_id),
            "Name": encode_value(chunk.name),
            "ArgumentsJson": encode_value(chunk.arguments),
        }
    if isinstance(chunk, ReplyFinished):
        return {
            "Finished": {
                "Usage": encode_value(chunk.usage),
                "Model": encode_value(chunk.model),
                "ResponseId": encode_value(chunk.response_id),
                "FinishReason": encode_value(chunk.finish_reason),
            }
        }
    return {"Type": type(chunk).__name__}


def chunk_of(data: Any) -> Any:
    """The chunk ``chunk_json`` wrote (an object of the recorded class name for ``Type``).

    What is not a chunk's JSON is handed back as recorded: the engine then says
    what it is not, as it did for the model's odd chunk.
    """
    if not isinstance(data, Mapping):
        return data
    if "Text" in data:
        return ReplyTextDelta(data["Text"])
    if "Index" in data:
        return ReplyToolCallDelta(
            data["Index"], data.get("ToolCallId"), data.get("Name"), data.get("ArgumentsJson", "")
        )
    finished = data.get("Finished")
    if isinstance(finished, Mapping):
        return ReplyFinished(
            decode_answer(_USAGE, finished.get("Usage")),
            finished.get("Model"),
            finished.get("ResponseId"),
            finished.get("FinishReason"),
        )
    if isinstance(data.get("Type"), str):
        return type(data["Type"], (), {})()
    return data


def replayed_chunks(answer: Any, *, ended: bool) -> list[Any]:
    """The chunks a replay yields for a recorded stream's ``answer``, in order.

    They end with a ``ReplyFinished`` when the recorded stream had sent its end
    (``ended``: it ended, or it was cut short after its end). No answer (nothing
    came) is no chunk; an answer that is not a reply is one chunk, as recorded.
    """
    if answer is None:
        return []
    reply = decode_answer(_REPLY, answer)
    if not isinstance(reply, LLMReply):
        return [answer]
    chunks: list[Any] = list(split_reply(reply, REPLAY_CHUNK_SIZE))
    if not ended:
        chunks.pop()
    return chunks


class StreamLog:
    """What a recording tap knows of one stream while it passes the chunks on.

    ``hold`` a chunk as it goes to the engine; ``taken`` once the engine asks for
    the next one: only then is the chunk part of the reply, so the chunk the
    engine holds when it stops reading is its last one (``held``), apart from the
    reply before it. The tap's own assembler never raises into the turn: a chunk
    it cannot put together ends what it adds (``answer`` reports it).
    """

    __slots__ = ("_assembler", "_broken", "_texts", "ended", "held", "holding", "read")

    def __init__(self) -> None:
        self._assembler = ReplyAssembler()
        self._broken: MalformedStreamError | None = None
        self._texts: list[str] = []
        self.held: Any = None
        self.holding = False
        self.read = 0
        """How many chunks the engine has taken."""
        self.ended = False
        """Whether the engine has taken the stream's end (a ``ReplyFinished``)."""

    def hold(self, chunk: Any) -> None:
        """``chunk`` goes to the engine."""
        self.held, self.holding = chunk, True

    def taken(self) -> None:
        """The engine asked for another chunk: the one it held is part of the reply."""
        chunk, self.held, self.holding = self.held, None, False
        self.read += 1
        if isinstance(chunk, ReplyFinished):
            self.ended = True
        if self._broken is not None:
            return
        try:
            self._assembler.add(chunk)
        except MalformedStreamError as error:
            self._broken = error
            return
        if isinstance(chunk, ReplyTextDelta):
            self._texts.append(chunk.text)

    def so_far(self) -> Any:
        """The JSON of the reply of the chunks taken so far.

        When they do not make a reply (a tool call still without its name), its text
        alone: what a replay needs to fail the same way (text gone out or not).
        """
        try:
            reply = self._assembler.reply()
        except MalformedStreamError:
            reply = LLMReply(text="".join(self._texts) if self._texts else None)
        return encode_value(reply)

    def answer(self) -> tuple[Any, RecordedError | None]:
        """The answer of a stream that ended, and the error that kept it from being a reply.

        The engine's own assembler raised the same ``MalformedStreamError``: a replay
        yields the reply before it, then raises it.
        """
        if self._broken is not None:
            return self.so_far(), RecordedError.of(self._broken)
        try:
            return encode_value(self._assembler.reply()), None
        except MalformedStreamError as error:
            return self.so_far(), RecordedError.of(error)
