"""``aptix sessions list|show`` and ``aptix ui``'s refusals, run as a user runs them.

Each command is the installed ``aptix`` in a process of its own, on a real SQLite
store holding the demo session and another caller's (tests/kits/ui_kit.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cli_kit import aptix_run, stdout_json
from repo import ROOT
from ui_kit import Browsed, browsed_store

from aptix_pipeline.adapters.ui import is_loopback

APTIX = Path(sys.executable).parent / "aptix"


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return browsed_store(tmp_path_factory.mktemp("sessions"))


def aptix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(APTIX), *args], capture_output=True, text=True, check=False)


def test_list_owners_names_who_holds_sessions(browsed: Browsed) -> None:
    run = aptix("sessions", "list", "--store", browsed.store_url, "--owners", "--json")

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [
        {"org": "acme", "user": "ana", "sessions": 1},
        {"org": "globex", "user": "zoe", "sessions": 1},
    ]


@pytest.mark.decision("D346")
def test_list_shows_the_callers_sessions_with_mode_turns_and_times(browsed: Browsed) -> None:
    run = aptix(
        "sessions", "list", "--store", browsed.store_url, "--org", "acme", "--user", "ana", "--json"
    )

    assert run.returncode == 0, run.stderr
    [session] = json.loads(run.stdout)
    assert session["id"] == browsed.session_id
    assert (session["mode"], session["turns"]) == ("review", 2)
    assert session["last_activity"] > session["created_at"]


def test_list_prints_a_table_for_people(browsed: Browsed) -> None:
    run = aptix("sessions", "list", "--store", browsed.store_url, "--org", "acme", "--user", "ana")

    header, row = run.stdout.splitlines()
    assert header.split() == [
        *("SESSION", "MODE", "STATUS", "LAST", "ACTIVITY", "TURNS", "TOKENS", "COST"),
        *("LAST", "ERROR", "PREVIEW"),
    ]
    assert row.split()[:3] == [browsed.session_id, "review", "completed"]


@pytest.mark.decision("D346")
def test_show_prints_the_turns_and_the_transcript_with_its_content(browsed: Browsed) -> None:
    run = aptix(
        "sessions",
        "show",
        browsed.session_id,
        "--store",
        browsed.store_url,
        "--org",
        "acme",
        "--user",
        "ana",
    )

    assert run.returncode == 0, run.stderr
    text = run.stdout
    assert f"{browsed.first_turn}  completed  mode general  tokens 942 in / 79 out" in text
    assert "server tool result call_checklist" in text
    assert "user: Check it against the team's review checklist." in text
    assert "mode change general -> review" in text


def test_show_json_holds_the_session_turns_and_transcript(browsed: Browsed) -> None:
    run = aptix(
        "sessions",
        "show",
        browsed.session_id,
        "--store",
        browsed.store_url,
        "--org",
        "acme",
        "--user",
        "ana",
        "--json",
    )

    data = json.loads(run.stdout)
    assert [t["id"] for t in data["turns"]] == [browsed.first_turn, browsed.second_turn]
    assert data["turns"][0]["usage"] == {
        "InputTokens": 942,
        "OutputTokens": 79,
        "TotalTokens": 1021,
    }
    assert [m["seq"] for m in data["transcript"]] == list(range(1, len(data["transcript"]) + 1))
    assert data["session"]["mode_history"][0]["NewMode"] == "review"


@pytest.mark.decision("D346")
def test_another_callers_session_is_not_found_and_exits_1(browsed: Browsed) -> None:
    run = aptix(
        "sessions",
        "show",
        browsed.other_session,
        "--store",
        browsed.store_url,
        "--org",
        "acme",
        "--user",
        "ana",
    )

    assert run.returncode == 1
    assert run.stderr.strip() == (
        f"aptix sessions: no session '{browsed.other_session}' for org 'acme' and user 'ana'"
    )


@pytest.mark.decision("D357")
@pytest.mark.parametrize(
    ("store", "says"),
    [
        ("sqlite:{tmp}/missing.db", "no store at {tmp}/missing.db: the SQLite file does not exist"),
        ("sqllite:x.db", "unknown store scheme 'sqllite'"),
        ("memory", "a memory store holds nothing to browse"),
    ],
)
def test_a_store_that_cannot_be_browsed_exits_2_and_creates_nothing(
    tmp_path: Path, store: str, says: str
) -> None:
    run = aptix("sessions", "list", "--store", store.format(tmp=tmp_path))

    assert run.returncode == 2
    assert says.format(tmp=tmp_path) in run.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.decision("D358")
def test_aptix_ui_refuses_a_host_that_is_not_loopback_without_allow_remote(
    browsed: Browsed,
) -> None:
    run = aptix("ui", "--store", browsed.store_url, "--host", "0.0.0.0")

    assert run.returncode == 2
    assert "not a loopback address" in run.stderr
    assert "--allow-remote" in run.stderr


def test_aptix_ui_refuses_a_recordings_folder_that_does_not_exist(tmp_path: Path) -> None:
    run = aptix("ui", "--recordings", str(tmp_path / "nope"))

    assert run.returncode == 2
    assert "no such folder" in run.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.4", False),
        ("example.org", False),
    ],
)
def test_loopback_hosts_are_this_machine_only(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.decision("D360", "D396")
def test_the_demo_ends_with_the_command_that_opens_the_page_on_its_store(tmp_path: Path) -> None:
    db, recordings = tmp_path / "demo.db", tmp_path / "recordings"
    demo = ROOT / "examples" / "demo.py"

    run = subprocess.run(
        [sys.executable, str(demo), "--db", str(db), "--record", str(recordings), "--out", "."],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    command = run.stdout.splitlines()[-1].split()
    listed = subprocess.run(
        [
            str(APTIX),
            "sessions",
            "list",
            "--store",
            command[3],
            "--org",
            "acme",
            "--user",
            "ana",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )

    assert command == [str(APTIX), "ui", "--store", "sqlite:demo.db", "--recordings", "recordings"]
    assert [session["turns"] for session in json.loads(listed.stdout)] == [2]
    assert len(list(recordings.glob("*.json"))) == 3
    # as printed, in a shell without the virtual environment on its PATH (on a free port)
    shell_path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != APTIX.parent
    )
    with subprocess.Popen(
        ["bash", "-c", " ".join(command) + " --port 0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PATH": shell_path},
    ) as page:
        try:
            assert page.stdout is not None
            first = page.stdout.readline()
            url = first.split(" on ", 1)[1].split()[0]
            answer = httpx.get(url, timeout=10)
        finally:
            page.terminate()

    assert first.startswith("aptix ui: the turn browser on http://127.0.0.1:")
    assert answer.status_code == 200
    assert "acme" in answer.text


def test_without_a_store_sessions_reads_where_aptix_run_keeps_them(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"text": "Hello."}]', encoding="utf-8")
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    before = aptix("sessions", "list", "--org", "local", "--user", "local")

    run = subprocess.run(
        [str(APTIX), "run", "request.json", "--llm-script", str(script)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    listed = aptix("sessions", "list", "--org", "local", "--user", "local", "--json")

    assert before.returncode == 2  # no store yet: browsing never makes one
    assert run.returncode == 0, run.stderr
    [session] = json.loads(listed.stdout)
    assert session["id"] == json.loads(run.stdout)["Result"]["SessionId"]
    assert not (tmp_path / "aptix.db").exists()


@pytest.mark.decision("D390")
def test_show_reads_as_the_same_default_caller_as_aptix_run(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'aptix.db'}"
    ran = aptix_run(tmp_path, {"Instruction": "hi"}, [{"text": "hello"}], "--store", store)
    session = stdout_json(ran)["Result"]["SessionId"]

    shown = aptix("sessions", "show", session, "--store", store, "--json")
    elsewhere = aptix("sessions", "show", session, "--store", store, "--org", "acme", "--user", "x")

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["session"]["id"] == session
    assert elsewhere.returncode == 1


@pytest.mark.decision("D392")
@pytest.mark.parametrize("command", ["ui", "serve"])
def test_a_port_another_program_holds_is_refused_before_anything_says_serving(
    command: str, tmp_path: Path
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        given = (
            ["--recordings", str(ROOT / "examples" / "recordings")]
            if command == "ui"
            else ["--config", str(ROOT / "examples" / "quickstart" / "aptix.toml")]
        )
        run = subprocess.run(
            [str(APTIX), command, *given, "--port", str(port)],
            capture_output=True,
            text=True,
            env={**os.environ, "APTIX_KEY_ANA": "a-key"},
            timeout=60,
        )

    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.strip() == (
        f"aptix {command}: --host 127.0.0.1 --port {port}: "
        "the address is in use (another program listens there)"
    )
