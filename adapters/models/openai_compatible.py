"""``OpenAICompatibleLLM``: the LLM port (AGN-036 §4.9) on the official ``openai`` SDK.

It speaks chat completions with function tools, so it reaches OpenAI itself and
any server that speaks the same protocol through ``base_url``: vLLM
(``http://host:8000/v1``), Ollama (``http://localhost:11434/v1``), llama.cpp's
``llama-server`` (``http://localhost:8080/v1``).

Retries: the SDK's own retries are off (``max_retries=0``); this adapter
retries with tenacity, and is the only layer that does:

- retried: 429, 408 and every 5xx status, timeouts and connection errors;
- never retried: any other 4xx (400, 401, 403, 404, 409, 422, …), a malformed
  reply, cancellation;
- the wait is exponential with jitter (``backoff_initial_seconds`` doubling, plus up
  to ``backoff_initial_seconds`` of random jitter, at most ``backoff_max_seconds``),
  unless the server says how long to wait (``retry-after-ms``, or ``Retry-After``
  in seconds or as an HTTP date): that is honoured as given;
- at most ``max_attempts`` requests, and never past ``max_total_seconds`` from the
  first: each request's timeout is cut to the budget left, and when the next wait
  would end past the budget the adapter gives up at once.

When it gives up, or on an error no retry can fix, it raises ``PermanentPortError``
naming the status and the server's error message (never the API key), so the
engine, which retries a port's other exceptions itself (``steps/llm_client.py``),
does not multiply the attempts. Each retry adds an ``aptix.llm.retry`` event to the
current OpenTelemetry span (the engine's ``chat {model}`` span) and tells itself in one
line on the ``aptix_pipeline.retries`` logger (``models/retry_notices.py``).

Streaming (``StreamingLLM``, AGN-034 §4.7): ``stream`` sends the same request with
``stream: true`` and ``stream_options: {"include_usage": true}`` and yields the
reply's text deltas, its tool-call deltas (by index, the engine assembles them)
and one ``ReplyFinished`` (usage from the final usage chunk, when the server sends
one). The retry policy above covers opening the stream, up to its first chunk;
once a chunk has been yielded nothing is retried here (D257). A later failure is
raised at once, with the same clear message: ``PermanentPortError`` when another
request would fail alike (a malformed chunk, an oversized reply, an error event
naming a bad request), else ``StreamBrokenError`` (a dropped connection, a read
timeout, a server error event, a stream that ends before its reply is finished,
D259), which the engine retries only while no text has reached the client.
Chunks with no choices and no usage are skipped; chunks of the wrong shape are
reported, naming the chunk and the field (D258).

Usage: a reply's ``usage`` becomes ``LLMReply.usage``, with the cached input tokens
(``usage.prompt_tokens_details.cached_tokens``) and reasoning tokens
(``usage.completion_tokens_details.reasoning_tokens``) when the server reports them,
streamed (the ``include_usage`` chunk) or not. A detail the server leaves out stays
``None`` (unknown, never 0); a reply with no usage gives ``usage=None`` (unreported).
A count that is not a whole number >= 0 makes the reply malformed.
``LLMRequest.max_output_tokens`` is sent as ``max_completion_tokens``.

Images: a user message with image parts (``ChatMessage.parts``) is sent as a list
of content parts, its text parts as ``text`` and its images as ``image_url`` parts
whose URL is a ``data:`` URI holding the bytes (``ImagePart.data_url``), in
``complete`` and ``stream`` alike. A message without images is sent as its text.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import httpx2
import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)
from openai.types.shared_params import FunctionDefinition
from opentelemetry import trace
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_exponential,
    wait_random,
)

from aptix_pipeline.contracts import (
    AptixPipelineError,
    ChatMessage,
    ChatRole,
    ImagePart,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    ReplyChunk,
    ReplyFinished,
    ReplyTextDelta,
    ReplyToolCallDelta,
    ScrubbingFilter,
    ToolCall,
    ToolDefinition,
    Usage,
    mask_everywhere,
    mask_url_everywhere,
    scrub_secret,
    scrub_urls,
)

from .retry_notices import failure_text, notice, retry_line

__all__ = ["DEFAULT_MAX_REPLY_BYTES", "RETRY_EVENT", "OpenAICompatibleLLM", "StreamBrokenError"]

RETRY_EVENT: Final = "aptix.llm.retry"
"""The span event added before each retry's wait."""

