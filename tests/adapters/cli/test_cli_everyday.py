"""The CLI for everyday use: examples that run, ``aptix chat``, ``aptix init``, and what
``aptix run`` checks before a turn (docs/CLI.md). Each test runs the installed ``aptix``
in a subprocess, as a user would, on real SQLite files."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from repo import ROOT

APTIX = Path(sys.executable).parent / "aptix"
REQUESTS = ROOT / "examples" / "requests"
SESSION = ROOT / "examples" / "session"
EXAMPLE_CONFIG = ROOT / "examples" / "aptix.toml"
NO_SECRETS = ("OPENAI_API_KEY", "APTIX_KEY_ANA")


def _aptix(
    cwd: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(APTIX), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        input=stdin,
        env=env,
        timeout=120,
    )


def _run_hello(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``aptix run r.json --llm-script s.json ARGS`` in ``cwd``: a request saying hi to a
    scripted model that answers hello."""
    (cwd / "r.json").write_text('{"Instruction": "hi"}')
    (cwd / "s.json").write_text('[{"text": "hello"}]')
    return _aptix(cwd, "run", "r.json", "--llm-script", "s.json", *args, env=env)


def _without_secrets() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in NO_SECRETS}


def _result(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run.stdout)
    return data


# --- the examples, run as docs/CLI.md "Example requests" runs them --------------------------


@pytest.mark.decision("D362", "D368")
@pytest.mark.parametrize("config", [[], ["--config", str(EXAMPLE_CONFIG)]], ids=["builtin", "toml"])
def test_the_example_requests_run_in_sequence_with_their_script(
    tmp_path: Path, config: list[str]
) -> None:
    common = ["--llm-script", str(ROOT / "examples" / "requests-script.json")]
    common += ["--store", f"sqlite:{tmp_path / 'ex.db'}", *config]

    first = _aptix(tmp_path, "run", str(REQUESTS / "01-initial.json"), *common)
    (tmp_path / "first.json").write_text(first.stdout)
    second = _aptix(
        tmp_path,
        "run",
        str(REQUESTS / "02-tool-continuation.json"),
        "--after",
        "first.json",
        *common,
    )
    (tmp_path / "second.json").write_text(second.stdout)
    third = _aptix(
        tmp_path,
        "run",
        str(REQUESTS / "03-follow-on.json"),
        "--after",
        "second.json",
        *common,
        env=_without_secrets(),
    )

    assert (first.returncode, second.returncode, third.returncode) == (0, 0, 0), (
        first.stderr + second.stderr + third.stderr
    )
    assert _result(first)["Result"]["Kind"] == "client_tool_continuation"
    assert [c["ToolCallId"] for c in _result(first)["Result"]["ToolCalls"]] == ["call-1", "call-2"]
    assert "KeyError" in _result(second)["Result"]["PrimaryOutputText"]
    assert "def test_parse_config" in _result(third)["Result"]["PrimaryOutputText"]
    assert _result(third)["Result"]["SessionId"] == _result(first)["Result"]["SessionId"]
    assert not list(ROOT.glob("examples/**/*.db"))


def _doc_sequences() -> list[str]:
    """The ```sh blocks of docs/CLI.md "Example requests"."""
    import re

    page = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    section = page.split("### Example requests", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)


@pytest.mark.decision("D362")
@pytest.mark.parametrize("block", _doc_sequences(), ids=["requests", "session"])
def test_the_example_sequences_run_as_the_cli_page_writes_them(tmp_path: Path, block: str) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bash = f"set -euo pipefail\nPATH={APTIX.parent}:$PATH\n{block}"

    run = subprocess.run(
        ["bash", "-c", bash], capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120
    )

    assert run.returncode == 0, run.stderr
    last = json.loads(run.stdout)
    assert last["Successful"] is True
    assert last["Result"]["Kind"] == "final"
    assert not list(ROOT.glob("examples/**/*.db"))


