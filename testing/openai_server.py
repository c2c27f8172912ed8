"""A real HTTP server on 127.0.0.1 that speaks OpenAI's chat-completions protocol.

Tests point ``OpenAICompatibleLLM`` (or ``aptix serve`` configured with it) at
``server.base_url`` and the official ``openai`` SDK talks to it over a real socket,
so the adapter's request mapping, reply mapping and fault handling are tested on
the wire, the way a vLLM, Ollama or llama.cpp server would answer them.

``POST /v1/chat/completions`` answers from a **script**: a list of entries, played
in order, one per request. Each entry is a dict:

- a reply (status 200, a ``chat.completion`` object):
  ``{"text": "hello"}`` and/or
  ``{"tool_calls": [{"id": "call_1", "name": "read_file", "arguments": {...}}]}``
  (``arguments`` as an object or as JSON text), with optional ``"usage":
  {"prompt_tokens": 10, "completion_tokens": 5}`` (``total_tokens`` defaults to
  their sum), ``"model"`` (default: the request's model), ``"id"`` (default
  ``chatcmpl-<n>``) and ``"finish_reason"`` (default ``"tool_calls"`` when there
  are tool calls, else ``"stop"``);
- a fault: ``{"status": 429, "error": "Rate limit reached", "headers":
  {"Retry-After": "1"}}`` answers that status with an OpenAI-style error body
  ``{"error": {"message", "type", "code"}}`` (``"error"`` may also be a whole
  object, used as the body's ``error`` as is);
- a raw body: ``{"raw": "not json", "status": 200, "content_type":
  "application/json"}`` sends exactly that text; ``{"json": {...}}`` sends that
  JSON object (e.g. a completion with no ``choices``);
- ``{"disconnect": true}`` closes the connection without answering.

A request with ``"stream": true`` gets a reply entry as a real stream would come:
status 200, ``text/event-stream``, ``Transfer-Encoding: chunked``, one HTTP chunk per
server-sent event (``data: {chunk json}\n\n``), ending with ``data: [DONE]``. The
``chat.completion.chunk`` objects are OpenAI's: a first delta with the role (and
``content: ""`` when the reply has text), the text in pieces of ``"chunk_size"``
characters (default 4), each tool call opened by a delta with its index, id and
name, its arguments in later deltas of ``"chunk_size"`` characters (``"interleave":
true`` alternates the calls' deltas, as parallel calls may come), a delta with the
finish reason, and, when the request asks ``stream_options.include_usage`` and the
entry has ``"usage"``, a last chunk with no choices and the usage (the other chunks
then carry ``"usage": null``). A reply entry may add:

- ``"chunk_delay": seconds`` between events;
- ``"chunks": [...]`` — these chunk objects (or raw ``data`` text) instead, as
  given, then ``[DONE]`` unless ``"done": false``;
- ``"stream_fault": {"after": n, "kind": ...}`` — after ``n`` events, instead of
  the rest: ``"disconnect"`` drops the connection in the middle of the chunked
  body; ``"error"`` sends an error event ``data: {"error": {"message", "type",
  "code"}}`` (``"message"``, ``"type"`` default ``"Internal server error"``,
  ``"server_error"``) and ends the body; ``"end"`` ends the body cleanly with no
  finish reason and no ``[DONE]``.

``server.abandoned`` lists the numbers (1-based, as in ``requests``) of streamed
requests whose client went away before the stream's end; ``wait_abandoned()``
waits for one. Faults before the first chunk are the entries above: a status
(500, 429, …) or ``{"disconnect": true}``.

Any entry may add ``"delay": seconds`` (wait before answering, e.g. longer than
the client's timeout: a slow model) and ``"headers"``. When the script has run out the server
answers 400 with an error saying so (400, so no client retries it).

Instead of a script, ``respond`` may answer each request: a function of the request's
parsed JSON body that returns the entry to play (any entry above, ``"delay"`` included).
Use it when the answer depends on the request rather than on its place in line: several
turns at once, or a turn whose calls may be sent again (a client that retries, a worker
that died mid-call), each get the reply their own messages call for. Other paths
answer 404 in the same error shape. ``GET /v1/models`` lists one model,
``"fake-model"``.

``server.requests`` holds every request received (method, path, lower-cased
headers, parsed JSON body, arrival time), in order; ``server.add(*entries)`` appends to the
script while it runs. The server runs in a daemon thread and stops when the
``with`` block ends: delayed answers are cut short then, so it never outlives
its test.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAIServer", "RecordedRequest", "ScriptEntry", "fake_openai_server"]

ScriptEntry = Mapping[str, Any]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    """The parsed JSON body, or the raw text when it was not JSON (``None`` when empty)."""
    received_at: float
    """``time.monotonic()`` when the request arrived."""


def _error_body(status: int, error: object) -> dict[str, Any]:
    if isinstance(error, Mapping):
        return {"error": dict(error)}
    return {
        "error": {
            "message": str(error),
            "type": _ERROR_TYPES.get(status, "server_error"),
            "param": None,
            "code": _ERROR_TYPES.get(status, "server_error"),
        }
    }


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"status {status}"


def _completion(entry: ScriptEntry, request_body: Any, number: int) -> dict[str, Any]:
    """A chat.completion object for a scripted reply."""
    calls = [
        {
            "id": call["id"],
            "type": "function",
            "function": {
                "name": call["name"],
                "arguments": call["arguments"]
                if isinstance(call.get("arguments"), str)
                else json.dumps(call.get("arguments", {})),
            },
        }
        for call in entry.get("tool_calls", [])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": entry.get("text")}
    if calls:
        message["tool_calls"] = calls
    requested_model = request_body.get("model") if isinstance(request_body, dict) else None
    completion: dict[str, Any] = {
        "id": entry.get("id", f"chatcmpl-{number}"),
        "object": "chat.completion",
        "created": 1_700_000_000 + number,
        "model": entry.get("model", requested_model or "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": entry.get("finish_reason", "tool_calls" if calls else "stop"),
                "logprobs": None,
            }
        ],
    }
    if "usage" in entry:
        usage = dict(entry["usage"])
        usage.setdefault(
            "total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        )
        completion["usage"] = usage
    return completion


def _pieces(text: str, size: int) -> list[str]:
    return [text[at : at + size] for at in range(0, len(text), size)]


def _arguments(call: Mapping[str, Any]) -> str:
    arguments = call.get("arguments", {})
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _interleaved(lists: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One item of each list in turn, until all are used up."""
    merged: list[dict[str, Any]] = []
    for position in range(max((len(items) for items in lists), default=0)):
        merged.extend(items[position] for items in lists if position < len(items))
    return merged


