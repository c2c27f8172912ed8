"""``aptix fork SESSION TURN`` (adapters/cli/sessions.py, docs/FORKS.md, D610).

Real ``aptix`` processes on a real store: four turns with ``aptix run``, a fork after
the second with ``aptix fork``, then a turn on the fork with ``aptix run``. The model
is a loopback fake OpenAI server, so the test reads what each turn sent it. A memory
store lives as long as one process, so the CLI's stores here are a SQLite file and a
PostgreSQL database; the memory store forks in process (the store contract) and
behind ``aptix serve`` (test_http_fork.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_kit import APTIX, write_json
from fork_kit import ANSWERS, MODEL_ENV, said, store_url, write_fork_config

from aptix_pipeline.testing import fake_openai_server

ORG_USER = ("--org", "acme", "--user", "ana")


def aptix(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``aptix`` in ``folder`` with the fake model's key in its environment."""
    return subprocess.run(
        [str(APTIX), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=folder,
        env={**os.environ, **MODEL_ENV},
    )


def run_turn(folder: Path, config: Path, request: dict[str, Any]) -> dict[str, Any]:
    """``aptix run`` of ``request`` as acme/ana; its ``Result``."""
    done = aptix(
        folder,
        "run",
        str(write_json(folder / "request.json", request)),
        "--config",
        str(config),
        "--compact",
        *ORG_USER,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)["Result"]
    return result


@pytest.mark.decision("D610")
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_fork_from_turn_two_of_four_continues_as_its_own_session_over_the_cli(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with fake_openai_server(ANSWERS) as model:
        config = write_fork_config(tmp_path, model.base_url, store_url(kind, request, tmp_path))
        turns: list[dict[str, Any]] = []
        for n in range(1, 5):
            asked: dict[str, Any] = {"Instruction": f"question {n}"}
            if turns:
                asked |= {"SessionId": turns[-1]["SessionId"], "TurnId": turns[-1]["TurnId"]}
            turns.append(run_turn(tmp_path, config, asked))
        source = turns[0]["SessionId"]

        forked = aptix(
            tmp_path, "fork", source, turns[1]["TurnId"], "--config", str(config), *ORG_USER
        )
        assert forked.returncode == 0, forked.stderr
        fork_id = forked.stdout.strip()
        went_on = run_turn(
            tmp_path,
            config,
            {"SessionId": fork_id, "TurnId": turns[1]["TurnId"], "Instruction": "question 2b"},
        )
        where = ("--store", store_url(kind, request, tmp_path), *ORG_USER)
        shown = aptix(tmp_path, "sessions", "show", source, *where)
        shown_json = aptix(tmp_path, "sessions", "show", fork_id, "--json", *where)

    assert fork_id
    assert fork_id != source
    assert went_on["SessionId"] == fork_id
    assert went_on["PrimaryOutputText"] == "answer 2b"
    assert said(model.requests[-1]) == [
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
        "question 2b",
    ]
    assert said(model.requests[3])[-1] == "question 4"  # the source's own four turns went first
    assert shown.returncode == 0, shown.stderr
    assert f"fork {fork_id} after turn {turns[1]['TurnId']}" in shown.stdout
    detail = json.loads(shown_json.stdout)
    assert detail["session"]["forked_from"] == {
        "session_id": source,
        "turn_id": turns[1]["TurnId"],
        "messages": 4,
    }
    assert [entry["content"] for entry in detail["transcript"]] == ["question 2b", "answer 2b"]


@pytest.mark.decision("D610")
def test_aptix_fork_refuses_with_the_reason_and_exit_1(tmp_path: Path) -> None:
    with fake_openai_server(ANSWERS[:1]) as model:
        config = write_fork_config(tmp_path, model.base_url, f"sqlite:{tmp_path / 'aptix.db'}")
        first = run_turn(tmp_path, config, {"Instruction": "question 1"})
        session, turn = first["SessionId"], first["TurnId"]

        other = aptix(
            tmp_path,
            "fork",
            session,
            turn,
            "--config",
            str(config),
            "--org",
            "globex",
            "--user",
            "ana",
        )
        no_turn = aptix(tmp_path, "fork", session, "turn-x", "--config", str(config), *ORG_USER)
        as_json = aptix(
            tmp_path, "fork", session, turn, "--config", str(config), "--json", *ORG_USER
        )

    assert other.returncode == 1
    assert "not_found" in other.stderr
    assert "another org or user" in other.stderr
    assert no_turn.returncode == 1
    assert "no turn 'turn-x'" in no_turn.stderr
    assert as_json.returncode == 0, as_json.stderr
    fork = json.loads(as_json.stdout)
    assert fork["ForkedFrom"] == {"SessionId": session, "TurnId": turn, "Messages": 2}
    assert (fork["Org"], fork["User"], fork["Mode"]) == ("acme", "ana", "general")
