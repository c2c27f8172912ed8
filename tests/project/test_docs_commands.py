"""Every ```sh block of docs/*.md works when pasted in order (D395).

A page's ``sh`` blocks run as one bash script, in order, in a temporary folder
holding a copy of ``examples/`` (the clone's root, as far as the docs go), with this
environment's ``aptix`` first on ``PATH``. ``aptix serve --detach`` returns once its
server answers (D640); a line ending in ``&`` starts a server as a shell does; nothing
here waits for either, only the page's own lines, and no polling is inserted between
them. The servers are stopped afterwards: the ``--detach`` ones with the ``kill PID``
they printed, the others with the script's process group. A command
that exits 2 or more (a usage error, a command not found, curl unable to connect)
fails the page, naming the command; 1 is a verdict the page may show (``aptix
validate`` of the refused examples). The server's port is a free one: the one
change made to what is written. A block that is a synopsis (``[--option]``) or a
transcript is ``text`` or ``console``, not ``sh``, and is not run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from repo import ROOT
from serve_process import free_port, stop_detached

BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = [page for page in sorted((ROOT / "docs").glob("*.md")) if BLOCK.search(page.read_text())]
WRITTEN_PORT = "8080"
STOP_AT_FAILURE = r"""
set -o errtrace
trap 'status=$?; if [ "$status" -ge 2 ]; then
  echo "FAILED ($status): $BASH_COMMAND" >&2; exit "$status"; fi' ERR
"""


def _script(page: Path, port: int) -> str:
    """The page's sh blocks as one script; the written port is a free one."""
    body = "\n".join(BLOCK.findall(page.read_text(encoding="utf-8")))
    body = body.replace(f"127.0.0.1:{WRITTEN_PORT}", f"127.0.0.1:{port}")
    body = re.sub(r"^aptix serve ", f"aptix serve --port {port} ", body, flags=re.M)
    return STOP_AT_FAILURE + body


def test_the_docs_hold_sh_blocks_to_run() -> None:
    assert {page.name for page in PAGES} >= {"CLI.md", "HTTP.md"}


@pytest.mark.decision("D395", "D640")
@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_sh_blocks_of_a_page_run_when_pasted_in_order(page: Path, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "APTIX_DATA_DIR": str(tmp_path / "data"),
    }
    env.pop("OTEL_TRACES_EXPORTER", None)
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:  # files: a server keeps pipes open
        shell = subprocess.Popen(
            ["bash", "-c", _script(page, free_port())],
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # the servers it starts are stopped with it
        )
        try:
            shell.wait(timeout=180)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGTERM)
            stop_detached(out.read_text(errors="replace"))
    printed = err.read_text(errors="replace")

    assert shell.returncode == 0, f"{printed}\n{out.read_text(errors='replace')}"
    assert "FAILED" not in printed, printed
