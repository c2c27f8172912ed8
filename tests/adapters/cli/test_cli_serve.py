"""``aptix serve --detach`` as a user runs it: a real process, real HTTP on loopback.

The command returns once the service answers, so the next line of a pasted script
(``curl`` with no retry) finds it up; it prints the ``kill`` that stops it
(``serve_process.stop_detached`` runs it). The quick start's configuration is the
service (a scripted model, sessions in memory).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from cli_kit import APTIX
from repo import ROOT
from serve_process import WAIT, free_port, stop_detached

KEY = "quickstart-key"


def _quickstart(tmp: Path) -> Path:
    shutil.copytree(ROOT / "examples" / "quickstart", tmp / "quickstart")
    return tmp / "quickstart" / "aptix.toml"


def _detach(tmp: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "APTIX_KEY_ANA": KEY, "APTIX_DATA_DIR": str(tmp / "data")}
    return subprocess.run(
        [str(APTIX), "serve", "--config", str(config), "--detach", *args],
        capture_output=True,
        text=True,
        cwd=tmp,
        env=env,
        timeout=WAIT * 3,
    )


@pytest.mark.decision("D640")
def test_detach_returns_once_the_service_answers_and_prints_how_to_stop_it(
    tmp_path: Path,
) -> None:
    port = free_port()
    ran = _detach(tmp_path, _quickstart(tmp_path), "--port", str(port))
    try:
        # at once, with no retry: the command returned only when the service answered
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        turn = httpx.post(
            f"http://127.0.0.1:{port}/v1/agent/execute",
            json={"Instruction": "Review app.py"},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=WAIT,
        )
        (pid,) = [int(p) for p in re.findall(r"stop it: kill (\d+)$", ran.stdout.strip())]
        own_session = os.getsid(pid) == pid
    finally:
        stopped = stop_detached(ran.stdout)
    log = tmp_path / "data" / f"serve-{port}.log"

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == (
        f"aptix serve: serving http://127.0.0.1:{port} (pid {pid}, log {log}); "
        f"stop it: kill {pid}\n"
    )
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert turn.json()["Result"]["Kind"] == "client_tool_continuation"
    assert own_session  # it outlives the command and the terminal it ran in
    assert stopped == [pid]
    assert "Application startup complete" in log.read_text(encoding="utf-8")
    with pytest.raises(httpx.ConnectError):  # kill PID stopped it
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=WAIT)


@pytest.mark.decision("D640", "D392")
def test_detach_on_a_port_another_program_holds_is_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    config = _quickstart(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ran = _detach(tmp_path, config, "--port", str(port))

    assert ran.returncode == 2
    assert ran.stdout == ""
    assert ran.stderr == (
        f"aptix serve: --host 127.0.0.1 --port {port}: "
        "the address is in use (another program listens there)\n"
    )
    assert not (tmp_path / "data").exists()  # no log, no process


@pytest.mark.decision("D640")
def test_a_detached_server_that_stops_while_starting_is_one_line_naming_its_log(
    tmp_path: Path,
) -> None:
    config = _quickstart(tmp_path)
    (tmp_path / "a-folder").mkdir()
    text = config.read_text(encoding="utf-8")  # a store the service cannot open
    folder = f'url = "sqlite:{tmp_path / "a-folder"}"'
    config.write_text(text.replace('url = "memory"', folder), "utf-8")
    log = tmp_path / "serve.log"

    ran = _detach(tmp_path, config, "--port", str(free_port()), "--log", str(log))
    stop_detached(ran.stdout)  # had it started after all

    assert ran.returncode == 1
    assert ran.stdout == ""
    (line,) = ran.stderr.splitlines()
    assert line.startswith("aptix serve: the server exited (3) before it answered: ")
    assert line.endswith(f"(its log: {log})")
    assert "cannot open the store" in log.read_text(encoding="utf-8")


@pytest.mark.decision("D640")
@pytest.mark.parametrize("log", ["missing-folder-file/serve.log", "a-folder"])
def test_a_log_file_that_cannot_be_written_is_refused_before_the_server_starts(
    tmp_path: Path, log: str
) -> None:
    config = _quickstart(tmp_path)
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "missing-folder-file").write_text("a file, not a folder", encoding="utf-8")
    port = free_port()

    ran = _detach(tmp_path, config, "--port", str(port), "--log", str(tmp_path / log))

    assert ran.returncode == 2
    assert ran.stderr.startswith(f"aptix serve: --log {tmp_path / log}: ")
    with pytest.raises(httpx.ConnectError):  # nothing was started
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=WAIT)


@pytest.mark.decision("D640")
def test_log_without_detach_is_a_usage_error(tmp_path: Path) -> None:
    ran = subprocess.run(
        [str(APTIX), "serve", "--config", str(_quickstart(tmp_path)), "--log", "x.log"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )

    assert ran.returncode == 2
    assert ran.stderr.startswith("aptix serve: --log is for --detach")
