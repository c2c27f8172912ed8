"""Refused input stays cheap: a 1 MB nested body against a real ``aptix serve``, recording redacted.

It starts one ``aptix serve`` worker (SQLite store, the scripted model) with the
production recording setting, ``[recording] redact = true``, and a body the engine
refuses for its depth (``DESIGN/limits/json-depth``): ``{"Instruction": "x",
"Artifacts": [[[[…]]]]}``, nested to fill 1,000,000 bytes. Then, as the client sees it:

- **refused alone** — such bodies one after another: min and median ms each (the
  answer is a 400 naming the depth rule, and the turn's recording is written);
  ``cpu ms`` is the server's CPU per body (``/proc``);
- **ordinary turns** — Initial turns one after another on a keep-alive connection,
  idle, and again while two other clients send such bodies back to back: p50 and p99,
  and the p99 under the two clients divided by the idle p99. Idle and loaded blocks
  alternate, so machine noise hits both alike;
- **health** — ``GET /healthz`` while the two clients send: median and max ms (how
  long the event loop is held).

Targets: a refused body ≤ 50 ms (median); the p99 of ordinary turns under the two
clients ≤ 2 x idle. ``make bench`` runs it as its ``refused`` section;
``python bench/refused_http.py [--turns 300] [--refused 20] [--json FILE]`` alone.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from http_load import KEY, PATH, cpu_seconds, serving, write_config

__all__ = ["nested_body", "refused_figures"]

BODY_BYTES = 1_000_000
DEPTH_RULE = b"DESIGN/limits/json-depth"
ORDINARY = json.dumps({"Instruction": "Say hello."}).encode()


def nested_body(size: int = BODY_BYTES) -> bytes:
    """``{"Instruction":"x","Artifacts":[[[…]]]}``, nested to be ``size`` bytes long."""
    head, tail = b'{"Instruction":"x","Artifacts":', b"}"
    depth = (size - len(head) - len(tail)) // 2
    return head + b"[" * depth + b"]" * depth + tail + b" " * ((size - len(head) - 1) % 2)


def _post(host: str, port: int, body: bytes) -> bytes:
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _get(host: str, port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


class _Lean:
    """One keep-alive connection, blocking: writes a request, reads status, headers, body."""

    def __init__(self, host: str, port: int) -> None:
        self._socket = socket.create_connection((host, port))
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def _read_until(self, mark: bytes) -> bytes:
        while mark not in self._buffer:
            chunk = self._socket.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        head, _, self._buffer = self._buffer.partition(mark)
        return head

    def _read_exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            chunk = self._socket.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        body, self._buffer = self._buffer[:count], self._buffer[count:]
        return body

    def send(self, request: bytes) -> tuple[int, bytes]:
        """The status and body of the answer to ``request``."""
        self._socket.sendall(request)
        head = self._read_until(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), self._read_exactly(_length(head))

    def close(self) -> None:
        self._socket.close()


def _refused(answer: tuple[int, bytes]) -> None:
    status, body = answer
    if status != 400 or DEPTH_RULE not in body:
        raise RuntimeError(f"not refused for its depth: {status} {body[:300]!r}")


def _timed(connection: _Lean, request: bytes) -> tuple[float, tuple[int, bytes]]:
    started = time.perf_counter()
    answer = connection.send(request)
    return (time.perf_counter() - started) * 1e3, answer


class _Senders:
    """Clients sending the refused body back to back, each on its own connection, in
    threads of their own (blocking sockets: they hold no lock while they wait)."""

    def __init__(self, host: str, port: int, body: bytes, count: int) -> None:
        self._host, self._port, self._request = host, port, _post(host, port, body)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send) for _ in range(count)]
        self.sent = 0
        self.failure: BaseException | None = None

    def _send(self) -> None:
        connection = _Lean(self._host, self._port)
        try:
            while not self._stop.is_set():
                _refused(connection.send(self._request))
                self.sent += 1
        except BaseException as error:
            self.failure = error
        finally:
            connection.close()

    def __enter__(self) -> _Senders:
        for thread in self._threads:
            thread.start()
        time.sleep(0.3)  # both are sending
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
        if self.failure is not None:
            raise RuntimeError(f"a sender failed: {self.failure!r}")


def _turns(connection: _Lean, request: bytes, count: int) -> list[float]:
    taken = []
    for _ in range(count):
        elapsed, (status, body) = _timed(connection, request)
        if status != 200:
            raise RuntimeError(f"an ordinary turn failed: {status} {body[:300]!r}")
        taken.append(elapsed)
    return taken


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))]


def _measure(base: str, pid: int, turns: int, refused: int, body: bytes) -> dict[str, Any]:
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    ordinary, refusal = _post(host, port, ORDINARY), _post(host, port, body)
    health = _get(host, port, "/healthz")
    connection = _Lean(host, port)
    try:
        _turns(connection, ordinary, 30)  # warm up
        for _ in range(3):
            _refused(connection.send(refusal))
        before = cpu_seconds(pid)
        alone = []
        for _ in range(refused):
            elapsed, answer = _timed(connection, refusal)
            _refused(answer)
            alone.append(elapsed)
        after = cpu_seconds(pid)
        idle: list[float] = []
        loaded: list[float] = []
        healthy: list[float] = []
        sent = 0
        for _ in range(2):  # idle and loaded blocks alternate
            idle += _turns(connection, ordinary, turns // 2)
            with _Senders(host, port, body, 2) as senders:
                loaded += _turns(connection, ordinary, turns // 2)
                for _ in range(25):
                    elapsed, (status, _) = _timed(connection, health)
                    if status != 200:
                        raise RuntimeError(f"/healthz answered {status}")
                    healthy.append(elapsed)
            sent += senders.sent
    finally:
        connection.close()
    cpu = (after - before) / refused * 1e3 if before is not None and after is not None else None
    return {
        "body_bytes": len(body),
        "refused_min_ms": min(alone),
        "refused_median_ms": statistics.median(alone),
        "refused_cpu_ms": cpu,
        "idle_p50_ms": statistics.median(idle),
        "idle_p99_ms": _percentile(idle, 0.99),
        "loaded_p50_ms": statistics.median(loaded),
        "loaded_p99_ms": _percentile(loaded, 0.99),
        "p99_ratio": _percentile(loaded, 0.99) / _percentile(idle, 0.99),
        "health_median_ms": statistics.median(healthy),
        "health_max_ms": max(healthy),
        "bodies_sent_under_load": sent,
    }


def refused_figures(turns: int = 300, refused: int = 20) -> dict[str, Any]:
    """The figures of the module docstring, from one server."""
    with tempfile.TemporaryDirectory(prefix="aptix-refused-bench-") as folder:
        config = write_config(Path(folder), replies=2 * turns + 100)
        with config.open("a", encoding="utf-8") as more:
            more.write('[recording]\ndirectory = "recordings"\nredact = true\n')
        with serving(config) as (base, pid):
            figures = _measure(base, pid, turns, refused, nested_body())
        written = list((Path(folder) / "recordings").glob("*.json"))
        figures["recordings_written"] = len(written)
        figures["largest_recording_bytes"] = max(path.stat().st_size for path in written)
    return figures


def print_figures(figures: dict[str, Any]) -> None:
    """The figures as ``make bench`` prints them, with their targets."""

    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    cpu = figures["refused_cpu_ms"]
    print(
        f"refused {figures['body_bytes'] / 1e6:.0f} MB nested body, [recording] redact = true, "
        "one aptix serve worker on loopback (ms as the client sees it)"
    )
    median = figures["refused_median_ms"]
    print(
        f"  refused alone        min {figures['refused_min_ms']:.1f}, median {median:.1f}"
        + (f"; server CPU {cpu:.1f} per body" if cpu is not None else "")
        + f"  {mark(median <= 50)}  (target ≤ 50 ms)"
    )
    print(
        f"  ordinary turns       idle p50 {figures['idle_p50_ms']:.1f}, "
        f"p99 {figures['idle_p99_ms']:.1f}; under two clients sending such bodies "
        f"p50 {figures['loaded_p50_ms']:.1f}, p99 {figures['loaded_p99_ms']:.1f}"
    )
    ratio = figures["p99_ratio"]
    print(f"  p99 loaded / idle    {ratio:.2f}  {mark(ratio <= 2)}  (target ≤ 2 x)")
    print(
        f"  /healthz under them  median {figures['health_median_ms']:.1f}, "
        f"max {figures['health_max_ms']:.1f}  ({figures['bodies_sent_under_load']} bodies "
        f"sent meanwhile; {figures['recordings_written']} recordings written, the largest "
        f"{figures['largest_recording_bytes'] / 1024:.1f} KB)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run once, print, write ``--json`` when asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=300, help="ordinary turns, idle and loaded")
    parser.add_argument("--refused", type=int, default=20, help="refused bodies sent alone")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args(argv)
    figures = refused_figures(args.turns, args.refused)
    print_figures(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
