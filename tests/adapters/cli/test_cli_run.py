"""``aptix run``: one turn per process; a session chains across processes on one SQLite file.

A turn that fails exits 1 with its unsuccessful result; what the command cannot
use — a bad script or option, a catalog that is broken or not UTF-8, a SQLite store
that is a directory or not a database — is a usage error: exit 2, a message, no
traceback, nothing written.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_kit import APTIX, aptix_run, stdout_json, write_json
from engine_kit import REPORT_CATALOG
from serve_process import free_port

from aptix_pipeline.adapters.config.data_dir import default_store_path


def _run_hi(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``aptix run`` on a one-line Initial request with a one-reply script."""
    return aptix_run(tmp, {"Instruction": "hi"}, [{"text": "hello"}], *args)


def test_three_turns_chain_across_processes_on_one_sqlite_file(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'session.db'}"
    mode_and_read = [
        {
            "tool_calls": [
                {"id": "m1", "name": "agent_change_mode", "arguments": {"mode": "review"}},
                {"id": "r1", "name": "read_file", "arguments": {"path": "a.py"}},
            ]
        }
    ]

    first = aptix_run(tmp_path, {"Instruction": "review a.py"}, mode_and_read, "--store", store)
    assert first.returncode == 0, first.stderr
    one = stdout_json(first)["Result"]
    assert one["Kind"] == "client_tool_continuation"
    assert one["ModeDisplayName"] == "Code Review"

    results = [{"ToolCallId": "r1", "ExecutionMs": 2, "ResultJson": '{"text": "x = 1"}'}]
    second = aptix_run(
        tmp_path,
        {"SessionId": one["SessionId"], "TurnId": one["TurnId"], "ToolResults": results},
        [{"text": "Looks fine."}],
        "--store",
        store,
    )
    assert second.returncode == 0, second.stderr
    two = stdout_json(second)["Result"]
    assert (two["Kind"], two["TurnId"]) == ("final", one["TurnId"])

    third = aptix_run(
        tmp_path,
        {"SessionId": two["SessionId"], "TurnId": two["TurnId"], "Instruction": "checklist?"},
        [
            {"tool_calls": [{"id": "k1", "name": "review_checklist", "arguments": {}}]},
            {"text": "Checked."},
        ],
        "--store",
        store,
        "--report",
    )
    assert third.returncode == 0, third.stderr
    three = stdout_json(third)["Result"]
    assert three["ModeDisplayName"] == "Code Review"
    assert three["TurnId"] != one["TurnId"]
    assert three["ToolResults"][0]["ToolCallId"] == "k1"
    report = json.loads(third.stderr)
    assert report["states"][-1] == "done"
    assert report["tool_calls"][0]["outcome"] == "executed"


def test_a_failed_turn_exits_one_with_an_unsuccessful_result(tmp_path: Path) -> None:
    run = aptix_run(
        tmp_path,
        {"SessionId": "nope", "TurnId": "nope", "Instruction": "hi"},
        [{"text": "never"}],
        "--store",
        "memory",
    )

    assert run.returncode == 1
    result = stdout_json(run)
    assert result["Successful"] is False
    assert result["Result"] is None
    assert result["Errors"][0]["RuleId"] == "AGN-033/3.1/session-found"


def test_a_refused_request_exits_one_and_writes_no_database(tmp_path: Path) -> None:
    run = aptix_run(tmp_path, {"Instruction": "hi", "Mode": "review"}, [{"text": "x"}])

    assert run.returncode == 1
    assert "AGN-034/3/server-owned-field" in run.stdout


@pytest.mark.decision("D366")
def test_the_default_store_is_a_sqlite_file_in_the_data_folder_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("APTIX_DATA_DIR", str(data))

    first = aptix_run(tmp_path, {"Instruction": "hi"}, [{"text": "hello"}])
    second = aptix_run(tmp_path, {"Instruction": "hi"}, [{"text": "hello"}])

    assert (first.returncode, second.returncode) == (0, 0), first.stderr
    assert (data / "aptix.db").is_file()
    assert not (tmp_path / "aptix.db").exists()
    assert f"aptix: creating the session store {data / 'aptix.db'}" in first.stderr
    assert second.stderr == ""


