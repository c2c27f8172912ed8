"""Slow clients and slow turns over HTTP: ``[server] read_timeout_seconds`` closes a
connection whose request does not arrive in time (``adapters/http/protocol.py``); a turn
past its deadline is a 504.

A real uvicorn server, in a thread of this process (both of uvicorn's HTTP/1.1
parsers) or as ``aptix serve``, and raw sockets that send half a request. The read
timeout is 0.5 s; the tests wait up to 20 s for the close and assert only that it
came (and what was answered), never when.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from http_kit import ANA_KEY, ENV, aptix_serve, write_config
from server_thread import WAIT, server_thread

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import EXECUTE_PATH, create_app, http_status
from aptix_pipeline.adapters.http.protocol import (
    H11ReadTimeoutProtocol,
    HttpToolsReadTimeoutProtocol,
    ReadTimeoutProtocol,
)
from aptix_pipeline.contracts import AgentExecuteResponse, ErrorCode, InvokeError, InvokeResult

TIMEOUT_TABLE = "[server]\nread_timeout_seconds = 0.5\n"
PROTOCOLS = {"httptools": HttpToolsReadTimeoutProtocol, "h11": H11ReadTimeoutProtocol}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


@contextmanager
def _server_thread(config: Path, protocol: type) -> Iterator[int]:
    """The configured app under uvicorn with ``protocol``, in a thread; its port."""
    with server_thread(create_app(load_service_config(config)), http=protocol) as port:
        yield port


def _answer_and_close(port: int, sent: bytes) -> bytes:
    """Send ``sent`` and stop; everything the server writes until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        if sent:
            client.sendall(sent)
        received = b""
        while True:
            try:
                chunk = client.recv(65536)
            except TimeoutError:
                pytest.fail(f"the server kept the connection open; it sent {received!r}")
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk


HEAD = (
    f"POST {EXECUTE_PATH} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {ANA_KEY}\r\n"
    "Content-Type: application/json\r\n"
)
HALF_SENT = {
    "nothing": b"",
    "half-a-header": HEAD.encode()[:40],
    "headers-without-end": HEAD.encode(),
    "half-a-body": (HEAD + "Content-Length: 100\r\n\r\n").encode() + b'{"Instruction": "',
}


@pytest.mark.decision("D206", "D382")
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("sent", HALF_SENT)
def test_a_half_sent_request_is_closed_when_its_time_is_up(
    tmp_path: Path, protocol: str, sent: str
) -> None:
    config = write_config(tmp_path, [{"text": "never"}], more=TIMEOUT_TABLE)

    with _server_thread(config, PROTOCOLS[protocol]) as port:
        received = _answer_and_close(port, HALF_SENT[sent])

    assert received.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b"connection: close\r\n" in received
    body = json.loads(received.partition(b"\r\n\r\n")[2])
    assert body["Errors"][0]["Code"] == "request_timeout"  # the errors' one shape (D382)


@pytest.mark.decision("D206")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_whole_request_is_answered_and_the_next_one_gets_its_own_time(
    tmp_path: Path, protocol: str
) -> None:
    config = write_config(tmp_path, [{"text": "first"}, {"text": "second"}], more=TIMEOUT_TABLE)
    body = json.dumps({"Instruction": "hi"}).encode()
    request = (HEAD + f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    with (
        _server_thread(config, PROTOCOLS[protocol]) as port,
        socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client,
    ):
        client.sendall(request)
        first = client.recv(65536)
        time.sleep(0.7)  # past the read timeout, idle between requests: keep-alive's business
        client.sendall(request)
        second = client.recv(65536)

    assert first.startswith(b"HTTP/1.1 200 ")
    assert b'"PrimaryOutputText":"first"' in first
    assert second.startswith(b"HTTP/1.1 200 ")
    assert b'"PrimaryOutputText":"second"' in second


@pytest.mark.decision("D206", "D484")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_begun_before_the_last_ones_time_was_up_gets_all_of_its_own(
    tmp_path: Path, protocol: str
) -> None:
    """One timer per connection, re-armed lazily: the timer armed for the first request
    fires at that request's deadline, in the middle of the second, which still gets its
    whole second (D484)."""
    table = "[server]\nread_timeout_seconds = 1.0\n"
    config = write_config(tmp_path, [{"text": "first"}, {"text": "second"}], more=table)
    body = json.dumps({"Instruction": "hi"}).encode()
    request = (HEAD + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    half = len(request) - 10

    with (
        _server_thread(config, PROTOCOLS[protocol]) as port,
        socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client,
    ):
        client.sendall(request)
        first = client.recv(65536)
        time.sleep(0.6)
        client.sendall(request[:half])  # the second request's time starts here
        time.sleep(0.6)  # past the first request's deadline, within the second's
        client.sendall(request[half:])
        second = client.recv(65536)

    assert first.startswith(b"HTTP/1.1 200 ")
    assert second.startswith(b"HTTP/1.1 200 ")
    assert b'"PrimaryOutputText":"second"' in second


@pytest.mark.decision("D206")
def test_aptix_serve_closes_a_half_sent_request(tmp_path: Path) -> None:
    config = write_config(tmp_path, [{"text": "never"}], more=TIMEOUT_TABLE)

    with aptix_serve(config, ENV) as (base, log):
        port = int(base.rsplit(":", 1)[1])
        received = _answer_and_close(port, HALF_SENT["half-a-body"])

    assert received.startswith(b"HTTP/1.1 408 ")
    assert "Exception in ASGI application" not in log.read_text(errors="replace")


def test_the_default_protocol_is_httptools_when_it_is_installed() -> None:
    assert ReadTimeoutProtocol is HttpToolsReadTimeoutProtocol


@pytest.mark.decision("D200")
def test_a_turn_past_its_deadline_is_a_504() -> None:
    result = InvokeResult[AgentExecuteResponse].failure(
        [InvokeError(code=ErrorCode.DEADLINE_EXCEEDED, message="m")]
    )
    assert http_status(result) == 504
