"""``capture_cases``: a session's or a window's recordings made into a case folder, with
expectations inferred from the recorded turns (docs/EVALS.md, D624)."""

from __future__ import annotations

import asyncio
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from eval_kit import CANDIDATE, RECORDINGS

from aptix_pipeline.adapters.evals import (
    Candidate,
    CaptureError,
    capture_cases,
    load_cases,
    run_evals,
)


@pytest.mark.decision("D624")
def test_a_sessions_turns_are_captured_with_their_kind_and_tools(tmp_path: Path) -> None:
    out = tmp_path / "cases"

    copied = capture_cases(RECORDINGS, out, session="session-1")

    assert [path.name for path in copied] == [
        "01-initial.json",
        "02-faulted-unknown-tool-call-id.json",
        "03-continuation.json",
        "04-follow-on.json",
        "05-streamed-initial.json",  # recorded on another pipeline, whose ids began again
    ]
    expectations = tomllib.loads((out / "expectations.toml").read_text(encoding="utf-8"))
    assert expectations["01-initial"] == {
        "kind": "client_tool_continuation",
        "calls": ["agent_change_mode", "read_file"],
    }
    assert expectations["02-faulted-unknown-tool-call-id"] == {"kind": "error"}
    assert expectations["04-follow-on"] == {"kind": "final", "calls": ["review_checklist"]}
    assert expectations["05-streamed-initial"] == {"kind": "final", "calls": ["Math", "Add"]}


@pytest.mark.decision("D624")
def test_a_captured_folder_checks_what_each_recorded_turn_did(tmp_path: Path) -> None:
    out = tmp_path / "cases"
    capture_cases(RECORDINGS, out, session="session-1")

    report = asyncio.run(run_evals(load_cases(out), Candidate.load(CANDIDATE)))

    # The candidate is the model that recorded the demo session, not the streamed turn.
    assert [result.candidate.failures for result in report.results] == [()] * 4 + [
        (
            "kind final: the turn ended client_tool_continuation",
            "calls Math: not called",
            "calls Add: not called",
        )
    ]


@pytest.mark.decision("D624")
def test_a_window_takes_the_turns_begun_in_it(tmp_path: Path) -> None:
    since = datetime(2026, 1, 1, 0, 0, 0, 8000, tzinfo=UTC)

    copied = capture_cases(RECORDINGS, tmp_path / "late", since=since)
    before = capture_cases(RECORDINGS, tmp_path / "early", until=since)

    assert [p.stem for p in copied] == ["04-follow-on"]
    assert [p.stem for p in before] == [
        "01-initial",
        "02-faulted-unknown-tool-call-id",
        "03-continuation",
        "05-streamed-initial",
    ]


@pytest.mark.decision("D624")
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "give --session ID, or a window"),
        ({"session": "session-9"}, "no recording of that session or window"),
        ({"since": datetime(2026, 1, 1)}, "--since: give a time zone"),
    ],
)
def test_a_capture_that_cannot_be_made_is_refused(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    with pytest.raises(CaptureError, match=message):
        capture_cases(RECORDINGS, tmp_path / "cases", **options)  # type: ignore[arg-type]


@pytest.mark.decision("D624")
def test_a_folder_holding_cases_is_not_captured_into(tmp_path: Path) -> None:
    out = tmp_path / "cases"
    capture_cases(RECORDINGS, out, session="session-1")

    with pytest.raises(CaptureError, match="holds cases already"):
        capture_cases(RECORDINGS, out, session="session-1")
