"""``aptix sessions`` shows every turn's trace, failed turns included (issue 33 part 2):
``list`` the status and last error of each session, ``show`` each kept trace with
its path, ``traces`` a caller's traces, a failed first turn without a session too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trace_kit import FailedTurns, failed_turns_store

APTIX = Path(sys.executable).with_name("aptix")
WHO = ("--org", "acme", "--user", "ana")


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> FailedTurns:
    return failed_turns_store(tmp_path_factory.mktemp("traces"))


def aptix(*args: str) -> subprocess.CompletedProcess[str]:
    run = subprocess.run([str(APTIX), *args], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    return run


@pytest.mark.decision("D659")
def test_list_shows_each_sessions_status_and_last_error(failed: FailedTurns) -> None:
    as_json = aptix("sessions", "list", "--store", failed.store_url, *WHO, "--json")
    table = aptix("sessions", "list", "--store", failed.store_url, *WHO)

    [session] = json.loads(as_json.stdout)
    assert session["status"] == "faulted"
    assert session["last_error"]["code"] == "port_failed"
    assert "the model is gone" in session["last_error"]["message"]
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["SESSION", "MODE", "STATUS"]
    assert "LAST ERROR" in header
    assert row.split()[:3] == [failed.session_id, "general", "faulted"]
    assert "port_failed: the LLM failed" in row


@pytest.mark.decision("D659")
def test_show_lists_the_failed_turns_trace_with_its_path(failed: FailedTurns) -> None:
    text = aptix("sessions", "show", failed.session_id, "--store", failed.store_url, *WHO).stdout
    as_json = aptix(
        "sessions", "show", failed.session_id, "--store", failed.store_url, *WHO, "--json"
    )

    assert "faulted  turn -  at llm_client  port_failed" in text
    assert "path received > validated > session_restored" in text
    assert f"done  turn {failed.done_turn}" in text
    traces = json.loads(as_json.stdout)["traces"]
    assert [t["outcome"] for t in traces] == ["faulted", "done"]
    assert traces[0]["states"][-1] == "faulted"
    assert traces[0]["error"]["code"] == "port_failed"
    assert any(step.get("messages_added") == ["user"] for step in traces[1]["steps"])


@pytest.mark.decision("D659")
def test_traces_lists_a_failed_first_turn_that_left_no_session(failed: FailedTurns) -> None:
    listed = json.loads(
        aptix("sessions", "traces", "--store", failed.store_url, *WHO, "--json").stdout
    )
    text = aptix("sessions", "traces", "--store", failed.store_url, *WHO, "--limit", "1").stdout
    of_session = json.loads(
        aptix(
            "sessions",
            "traces",
            "--session",
            failed.session_id,
            "--store",
            failed.store_url,
            *WHO,
            "--json",
        ).stdout
    )

    assert [(t["session_id"], t["outcome"]) for t in listed] == [
        (None, "faulted"),
        (failed.session_id, "faulted"),
        (failed.session_id, "done"),
    ]
    assert text.startswith("(no session) ")
    assert "faulted" in text
    assert len(of_session) == 2
    other = aptix("sessions", "traces", "--store", failed.store_url, "--org", "x", "--user", "y")
    assert other.stdout.strip() == "no kept traces for this org and user"
