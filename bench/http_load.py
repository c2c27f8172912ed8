"""One ``aptix serve`` worker under a bounded loopback load: throughput, p50 and p99.

``make bench-http`` runs it. It starts a real ``aptix serve`` (one uvicorn worker on
127.0.0.1 at a free port, a SQLite store in a temporary folder, the scripted model),
then, at each concurrency level (default 1, 50 and 200), sends a fixed number of
Initial turns (``POST /v1/agent/execute``) from ``concurrency`` senders of one
event loop, each on its own keep-alive connection, and prints turns per second
and the p50 / p99 latency of a request as the client sees it. A level stops
early when its time budget runs out; the server is stopped afterwards either
way. Every answer must be a 200.

    python bench/http_load.py [--requests 2000] [--levels 1,50,200] [--seconds 60]
                              [--client raw|httpx] [--json FILE] [--server-arg ARG ...]

``make bench`` runs the ``http`` section (``http_figures``): one server, one level
of 50 concurrent clients, a few rounds of Initial turns, and the median of the
rounds beside its target (the best round beside it), with the load average of the
machine at the time (other work on the machine lowers turns/s and raises p99 far
more than it changes the server's CPU per turn).

The client shares the machine with the server, so it must cost little: the
default ``raw`` client writes the request bytes and reads the answer with asyncio
streams (tens of µs a request). ``--client httpx`` uses one ``httpx.AsyncClient``
per sender instead, which costs 1.5 to 4 ms of CPU a request, more than the turn it
measures: use it to check the raw client, not to measure the server.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

APTIX = Path(sys.executable).parent / "aptix"
KEY = "bench-http-key"
PATH = "/v1/agent/execute"
BODY = json.dumps({"Instruction": "Say hello."}).encode()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def write_config(folder: Path, replies: int, script: dict[str, Any] | None = None) -> Path:
    """A configuration: SQLite in ``folder``, a script of ``replies`` final answers (or
    ``script``), one key."""
    if script is None:
        script = {"replies": [{"text": f"Hello {n}."} for n in range(replies)]}
    (folder / "replies.json").write_text(json.dumps(script), encoding="utf-8")
    path = folder / "aptix.toml"
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    path.write_text(
        '[store]\nurl = "sqlite:bench.db"\n'
        '[model]\nkind = "scripted"\nscript = "replies.json"\n'
        f'[[auth.keys]]\norg = "bench"\nuser = "load"\nkey_sha256 = "{digest}"\n',
        encoding="utf-8",
    )
    return path


@contextmanager
def serving(config: Path, extra: Sequence[str] = ()) -> Iterator[tuple[str, int]]:
    """``aptix serve`` (one worker) on 127.0.0.1 at a free port; its base URL and process id.

    Stopped afterwards.
    """
    port = _free_port()
    log = config.parent / "serve.log"
    with log.open("wb") as out:
        loopback = ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        process = subprocess.Popen(
            [str(APTIX), "serve", "--config", str(config), *loopback, *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError("aptix serve stopped:\n" + log.read_text(errors="replace"))
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("no health in 30 s:\n" + log.read_text(errors="replace"))
            time.sleep(0.05)
        yield base, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) a process has used, from ``/proc``; ``None`` elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted values."""
    index = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


