"""``aptix run --stream``: the text live on stdout, progress on stderr, the same result.

Each test runs the real ``aptix`` command in a subprocess with a scripted model
(AGN-034 §4.7; docs/CLI.md "Streaming"). stdout holds each model round's text
ended by a newline, then the ``InvokeResult`` line that ``aptix run`` prints
without ``--stream``; exit codes are the same; Ctrl-C mid-stream exits 130 and
stores nothing.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_kit import APTIX, aptix_run, stdout_json, write_json
from repo import ROOT

_ANSI = "\x1b"
_IDS = re.compile(r"\b(session|turn)_[0-9a-f]{32}\b")
_TIMINGS = re.compile(r'"ExecutionMs":\s*\d+')

HELLO = "Hello! This answer arrives a few characters at a time."
ADD_SCRIPT: dict[str, Any] = {
    "replies": [
        {"tool_calls": [{"id": "m1", "name": "Math", "arguments": {}}]},
        {
            "text": "Adding them.",
            "tool_calls": [{"id": "a1", "name": "Add", "arguments": {"a": 2, "b": 3}}],
        },
        {"text": "2 + 3 = 5."},
    ],
    "chunk_size": 4,
}
READ_FILE = {
    "text": "Reading a.py first.",
    "tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "a.py"}}],
}
PNG_DATA_URI = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

# request, script, the text streamed to stdout, the expected exit code
SCENARIOS: dict[str, tuple[object, object, str, int]] = {
    "final answer": (
        {"Instruction": "hi"},
        {"replies": [{"text": HELLO}], "chunk_size": 3},
        HELLO + "\n",
        0,
    ),
    "server tool rounds": ({"Instruction": "2 + 3?"}, ADD_SCRIPT, "Adding them.\n2 + 3 = 5.\n", 0),
    "client tool call": ({"Instruction": "review a.py"}, [READ_FILE], "Reading a.py first.\n", 0),
    "refused request": ({"Instruction": "hi", "Mode": "review"}, [{"text": "never"}], "", 1),
    "model failure": (
        {"Instruction": "2 + 3?"},
        [{"tool_calls": [{"id": "m1", "name": "Math", "arguments": {}}]}],
        "",
        1,
    ),
    "response refused by a POST rule": (
        {"Instruction": "a picture"},
        [{"text": f"Here: {PNG_DATA_URI}"}],
        f"Here: {PNG_DATA_URI}\n",
        1,
    ),
}


def _comparable(stdout: str) -> str:
    """Output with the run's random ids and measured timings put aside."""
    return _TIMINGS.sub('"ExecutionMs": 0', _IDS.sub(r"\1_ID", stdout))


def _split(stdout: str) -> tuple[str, str]:
    """A compact streamed stdout as (the text before the last line, the last line)."""
    head, _, last = stdout.removesuffix("\n").rpartition("\n")
    return (head + "\n" if head else ""), last


def _stored_rows(database: Path) -> dict[str, int]:
    with sqlite3.connect(database) as connection:
        return {
            table: connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("sessions", "turns", "transcript")
        }


@pytest.mark.decision("D266")
def test_the_streamed_text_on_stdout_is_the_primary_output_text_then_the_result(
    tmp_path: Path,
) -> None:
    run = aptix_run(
        tmp_path, {"Instruction": "hi"}, {"replies": [{"text": HELLO}], "chunk_size": 3}
    )

    run_streamed = aptix_run(
        tmp_path,
        {"Instruction": "hi"},
        {"replies": [{"text": HELLO}], "chunk_size": 3, "chunk_delay_seconds": 0.01},
        "--stream",
    )

    assert run_streamed.returncode == 0, run_streamed.stderr
    text, last_line = _split(run_streamed.stdout)
    result = json.loads(last_line)
    assert text == result["Result"]["PrimaryOutputText"] + "\n" == HELLO + "\n"
    assert _comparable(run_streamed.stdout) == _comparable(text + run.stdout)


@pytest.mark.decision("D266")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_streamed_turn_prints_the_result_and_exit_code_of_the_same_turn_not_streamed(
    tmp_path: Path, scenario: str
) -> None:
    request, script, streamed_text, exit_code = SCENARIOS[scenario]

    plain = aptix_run(tmp_path, request, script, "--store", "memory")
    streamed = aptix_run(tmp_path, request, script, "--store", "memory", "--stream")

    assert (plain.returncode, streamed.returncode) == (exit_code, exit_code), streamed.stderr
    text, last_line = _split(streamed.stdout)
    assert text == streamed_text
    assert _comparable(last_line + "\n") == _comparable(plain.stdout)


@pytest.mark.decision("D266")
def test_usage_errors_exit_two_streamed_or_not(tmp_path: Path) -> None:
    plain = aptix_run(tmp_path, {"Instruction": "hi"}, [{"txt": "typo"}])
    streamed = aptix_run(tmp_path, {"Instruction": "hi"}, [{"txt": "typo"}], "--stream")

    assert (plain.returncode, streamed.returncode) == (2, 2)
    assert streamed.stdout == ""
    assert streamed.stderr == plain.stderr