@pytest.mark.decision("D362", "D363")
def test_the_example_session_runs_turn_by_turn_with_its_script_keyed_by_turn(
    tmp_path: Path,
) -> None:
    common = ["--llm-script", str(SESSION / "turns.json"), "--store", f"sqlite:{tmp_path / 's.db'}"]

    first = _aptix(tmp_path, "run", str(SESSION / "01-initial.json"), *common)
    (tmp_path / "1.json").write_text(first.stdout)
    second = _aptix(
        tmp_path, "run", str(SESSION / "02-continuation.json"), "--after", "1.json", *common
    )
    (tmp_path / "2.json").write_text(second.stdout)
    third = _aptix(
        tmp_path, "run", str(SESSION / "03-follow-on.json"), "--after", "2.json", *common
    )

    assert (first.returncode, second.returncode, third.returncode) == (0, 0, 0), third.stderr
    assert _result(first)["Result"]["ModeDisplayName"] == "Code Review"
    assert _result(second)["Result"]["Kind"] == "final"
    assert _result(third)["Result"]["ToolResults"][0]["ToolCallId"] == "call_checklist"


@pytest.mark.decision("D363")
def test_a_flat_script_reused_for_a_continuation_is_named_as_the_cause(tmp_path: Path) -> None:
    common = [
        "--llm-script",
        str(SESSION / "script.json"),
        "--store",
        f"sqlite:{tmp_path / 's.db'}",
    ]
    first = _aptix(tmp_path, "run", str(SESSION / "01-initial.json"), *common)
    (tmp_path / "1.json").write_text(first.stdout)

    second = _aptix(
        tmp_path, "run", str(SESSION / "02-continuation.json"), "--after", "1.json", *common
    )

    assert second.returncode == 1
    assert "the script replayed its first reply" in second.stderr
    assert '{"turns": [[' in second.stderr


@pytest.mark.decision("D363")
def test_a_script_without_replies_for_the_sessions_turn_is_a_usage_error(tmp_path: Path) -> None:
    script = tmp_path / "one-turn.json"
    script.write_text(json.dumps({"turns": [[{"text": "only one"}]]}))
    common = ["--llm-script", str(script), "--store", f"sqlite:{tmp_path / 's.db'}"]
    (tmp_path / "r.json").write_text('{"Instruction": "hi"}')
    (tmp_path / "f.json").write_text('{"SessionId": "s", "TurnId": "t", "Instruction": "more"}')
    first = _aptix(tmp_path, "run", "r.json", *common)
    (tmp_path / "1.json").write_text(first.stdout)

    second = _aptix(tmp_path, "run", "f.json", "--after", "1.json", *common)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 2
    assert "this request is the session's turn 2" in second.stderr


@pytest.mark.decision("D368")
def test_after_a_file_without_a_successful_result_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "failed.json").write_text('{"Successful": false, "Result": null, "Errors": []}')

    run = _aptix(
        tmp_path,
        "run",
        str(REQUESTS / "03-follow-on.json"),
        "--after",
        "failed.json",
        "--llm-script",
        str(ROOT / "examples" / "requests-script.json"),
        "--store",
        "memory",
    )

    assert run.returncode == 2
    assert "--after failed.json: not the InvokeResult of a successful turn" in run.stderr


# --- what aptix run checks, and what it does not ask for ------------------------------------


@pytest.mark.decision("D364")
def test_a_scripted_run_on_the_example_config_asks_for_no_secret(tmp_path: Path) -> None:

    run = _run_hello(tmp_path, "--config", str(EXAMPLE_CONFIG), "--compact", env=_without_secrets())

    assert run.returncode == 0, run.stderr
    assert _result(run)["Result"]["PrimaryOutputText"] == "hello"