class _Connection:
    """One keep-alive HTTP/1.1 connection that POSTs the same request: a lean client.

    It writes the request bytes and reads the status line, the headers and
    ``Content-Length`` bytes of body, nothing more, so the load costs the
    machine far less than the server it measures (see the module docstring).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, request: bytes) -> tuple[int, bytes]:
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self._reader.readexactly(length)

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


def _request_bytes(host: str, port: int) -> bytes:
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY


async def _level(
    base: str, concurrency: int, requests: int, seconds: float, client: str = "raw"
) -> dict[str, Any]:
    """``requests`` Initial turns, ``concurrency`` at a time, within ``seconds``.

    Each of the ``concurrency`` senders holds one keep-alive connection: a lean
    ``_Connection`` (``client="raw"``) or an ``httpx.AsyncClient`` of its own
    (``client="httpx"``).
    """
    latencies: list[float] = []
    failures: list[str] = []
    remaining = requests
    deadline = time.perf_counter() + seconds
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = _request_bytes(host, port)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def take() -> bool:
        nonlocal remaining
        if remaining <= 0 or time.perf_counter() >= deadline:
            return False
        remaining -= 1
        return True

    def record(started: float, status: int, body: bytes) -> None:
        latencies.append(time.perf_counter() - started)
        if status != 200:
            failures.append(f"{status}: {body[:200]!r}")

    async def raw_sender() -> None:
        connection = await _Connection.open(host, port)
        try:
            while take():
                started = time.perf_counter()
                status, body = await connection.send(request)
                record(started, status, body)
        finally:
            await connection.close()

    async def httpx_sender() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as http:
            while take():
                started = time.perf_counter()
                response = await http.post(PATH, content=BODY, headers=headers)
                record(started, response.status_code, response.content)

    sender = raw_sender if client == "raw" else httpx_sender
    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed; first: {failures[0]}")
    ordered = sorted(latencies)
    return {
        "concurrency": concurrency,
        "requests": len(ordered),
        "seconds": round(elapsed, 3),
        "turns_per_s": round(len(ordered) / elapsed, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(_percentile(ordered, 0.99) * 1000, 1),
        "complete": len(ordered) == requests,
    }


def run(
    levels: Sequence[int],
    requests: int,
    seconds: float,
    *,
    client: str = "raw",
    extra: Sequence[str] = (),
    warmup: int = 50,
) -> list[dict[str, Any]]:
    """Start a server, warm it up (``warmup`` turns), load it at each level; the rows,
    one per level."""
    with tempfile.TemporaryDirectory(prefix="aptix-http-bench-") as folder:
        config = write_config(Path(folder), replies=warmup + requests * len(levels) + 10)
        with serving(config, extra) as (base, pid):
            asyncio.run(_level(base, 5, warmup, seconds, client))
            rows = []
            for level in levels:
                before = cpu_seconds(pid)
                row = asyncio.run(_level(base, level, requests, seconds, client))
                after = cpu_seconds(pid)
                row["server_cpu_ms_per_turn"] = (
                    None
                    if before is None or after is None
                    else round((after - before) * 1000 / row["requests"], 2)
                )
                rows.append(row)
            return rows


HTTP_TARGETS = {"turns_per_s": 600.0, "p99_ms": 150.0, "server_cpu_ms_per_turn": 1.2}
"""The targets of one worker at 50 concurrent clients (docs/PERFORMANCE.md): at least
600 turns a second, a p99 of at most 150 ms, at most 1.2 ms of server CPU a turn."""

_FIGURES = {  # key: label, how it compares with its target, format
    "turns_per_s": ("turns/s", "≥", ".0f"),
    "p50_ms": ("p50 ms", "", ".1f"),
    "p99_ms": ("p99 ms", "≤", ".1f"),
    "server_cpu_ms_per_turn": ("server CPU ms/turn", "≤", ".2f"),
}


def http_figures(
    rounds: int = 3, turns: int = 1500, concurrency: int = 50, seconds: float = 60
) -> dict[str, Any]:
    """The ``http`` section of ``make bench``: one server, ``rounds`` rounds of ``turns``
    Initial turns from ``concurrency`` clients; each figure's median over the rounds
    and its best round (bench/README.md lists the keys)."""
    load = os.getloadavg()
    rows = run([concurrency] * rounds, turns, seconds, warmup=200)
    figures: dict[str, Any] = {
        "concurrency": concurrency,
        "turns_per_round": turns,
        "load_average": [round(value, 2) for value in load],
        "load_average_end": [round(value, 2) for value in os.getloadavg()],
        "targets": dict(HTTP_TARGETS),
        "complete": all(row["complete"] for row in rows),
        "rounds": rows,
    }
    for key, (_, sign, _) in _FIGURES.items():
        values = [row[key] for row in rows if row[key] is not None]
        median = round(statistics.median(values), 2) if values else None
        best = (max(values) if sign == "≥" else min(values)) if values else None
        figures[key], figures[f"{key}_best"] = median, best
    return figures


def print_http_figures(figures: dict[str, Any]) -> None:
    """The ``http`` figures as ``make bench`` prints them, each beside its target."""
    load = ", ".join(f"{value:.2f}" for value in figures["load_average"])
    print(
        f"one aptix serve worker, SQLite, scripted model, {figures['concurrency']} concurrent "
        f"clients on loopback: {len(figures['rounds'])} rounds of "
        f"{figures['turns_per_round']} Initial turns (median of the rounds, best beside it)"
    )
    print(f"  load average at the start {load} on {os.cpu_count()} CPUs")
    for key, (label, sign, spec) in _FIGURES.items():
        median, best = figures[key], figures[f"{key}_best"]
        if median is None:
            print(f"  {label:<20}{'n/a':>9}  (no /proc here)")
            continue
        line = f"  {label:<20}{median:>9{spec}}  (best {best:{spec}})"
        target = figures["targets"].get(key)
        if target is not None:
            ok = median >= target if sign == "≥" else median <= target
            line += f"  {'ok' if ok else 'MISSED'}  (target {sign} {target:g})"
        print(line)
    if not figures["complete"]:
        print("  (a round's time budget ran out before all its turns were sent)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=2000, help="Initial turns per level")
    parser.add_argument("--levels", default="1,50,200", help="concurrency levels, comma-separated")
    parser.add_argument("--seconds", type=float, default=60, help="time budget per level")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--client", choices=["raw", "httpx"], default="raw", help="the load's HTTP client"
    )
    parser.add_argument(
        "--server-arg", action="append", default=[], help="one more `aptix serve` argument"
    )
    args = parser.parse_args(argv)
    levels = [int(level) for level in args.levels.split(",")]
    rows = run(levels, args.requests, args.seconds, client=args.client, extra=args.server_arg)
    print(
        f"one `aptix serve` worker, SQLite, scripted model; {args.client} client, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{'concurrency':>11} {'turns':>6} {'turns/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'server CPU ms/turn':>18}"
    )
    for row in rows:
        mark = "" if row["complete"] else "  (time budget ran out)"
        cpu = row["server_cpu_ms_per_turn"]
        print(
            f"{row['concurrency']:>11} {row['requests']:>6} {row['turns_per_s']:>8.1f} "
            f"{row['p50_ms']:>7.1f} {row['p99_ms']:>7.1f} "
            f"{'n/a' if cpu is None else f'{cpu:.2f}':>18}{mark}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"http": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