@pytest.mark.decision("D266")
def test_progress_goes_to_stderr_as_plain_lines_without_control_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # asks rich for colours: still no terminal

    run = aptix_run(
        tmp_path, {"Instruction": "2 + 3?"}, ADD_SCRIPT, "--store", "memory", "--stream"
    )

    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert [line for line in lines if not line.startswith("progress: ")] == []
    assert {
        "progress: step llm_client",
        "progress: model round 2: waiting for scripted",
        "progress: tool Add: running",
        "progress: tool Add: executed",
        "progress: model round 3: answered",
    } <= set(lines)
    assert _ANSI not in run.stderr
    assert _ANSI not in run.stdout
    assert "progress" not in run.stdout


def _run_on_a_terminal(tmp_path: Path, *, stdout_too: bool) -> tuple[int, str, str]:
    """The server-tool turn streamed with stderr (and stdout) on a pseudo-terminal:
    the exit code, what went to the stdout pipe, and what was drawn on the terminal."""
    request = write_json(tmp_path / "request.json", {"Instruction": "2 + 3?"})
    script = write_json(tmp_path / "script.json", {**ADD_SCRIPT, "chunk_delay_seconds": 0.05})
    command = [str(APTIX), "run", str(request), "--llm-script", str(script), "--compact"]
    command += ["--store", "memory", "--stream"]
    unset = {"TTY_INTERACTIVE", "TTY_COMPATIBLE", "NO_COLOR", "FORCE_COLOR"}
    env = {key: value for key, value in os.environ.items() if key not in unset}
    terminal, terminal_side = pty.openpty()
    drawn = bytearray()

    def read_terminal() -> None:
        while True:
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # every end of the terminal's other side is closed
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=read_terminal)
    reader.start()
    try:
        run = subprocess.run(
            command,
            stdout=terminal_side if stdout_too else subprocess.PIPE,
            stderr=terminal_side,
            check=False,
            cwd=tmp_path,
            env={**env, "TERM": "xterm-256color"},
        )
    finally:
        os.close(terminal_side)
        reader.join(timeout=10)
        os.close(terminal)
    stdout = (run.stdout or b"").decode()
    return run.returncode, stdout, drawn.decode("utf-8", "replace")


@pytest.mark.decision("D266")
def test_on_a_terminal_the_status_line_is_drawn_on_stderr_and_stdout_stays_clean(
    tmp_path: Path,
) -> None:
    code, stdout, screen = _run_on_a_terminal(tmp_path, stdout_too=False)

    assert code == 0
    text, last_line = _split(stdout)
    assert text == "Adding them.\n2 + 3 = 5.\n"
    assert json.loads(last_line)["Result"]["PrimaryOutputText"] == "2 + 3 = 5."
    assert "model round 2: streaming" in screen  # the status line, shown during the chunks
    assert _ANSI in screen
    assert "progress: " not in screen


@pytest.mark.decision("D266")
def test_on_one_terminal_the_status_line_never_breaks_into_the_text(tmp_path: Path) -> None:
    code, _, screen = _run_on_a_terminal(tmp_path, stdout_too=True)

    assert code == 0
    assert "Adding them.\r\n" in screen  # written in pieces 50 ms apart, nothing between
    assert "2 + 3 = 5.\r\n" in screen
    assert '{"Successful":true,' in screen
    assert "model round" in screen


@pytest.mark.decision("D268")
def test_ctrl_c_mid_stream_exits_130_and_stores_nothing(tmp_path: Path) -> None:
    database = tmp_path / "session.db"
    request = write_json(tmp_path / "request.json", {"Instruction": "hi"})
    slow = {"replies": [{"text": "x" * 400}], "chunk_size": 1, "chunk_delay_seconds": 0.05}
    script = write_json(tmp_path / "script.json", slow)
    command = [str(APTIX), "run", str(request), "--llm-script", str(script)]
    command += ["--store", f"sqlite:{database}", "--stream", "--compact"]

    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    ) as process:
        assert process.stdout is not None
        first = process.stdout.read(1)  # the first delta is out: the turn is streaming
        process.send_signal(signal.SIGINT)
        rest, errors = process.communicate(timeout=60)

    assert first == b"x"
    assert process.returncode == 130
    assert b"interrupted: the turn was cancelled, nothing stored" in errors
    assert b"Traceback" not in errors
    assert set((first + rest).decode()) <= {"x", "\n"}  # no InvokeResult
    assert _stored_rows(database) == {"sessions": 0, "turns": 0, "transcript": 0}


@pytest.mark.decision("D268")
def test_the_same_streamed_turn_left_to_finish_is_stored(tmp_path: Path) -> None:
    database = tmp_path / "session.db"
    script = {"replies": [{"text": "x" * 40}], "chunk_size": 1, "chunk_delay_seconds": 0.001}

    run = aptix_run(
        tmp_path, {"Instruction": "hi"}, script, "--store", f"sqlite:{database}", "--stream"
    )

    assert run.returncode == 0, run.stderr
    assert _stored_rows(database) == {"sessions": 1, "turns": 1, "transcript": 2}


