"""Running the ``aptix`` command of this environment in a test: ``aptix run`` on a request
and a model script.

``APTIX`` is the console script next to the running interpreter; ``aptix_run`` writes a
request and a script as JSON files (``write_json``) in a folder and runs one turn
there with compact output; ``stdout_json`` reads what it printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["APTIX", "aptix_run", "stdout_json", "turn_from_another_process", "write_json"]

APTIX = Path(sys.executable).parent / "aptix"


def write_json(path: Path, data: object) -> Path:
    """``data`` as JSON in the file at ``path``; the path."""
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def aptix_run(
    tmp: Path, request: object, script: object, *args: str
) -> subprocess.CompletedProcess[str]:
    """``aptix run`` in ``tmp`` on ``request`` with the scripted model playing ``script``
    (both written to JSON files there), compact output, and more ``args``; its outcome."""
    request_file = write_json(tmp / "request.json", request)
    script_file = write_json(tmp / "script.json", script)
    return subprocess.run(
        [
            str(APTIX),
            "run",
            str(request_file),
            "--llm-script",
            str(script_file),
            "--compact",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp,
    )


def stdout_json(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """What the command printed on stdout, read as one JSON object."""
    data: dict[str, Any] = json.loads(run.stdout)
    return data


def turn_from_another_process(
    tmp: Path, store_url: str, instruction: str, reply: str, org: str = "acme", user: str = "ana"
) -> str:
    """Commit a turn to the store at ``store_url`` from a process of its own (``aptix run``
    as ``org`` / ``user``, the scripted model answering ``reply``); its turn id."""
    run = aptix_run(
        tmp,
        {"Instruction": instruction},
        [{"text": reply}],
        "--store",
        store_url,
        "--org",
        org,
        "--user",
        user,
    )
    assert run.returncode == 0, run.stderr
    turn_id: str = stdout_json(run)["Result"]["TurnId"]
    return turn_id
