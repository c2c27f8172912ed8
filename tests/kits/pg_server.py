"""A throwaway PostgreSQL server for the tests: one cluster per test session, on loopback.

``postgres_server`` (session scope) runs ``initdb`` into a temporary directory and
starts ``postgres`` on 127.0.0.1 at a free port, with password authentication and
no Unix socket; it stops the server and deletes the directory at the end of the
session. The server also stops by itself if the test process dies (it gets SIGQUIT,
an immediate shutdown, through ``PR_SET_PDEATHSIG``).

- ``postgres_url``: the server's maintenance database (``postgres``), session scope.
- ``postgres_db_url``: a fresh, empty database for one test, dropped afterwards.

The binaries come from ``/usr/lib/postgresql/<version>/bin`` (Debian's layout, highest
version first) or ``PATH``; ``make postgres-server`` installs them when missing. Where
they cannot be found the tests that need them are skipped with the reason — unless
the ``CI`` environment variable is set, where they fail instead, so CI never passes
by skipping. ``initdb`` refuses to run as root, so under root the server runs as the
``postgres`` system user (or ``nobody``) and owns the temporary directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

import pytest

__all__ = [
    "PostgresServer",
    "find_postgres_bin",
    "postgres_db_url",
    "postgres_server",
    "postgres_url",
]

ADMIN_USER = "aptix"
START_TIMEOUT_S = 30.0


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``, or ``None`` when not installed."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
        reverse=True,
    )
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    initdb, server = shutil.which("initdb"), shutil.which("postgres")
    if initdb and server and Path(initdb).resolve().parent == Path(server).resolve().parent:
        return Path(initdb).resolve().parent
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process: get SIGQUIT (immediate shutdown) when the test process dies."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGQUIT)


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; ``start`` then ``stop``."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.password = secrets.token_urlsafe(16)
        self.port = 0
        self._root = Path(tempfile.mkdtemp(prefix="aptix-pg-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._run_as: str | None = None
        if os.geteuid() == 0:
            self._run_as = "postgres" if _user_exists("postgres") else "nobody"
            shutil.chown(self._root, user=self._run_as)
        self._databases = 0

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL for a database of this server, as the admin user."""
        return (
            f"postgresql://{ADMIN_USER}:{quote(self.password, safe='')}"
            f"@127.0.0.1:{self.port}/{database}"
        )

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            args, user=self._run_as, capture_output=True, timeout=120, check=False, cwd=self._root
        )

    def start(self) -> None:
        """``initdb``, then the server on a free loopback port; waits until it answers."""
        password_file = self._root / "password"
        password_file.write_text(self.password, encoding="utf-8")
        if self._run_as is not None:
            shutil.chown(password_file, user=self._run_as)
        done = self._run(
            str(self.bin_dir / "initdb"),
            "--pgdata",
            str(self._root / "data"),
            "--username",
            ADMIN_USER,
            "--pwfile",
            str(password_file),
            "--auth",
            "scram-sha-256",
            "--encoding",
            "UTF8",
            "--no-sync",
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.decode(errors='replace')}")
        for _attempt in range(3):  # a free port may be taken between probe and bind
            self.port = _free_port()
            if self._launch():
                return
        raise RuntimeError(f"PostgreSQL did not start; log:\n{self.log()}")

    def _launch(self) -> bool:
        log = (self._root / "server.log").open("ab")
        self._process = subprocess.Popen(
            [
                str(self.bin_dir / "postgres"),
                "-D",
                str(self._root / "data"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                "",  # no Unix socket: loopback TCP only
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            user=self._run_as,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self._root,
            preexec_fn=_die_with_parent,  # the server must not outlive the tests
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            if self._answers():
                return True
            time.sleep(0.05)
        self.stop()
        return False

    def _answers(self) -> bool:
        done = self._run(
            str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"
        )
        return done.returncode == 0

    def log(self) -> str:
        """The server's log so far."""
        path = self._root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def create_database(self) -> str:
        """A new empty database; returns its name."""
        import psycopg

        self._databases += 1
        name = f"test_{self._databases}_{secrets.token_hex(3)}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')  # name is ours: no quoting issue
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whoever still uses it."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Stop the server (fast shutdown, then kill) and delete its directory."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)  # "fast" shutdown
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._process = None
        shutil.rmtree(self._root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL tests cannot run on CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason} (run `make postgres-server`)")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for the whole test session (see the module docstring)."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        _unavailable("no PostgreSQL server binaries (initdb, postgres) were found")
    server = PostgresServer(bin_dir)
    try:
        server.start()  # installed but failing to start is a failure, never a skip
    except BaseException:
        server.stop()
        raise
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of the test server's ``postgres`` database (shared by the whole session)."""
    return postgres_server.url()


@pytest.fixture
def postgres_db_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, empty database for this test; dropped afterwards."""
    name = postgres_server.create_database()
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)