def _stream_events(entry: ScriptEntry, request_body: Any, number: int) -> list[str]:
    """The ``data`` of each server-sent event of a streamed reply (module docstring)."""
    if "chunks" in entry:
        given = [c if isinstance(c, str) else json.dumps(c) for c in entry["chunks"]]
        return [*given, "[DONE]"] if entry.get("done", True) else given
    body = request_body if isinstance(request_body, dict) else {}
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    completion = _completion(entry, body, number)
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "system_fingerprint": None,
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return json.dumps({**base, "choices": [choice]})

    size = int(entry.get("chunk_size", 4))
    text = entry.get("text")
    calls = list(entry.get("tool_calls", []))
    events = [chunk({"role": "assistant", "content": "" if text is not None else None})]
    events.extend(chunk({"content": piece}) for piece in _pieces(text or "", size))
    per_call: list[list[dict[str, Any]]] = []
    for index, call in enumerate(calls):
        opening = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        rest = [
            {"index": index, "function": {"arguments": piece}}
            for piece in _pieces(_arguments(call), size)
        ]
        per_call.append([opening, *rest])
    if entry.get("interleave"):
        ordered = _interleaved(per_call)
    else:
        ordered = [delta for deltas in per_call for delta in deltas]
    events.extend(chunk({"tool_calls": [delta]}) for delta in ordered)
    events.append(chunk({}, completion["choices"][0]["finish_reason"]))
    if include_usage and "usage" in completion:
        events.append(json.dumps({**base, "choices": [], "usage": completion["usage"]}))
    events.append("[DONE]")
    return events


