"""Time to the first text delta over HTTP: a real ``aptix serve`` on loopback (AGN-034 §4.7).

It starts one ``aptix serve`` worker (SQLite store, the scripted model streaming
4-character chunks, no delay before its first chunk, so the model's own
first-token time is nil), then sends Initial turns with ``"Stream": true``, one at
a time on one keep-alive connection, and times, as the client sees it, the first
``event: delta`` line and the end of the stream. A lean client (asyncio streams)
reads the bytes, so the figure is the server's, not an HTTP library's. For
reference it also times the same turn without the flag (the whole JSON answer).
Target: the first delta within 5 ms.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from http_load import KEY, PATH, serving, write_config

__all__ = ["first_delta_over_http"]

_END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked body


def _config(folder: Path, replies: int) -> Path:
    text = "The diff is small and every test passes. " * 5
    return write_config(folder, replies, {"replies": [{"text": text}] * replies, "chunk_size": 4})


def _request(host: str, port: int, stream: bool) -> bytes:
    body = json.dumps({"Instruction": "Review it.", "Stream": stream}).encode()
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _read_json(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.partition(b":")[2])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)


async def _measure(base: str, count: int) -> dict[str, list[float]]:
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    streamed, plain = _request(host, port, True), _request(host, port, False)
    seen: dict[str, list[float]] = {"first delta": [], "stream end": [], "json answer": []}
    try:
        for index in range(count + 10):
            started = time.perf_counter()
            writer.write(streamed)
            buffer, first = b"", 0.0
            while not buffer.endswith(_END):
                buffer += await reader.read(65536)
                if not first and b"event: delta" in buffer:
                    first = time.perf_counter() - started
            if not buffer.startswith(b"HTTP/1.1 200") or b"event: result" not in buffer:
                raise RuntimeError(f"not a stream: {buffer[:300]!r}")
            ended = time.perf_counter() - started
            started = time.perf_counter()
            writer.write(plain)
            await _read_json(reader)
            answered = time.perf_counter() - started
            if index >= 10:  # the first turns warm up
                seen["first delta"].append(first * 1e3)
                seen["stream end"].append(ended * 1e3)
                seen["json answer"].append(answered * 1e3)
    finally:
        writer.close()
        await writer.wait_closed()
    return seen


def first_delta_over_http(count: int = 100) -> dict[str, dict[str, float]]:
    """ms, min / median / p95, of the first delta, the stream's end and the JSON answer."""
    with tempfile.TemporaryDirectory() as folder:
        config = _config(Path(folder), 2 * (count + 10))
        with serving(config) as (base, _):
            seen = asyncio.run(_measure(base, count))
    figures: dict[str, dict[str, float]] = {}
    for name, values in seen.items():
        ordered = sorted(values)
        figures[name] = {
            "min ms": ordered[0],
            "median ms": statistics.median(ordered),
            "p95 ms": ordered[int(len(ordered) * 0.95) - 1],
        }
    return figures