@pytest.mark.decision("D364")
def test_a_run_on_the_configs_model_asks_for_its_key_and_no_other(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text('{"Instruction": "hi"}')

    run = _aptix(tmp_path, "run", "r.json", "--config", str(EXAMPLE_CONFIG), env=_without_secrets())

    assert run.returncode == 2
    assert "OPENAI_API_KEY is not set" in run.stderr
    assert "APTIX_KEY_ANA" not in run.stderr


@pytest.mark.decision("D364")
def test_a_live_replay_on_the_example_config_asks_for_no_secret(tmp_path: Path) -> None:
    recording = ROOT / "examples" / "recordings" / "01-initial.json"

    run = _aptix(
        tmp_path, "replay", str(recording), "--live", str(EXAMPLE_CONFIG), env=_without_secrets()
    )

    assert run.returncode in (0, 1), run.stderr  # replayed or diverged: not refused for a key
    assert "is not set" not in run.stderr
    assert run.stdout.startswith("replay ")


@pytest.mark.decision("D365")
def test_a_record_folder_that_cannot_be_made_is_one_line_and_exit_two(tmp_path: Path) -> None:

    run = _run_hello(tmp_path, "--store", "sqlite:x.db", "--record", "/proc/nope")

    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "aptix run: --record /proc/nope: cannot make the folder: No such file or directory"
    ]
    assert not (tmp_path / "x.db").exists()  # refused before the turn


@pytest.mark.decision("D365")
def test_a_record_folder_that_exists_but_takes_no_file_is_refused_before_the_turn(
    tmp_path: Path,
) -> None:
    """Judged by trying, not by permission bits (which say yes to root everywhere)."""
    run = _run_hello(tmp_path, "--store", "sqlite:x.db", "--record", "/proc/self")

    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("aptix run: --record /proc/self: the folder is not writable (")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.decision("D375")
@pytest.mark.parametrize("store", ["sqllite:x.db", "mysql://u@h/db"])
def test_a_store_of_an_unknown_scheme_is_refused_naming_the_known_ones(
    tmp_path: Path, store: str
) -> None:

    run = _run_hello(tmp_path, "--store", store)

    assert run.returncode == 2
    assert "unknown store scheme" in run.stderr
    assert "memory, sqlite:PATH or postgresql://USER@HOST/DB" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "s.json"]


@pytest.mark.decision("D375")
def test_a_config_store_of_an_unknown_scheme_is_refused(tmp_path: Path) -> None:
    from aptix_pipeline.adapters.config.service import ConfigError, load_service_config

    path = tmp_path / "aptix.toml"
    path.write_text('[store]\nurl = "sqllite:x.db"\n')

    with pytest.raises(ConfigError, match=r"\[store\]\.url: unknown store 'sqllite'"):
        load_service_config(path, env={})