_LOCAL_API_KEY: Final = "not-needed"
"""Sent when no key is configured: local servers ignore it, the SDK needs one."""

_MESSAGE_LIMIT: Final = 500
"""How much of a server's error message an error repeats."""
_UNSENDABLE_KEY: Final = re.compile(r"[^\x21-\x7e\xa0-\xff]")
"""What a key sent as ``Authorization: Bearer <key>`` may not hold."""

for _name in ("httpx", "httpx2", "openai", "openai._base_client"):
    # These log each request's full URL: a base_url's credentials must not reach a log (D220).
    logging.getLogger(_name).addFilter(ScrubbingFilter())


DEFAULT_MAX_REPLY_BYTES: Final = 16 * 1024 * 1024
"""The largest HTTP response body the adapter reads (``max_reply_bytes``)."""


class _ReplyTooLargeError(Exception):
    """The server's response body passed ``max_reply_bytes``; reading stopped there."""


class StreamBrokenError(AptixPipelineError, ConnectionError):
    """A model server's stream failed after its first chunk, in a way another request may not.

    The connection dropped, a read timed out, the server sent an error event of its
    own (not one naming a bad request), or the stream ended before the reply said
    it was finished. The adapter does not retry once a chunk has gone out (D257);
    the engine retries this one only while none of the reply's text has reached
    the client.
    """


class _StreamEndedEarlyError(Exception):
    """The stream ended without a finish reason: the reply may be cut short (D259)."""


_BAD_REQUEST_ERRORS: Final = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "context_length_exceeded",
    }
)
"""The ``type`` or ``code`` of a stream's error event that another request would repeat."""


def _error_event(error: BaseException) -> bool:
    """Whether ``error`` is the SDK's report of an ``{"error": ...}`` event in a stream."""
    return isinstance(error, openai.APIError) and not isinstance(
        error,
        openai.APIStatusError | openai.APIConnectionError | openai.APIResponseValidationError,
    )


class _BoundedStream(httpx2.AsyncByteStream):
    """A response body that raises once more than ``limit`` bytes have arrived."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        async for chunk in self._inner:
            received += len(chunk)
            if received > self._limit:
                raise _ReplyTooLargeError(
                    f"the model server's reply is larger than {self._limit} bytes; "
                    "reading stopped there"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedTransport(httpx2.AsyncBaseTransport):
    """httpx's transport, its response bodies bounded (``_BoundedStream``), chunked or not."""

    def __init__(self, limit: int) -> None:
        # The SDK's own connection limits (openai's DefaultAsyncHttpxClient).
        self._inner = httpx2.AsyncHTTPTransport(
            limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
        )
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            await response.aclose()
            raise _ReplyTooLargeError(
                f"the model server's reply is {declared} bytes, more than {self._limit}"
            )
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _BoundedStream(stream, self._limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _too_large(error: BaseException | None) -> _ReplyTooLargeError | None:
    """The ``_ReplyTooLargeError`` behind ``error`` (the SDK wraps it), if there is one."""
    while error is not None:
        if isinstance(error, _ReplyTooLargeError):
            return error
        error = error.__cause__ or error.__context__
    return None


def _retryable(error: BaseException) -> bool:
    """429, 408, 5xx, timeouts and connection errors; nothing else (no other 4xx).

    A reply over ``max_reply_bytes`` is not retried: the next would likely be as big.
    In a stream, a stream that ends before its reply is finished is retried, and an
    error event is unless it names a bad request (``_BAD_REQUEST_ERRORS``).
    """
    if _too_large(error) is not None:
        return False
    if isinstance(error, openai.APIStatusError):
        return error.status_code in (408, 429) or error.status_code >= 500
    if isinstance(error, _StreamEndedEarlyError):
        return True
    if isinstance(error, openai.APIError) and _error_event(error):
        return not {error.type, error.code} & _BAD_REQUEST_ERRORS
    return isinstance(error, openai.APIConnectionError)  # APITimeoutError is one too


def _server_wait(error: BaseException) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms`` / ``Retry-After``), if it did."""
    if not isinstance(error, openai.APIStatusError):
        return None
    headers = error.response.headers
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    seconds = headers.get("retry-after")
    if seconds is None:
        return None
    try:
        value = float(seconds)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(seconds)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return value if math.isfinite(value) and value >= 0 else None


def _error_type(error: BaseException) -> str:
    """The OpenTelemetry ``error.type`` of a failed attempt: the status, or the class."""
    if isinstance(error, openai.APIStatusError):
        return str(error.status_code)
    return type(error).__name__


def _status_text(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _server_message(error: openai.APIStatusError) -> str:
    """The server's own error message: ``error.message`` of an OpenAI-style body."""
    body = error.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
        nested = body.get("error")
        if isinstance(nested, Mapping) and isinstance(nested.get("message"), str):
            return str(nested["message"])
        if isinstance(nested, str) and nested:
            return nested
    if isinstance(body, str) and body:
        return body
    return error.message


