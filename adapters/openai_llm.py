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
current OpenTelemetry span (the engine's ``chat {model}`` span).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, Final

import httpx2
import openai
from openai.types.chat import (
    ChatCompletion,
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
    ChatMessage,
    ChatRole,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    ScrubbingFilter,
    ToolCall,
    ToolDefinition,
    Usage,
    scrub_urls,
)

__all__ = ["DEFAULT_MAX_REPLY_BYTES", "RETRY_EVENT", "OpenAICompatibleLLM"]

RETRY_EVENT: Final = "aptix.llm.retry"
"""The span event added before each retry's wait."""

_LOCAL_API_KEY: Final = "not-needed"
"""Sent when no key is configured: local servers ignore it, the SDK needs one."""

_MESSAGE_LIMIT: Final = 500
"""How much of a server's error message an error repeats."""

for _name in ("httpx", "httpx2", "openai", "openai._base_client"):
    # These log each request's full URL: a base_url's credentials must not reach a log (D220).
    logging.getLogger(_name).addFilter(ScrubbingFilter())


DEFAULT_MAX_REPLY_BYTES: Final = 16 * 1024 * 1024
"""The largest HTTP response body the adapter reads (``max_reply_bytes``)."""


class _ReplyTooLargeError(Exception):
    """The server's response body passed ``max_reply_bytes``; reading stopped there."""


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
    """
    if _too_large(error) is not None:
        return False
    if isinstance(error, openai.APIStatusError):
        return error.status_code in (408, 429) or error.status_code >= 500
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


def _message_param(message: ChatMessage, index: int) -> ChatCompletionMessageParam:
    """One transcript message as a chat-completions message."""
    if message.role is ChatRole.SYSTEM:
        return {"role": "system", "content": message.content}
    if message.role is ChatRole.USER:
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
    usage = None
    raw_usage = getattr(completion, "usage", None)
    if raw_usage is not None:
        prompt = _count(getattr(raw_usage, "prompt_tokens", None), "usage.prompt_tokens")
        output = _count(getattr(raw_usage, "completion_tokens", None), "usage.completion_tokens")
        total = getattr(raw_usage, "total_tokens", None)
        usage = Usage(
            input_tokens=prompt,
            output_tokens=output,
            total_tokens=prompt + output if total is None else _count(total, "usage.total_tokens"),
        )
    finish = getattr(choice, "finish_reason", None)
    return LLMReply(
        text=text,
        tool_calls=calls,
        usage=usage,
        model=getattr(completion, "model", None) or None,
        response_id=getattr(completion, "id", None) or None,
        finish_reason=finish if isinstance(finish, str) else None,
    )


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be more than 0 seconds, got {value!r}")
    return float(value)


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
            return
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None and base_url is None and not os.environ.get("OPENAI_BASE_URL"):
            raise ValueError(
                "api_key is missing: pass api_key or set OPENAI_API_KEY (a local server "
                "given by base_url needs none)"
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

    @property
    def base_url(self) -> str:
        """The endpoint requests go to."""
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
        messages = [_message_param(m, i) for i, m in enumerate(request.messages)]
        tools = [_tool_param(tool) for tool in request.tools]
        model = request.model or self.model
        try:
            completion = await self._create_with_retries(model, messages, tools)
        except Exception as error:  # the bound's error, raised as is or wrapped by the SDK
            too_large = _too_large(error)
            if too_large is None:
                raise
            raise PermanentPortError(str(too_large)) from None
        try:
            return _reply(completion)
        except _MalformedReplyError as error:
            raise PermanentPortError(
                self._scrubbed(f"the model server's reply is malformed: {error}")
            ) from None

    async def _create(
        self,
        model: str,
        messages: list[ChatCompletionMessageParam],
        tools: list[ChatCompletionToolParam],
        timeout: float,
    ) -> ChatCompletion:
        # An empty "tools" list is refused by OpenAI: leave the field out instead.
        if tools:
            return await self._client.chat.completions.create(
                model=model,
                messages=messages,
                tools=tools,
                extra_body=self._extra_body,
                timeout=timeout,
            )
        return await self._client.chat.completions.create(
            model=model, messages=messages, extra_body=self._extra_body, timeout=timeout
        )

    async def _create_with_retries(
        self,
        model: str,
        messages: list[ChatCompletionMessageParam],
        tools: list[ChatCompletionToolParam],
    ) -> ChatCompletion:
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
            async for attempt in AsyncRetrying(
                stop=stop,
                wait=wait,
                retry=retry_if_exception(_retryable),
                sleep=self._sleep,
                before_sleep=before_sleep,
                reraise=True,  # our own PermanentPortError below says why
            ):
                with attempt:
                    attempts += 1
                    left = self._max_total - (self._clock() - start)
                    timeout = max(min(self._timeout, left), 0.001)
                    return await self._create(model, messages, tools, timeout)
        except openai.APIStatusError as error:
            what = (
                f"the model server answered {_status_text(error.status_code)}: "
                f"{_server_message(error)[:_MESSAGE_LIMIT]}"
            )
            raise PermanentPortError(self._scrubbed(self._why(what, gave_up, attempts))) from error
        except openai.APITimeoutError as error:
            what = f"the model server at {self.base_url} did not answer in time"
            raise PermanentPortError(self._scrubbed(self._why(what, gave_up, attempts))) from error
        except openai.APIConnectionError as error:
            cause = error.__cause__ or error
            what = f"could not reach the model server at {self.base_url}: {cause}"
            raise PermanentPortError(self._scrubbed(self._why(what, gave_up, attempts))) from error
        except (openai.OpenAIError, ValueError) as error:
            # A 2xx body that is not JSON (ValueError) or fails the SDK's validation.
            what = f"the model server's reply is malformed: {type(error).__name__}: {error}"
            raise PermanentPortError(self._scrubbed(what[: _MESSAGE_LIMIT * 2])) from error
        raise AssertionError(f"unreachable: {attempts} attempts ended without an outcome")

    @staticmethod
    def _why(what: str, gave_up: str, attempts: int) -> str:
        if gave_up:
            return f"{what} ({gave_up})"
        return f"{what} (attempt {attempts}; not retryable)"

    def _scrubbed(self, text: str) -> str:
        """``text`` with the API key and URL credentials masked (``scrub_urls``, D220)."""
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return scrub_urls(text)