@pytest.mark.decision("D367")
def test_the_report_lists_each_checks_rule_ids_once_and_full_keeps_the_trace(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.json").write_text('{"Instruction": "hi"}')
    (tmp_path / "s.json").write_text('[{"text": "hello"}]')
    common = ["run", "r.json", "--llm-script", "s.json", "--store", "memory"]

    summary = json.loads(_aptix(tmp_path, *common, "--report").stderr)
    full = json.loads(_aptix(tmp_path, *common, "--report", "--report-format", "full").stderr)

    assert "trace" not in summary
    assert "transitions" not in summary
    assert json.dumps(summary).count('"AGN-036/3/type-valid"') == 1
    assert summary["checks"][0] == {
        "step": "request_handler",
        "phase": "POST",
        "rules": 15,
        "failed": [],
        "deferred": False,
    }
    assert summary["states"][-1] == "done"
    assert full["trace"]["entries"]
    assert full["transitions"]
    assert json.dumps(full).count("AGN-036/3/type-valid") > 1


@pytest.mark.decision("D374")
@pytest.mark.parametrize("name", ["path.dot", "path.mmd", "path.svg"])
def test_run_diagram_draws_the_live_turns_path(tmp_path: Path, name: str) -> None:

    run = _run_hello(tmp_path, "--store", "memory", "--diagram", name)

    assert run.returncode == 0, run.stderr
    drawn = (tmp_path / name).read_text()
    assert "llm_answered" in drawn
    taken = {"path.mmd": "#1 ", "path.dot": '"#0969da"', "path.svg": "<svg"}[name]
    assert taken in drawn


@pytest.mark.decision("D374")
def test_run_diagram_with_an_unknown_suffix_is_refused_before_the_turn(tmp_path: Path) -> None:

    run = _run_hello(tmp_path, "--store", "sqlite:x.db", "--diagram", "path.txt")

    assert run.returncode == 2
    assert "accepted suffixes" in run.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.decision("D391")
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("missing/path.mmd", "the folder {tmp}/missing does not exist"),
        ("a-folder.mmd", "is a folder, not a file"),
        ("path.txt", "cannot tell the diagram format"),
    ],
)
def test_replay_diagram_that_cannot_be_written_is_refused_before_anything_replays(
    tmp_path: Path, name: str, says: str
) -> None:
    (tmp_path / "a-folder.mmd").mkdir()
    recording = ROOT / "examples" / "recordings" / "01-initial.json"

    run = _aptix(tmp_path, "replay", str(recording), "--diagram", str(tmp_path / name))

    assert run.returncode == 2
    assert run.stdout == ""  # no recording was replayed
    (line,) = run.stderr.splitlines()
    assert line.startswith("aptix replay: --diagram")
    assert says.format(tmp=tmp_path) in line


@pytest.mark.decision("D369")
def test_a_faulted_recordings_replay_says_where_it_faulted_also_quiet(tmp_path: Path) -> None:
    recording = ROOT / "examples" / "recordings" / "02-faulted-unknown-tool-call-id.json"

    loud = _aptix(tmp_path, "replay", str(recording))
    quiet = _aptix(tmp_path, "replay", "--quiet", str(recording))

    expected = "ok, the turn faulted at client_tool_continuation_resolver (rule AGN-036/5/id-match)"
    assert (loud.returncode, quiet.returncode) == (0, 0)
    assert loud.stdout.splitlines()[-1].startswith(expected)
    assert quiet.stdout.splitlines()[-1].startswith(expected)


# --- aptix chat ---------------------------------------------------------------------------------


@pytest.mark.decision("D370")
@pytest.mark.parametrize("script", ["script.json", "turns.json"])
def test_chat_runs_a_continuation_and_a_follow_on_from_piped_lines(
    tmp_path: Path, script: str
) -> None:
    lines = [
        "Please review src/app.py.",
        "this is not JSON",
        '{"path": "src/app.py", "contents": "x = 1"}',
        "Check it against the checklist.",
        "/quit",
        "never read",
    ]

    run = _aptix(
        tmp_path,
        "chat",
        "--llm-script",
        str(SESSION / script),
        "--store",
        f"sqlite:{tmp_path / 'chat.db'}",
        stdin="\n".join(lines) + "\n",
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "Switching to review mode, then reading the file.",
        "`load_config` opens `settings.json` without closing it. Use `with open(path) as f:` "
        "so the file is closed even when parsing fails.",
        "Against the team checklist: the change does what it says, but no test covers a "
        "malformed `settings.json`, and the `except Exception: pass` swallows the error. "
        "Add a test and let the error surface.",
    ]
    assert 'tool read_file (call_read) called with {"path": "src/app.py"}' in run.stderr
    assert "aptix chat: not JSON" in run.stderr
    assert "progress: tool review_checklist: executed" in run.stderr