def _user_parts(message: ChatMessage) -> list[ChatCompletionContentPartParam]:
    """A user message's parts as chat-completions content parts: images as data URIs."""
    parts: list[ChatCompletionContentPartParam] = []
    for part in message.parts or ():
        if isinstance(part, ImagePart):
            parts.append({"type": "image_url", "image_url": {"url": part.data_url()}})
        else:
            parts.append({"type": "text", "text": part.text})
    return parts


def _message_param(message: ChatMessage, index: int) -> ChatCompletionMessageParam:
    """One transcript message as a chat-completions message."""
    if message.role is ChatRole.SYSTEM:
        return {"role": "system", "content": message.content}
    if message.role is ChatRole.USER:
        if message.images:
            return {"role": "user", "content": _user_parts(message)}
        return {"role": "user", "content": message.content}
    if message.role is ChatRole.TOOL:
        if not message.tool_call_id:
            raise PermanentPortError(
                f"messages[{index}]: a tool message needs the tool_call_id of the call it answers"
            )
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    return {
        "role": "assistant",
        # The protocol's "no text" beside tool calls is null, not "".
        "content": message.content or None,
        "tool_calls": [
            {
                "id": call.tool_call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in message.tool_calls
        ],
    }


def _tool_param(tool: ToolDefinition) -> ChatCompletionToolParam:
    """One advertised tool as a function tool with its JSON Schema."""
    function: FunctionDefinition = {"name": tool.name, "parameters": tool.parameters}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


class _MalformedReplyError(ValueError):
    """The server answered 2xx with something that is not a chat completion."""


def _text_field(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _MalformedReplyError(f"{where} is {type(value).__name__}, not text")
    return value


def _count(value: object, where: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _MalformedReplyError(f"{where} is {value!r}, not a whole number >= 0")
    return value


def _detail(raw: object, details: str, name: str) -> int | None:
    """``usage.<details>.<name>`` (``cached_tokens``, ``reasoning_tokens``): ``None`` when
    the server leaves it out, as it does when it does not count them (unknown, not 0)."""
    where = f"usage.{details}"
    value: object = getattr(raw, details, None)
    if value is None:
        return None
    if isinstance(value, Mapping):  # a field the SDK did not parse into its model
        count = value.get(name)
    elif isinstance(value, openai.BaseModel):
        count = getattr(value, name, None)
    else:
        raise _MalformedReplyError(f"{where} is {type(value).__name__}, not an object")
    if count is None:
        return None
    return _count(count, f"{where}.{name}")


def _usage(raw: object) -> Usage | None:
    """A completion's or a chunk's ``usage`` as ``Usage`` (``None`` when it has none).

    Cached input tokens come from ``usage.prompt_tokens_details.cached_tokens`` and
    reasoning tokens from ``usage.completion_tokens_details.reasoning_tokens``; a
    server that leaves them out leaves them unknown (``None``).
    """
    if raw is None:
        return None
    prompt = _count(getattr(raw, "prompt_tokens", None), "usage.prompt_tokens")
    output = _count(getattr(raw, "completion_tokens", None), "usage.completion_tokens")
    total = getattr(raw, "total_tokens", None)
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=prompt + output if total is None else _count(total, "usage.total_tokens"),
        cached_input_tokens=_detail(raw, "prompt_tokens_details", "cached_tokens"),
        reasoning_tokens=_detail(raw, "completion_tokens_details", "reasoning_tokens"),
    )


def _reply(completion: object) -> LLMReply:
    """A chat completion as an ``LLMReply``; ``_MalformedReplyError`` says what is wrong."""
    if not isinstance(completion, ChatCompletion):
        raise _MalformedReplyError(f"the reply is {type(completion).__name__}, not a completion")
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise _MalformedReplyError("the reply has no choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise _MalformedReplyError("choices[0] has no message")
    text: object = getattr(message, "content", None)
    if text is None:
        text = getattr(message, "refusal", None)  # a refusal is the model's answer
    if text is not None:
        text = _text_field(text, "choices[0].message.content")
    calls: list[ToolCall] = []
    for index, call in enumerate(getattr(message, "tool_calls", None) or []):
        where = f"choices[0].message.tool_calls[{index}]"
        function: Any = getattr(call, "function", None)
        if function is None:
            kind = getattr(call, "type", None)
            raise _MalformedReplyError(f"{where} is a {kind!r} call, not a function call")
        calls.append(
            ToolCall(
                tool_call_id=_text_field(getattr(call, "id", None), f"{where}.id"),
                name=_text_field(getattr(function, "name", None), f"{where}.function.name"),
                arguments_json=_text_field(
                    getattr(function, "arguments", None), f"{where}.function.arguments"
                ),
            )
        )
    finish = getattr(choice, "finish_reason", None)
    return LLMReply(
        text=text,
        tool_calls=calls,
        usage=_usage(getattr(completion, "usage", None)),
        model=getattr(completion, "model", None) or None,
        response_id=getattr(completion, "id", None) or None,
        finish_reason=finish if isinstance(finish, str) else None,
    )


class _ChunkReader:
    """A stream's chunks as ``ReplyChunk`` items: choice 0's deltas, then its end (D258).

    A chunk with no choices and no usage carries nothing of the reply (Azure's
    content-filter chunk, a keep-alive) and is skipped; one of the wrong shape
    raises ``_MalformedReplyError`` naming the chunk (1-based) and the field. The
    model and id come from the first chunk that names them, the usage from the last
    chunk that has one (the usage chunk ``include_usage`` asks for).
    """

    def __init__(self) -> None:
        self.received = 0
        """The chunks read so far."""
        self.ended = False
        self._model: str | None = None
        self._response_id: str | None = None
        self._usage: Usage | None = None
        self._finish_reason: str | None = None
        self._empty_text = False
        self._wrote_text = False

    async def next_items(self, chunks: openai.AsyncStream[ChatCompletionChunk]) -> list[ReplyChunk]:
        """The items of the next chunk that gives any; at the end, the reply's last items."""
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                return self._end()
            self.received += 1
            items = self._items(chunk)
            if items:
                return items

    def _items(self, chunk: object) -> list[ReplyChunk]:
        where = f"chunk {self.received}"
        if not isinstance(chunk, ChatCompletionChunk):
            raise _MalformedReplyError(f"{where} is {type(chunk).__name__}, not a chunk")
        self._model = self._model or _optional_text(getattr(chunk, "model", None))
        self._response_id = self._response_id or _optional_text(getattr(chunk, "id", None))
        usage = _usage(getattr(chunk, "usage", None))
        if usage is not None:
            self._usage = usage
        choices = getattr(chunk, "choices", None)
        if choices is None:
            return []
        if not isinstance(choices, list):
            raise _MalformedReplyError(f"{where}: choices is {type(choices).__name__}, not a list")
        items: list[ReplyChunk] = []
        for choice in choices:
            if getattr(choice, "index", 0) in (0, None):  # n > 1: the first choice, as complete
                items.extend(self._delta(choice, where))
        return items

    def _delta(self, choice: object, where: str) -> list[ReplyChunk]:
        finish = getattr(choice, "finish_reason", None)
        if finish is not None:
            self._finish_reason = _text_field(finish, f"{where}: choices[0].finish_reason")
        delta = getattr(choice, "delta", None)
        if delta is None:
            return []
        items: list[ReplyChunk] = []
        text: object = getattr(delta, "content", None)
        if text is None:
            text = getattr(delta, "refusal", None)  # a refusal is the model's answer
        if text is not None:
            text = _text_field(text, f"{where}: choices[0].delta.content")
            if text:
                items.append(ReplyTextDelta(text))
                self._wrote_text = True
            else:
                self._empty_text = True
        for position, call in enumerate(getattr(delta, "tool_calls", None) or []):
            at = f"{where}: choices[0].delta.tool_calls[{position}]"
            index = getattr(call, "index", None)
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise _MalformedReplyError(f"{at}.index is {index!r}, not a whole number >= 0")
            function: Any = getattr(call, "function", None)
            arguments = getattr(function, "arguments", None)
            items.append(
                ReplyToolCallDelta(
                    index=index,
                    tool_call_id=_optional_text(getattr(call, "id", None), f"{at}.id"),
                    name=_optional_text(getattr(function, "name", None), f"{at}.function.name"),
                    arguments=""
                    if arguments is None
                    else _text_field(arguments, f"{at}.function.arguments"),
                )
            )
        return items

    def _end(self) -> list[ReplyChunk]:
        if self._finish_reason is None:
            raise _StreamEndedEarlyError(
                f"it ended after {self.received} chunk(s) without a finish_reason"
            )
        self.ended = True
        items: list[ReplyChunk] = []
        if self._empty_text and not self._wrote_text:
            items.append(ReplyTextDelta(""))  # text "", as complete gives it, not None
        items.append(
            ReplyFinished(self._usage, self._model, self._response_id, self._finish_reason)
        )
        return items


def _optional_text(value: object, where: str = "") -> str | None:
    """``value`` when it is non-empty text; ``None`` when it is empty or absent."""
    if value is None or value == "":
        return None
    if where:
        return _text_field(value, where)
    return value if isinstance(value, str) else None


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be more than 0 seconds, got {value!r}")
    return float(value)


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Call:
    """The chat-completions parameters of one ``LLMRequest``."""

    model: str
    messages: list[ChatCompletionMessageParam]
    tools: list[ChatCompletionToolParam] | openai.Omit
    max_completion_tokens: int | openai.Omit


@dataclass(frozen=True, slots=True)
class _OpenedStream:
    """A stream that has given its first items (``first``); ``chunks`` are the rest."""

    chunks: openai.AsyncStream[ChatCompletionChunk]
    reader: _ChunkReader
    first: list[ReplyChunk]


class OpenAICompatibleLLM:
    """The LLM port on an OpenAI-compatible chat-completions endpoint (see the module docstring).

    Keyword-only arguments:

    - ``model`` — the default model; a request's own ``model`` (the agent context's)
      wins.
    - ``base_url`` — the server, e.g. ``http://localhost:11434/v1``; ``None`` is
      OpenAI (or the SDK's ``OPENAI_BASE_URL``).
    - ``api_key`` — else ``OPENAI_API_KEY``; a server named by ``base_url`` may need
      none (a placeholder is sent). OpenAI itself needs one.
    - ``timeout_seconds`` — one request; ``max_attempts``, ``max_total_seconds``,
      ``backoff_initial_seconds``, ``backoff_max_seconds`` — the retry policy.
    - ``temperature`` and ``extra_body`` — sent with every request (``extra_body``
      adds any other body field: ``max_tokens``, ``top_p``, a server's own options).
    - ``client`` — an ``openai.AsyncOpenAI`` to use instead of building one (then
      ``base_url`` and ``api_key`` must be left out); its own retries are turned off.
    - ``sleep`` and ``clock`` — how to wait and what time it is (monotonic seconds),
      for tests.

    Bad arguments raise ``ValueError`` naming the argument. Building one needs no
    running event loop; ``aclose()`` closes the client it built.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_seconds: float = 60.0,
        max_attempts: int = 4,
        max_total_seconds: float = 120.0,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 20.0,
        temperature: float | None = None,
        extra_body: Mapping[str, object] | None = None,
        client: openai.AsyncOpenAI | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        if isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int):
            raise ValueError(f"max_reply_bytes must be a whole number, got {max_reply_bytes!r}")
        if max_reply_bytes < 1:
            raise ValueError(f"max_reply_bytes must be 1 or more, got {max_reply_bytes!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must be a non-empty model name")
        if base_url is not None and (
            not isinstance(base_url, str) or not base_url.startswith(("http://", "https://"))
        ):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
            raise ValueError("api_key must be non-empty text when given")
        self._timeout = _positive("timeout_seconds", timeout_seconds)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(
                f"max_attempts must be a whole number, 1 or more, got {max_attempts!r}"
            )
        self._max_attempts = max_attempts
        self._max_total = _positive("max_total_seconds", max_total_seconds)
        self._backoff_initial = _positive("backoff_initial_seconds", backoff_initial_seconds)
        self._backoff_max = _positive("backoff_max_seconds", backoff_max_seconds)
        if self._backoff_max < self._backoff_initial:
            raise ValueError(
                f"backoff_max_seconds ({backoff_max_seconds}) must be at least "
                f"backoff_initial_seconds ({backoff_initial_seconds})"
            )
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not 0 <= temperature <= 2
        ):
            raise ValueError(f"temperature must be a number from 0 to 2, got {temperature!r}")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ValueError("extra_body must be a mapping of request body fields")
        body: dict[str, object] = dict(extra_body or {})
        clash = {"model", "messages", "tools", "stream"} & set(body)
        if clash:
            raise ValueError(f"extra_body may not set {sorted(clash)}; the adapter sets them")
        if temperature is not None:
            body["temperature"] = temperature
        self._extra_body = body or None
        self.model = model
        self._sleep = sleep
        self._clock = clock
        if client is not None:
            if base_url is not None or api_key is not None:
                raise ValueError("give either client or base_url/api_key, not both")
            self._owns_client = False
            self._client = client.with_options(max_retries=0)
            self._api_key: str | None = client.api_key
            self._shown_url = self._mask_secrets(None)
            return
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None and base_url is None and not os.environ.get("OPENAI_BASE_URL"):
            raise ValueError(
                "api_key is missing: pass api_key or set OPENAI_API_KEY (a local server "
                "given by base_url needs none)"
            )
        if key is not None and _UNSENDABLE_KEY.search(key):
            # httpx would refuse the header quoting the key whole, past any scrubbing (D402).
            named = "api_key" if api_key else "OPENAI_API_KEY"
            raise ValueError(
                f"{named} holds a space, a control character or a character outside "
                "latin-1 (a trailing newline from a file?): an HTTP header cannot carry it"
            )
        self._api_key = key
        self._owns_client = True
        self._client = openai.AsyncOpenAI(
            api_key=key or _LOCAL_API_KEY,
            base_url=base_url,
            timeout=self._timeout,
            max_retries=0,  # tenacity here is the only retry layer
            # A reply body is read up to max_reply_bytes, never more (docs/CONFIGURATION.md).
            http_client=openai.DefaultAsyncHttpxClient(
                timeout=self._timeout, transport=_BoundedTransport(max_reply_bytes)
            ),
        )
        self._shown_url = self._mask_secrets(base_url)

    def _mask_secrets(self, given_url: str | None) -> str:
        """Register the API key and the base URL's secret parts for every scrub (D402);
        the base URL as errors name it. The path segments it masks that are too short
        to register are masked in this adapter's own messages (``_scrubbed``)."""
        if self._api_key:
            mask_everywhere(self._api_key)
        if given_url is not None:
            mask_url_everywhere(given_url)
        raw = str(self._client.base_url)
        shown = mask_url_everywhere(raw)
        masked = zip(urlsplit(raw).path.split("/"), urlsplit(shown).path.split("/"), strict=False)
        self._shown_secrets = tuple(
            segment for segment, seen in masked if segment != seen and len(segment) >= 4
        )
        return shown

    @property
    def base_url(self) -> str:
        """The endpoint requests go to (errors name it as ``shown_url`` shows it, D402)."""
        return str(self._client.base_url)

    async def aclose(self) -> None:
        """Close the HTTP client this adapter built (an injected client is left open)."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> OpenAICompatibleLLM:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def complete(self, request: LLMRequest) -> LLMReply:
        """Ask the model once (with retries, see the module docstring).

        Raises ``PermanentPortError`` when the server refuses, the retries run out,
        or the reply is not a chat completion; the message names the status and
        the server's message.
        """
        call = self._call(request)
        completion = await self._with_retries(lambda timeout: self._create(call, timeout))
        try:
            return _reply(completion)
        except _MalformedReplyError as error:
            raise PermanentPortError(
                self._scrubbed(f"the model server's reply is malformed: {error}")
            ) from None

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        """Ask the model once and yield its reply as it is written (``StreamingLLM``).

        Text deltas, tool-call deltas by index, then one ``ReplyFinished``. Opening
        the stream is retried as ``complete`` is, up to the first chunk; after it a
        failure is raised at once: ``PermanentPortError`` or ``StreamBrokenError``
        (see the module docstring). Closing the iterator early closes the response.
        """
        call = self._call(request)
        opened = await self._with_retries(lambda timeout: self._open(call, timeout))
        reader = opened.reader
        try:
            for item in opened.first:
                yield item
            while not reader.ended:
                try:
                    items = await reader.next_items(opened.chunks)
                except Exception as error:
                    broken = self._broken(error, reader.received)
                    if broken is error:
                        raise
                    raise broken from error
                for item in items:
                    yield item
        finally:
            await opened.chunks.close()

    def _call(self, request: LLMRequest) -> _Call:
        """The request's chat-completions parameters, shared by ``complete`` and ``stream``."""
        return _Call(
            model=request.model or self.model,
            messages=[_message_param(m, i) for i, m in enumerate(request.messages)],
            # An empty "tools" list is refused by OpenAI: the field is left out instead.
            tools=[_tool_param(tool) for tool in request.tools] or openai.omit,
            # The output cap under its current name (``max_tokens`` is deprecated and
            # refused by OpenAI's reasoning models); llama-server, vLLM take it too.
            max_completion_tokens=openai.omit
            if request.max_output_tokens is None
            else request.max_output_tokens,
        )

    async def _create(self, call: _Call, timeout: float) -> ChatCompletion:
        return await self._client.chat.completions.create(
            model=call.model,
            messages=call.messages,
            tools=call.tools,
            max_completion_tokens=call.max_completion_tokens,
            extra_body=self._extra_body,
            timeout=timeout,
        )

    async def _open(self, call: _Call, timeout: float) -> _OpenedStream:
        """One attempt at a stream: the request, then its chunks up to the first item."""
        chunks = await self._client.chat.completions.create(
            model=call.model,
            messages=call.messages,
            tools=call.tools,
            max_completion_tokens=call.max_completion_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=self._extra_body,
            timeout=timeout,
        )
        try:
            kind = chunks.response.headers.get("content-type", "")
            if kind.startswith("application/json"):
                raise _MalformedReplyError(
                    f"a stream was asked for and the answer is {kind}, not text/event-stream"
                )
            reader = _ChunkReader()
            first = await reader.next_items(chunks)
        except BaseException:
            await chunks.close()
            raise
        return _OpenedStream(chunks, reader, first)

    async def _with_retries(self, attempt: Callable[[float], Awaitable[_T]]) -> _T:
        """``attempt(timeout)`` under the retry policy (module docstring); its failure as a
        ``PermanentPortError`` naming the status and the server's message."""
        start = self._clock()
        # Exponential, plus up to one initial wait of jitter, capped (module docstring).
        backoff = wait_exponential(
            multiplier=self._backoff_initial, max=self._backoff_max
        ) + wait_random(0, self._backoff_initial)
        gave_up = ""

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            asked = _server_wait(error) if error else None
            return asked if asked is not None else min(backoff(state), self._backoff_max)

        def stop(state: RetryCallState) -> bool:
            nonlocal gave_up
            if state.attempt_number >= self._max_attempts:
                gave_up = f"gave up after {state.attempt_number} attempt(s)"
                return True
            left = self._max_total - (self._clock() - start)
            if state.upcoming_sleep >= left:
                gave_up = (
                    f"gave up after {state.attempt_number} attempt(s): the next wait of "
                    f"{state.upcoming_sleep:.3g} s would pass the {self._max_total:g} s budget"
                )
                return True
            return False

        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, Exception):  # one line on the retries logger (retry_notices.py)
                failure = self._scrubbed(
                    failure_text(type(error).__name__, self._what(error) or error)
                )
                attempt = state.attempt_number
                notice(retry_line(failure, attempt, self._max_attempts, state.upcoming_sleep))
            trace.get_current_span().add_event(
                RETRY_EVENT,
                {
                    "aptix.llm.attempt": state.attempt_number,
                    "error.type": _error_type(error) if error else "unknown",
                    "aptix.llm.retry_wait_seconds": float(state.upcoming_sleep),
                },
            )

        attempts = 0
        try:
            async for retrying in AsyncRetrying(
                stop=stop,
                wait=wait,
                retry=retry_if_exception(_retryable),
                sleep=self._sleep,
                before_sleep=before_sleep,
                reraise=True,  # our own PermanentPortError below says why
            ):
                with retrying:
                    attempts += 1
                    left = self._max_total - (self._clock() - start)
                    return await attempt(max(min(self._timeout, left), 0.001))
        except Exception as error:
            failure = self._failure(error, gave_up or f"attempt {attempts}; not retryable")
            if failure is error:
                raise
            raise failure from error
        raise AssertionError(f"unreachable: {attempts} attempts ended without an outcome")

    def _failure(self, error: Exception, when: str) -> Exception:
        """``error`` of a request that is not tried again, ``when`` saying why (or where).

        A failure of the model server is a ``PermanentPortError`` naming it; any other
        exception (not the server's doing) is given back as it is.
        """
        too_large = _too_large(error)
        if too_large is not None:
            return PermanentPortError(str(too_large))
        what = (
            f"the model server's reply is malformed: {error}"
            if isinstance(error, _MalformedReplyError)
            else self._what(error)
        )
        if what is None:
            if not isinstance(error, openai.OpenAIError | ValueError):
                return error
            # A 2xx body that is not JSON (ValueError) or fails the SDK's checks.
            what = f"the model server's reply is malformed: {type(error).__name__}: {error}"
        return PermanentPortError(self._scrubbed(f"{what[: _MESSAGE_LIMIT * 2]} ({when})"))

    def _what(self, error: Exception) -> str | None:
        """What went wrong, in words, for the failures a retry might fix; else ``None``."""
        if isinstance(error, openai.APIStatusError):
            return (
                f"the model server answered {_status_text(error.status_code)}: "
                f"{_server_message(error)[:_MESSAGE_LIMIT]}"
            )
        if isinstance(error, openai.APITimeoutError):
            return f"the model server at {self._shown_url} did not answer in time"
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__ or error
            return f"could not reach the model server at {self._shown_url}: {cause}"
        if isinstance(error, openai.APIError) and _error_event(error):
            message = error.message[:_MESSAGE_LIMIT]
            return f"the model server sent an error in its stream: {message}"
        if isinstance(error, _StreamEndedEarlyError):
            return f"the model server's stream is incomplete: {error}"
        return None

    def _broken(self, error: Exception, received: int) -> Exception:
        """``error`` after a stream's first chunk: not retried here (D257).

        Another request may succeed (``_retryable``): ``StreamBrokenError``, which the
        engine retries while no text has reached the client; else ``PermanentPortError``.
        """
        where = f"after {received} chunk(s) of the stream; not retried"
        failure = self._failure(error, where)
        if failure is error or not _retryable(error):
            return failure
        if isinstance(error, openai.APIConnectionError) and not isinstance(
            error, openai.APITimeoutError
        ):
            cause = error.__cause__ or error
            what = f"the connection to the model server at {self._shown_url} broke: {cause}"
            return StreamBrokenError(self._scrubbed(f"{what} ({where})"))
        return StreamBrokenError(str(failure))

    def _scrubbed(self, text: str) -> str:
        """``text`` with URL credentials, secret parameters, the base URL's secret parts
        and the API key masked (``scrub_urls``, D220, D402). The parameters go first, and
        a short key (``k``, a local server's placeholder) only as a word of its own, so
        masking it never breaks a parameter's name (``api-key``) and so its value."""
        text = scrub_urls(text)
        if self._api_key:
            text = scrub_secret(text, self._api_key)
        for segment in self._shown_secrets:
            text = scrub_secret(text, segment)
        return text
