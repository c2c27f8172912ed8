"""A script keyed by turn played for every session at once (``TurnScript``, D393).

The quick start's service plays one script for whoever calls it: each session gets
the script's first turn on its first request, the rest of that turn on its
continuation, the next turn on a follow-on — concurrently too — and the calls are a
model's like any other, recorded and replayed. Over real HTTP, ``aptix serve`` on
``examples/quickstart/aptix.toml`` answers any number of sessions.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_kit import aptix_serve
from repo import ROOT

from aptix_pipeline import Caller, InvokeResult, RecordingOptions, embedded_pipeline, replay
from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.embedded import build_pipeline
from aptix_pipeline.adapters.models import ScriptError, TurnScript

ANA = Caller(org="acme", user="ana")
SCRIPT = """{"turns": [
  [{"tool_calls": [{"id": "call_read", "name": "read_file", "arguments": {"path": "a.py"}}]},
   {"text": "answer one"}],
  [{"text": "answer two"}]
]}"""
QUICKSTART = ROOT / "examples" / "quickstart" / "aptix.toml"


def _results(call_id: str = "call_read") -> list[dict[str, Any]]:
    return [{"ToolCallId": call_id, "ExecutionMs": 1, "ResultJson": '{"text": "x = 1"}'}]


def _ids(result: InvokeResult[Any]) -> dict[str, str]:
    assert result.result is not None, result.errors
    return {"SessionId": result.result.session_id, "TurnId": result.result.turn_id}


async def _session(pipeline: Any) -> list[str]:
    """A whole session: initial (a tool call), continuation, follow-on; what each got."""
    first = await pipeline.execute({"Instruction": "review a.py"}, ANA)
    second = await pipeline.execute({**_ids(first), "ToolResults": _results()}, ANA)
    third = await pipeline.execute({**_ids(second), "Instruction": "more"}, ANA)
    return [
        str(first.result.kind),
        second.result.primary_output_text,
        third.result.primary_output_text,
    ]


@pytest.mark.decision("D393")
async def test_every_session_plays_the_script_from_its_own_first_turn() -> None:
    script = TurnScript(SCRIPT)
    pipeline = embedded_pipeline(llm=script, interceptors=[script], store="memory")

    sessions = await asyncio.gather(*(_session(pipeline) for _ in range(5)))

    assert sessions == [["client_tool_continuation", "answer one", "answer two"]] * 5
    assert len(script.requests) == 15


@pytest.mark.decision("D393", "D555")
async def test_without_its_interceptor_the_script_places_each_call_by_its_messages() -> None:
    script = TurnScript(SCRIPT)
    pipeline = embedded_pipeline(llm=script, store="memory")

    result = await pipeline.execute({"Instruction": "hi"}, ANA)

    assert result.successful
    assert result.result is not None
    assert [call.name for call in result.result.tool_calls or ()] == ["read_file"]


@pytest.mark.decision("D393")
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[{"text": "flat"}]', "keyed by turn"),
        ('{"turns": [[{"text": "ok"}], []]}', r"turns\[1\] must be a non-empty list"),
    ],
)
def test_a_script_not_keyed_by_turn_or_malformed_is_refused_at_once(text: str, says: str) -> None:
    with pytest.raises(ScriptError, match=says):
        TurnScript(text)


@pytest.mark.decision("D393")
async def test_a_turn_past_the_script_fails_naming_the_turn_to_add() -> None:
    script = TurnScript('{"turns": [[{"text": "only one"}]]}')
    pipeline = embedded_pipeline(llm=script, interceptors=[script], store="memory")

    first = await pipeline.execute({"Instruction": "hi"}, ANA)
    second = await pipeline.execute({**_ids(first), "Instruction": "again"}, ANA)

    assert first.successful
    assert not second.successful
    assert "this request is the session's turn 2" in second.errors[0].message


@pytest.mark.decision("D393")
async def test_its_calls_are_recorded_and_replay() -> None:
    script = TurnScript(SCRIPT)
    pipeline = embedded_pipeline(
        llm=script,
        interceptors=[script],
        store="memory",
        recording=RecordingOptions(redact=False),
    )

    report = await pipeline.run({"Instruction": "review a.py"}, ANA)
    assert report.recording is not None
    outcome = await replay(report.recording)

    assert [c.name for c in report.recording.calls if c.name.startswith("LLM")] == ["LLM.complete"]
    assert outcome.ok, outcome.divergence


@pytest.mark.decision("D393")
async def test_the_configuration_of_a_keyed_script_builds_a_pipeline_for_every_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APTIX_KEY_ANA", "unused")
    config = load_service_config(QUICKSTART)
    pipeline = build_pipeline(config, store="memory")

    sessions = await asyncio.gather(*(_session(pipeline) for _ in range(3)))

    assert {tuple(s) for s in sessions} == {
        (
            "client_tool_continuation",
            "app.py opens a file without closing it: use `with open(path) as f:`.",
            "The same file has no test for a missing path; add one.",
        )
    }


@pytest.mark.decision("D393")
def test_the_quick_start_service_answers_any_number_of_sessions(tmp_path: Path) -> None:
    env = {"APTIX_KEY_ANA": "quickstart-key"}
    headers = {"Authorization": "Bearer quickstart-key"}
    shutil.copytree(QUICKSTART.parent, tmp_path / "quickstart")  # its log goes beside it
    config = tmp_path / "quickstart" / "aptix.toml"
    with aptix_serve(config, env) as (base, _log), httpx.Client(base_url=base) as client:
        answers = []
        for _ in range(3):  # three new sessions, each through its continuation
            first = client.post(
                "/v1/agent/execute", json={"Instruction": "Review app.py"}, headers=headers
            )
            ids = {k: first.json()["Result"][k] for k in ("SessionId", "TurnId")}
            second = client.post(
                "/v1/agent/execute", json={**ids, "ToolResults": _results()}, headers=headers
            )
            answers.append((first.status_code, first.json()["Result"]["Kind"], second.status_code))

    assert answers == [(200, "client_tool_continuation", 200)] * 3


@pytest.mark.decision("D393")
def test_five_new_sessions_then_a_continuation_and_a_follow_on_over_http(tmp_path: Path) -> None:
    headers = {"Authorization": "Bearer quickstart-key"}
    shutil.copytree(QUICKSTART.parent, tmp_path / "quickstart")
    config = tmp_path / "quickstart" / "aptix.toml"
    env = {"APTIX_KEY_ANA": "quickstart-key"}
    with aptix_serve(config, env) as (base, _log), httpx.Client(base_url=base) as client:

        def post(body: dict[str, Any]) -> httpx.Response:
            return client.post("/v1/agent/execute", json=body, headers=headers)

        # five new sessions before any goes on: one queue would give the second the
        # first's answer, and run out at the fourth request
        firsts = [post({"Instruction": "Review app.py"}) for _ in range(5)]
        ids = [{k: r.json()["Result"][k] for k in ("SessionId", "TurnId")} for r in firsts]
        continued = post({**ids[2], "ToolResults": _results()})
        after = {k: continued.json()["Result"][k] for k in ("SessionId", "TurnId")}
        follow_on = post({**after, "Instruction": "Anything else?"})

    assert [(r.status_code, r.json()["Result"]["Kind"]) for r in firsts] == [
        (200, "client_tool_continuation")
    ] * 5
    assert len({i["SessionId"] for i in ids}) == 5
    assert continued.status_code == 200, continued.text
    assert continued.json()["Result"]["PrimaryOutputText"].startswith("app.py opens a file")
    assert follow_on.status_code == 200, follow_on.text
    assert follow_on.json()["Result"]["PrimaryOutputText"].startswith("The same file has no test")


@pytest.mark.decision("D555")
@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        (["system", "user"], "first"),  # turn 1, nothing played: its first reply
        (["system", "user", "assistant", "tool"], "answer one"),  # turn 1, one played
        (["system", "user", "assistant", "user"], "answer two"),  # turn 2
    ],
)
async def test_a_call_no_interceptor_placed_is_placed_by_its_messages(
    roles: list[str], expected: str
) -> None:
    from aptix_pipeline import ChatMessage, ChatRole, LLMRequest

    script = TurnScript(
        '{"turns": [[{"text": "first"}, {"text": "answer one"}], [{"text": "answer two"}]]}'
    )
    messages = [
        ChatMessage(role=ChatRole(role), content="x", tool_call_id="c1" if role == "tool" else None)
        for role in roles
    ]
    reply = await script.complete(LLMRequest(model="m", mode="general", messages=messages))
    assert reply.text == expected


@pytest.mark.decision("D555")
async def test_a_call_with_no_user_message_and_no_interceptor_still_says_how_to_place_it() -> None:
    from aptix_pipeline import ChatMessage, ChatRole, LLMRequest

    script = TurnScript('{"turns": [[{"text": "first"}]]}')
    request = LLMRequest(
        model="m", mode="general", messages=[ChatMessage(role=ChatRole.SYSTEM, content="x")]
    )
    with pytest.raises(ScriptError, match="interceptors=\\[script\\]"):
        await script.complete(request)