@pytest.mark.decision("D371")
def test_chat_answers_a_client_tool_with_its_handler_and_its_error_with_bang(
    tmp_path: Path,
) -> None:
    handler = tmp_path / "read_file.py"
    handler.write_text(
        "import json, sys\nargs = json.load(sys.stdin)\n"
        "print(json.dumps({'path': args['path'], 'contents': 'x = 1'}))\n"
    )
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "a"}}]},
                {"text": "read it"},
                {"tool_calls": [{"id": "t1", "name": "run_tests", "arguments": {}}]},
                {"text": "tests failed to run"},
            ]
        )
    )

    run = _aptix(
        tmp_path,
        "chat",
        "--llm-script",
        str(script),
        "--store",
        "memory",
        "--handler",
        f"read_file={sys.executable} {handler}",
        stdin="read a\nrun the tests\n!pytest not installed\n",
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["read it", "tests failed to run"]
    assert f"tool read_file (r1): running {sys.executable}" in run.stderr


@pytest.mark.decision("D373")
def test_chat_says_why_a_turn_failed_and_goes_on(tmp_path: Path) -> None:
    run = _aptix(
        tmp_path,
        "chat",
        "--llm-script",
        str(SESSION / "script.json"),
        "--store",
        "memory",
        "--agent",
        "no-such-agent",
        stdin="hi\n",
    )

    assert run.returncode == 0
    assert "aptix chat: the turn failed:" in run.stderr
    assert run.stdout == ""


@pytest.mark.decision("D371")
def test_chat_runs_the_handler_the_configuration_names(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(
        json.dumps(
            [
                {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "a"}}]},
                {"text": "read it"},
            ]
        )
    )
    (tmp_path / "aptix.toml").write_text(
        f"[chat.handlers]\nread_file = \"{sys.executable} -c 'print(42)'\"\n"
    )

    run = _aptix(
        tmp_path,
        "chat",
        "--config",
        "aptix.toml",
        "--llm-script",
        "s.json",
        "--store",
        "memory",
        stdin="read a\n",
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout == "read it\n"
    assert "called with" not in run.stderr  # not asked: the handler answered


@pytest.mark.decision("D373")
def test_ctrl_c_while_chat_waits_for_input_ends_it_with_130_and_keeps_the_answered_turn(
    tmp_path: Path,
) -> None:
    store = tmp_path / "chat.db"
    chat = subprocess.Popen(
        [
            str(APTIX),
            "chat",
            "--llm-script",
            str(SESSION / "script.json"),
            "--store",
            f"sqlite:{store}",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as on a terminal, even when the tests run where SIGINT is ignored (a
        # background job): Python then leaves it ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert chat.stdin is not None
    assert chat.stdout is not None
    chat.stdin.write("Please review src/app.py.\n")
    chat.stdin.flush()
    first_line = chat.stdout.readline()
    assert chat.stderr is not None
    for line in chat.stderr:  # the turn answered: the chat asks for read_file's result
        if line.startswith("tool read_file (call_read) called with"):
            break

    chat.send_signal(signal.SIGINT)
    code = chat.wait(timeout=60)

    assert first_line == "Switching to review mode, then reading the file.\n"
    assert code == 130
    with sqlite3.connect(store) as db:
        assert db.execute("select count(*) from sessions").fetchone() == (1,)


# --- aptix init ---------------------------------------------------------------------------------


@pytest.mark.decision("D372")
def test_init_writes_a_configuration_that_runs_at_once(tmp_path: Path) -> None:
    made = _aptix(tmp_path, "init", "proj")

    run = _aptix(tmp_path / "proj", "run", "request.json", "--config", "aptix.toml", "--compact")

    assert made.returncode == 0, made.stderr
    assert run.returncode == 0, run.stderr
    assert _result(run)["Result"]["PrimaryOutputText"] == "2 + 3 = 5."


@pytest.mark.decision("D372")
def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "aptix.toml").write_text("# mine\n")

    refused = _aptix(tmp_path, "init")
    kept = (tmp_path / "aptix.toml").read_text()
    forced = _aptix(tmp_path, "init", "--force")

    assert refused.returncode == 2
    assert "aptix.toml already in" in refused.stderr
    assert kept == "# mine\n"
    assert forced.returncode == 0
    assert 'kind = "scripted"' in (tmp_path / "aptix.toml").read_text()