@pytest.mark.decision("D366")
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"APTIX_DATA_DIR": "/srv/aptix", "XDG_DATA_HOME": "/x", "HOME": "/h"}, "/srv/aptix"),
        ({"XDG_DATA_HOME": "/x", "HOME": "/h"}, "/x/aptix"),
        ({"XDG_DATA_HOME": "relative", "HOME": "/h"}, "/h/.local/share/aptix"),
        ({"HOME": "/h"}, "/h/.local/share/aptix"),
    ],
)
def test_the_data_folder_is_aptix_data_dir_else_xdg_data_home_else_local_share(
    env: dict[str, str], expected: str
) -> None:
    assert default_store_path(env) == Path(expected) / "aptix.db"


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ([{"txt": "typo"}], (), "replies[0] has unknown keys"),
        ("not a list", (), "a script is a list of replies"),
        ([{"text": "x"}], ("--store", "mysql://x"), "unknown store"),
        ([{"text": "x"}], ("--org", " "), "must not be empty"),
    ],
)
def test_usage_errors_exit_two_with_a_message(
    tmp_path: Path, script: object, args: tuple[str, ...], message: str
) -> None:
    run = aptix_run(tmp_path, {"Instruction": "hi"}, script, *args)

    assert run.returncode == 2
    assert message in run.stderr
    assert run.stdout == ""


def test_a_broken_config_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "catalog.toml"
    config.write_text('[[modes]]\nname = "review"\ndisplay_name = "Review"\n', encoding="utf-8")

    run = aptix_run(tmp_path, {"Instruction": "hi"}, [{"text": "x"}], "--config", str(config))

    assert run.returncode == 2
    assert "catalog.toml" in run.stderr


