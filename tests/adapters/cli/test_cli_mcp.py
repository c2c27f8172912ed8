"""``aptix run``, ``aptix serve`` and ``aptix chat`` with one stdio MCP server in the
configuration run a turn that calls its tool (docs/MCP.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_kit import APTIX, write_json
from mcp_kit import DEMO_SERVER
from serve_process import free_port, serving

SCRIPT = [
    {"tool_calls": [{"id": "c1", "name": "recall", "arguments": {"key": "k"}}]},
    {"text": "recalled"},
]


def _config(tmp: Path, *, command: str = sys.executable) -> Path:
    write_json(tmp / "script.json", SCRIPT)
    config = tmp / "aptix.toml"
    config.write_text(
        f"""
[model]
kind = "scripted"
script = "script.json"

[store]
url = "memory"

[[auth.keys]]
org = "acme"
user = "ana"
key_env = "APTIX_TEST_KEY"

[[mcp_servers]]
name = "demo"
command = {json.dumps(command)}
args = [{json.dumps(str(DEMO_SERVER))}, "stdio"]
modes = ["general"]
""",
        encoding="utf-8",
    )
    return config


def _aptix(tmp: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(APTIX), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp,
        input=stdin,
        env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
        timeout=120,
    )


def _recalled(response: dict[str, Any]) -> Any:
    [result] = response["ToolResults"]
    return json.loads(result["ResultJson"])


@pytest.mark.decision("D500")
def test_aptix_run_calls_the_mcp_tool(tmp_path: Path) -> None:
    config = _config(tmp_path)
    request = write_json(tmp_path / "request.json", {"Instruction": "recall k"})

    ran = _aptix(tmp_path, "run", str(request), "--config", str(config), "--compact")

    assert ran.returncode == 0, ran.stderr
    assert _recalled(json.loads(ran.stdout)["Result"]) == {"key": "k", "value": None}


@pytest.mark.decision("D500")
def test_aptix_chat_calls_the_mcp_tool(tmp_path: Path) -> None:
    config = _config(tmp_path)

    ran = _aptix(tmp_path, "chat", "--config", str(config), stdin="recall k\n")

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["recalled"]
    assert "progress: tool recall: executed" in ran.stderr


@pytest.mark.decision("D500")
def test_aptix_serve_calls_the_mcp_tool(tmp_path: Path) -> None:
    config = _config(tmp_path)
    port = free_port()
    command = [APTIX, "serve", "--config", config, "--port", str(port)]
    env = {**os.environ, "APTIX_TEST_KEY": "k", "OTEL_TRACES_EXPORTER": "none"}

    with serving(command, env, port=port, cwd=tmp_path, log=tmp_path / "serve.log") as served:
        answer = httpx.post(
            served.base + "/v1/agent/execute",
            json={"Instruction": "recall k"},
            headers={"Authorization": "Bearer k"},
            timeout=60,
        )

    assert answer.status_code == 200, answer.text
    assert _recalled(answer.json()["Result"]) == {"key": "k", "value": None}


@pytest.mark.decision("D491")
def test_a_server_that_cannot_start_exits_2_with_one_line(tmp_path: Path) -> None:
    config = _config(tmp_path, command=str(tmp_path / "no-such-server"))
    request = write_json(tmp_path / "request.json", {"Instruction": "hi"})

    for args in (
        ["run", str(request), "--config", str(config)],
        ["serve", "--config", str(config)],
    ):
        ran = _aptix(tmp_path, *args)
        assert ran.returncode == 2, ran.stderr
        [line] = ran.stderr.strip().splitlines()
        assert "MCP server 'demo' (stdio: " in line
        assert "no-such-server" in line
