"""The turn browser shows that a recorded turn ran durably, and on which workers (D537)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest
from engine_kit import CALLER, make_pipeline, text
from server_thread import WAIT, server_thread
from ui_kit import standalone_app, with_token

from aptix_pipeline import MemoryStore, Recorder, RecordingOptions, write_recording
from aptix_pipeline.adapters.ui.guard import UIGuard


@pytest.mark.decision("D537")
async def test_a_durable_recording_names_its_workflow_and_workers(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    pipeline, _ = make_pipeline(MemoryStore(), [text("hello"), text("again")])
    from aptix_pipeline import Pipeline

    recording_pipeline = Pipeline(
        pipeline.ports, pipeline.options, interceptors=[Recorder(RecordingOptions())]
    )
    local = await recording_pipeline.run({"Instruction": "hi"}, CALLER)
    durable = await recording_pipeline.run({"Instruction": "hi again"}, CALLER)
    assert local.recording is not None
    assert durable.recording is not None
    write_recording(local.recording, folder)
    write_recording(
        dataclasses.replace(
            durable.recording,
            durable={
                "workflow_id": "aptix-turn-0123abcd",
                "run_id": "run-1",
                "task_queue": "aptix-turns",
                "workers": ["worker-a", "worker-<b>"],
            },
        ),
        folder,
    )
    guard = UIGuard.start()
    with (
        server_thread(standalone_app(None, guard, recordings=folder)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        index = client.get("/").text
        rows = index.split("<tr data-recording=")[1:]
        assert sum("durable" in row for row in rows) == 1
        names = [row.split("'")[1] for row in rows]
        pages = {name: client.get("/recording", params={"name": name}).text for name in names}
    [durable_page] = [page for page in pages.values() if "badge durable" in page]
    assert "<code>aptix-turn-0123abcd</code>" in durable_page
    assert "<code>worker-a</code>, <code>worker-&lt;b&gt;</code>" in durable_page
    assert "moved between workers" in durable_page
    assert sum("badge durable" in page for page in pages.values()) == 1


@pytest.mark.decision("D678")
async def test_a_durable_recording_lists_each_activitys_worker_and_attempts(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "recordings"
    pipeline, _ = make_pipeline(MemoryStore(), [text("hello")])
    from aptix_pipeline import Pipeline

    recording_pipeline = Pipeline(
        pipeline.ports, pipeline.options, interceptors=[Recorder(RecordingOptions())]
    )
    report = await recording_pipeline.run({"Instruction": "hi"}, CALLER)
    assert report.recording is not None
    activities = [
        {"activity": "aptix.llm.complete", "worker": "worker-a", "attempt": 3},
        {"activity": "aptix.tool.call", "failed": "ConnectionError", "retry_state": "TIMEOUT"},
        {"activity": "aptix.store.apply", "worker": "worker-b", "attempt": 1},
    ]
    write_recording(
        dataclasses.replace(
            report.recording,
            durable={
                "workflow_id": "aptix-turn-77",
                "task_queue": "q",
                "workers": ["worker-a", "worker-b"],
                "activities": activities,
            },
        ),
        folder,
    )
    guard = UIGuard.start()
    with (
        server_thread(standalone_app(None, guard, recordings=folder)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        index = with_token(client, guard.token).text
        name = index.split("<tr data-recording=")[1].split("'")[1]
        shown = client.get("/recording", params={"name": name}).text
    rows = shown.split("<tr data-activity=")[1:]
    assert len(rows) == 3
    assert "model call <code>aptix.llm.complete</code>" in rows[0]
    assert "<td>worker-a</td><td>attempt 3 (2 retries)</td>" in rows[0]
    assert "<td class='error'>failed: ConnectionError (TIMEOUT)</td>" in rows[1]
    assert "<td>worker-b</td><td>attempt 1</td>" in rows[2]
