"""A refused megabyte over HTTP, with the production recording setting (``redact = true``).

A 1 MB body nested far past ``max_json_depth`` gets the engine's 400 naming
``DESIGN/limits/json-depth``; its turn is still recorded, redacted, as the part of the
body the engine read — a few hundred bytes, not a megabyte — and the recording replays
to the same refusal. The service goes on answering meanwhile (docs/CONFORMANCE.md D421).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from http_kit import ANA, ENV, READ_THEN_ANSWER, app_client, write_config

from aptix_pipeline import TurnRecording, replay
from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import EXECUTE_PATH, HEALTH_PATH, create_app

DEPTH_RULE = "DESIGN/limits/json-depth"


def nested_megabyte() -> bytes:
    """``{"Instruction": …, "Artifacts": [[[…]]]}``, a secret inside, 1,000,000 bytes."""
    head, tail = b'{"Instruction":"SECRET-1MB","Artifacts":', b'"SECRET-1MB"}'
    depth = (1_000_000 - len(head) - len(tail)) // 2
    return head + b"[" * depth + b"]" * depth + tail


@pytest.mark.decision("D421")
async def test_a_refused_nested_megabyte_is_recorded_as_the_part_read_and_replays(
    tmp_path: Path,
) -> None:
    more = '[recording]\ndirectory = "recordings"\nredact = true\n'
    config = load_service_config(write_config(tmp_path, READ_THEN_ANSWER, more=more), env=ENV)
    app = create_app(config)
    headers = {**ANA, "Content-Type": "application/json"}

    async with app_client(app) as client:
        refused, health = await asyncio.gather(
            client.post(EXECUTE_PATH, content=nested_megabyte(), headers=headers),
            client.get(HEALTH_PATH),
        )
        answered = await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)

    assert refused.status_code == 400
    assert [error["RuleId"] for error in refused.json()["Errors"]] == [DEPTH_RULE]
    assert health.status_code == 200
    assert answered.status_code == 200
    recordings = [TurnRecording.load(path) for path in (tmp_path / "recordings").iterdir()]
    [recording] = [r for r in recordings if not r.successful]
    [path] = [p for p in (tmp_path / "recordings").iterdir() if p.name == recording.file_name()]
    assert path.stat().st_size < 8_000
    assert "SECRET-1MB" not in path.read_text(encoding="utf-8")
    outcome = await replay(path)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    assert [error.rule_id for error in outcome.report.result.errors] == [DEPTH_RULE]
