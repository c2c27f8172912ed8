"""Time to the first text delta over HTTP: a real ``aptix serve`` on loopback (AGN-034 §4.7).

It starts one ``aptix serve`` worker (SQLite store, the scripted model streaming
4-character chunks, no delay before its first chunk, so the model's own
first-token time is nil), then sends Initial turns with ``"Stream": true``, one at
a time on one keep-alive connection, and times, as the client sees it, the first
``event: delta`` line and the end of the stream. A lean client (asyncio streams)
reads the bytes, so the figure is the server's, not an HTTP library's. For
reference it also times the same turn without the flag (the whole JSON answer).
Target: the first delta within 5 ms.

``server_cpu_per_turn`` reads the server's own CPU time (``/proc``) over blocks of
the same turns, streamed (SSE) and not (JSON), the two kinds of block interleaved
with their order rotated from round to round: server CPU ms per turn, min and
median of the blocks, and their ratio. Target: an SSE turn ≤ 1.3 x a JSON turn
(on the medians).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from http_load import KEY, PATH, cpu_seconds, serving, write_config

__all__ = ["first_delta_over_http", "server_cpu_per_turn"]

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


async def _read_stream(reader: asyncio.StreamReader) -> bytes:
    buffer = b""
    while not buffer.endswith(_END):
        buffer += await reader.read(65536)
    return buffer


async def _cpu_blocks(base: str, pid: int, rounds: int, block: int) -> dict[str, list[float]]:
    """Server CPU ms per turn of each block of ``block`` turns, SSE and JSON interleaved."""
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    requests = {"sse": _request(host, port, True), "json": _request(host, port, False)}
    seen: dict[str, list[float]] = {"sse": [], "json": []}

    async def turn(kind: str) -> None:
        writer.write(requests[kind])
        if kind == "json":
            await _read_json(reader)
            return
        buffer = await _read_stream(reader)
        if not buffer.startswith(b"HTTP/1.1 200") or b"event: result" not in buffer:
            raise RuntimeError(f"not a stream: {buffer[:300]!r}")

    try:
        for _ in range(20):  # warm up
            await turn("sse")
            await turn("json")
        for index in range(rounds):
            for kind in ("sse", "json") if index % 2 == 0 else ("json", "sse"):
                before = cpu_seconds(pid)
                for _ in range(block):
                    await turn(kind)
                after = cpu_seconds(pid)
                if before is None or after is None:
                    raise RuntimeError("no /proc: the server's CPU cannot be read")
                seen[kind].append((after - before) * 1e3 / block)
    finally:
        writer.close()
        await writer.wait_closed()
    return seen


def server_cpu_per_turn(rounds: int = 8, block: int = 200) -> dict[str, float]:
    """Server CPU ms per turn, SSE and JSON, min and median of the blocks, and the ratios."""
    with tempfile.TemporaryDirectory() as folder:
        config = _config(Path(folder), 2 * (rounds * block + 20) + 10)
        with serving(config) as (base, pid):
            seen = asyncio.run(_cpu_blocks(base, pid, rounds, block))
    sse, plain = seen["sse"], seen["json"]
    return {
        "sse min ms": min(sse),
        "sse median ms": statistics.median(sse),
        "json min ms": min(plain),
        "json median ms": statistics.median(plain),
        "ratio min": min(sse) / min(plain),
        "ratio median": statistics.median(sse) / statistics.median(plain),
    }


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