def test_a_missing_request_file_is_a_usage_error(tmp_path: Path) -> None:
    script = write_json(tmp_path / "script.json", [{"text": "x"}])
    run = subprocess.run(
        [str(APTIX), "run", str(tmp_path / "absent.json"), "--llm-script", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert run.returncode == 2


def test_a_custom_catalog_and_initial_mode_are_used(tmp_path: Path) -> None:
    config = tmp_path / "catalog.toml"
    config.write_text(
        '[[modes]]\nname = "general"\ndisplay_name = "Everyday"\n'
        '[[modes]]\nname = "plan"\ndisplay_name = "Planning"\n'
        '[[agents]]\nid = "a"\nname = "A"\n'
        '[[conversations]]\nid = "c"\n',
        encoding="utf-8",
    )

    run = aptix_run(
        tmp_path,
        {"Instruction": "hi"},
        [{"text": "ok"}],
        "--config",
        str(config),
        "--initial-mode",
        "plan",
        "--store",
        "memory",
    )

    assert run.returncode == 0, run.stderr
    assert stdout_json(run)["Result"]["ModeDisplayName"] == "Planning"


def test_aptix_run_on_a_directory_as_sqlite_store_is_a_usage_error(tmp_path: Path) -> None:
    directory = tmp_path / "store-dir"
    directory.mkdir()

    run = _run_hi(tmp_path, "--store", f"sqlite:{directory}")

    assert run.returncode == 2
    assert run.stderr.startswith("aptix run: ")
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert list(directory.iterdir()) == []


def test_aptix_run_on_a_file_that_is_not_a_database_is_a_usage_error(tmp_path: Path) -> None:
    junk = tmp_path / "notes.db"
    content = b"these are my notes, not a database\n" * 64
    junk.write_bytes(content)

    run = _run_hi(tmp_path, "--store", f"sqlite:{junk}")

    assert run.returncode == 2
    assert run.stderr.startswith("aptix run: ")
    assert "not a database" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert junk.read_bytes() == content


def test_aptix_run_with_a_non_utf8_config_is_a_usage_error_naming_the_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "latin1-catalog.toml"
    config.write_bytes('[[modes]]\nname = "général"\n'.encode("latin-1"))

    run = _run_hi(tmp_path, "--config", str(config), "--store", "memory")

    assert run.returncode == 2
    assert "latin1-catalog.toml" in run.stderr
    assert "UTF-8" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""


def test_a_sqlite_store_that_works_still_runs(tmp_path: Path) -> None:
    run = _run_hi(tmp_path, "--store", f"sqlite:{tmp_path / 'fine.db'}")

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["Result"]["PrimaryOutputText"] == "hello"


@pytest.mark.decision("D391")
@pytest.mark.parametrize(
    "where",
    # /proc takes no file, even from root, whose permission bits say every folder is writable
    ["missing-folder/path.mmd", "a-folder.mmd", "/proc/aptix-path.mmd"],
)
def test_a_diagram_file_that_cannot_be_written_is_refused_before_the_turn_runs(
    tmp_path: Path, where: str
) -> None:
    (tmp_path / "a-folder.mmd").mkdir()
    store = tmp_path / "turns.db"

    ran = aptix_run(
        tmp_path,
        {"Instruction": "hi"},
        [{"text": "hello"}],
        "--store",
        f"sqlite:{store}",
        "--diagram",
        str(tmp_path / where),
    )

    assert ran.returncode == 2
    assert ran.stdout == ""
    assert not store.exists()  # nothing was opened, so nothing was committed


@pytest.mark.decision("D391")
def test_the_refusal_of_a_diagram_file_names_the_folder_that_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "path.mmd"

    ran = aptix_run(tmp_path, {"Instruction": "hi"}, [{"text": "hello"}], "--diagram", str(out))

    assert ran.returncode == 2
    assert ran.stderr.strip() == (
        f"aptix run: --diagram {out}: the folder {out.parent} does not exist"
    )


def _unreachable_model(tmp: Path) -> Path:
    """A configuration whose OpenAI-compatible model server is a port nothing listens on,
    with credentials in its URL; the request beside it."""
    write_json(tmp / "request.json", {"Instruction": "hi"})
    config = tmp / "aptix.toml"
    config.write_text(
        '[store]\nurl = "memory"\n[model]\nkind = "openai"\nmodel = "m"\n'
        f'base_url = "http://ana:pa55word@127.0.0.1:{free_port()}/v1"\n'
        'api_key_env = "MODEL_KEY"\nmax_attempts = 2\n',
        encoding="utf-8",
    )
    return config


@pytest.mark.decision("D394", "D641")
def test_a_model_that_cannot_be_reached_is_one_line_naming_its_url_without_secrets(
    tmp_path: Path,
) -> None:
    config = _unreachable_model(tmp_path)
    env = {**os.environ, "MODEL_KEY": "sk-very-secret"}

    quiet = subprocess.run(
        [str(APTIX), "run", "request.json", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    verbose = subprocess.run(
        [str(APTIX), "run", "request.json", "--config", str(config), "--verbose"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )

    assert quiet.returncode == 1
    (line,) = quiet.stderr.splitlines()  # the retry (max_attempts = 2) only with --verbose
    assert line.startswith("aptix run: the LLM failed after ")
    assert "could not reach the model server at http://***@127.0.0.1:" in line
    assert "(gave up after 2 attempt(s))" in line
    for shown in (quiet.stderr, quiet.stdout, verbose.stderr):
        assert "pa55word" not in shown
        assert "sk-very-secret" not in shown
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in verbose.stderr
    assert "aptix: model call failed (APIConnectionError: " in verbose.stderr


def _screen(written: bytes) -> list[str]:
    """The lines a terminal shows after ``written``: ``\\r`` goes back to the start of the
    line, ``ESC [K`` clears the rest of it."""
    lines = [""]
    column = 0
    text = written.decode("utf-8", "replace").replace("\r\n", "\n")
    index = 0
    while index < len(text):
        if text.startswith("\x1b[K", index):
            lines[-1] = lines[-1][:column]
            index += 3
            continue
        char = text[index]
        if char == "\n":
            lines.append("")
            column = 0
        elif char == "\r":
            column = 0
        else:
            lines[-1] = lines[-1][:column] + char + lines[-1][column + 1 :]
            column += 1
        index += 1
    return [line for line in lines if line]


@pytest.mark.decision("D394", "D641")
def test_on_a_terminal_a_retry_is_a_status_line_wiped_before_the_one_failure_line(
    tmp_path: Path,
) -> None:
    import pty

    config = _unreachable_model(tmp_path)
    main, terminal = pty.openpty()
    with os.fdopen(main, "rb", buffering=0) as screen:
        ran = subprocess.Popen(
            [str(APTIX), "run", "request.json", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=terminal,
            cwd=tmp_path,
            env={**os.environ, "MODEL_KEY": "sk-very-secret"},
        )
        os.close(terminal)
        written = b""
        while True:
            try:
                chunk = screen.read(4096)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            written += chunk
        code = ran.wait(timeout=120)

    assert code == 1
    assert b"\raptix: " not in written  # every status line starts by wiping the line
    assert b"\r\x1b[Kaptix: model call failed (APIConnectionError: " in written  # shown
    (line,) = _screen(written)  # then wiped: the screen keeps the one failure line
    assert line.startswith("aptix run: the LLM failed after ")
    assert b"sk-very-secret" not in written


FILES_TABLE = """
[files]
directory = "kept"
url_base = "https://files.example.test"
signing_key_env = "APTIX_TEST_FILES_KEY"
"""
REPORT_SCRIPT = [
    {
        "tool_calls": [
            {"id": "r1", "name": "make_report", "arguments": {"title": "W", "points": []}}
        ]
    },
    {"text": "The report is attached."},
]


def _run_with_config(
    tmp: Path, config: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    write_json(tmp / "script.json", REPORT_SCRIPT)
    write_json(tmp / "request.json", {"Instruction": "report"})
    (tmp / "aptix.toml").write_text(
        f'[store]\nurl = "memory"\n[model]\nkind = "scripted"\nscript = "script.json"\n{config}',
        encoding="utf-8",
    )
    return subprocess.run(
        [str(APTIX), "run", "request.json", "--config", "aptix.toml", "--compact"],
        capture_output=True,
        text=True,
        cwd=tmp,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


@pytest.mark.decision("D404")
def test_aptix_run_keeps_a_tools_files_as_its_config_files_table_says(tmp_path: Path) -> None:
    key = "files signing key of the tests, 32+"

    run = _run_with_config(tmp_path, REPORT_CATALOG + FILES_TABLE, {"APTIX_TEST_FILES_KEY": key})

    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    [ref] = stdout_json(run)["Result"]["Files"]
    assert ref["Name"] == "report.md"
    assert ref["Url"].startswith(f"https://files.example.test/v1/files/{ref['ContentHash']}?")
    kept = tmp_path / "kept" / ref["ContentHash"][:2] / ref["ContentHash"]
    assert kept.read_bytes().startswith(b"# W")


@pytest.mark.decision("D404")
def test_aptix_run_without_the_files_signing_key_is_a_usage_error_naming_it(
    tmp_path: Path,
) -> None:
    run = _run_with_config(tmp_path, REPORT_CATALOG + FILES_TABLE, {"APTIX_TEST_FILES_KEY": ""})

    assert run.returncode == 2
    assert "[files].signing_key_env" in run.stderr
    assert "APTIX_TEST_FILES_KEY" in run.stderr
    assert run.stdout == ""


@pytest.mark.decision("D317", "D404")
def test_a_tool_failing_for_want_of_a_file_store_is_one_line_on_stderr(tmp_path: Path) -> None:
    run = _run_with_config(tmp_path, REPORT_CATALOG, {})

    assert run.returncode == 0
    [result] = stdout_json(run)["Result"]["ToolResults"]
    assert "no FileStore" in result["ErrorMessage"]
    assert run.stderr.splitlines() == [
        "aptix: server tool 'make_report' raised aptix_pipeline.steps.tool_files.ToolFileError"
    ]
