"""The live page's event stream (adapters/ui/live_hub.py, live_events.py) in ``aptix serve``.

A real service (uvicorn in a thread) with the turn browser mounted: a page reading
``/ui/live/events`` as ana sees each turn the service runs as it runs, streamed or
not — its start, ids, steps, the model's text and its end — and never another
caller's. A page that never reads never holds a turn up (its queue is bounded).
PostgreSQL's commit notices are in tests/adapters/ui/test_ui_live_notify.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_kit import ANA, ANA_KEY, BOB, BOB_KEY, ENV
from live_kit import LiveEvents, live_events
from server_thread import WAIT, server_thread
from ui_kit import ANA as ANA_CALLER
from ui_kit import Browsed, browsed_store, standalone_app, with_token, write_ui_config

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.http.app import create_app
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores import MemoryStore
from aptix_pipeline.adapters.ui.guard import UIGuard
from aptix_pipeline.adapters.ui.live_hub import LIVE_QUEUE, LiveEvent, LiveHub
from aptix_pipeline.engine import Telemetry

REPLY = "Two and three make five, counted on the fingers of one hand."


@pytest.fixture
def browsed(tmp_path: Path) -> Browsed:
    return browsed_store(tmp_path / "browsed")


@pytest.fixture
def service(tmp_path: Path, browsed: Browsed) -> Iterator[str]:
    """The service with the page mounted; its model writes ``REPLY`` four characters
    at a time when asked to stream. Its base URL."""
    config_file = write_ui_config(tmp_path, browsed)
    reply = {"text": REPLY, "usage": {"input_tokens": 12, "output_tokens": 15}}
    script = {"replies": [reply] * 8, "chunk_size": 4, "chunk_delay_seconds": 0.01}
    (tmp_path / "script.json").write_text(json.dumps(script), encoding="utf-8")
    config = load_service_config(config_file, env=ENV)
    with server_thread(create_app(config)) as port:
        yield f"http://127.0.0.1:{port}"


def _signed_in(base: str, key: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=WAIT)
    signed = client.post(
        "/ui/login",
        content=f"key={key}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert signed.status_code == 303
    return client


def _turn(base: str, headers: dict[str, str], request: dict[str, Any]) -> dict[str, Any]:
    """Run a turn through ``POST /v1/agent/execute``; its ``Result`` (streamed: the
    ``result`` event's)."""
    with httpx.Client(base_url=base, timeout=WAIT) as client:
        answer = client.post("/v1/agent/execute", json=request, headers=headers)
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        last = answer.text.strip().split("\n\n")[-1]
        data = next(line[5:] for line in last.splitlines() if line.startswith("data:"))
        body = json.loads(data)
    else:
        body = answer.json()
    result: dict[str, Any] = body["Result"]
    return result


def _ended(events: LiveEvents, turn_id: str) -> dict[str, Any]:
    return events.wait_for(
        lambda name, data: (
            name == "turn" and data["kind"] == "turn_ended" and data["turn"] == turn_id
        )
    )


def _text_of(events: LiveEvents, run: str) -> list[str]:
    return [data["text"] for data in events.of("text") if data["run"] == run]


@pytest.mark.decision("D689")
def test_a_streamed_turn_is_followed_event_by_event_with_its_text_in_pieces(service: str) -> None:
    with live_events(_signed_in(service, ANA_KEY), "/ui/live/events") as events:
        result = _turn(service, ANA, {"Instruction": "What is 2 + 3?", "Stream": True})
        ended = _ended(events, result["TurnId"])
        stored = events.wait_for(
            lambda name, data: name == "stored" and data["turn"] == ended["turn"]
        )  # before the stream closes: it may come after the turn's end

    run = ended["run"]
    kinds = [data["kind"] for data in events.of("turn") if data["run"] == run]
    pieces = _text_of(events, run)
    assert kinds[0] == "turn_started"
    assert "turn_identified" in kinds
    assert "step_started" in kinds
    assert "llm_call" in kinds  # the model call's trace entry, as the stream gives it
    assert kinds[-1] == "turn_ended"
    assert "".join(pieces) == REPLY == result["PrimaryOutputText"]
    assert len(pieces) > 1  # as the model wrote it, not once at the end
    started = [d["round"] for d in events.of("turn") if d["kind"] == "model_call_started"]
    rounds = {data["round"] for data in events.of("text") if data["run"] == run}
    assert rounds == set(started) == {1}  # each piece names the model call that wrote it
    assert ended["status"] == "completed"
    assert ended["session"] == result["SessionId"]
    assert (ended["input_tokens"], ended["output_tokens"]) == (12, 15)
    assert stored["org"] == "acme"
    assert stored["user"] == "ana"


@pytest.mark.decision("D689")
def test_a_turn_that_is_not_streamed_is_followed_too_its_text_in_one_piece(service: str) -> None:
    with live_events(_signed_in(service, ANA_KEY), "/ui/live/events") as events:
        result = _turn(service, ANA, {"Instruction": "What is 2 + 3?"})
        ended = _ended(events, result["TurnId"])

    run = ended["run"]
    steps = [data["step"] for data in events.of("turn") if data.get("kind") == "step_started"]
    assert _text_of(events, run) == [REPLY]
    assert [data["round"] for data in events.of("text")] == [None]  # given at the end
    assert "llm_client" in steps
    assert "response_builder" in steps
    assert ended["status"] == "completed"


@pytest.mark.decision("D689")
def test_a_page_sees_only_its_own_callers_turns(service: str) -> None:
    with (
        live_events(_signed_in(service, ANA_KEY), "/ui/live/events") as anas,
        live_events(_signed_in(service, BOB_KEY), "/ui/live/events") as bobs,
    ):
        bob_turn = _turn(service, BOB, {"Instruction": "Bob asks", "Stream": True})
        ana_turn = _turn(service, ANA, {"Instruction": "Ana asks", "Stream": True})
        ana_run = _ended(anas, ana_turn["TurnId"])["run"]
        bob_run = _ended(bobs, bob_turn["TurnId"])["run"]

    def turns_seen(events: LiveEvents) -> set[str]:
        return {d["turn"] for n, d in events.events if n in ("turn", "stored") and d.get("turn")}

    assert turns_seen(anas) == {ana_turn["TurnId"]}
    assert turns_seen(bobs) == {bob_turn["TurnId"]}
    assert {d["run"] for d in anas.of("turn") + anas.of("text")} == {ana_run}
    assert {d["run"] for d in bobs.of("turn") + bobs.of("text")} == {bob_run}


@pytest.mark.decision("D689")
def test_a_recorded_turn_is_followed_alike(tmp_path: Path, browsed: Browsed) -> None:
    recorded = tmp_path / "recorded"
    tables = f'[recording]\ndirectory = "{recorded}"\nredact = true\n[ui]\nenabled = true\n'
    config_file = write_ui_config(tmp_path, browsed, ui=tables)
    script = {"replies": [{"text": REPLY}], "chunk_size": 8, "chunk_delay_seconds": 0.01}
    (tmp_path / "script.json").write_text(json.dumps(script), encoding="utf-8")
    with server_thread(create_app(load_service_config(config_file, env=ENV))) as port:
        base = f"http://127.0.0.1:{port}"
        with live_events(_signed_in(base, ANA_KEY), "/ui/live/events") as events:
            result = _turn(base, ANA, {"Instruction": "Record this", "Stream": True})
            ended = _ended(events, result["TurnId"])

    assert "".join(_text_of(events, ended["run"])) == REPLY
    assert len(_text_of(events, ended["run"])) > 1
    assert len(list(recorded.glob("*.json"))) == 1  # recorded, and followed as it ran


@pytest.mark.decision("D689")
def test_the_live_page_names_its_event_stream_only_where_there_is_one(
    service: str, browsed: Browsed
) -> None:
    with closing(_signed_in(service, ANA_KEY)) as client:
        mounted = client.get("/ui/live")
    refused = httpx.get(f"{service}/ui/live/events", timeout=WAIT)
    guard = UIGuard.start()
    with (
        server_thread(standalone_app(browsed, guard)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as standalone,
    ):
        with_token(standalone, guard.token)
        polled = standalone.get("/live")

    assert "<section id='live-running' data-events='/ui/live/events'>" in mounted.text
    assert "/ui/static/ui_live.js" in mounted.text
    assert refused.status_code == 303  # no key: sent to sign in, no events
    assert polled.status_code == 200
    assert "live-running" not in polled.text  # SQLite announces nothing: the poll alone
    assert "ui_live.js" not in polled.text


@pytest.mark.decision("D690")
def test_a_page_that_never_reads_misses_events_and_never_holds_a_turn_up() -> None:
    hub = LiveHub()
    pipeline = embedded_pipeline(
        llm=ScriptedLLM([{"text": REPLY}] * 3),
        store=MemoryStore(),
        telemetry=Telemetry.off(),
        listeners=[hub.listener],
    )

    async def scenario() -> tuple[bool, int, bool]:
        with hub.subscribe(("acme", "ana")) as stuck:
            for n in range(LIVE_QUEUE + 10):  # fill the page's queue
                hub.publish(LiveEvent("stored", "acme", "ana", {"n": n}))
            result = await pipeline.execute({"Instruction": "Still there?"}, ANA_CALLER)
            return result.successful, stuck.queue.qsize(), stuck.lagged

    successful, queued, lagged = asyncio.run(scenario())

    assert successful
    assert queued == LIVE_QUEUE
    assert lagged  # told it missed some: the page reads its feed afresh


@pytest.mark.decision("D689")
def test_a_failed_turn_ends_failed_with_its_error_and_nothing_stored() -> None:
    hub = LiveHub()
    pipeline = embedded_pipeline(
        llm=ScriptedLLM([{"text": REPLY}]),
        store=MemoryStore(),
        telemetry=Telemetry.off(),
        listeners=[hub.listener],
    )
    unknown = {"SessionId": "session_nope", "TurnId": "turn_nope", "Instruction": "x"}

    async def scenario() -> list[LiveEvent]:
        with hub.subscribe(("acme", "ana")) as page:
            result = await pipeline.execute(unknown, ANA_CALLER)
            assert not result.successful
            return [page.queue.get_nowait() for _ in range(page.queue.qsize())]

    events = asyncio.run(scenario())

    ended = events[-1]
    assert (ended.name, ended.data["kind"]) == ("turn", "turn_ended")
    assert ended.data["status"] == "failed"
    assert ended.data["error"] == "not_found"
    assert "stored" not in [event.name for event in events]
    assert "text" not in [event.name for event in events]