@pytest.mark.decision("D267")
def test_a_request_asking_for_a_stream_is_streamed_without_the_option(tmp_path: Path) -> None:
    request = {"Instruction": "hi", "Stream": True}
    script = {"replies": [{"text": HELLO}], "chunk_size": 5}

    streamed = aptix_run(tmp_path, request, script, "--store", "memory")
    not_streamed = aptix_run(tmp_path, request, script, "--store", "memory", "--no-stream")

    assert (streamed.returncode, not_streamed.returncode) == (0, 0), streamed.stderr
    text, last_line = _split(streamed.stdout)
    assert text == HELLO + "\n"
    assert "progress: model round 1: streaming" in streamed.stderr
    assert _comparable(not_streamed.stdout) == _comparable(last_line + "\n")
    assert not_streamed.stderr == ""


@pytest.mark.decision("D267")
def test_a_continuation_streams_with_the_option_and_no_stream_field_added(
    tmp_path: Path,
) -> None:
    store = f"sqlite:{tmp_path / 'session.db'}"
    first = aptix_run(tmp_path, {"Instruction": "review a.py"}, [READ_FILE], "--store", store)
    one = stdout_json(first)["Result"]
    continuation = {
        "SessionId": one["SessionId"],
        "TurnId": one["TurnId"],
        "ToolResults": [{"ToolCallId": "r1", "ExecutionMs": 2, "ResultJson": '{"text": "x = 1"}'}],
    }

    second = aptix_run(
        tmp_path, continuation, [{"text": "Looks fine to me."}], "--store", store, "--stream"
    )

    assert second.returncode == 0, second.stdout
    text, last_line = _split(second.stdout)
    two = json.loads(last_line)["Result"]
    assert (two["Kind"], two["TurnId"]) == ("final", one["TurnId"])
    assert text == two["PrimaryOutputText"] + "\n" == "Looks fine to me.\n"


@pytest.mark.decision("D267")
def test_a_continuation_asking_for_a_stream_is_refused_streamed_or_not(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'session.db'}"
    first = aptix_run(tmp_path, {"Instruction": "review a.py"}, [READ_FILE], "--store", store)
    one = stdout_json(first)["Result"]
    results = [{"ToolCallId": "r1", "ExecutionMs": 2, "ResultJson": '{"text": "x = 1"}'}]
    continuation = {**one, "ToolResults": results, "Stream": True}
    continuation = {
        key: continuation[key] for key in ("SessionId", "TurnId", "ToolResults", "Stream")
    }

    streamed = aptix_run(tmp_path, continuation, [{"text": "never"}], "--store", store)
    not_streamed = aptix_run(
        tmp_path, continuation, [{"text": "never"}], "--store", store, "--no-stream"
    )

    assert (streamed.returncode, not_streamed.returncode) == (1, 1)
    _, last_line = _split(streamed.stdout)
    assert json.loads(last_line)["Errors"][0]["Field"] == "Stream"
    assert _comparable(last_line + "\n") == _comparable(not_streamed.stdout)


def _console_session(page: Path, heading: str) -> list[tuple[str, str]]:
    """The commands of the first ```console block after ``heading``, with their output."""
    text = page.read_text(encoding="utf-8")
    block = text[text.index(heading) :].split("```console\n", 1)[1].split("```", 1)[0]
    session: list[tuple[str, str]] = []
    for line in block.splitlines(keepends=True):
        if line.startswith("$ "):
            session.append((line[2:].strip(), ""))
        else:
            command, output = session[-1]
            session[-1] = (command, output + line)
    return session


@pytest.mark.decision("D266")
def test_the_streaming_example_of_the_cli_page_prints_what_it_shows(tmp_path: Path) -> None:
    session = _console_session(ROOT / "docs" / "CLI.md", "### Streaming")
    env = {**os.environ, "PATH": f"{APTIX.parent}{os.pathsep}{os.environ['PATH']}"}

    script = "".join(f"echo @@{index}@@\n{command}\n" for index, (command, _) in enumerate(session))

    run = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, check=False
    )

    outputs = re.split(r"^@@\d+@@\n", run.stdout, flags=re.MULTILINE)[1:]
    assert run.stderr == ""
    assert [_comparable(output) for output in outputs] == [
        _comparable(output) for _, output in session
    ]


@pytest.mark.decision("D267")
def test_a_request_too_deep_to_read_for_its_stream_flag_is_refused_by_its_rule(
    tmp_path: Path,
) -> None:
    deep = '{"Instruction": ' + "[" * 100_000 + "]" * 100_000 + ', "Stream": true}'
    (tmp_path / "request.json").write_text(deep, encoding="utf-8")
    script = write_json(tmp_path / "script.json", [{"text": "never"}])

    run = subprocess.run(
        [str(APTIX), "run", "request.json", "--llm-script", str(script), "--compact"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )

    assert run.returncode == 1, run.stderr
    assert "RecursionError" not in run.stderr
    assert json.loads(run.stdout)["Errors"][0]["RuleId"] == "DESIGN/limits/json-depth"
