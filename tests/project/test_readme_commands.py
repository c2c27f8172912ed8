"""Every command of README.md's ```sh blocks runs as written.

Each block runs in order, in a fresh temporary folder holding a copy of
``examples/``, with ``HOME`` there too, so whatever a command writes lands there and
never in the clone. A line is one of:

- ``aptix …`` — run with this environment's ``aptix``; it must exit 0;
- ``aptix serve … --detach`` — a server the command itself waits for (D640): the
  line returns once it answers, and the next line runs at once, with no polling
  here; it is stopped when the block ends, with the ``kill PID`` the line printed;
- ``aptix … &`` — a server, started as a shell starts it, with no wait: the next
  line runs at once, as when the block is pasted (D395), so a line after it that
  does not wait itself fails; it is stopped when the block ends;
- a server of either kind is given ``--port`` of a free port, and the block's URLs on
  ``127.0.0.1:8080`` are pointed there (the one change to what is written);
- ``curl …`` — run by bash as written (variables and quoting as a shell reads them);
  it must exit 0 and print an ``InvokeResult`` with ``"Successful": true``;
- ``export NAME=VALUE`` — set for the lines after it;
- ``make …`` and the lines that make and fill a virtual environment
  (``python3 -m venv``, ``. .venv/bin/activate``, ``pip install``) — not run here:
  ``make test`` is this suite, and ``tests/project/test_packaging.py`` installs the built
  wheel into a fresh environment.

Any other line fails the test, naming it, so a README command is never skipped
unnoticed. ``#`` comments and lines continued with ``\\`` read as a shell reads them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from repo import ROOT
from serve_process import free_port, serving, stop_detached

README = ROOT / "README.md"
BIN = Path(sys.executable).parent
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
WRITTEN_PORT = "127.0.0.1:8080"
NOT_RUN_HERE = ("make ", "python3 -m venv ", ". .venv/bin/activate", "pip install ")


def commands(block: str) -> list[str]:
    """The block's commands: continued lines joined, comment lines and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [
        line.strip()
        for line in joined.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def sh_blocks() -> list[str]:
    return BLOCK.findall(README.read_text(encoding="utf-8"))


def _without_comment(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def test_the_readme_shows_aptix_commands_a_server_and_a_curl() -> None:
    lines = [line for block in sh_blocks() for line in commands(block)]

    assert any(line.startswith("aptix run ") for line in lines)
    assert any(line.startswith("aptix serve ") and "--detach" in line for line in lines)
    assert any(line.startswith("curl ") for line in lines)


def _run_block(block: str, folder: Path, stack: ExitStack) -> list[str]:
    """Run the block's commands in ``folder``; what each printed, in order."""
    env = {**os.environ, "HOME": str(folder), "XDG_DATA_HOME": str(folder / "data")}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env.pop("OTEL_TRACES_EXPORTER", None)
    port: int | None = None
    printed: list[str] = []
    for command in commands(block):
        if command.startswith(NOT_RUN_HERE):
            continue
        if command.startswith("export "):
            for assignment in _without_comment(command)[1:]:
                name, _, value = assignment.partition("=")
                env[name] = value
        elif command.startswith("aptix ") and command.endswith("&"):
            port = free_port()
            argv = [*_without_comment(command.removesuffix("&")), "--port", str(port)]
            log = folder / f"server-{port}.log"
            # started as a shell's & starts it: the block's next line runs at once, with
            # no wait for the server here (the README's own lines must wait, D395)
            stack.enter_context(serving(argv, env, port=port, cwd=folder, log=log, wait=False))
        elif command.startswith("aptix "):
            argv = _without_comment(command)
            if argv[:2] == ["aptix", "serve"]:
                port = free_port()
                argv += ["--port", str(port)]
            ran = subprocess.run(
                argv,
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            stack.callback(stop_detached, ran.stdout)
            assert ran.returncode == 0, f"{command}\n{ran.stderr}"
            printed.append(ran.stdout)
        elif command.startswith("curl "):
            if port is not None:
                command = command.replace(WRITTEN_PORT, f"127.0.0.1:{port}")
            ran = subprocess.run(
                ["bash", "-c", command],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert ran.returncode == 0, f"{command}\n{ran.stderr}"
            assert json.loads(ran.stdout)["Successful"] is True, ran.stdout
            printed.append(ran.stdout)
        else:
            pytest.fail(f"README.md sh line this test does not know how to run: {command}")
    return printed


@pytest.mark.decision("D387", "D395", "D640")
@pytest.mark.parametrize("number", range(len(sh_blocks())), ids=lambda n: f"block{n + 1}")
def test_each_sh_block_of_the_readme_runs_as_written(number: int, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")

    with ExitStack() as stack:
        printed = _run_block(sh_blocks()[number], tmp_path, stack)

    assert len(printed) == sum(
        line.startswith(("aptix ", "curl ")) and not line.endswith("&")
        for line in commands(sh_blocks()[number])
    )


@pytest.mark.decision("D387", "D395", "D640")
def test_the_quick_start_curl_gets_a_tool_call_from_the_scripted_model(tmp_path: Path) -> None:
    (block,) = [b for b in sh_blocks() if "curl " in b]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")

    with ExitStack() as stack:
        *_, answer = _run_block(block, tmp_path, stack)

    result = json.loads(answer)["Result"]
    assert result["Kind"] == "client_tool_continuation"
    assert result["ToolCalls"][0]["Name"] == "read_file"