class _QuietServer(ThreadingHTTPServer):
    """A client that resets its connection (it stopped reading a stream) is no error here."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOpenAIServer:
    """The running server: its ``base_url``, the ``requests`` it received, its script."""

    def __init__(
        self,
        script: Sequence[ScriptEntry],
        respond: Callable[[Any], ScriptEntry] | None = None,
    ) -> None:
        self._script: list[ScriptEntry] = [dict(entry) for entry in script]
        self._respond = respond
        self._next = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._gone = threading.Condition(self._lock)
        self.requests: list[RecordedRequest] = []
        self.abandoned: list[int] = []
        """Numbers of the streamed requests whose client went away before the end."""
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:<port>/v1``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def remaining(self) -> int:
        """Script entries not yet played."""
        with self._lock:
            return len(self._script) - self._next

    def add(self, *entries: ScriptEntry) -> None:
        """Append entries to the script."""
        with self._lock:
            self._script.extend(dict(entry) for entry in entries)

    def completions(self) -> list[RecordedRequest]:
        """The chat-completions requests received, in order."""
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self.requests.append(request)
            return len(self.requests)

    def _take(self, body: Any) -> ScriptEntry | None:
        if self._respond is not None:
            return self._respond(body)
        with self._lock:
            if self._next >= len(self._script):
                return None
            entry = self._script[self._next]
            self._next += 1
            return entry

    def _wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def _abandon(self, number: int) -> None:
        with self._gone:
            self.abandoned.append(number)
            self._gone.notify_all()

    def wait_abandoned(self, timeout: float = 5.0) -> bool:
        """Wait until a client has left a stream before its end; whether one has."""
        with self._gone:
            return self._gone.wait_for(lambda: bool(self.abandoned), timeout)

    def start(self) -> None:
        """Start serving in a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, cut delayed answers short, close the socket."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``server.requests`` instead."""

        def _send(
            self, status: int, body: bytes, content_type: str, headers: Mapping[str, Any]
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, str(value))
            self.end_headers()
            try:
                self.wfile.write(body)
                self.wfile.flush()
            except OSError:  # the client gave up (its timeout): nothing to answer
                self.close_connection = True

        def _client_gone(self) -> bool:
            """Whether the client has closed its side of the connection."""
            connection = self.connection
            readable, _, _ = select.select([connection], [], [], 0)
            if not readable:
                return False
            try:
                peeked: bytes = connection.recv(1, socket.MSG_PEEK)
            except OSError:
                return True
            return peeked == b""

        def _send_stream(
            self, entry: ScriptEntry, request_body: Any, number: int, headers: Mapping[str, Any]
        ) -> None:
            """A reply as server-sent events, one HTTP chunk each (module docstring)."""
            events = _stream_events(entry, request_body, number)
            fault: Mapping[str, Any] = entry.get("stream_fault") or {}
            if fault:
                events = events[: int(fault.get("after", 0))]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
            for name, value in headers.items():
                self.send_header(name, str(value))
            self.end_headers()
            delay = float(entry.get("chunk_delay", 0))
            kind = fault.get("kind")
            if kind == "error":
                error = {
                    "message": fault.get("message", "Internal server error"),
                    "type": fault.get("type", "server_error"),
                    "param": None,
                    "code": fault.get("code"),
                }
                events.append(json.dumps({"error": error}))
            try:
                for position, data in enumerate(events):
                    if position and delay:
                        server._wait(delay)
                    if self._client_gone():
                        raise ConnectionResetError("the client went away")
                    payload = f"data: {data}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
                    self.wfile.flush()
                if kind == "disconnect":  # the chunked body is never finished
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True
                server._abandon(number)

        def _send_json(self, status: int, data: object, headers: Mapping[str, Any]) -> None:
            self._send(status, json.dumps(data).encode(), "application/json", headers)

        def _read_body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return None
            text = raw.decode("utf-8", errors="replace")
            try:
                return json.loads(text)
            except ValueError:
                return text

        def _recorded(self, body: Any) -> int:
            headers = {name.lower(): value for name, value in self.headers.items()}
            received = RecordedRequest(self.command, self.path, headers, body, time.monotonic())
            return server._record(received)

        def do_GET(self) -> None:
            self._recorded(None)
            if self.path == "/v1/models":
                model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
                self._send_json(200, {"object": "list", "data": [model]}, {})
            else:
                self._send_json(404, _error_body(404, f"no route {self.path}"), {})

        def do_POST(self) -> None:
            body = self._read_body()
            number = self._recorded(body)
            if self.path != "/v1/chat/completions":
                self._send_json(404, _error_body(404, f"no route {self.path}"), {})
                return
            entry = server._take(body)
            if entry is None:
                message = "fake server: the script has no more entries"
                self._send_json(400, _error_body(400, message), {})
                return
            if entry.get("delay"):
                server._wait(float(entry["delay"]))
            headers: Mapping[str, Any] = entry.get("headers", {})
            if entry.get("disconnect"):
                self.close_connection = True
                return
            status = int(entry.get("status", 200))
            if "raw" in entry:
                content_type = entry.get("content_type", "application/json")
                self._send(status, str(entry["raw"]).encode(), content_type, headers)
            elif "json" in entry:
                self._send_json(status, entry["json"], headers)
            elif status >= 400 or "error" in entry:
                error = entry.get("error", _phrase(status))
                self._send_json(status, _error_body(status, error), headers)
            elif isinstance(body, dict) and body.get("stream") is True:
                self._send_stream(entry, body, number, headers)
            else:
                self._send_json(status, _completion(entry, body, number), headers)

    return Handler


@contextmanager
def fake_openai_server(
    script: Sequence[ScriptEntry] = (), *, respond: Callable[[Any], ScriptEntry] | None = None
) -> Iterator[FakeOpenAIServer]:
    """A running fake server for the ``with`` block; see the module docstring."""
    server = FakeOpenAIServer(script, respond)
    server.start()
    try:
        yield server
    finally:
        server.stop()
