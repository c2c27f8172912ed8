"""A durable turn with every other feature on (D556): the configuration ``aptix worker``
runs — ``[host] extension`` hooks and a server tool with files, ``[recording]``, an MCP
server's tool, ``[files]``, ``[retrieval]``, streaming — on a real Temporal dev server,
in one worker; and host rules, which run in the workflow itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from durable_kit import durable_client, pipeline_on
from engine_kit import text
from knowledge_kit import write_corpus
from matrix_host import CSV, HOST_ENV, NOTE, install
from mcp_kit import DEMO_SERVER
from temporal_kit import durable_worker as serving_worker

from aptix_pipeline import (
    Caller,
    DurablePipeline,
    HostRule,
    PipelineContext,
    PipelineStep,
    StreamResult,
    TurnRecording,
    durable_pipeline,
    durable_worker,
    recordings_in,
    replay,
)
from aptix_pipeline.adapters.config import load_service_config
from aptix_pipeline.adapters.embedded import build_pipeline
from aptix_pipeline.adapters.retrieval import build_index

ANA = Caller(org="acme", user="ana")
FILES_KEY = "a-signing-key-of-enough-bytes"
SCRIPT = [
    {"tool_calls": [{"id": "m1", "name": "remember", "arguments": {"key": "k", "value": "v"}}]},
    {"tool_calls": [{"id": "e1", "name": "export", "arguments": {}}]},
    {"text": "Kept and exported."},
    {"text": "Streamed."},
]


def _config(folder: Path, address: str, task_queue: str) -> Path:
    install(folder)
    build_index(write_corpus(folder / "docs"), folder / "index.db")
    (folder / "replies.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
    command, script = json.dumps(sys.executable), json.dumps(str(DEMO_SERVER))
    text = f"""
[[modes]]
name = "general"
display_name = "General"
server_tools = ["export"]

[[server_tools]]
name = "export"
description = "Export the table as CSV."

[[agents]]
id = "assistant"
name = "Assistant"
default = true

[[conversations]]
id = "chat"
name = "Chat"
default = true

[store]
url = "sqlite:aptix.db"

[model]
kind = "scripted"
script = "replies.json"

[files]
directory = "files"
url_base = "https://aptix.example.com"
signing_key_env = "APTIX_DURABLE_FILES_KEY"

[[mcp_servers]]
name = "demo"
command = {command}
args = [{script}, "stdio"]
tools = ["remember"]
modes = ["general"]

[retrieval]
folder = "docs"
index = "index.db"
collection = "handbook"

[recording]
directory = "recordings"
redact = false

[host]
extension = "matrix_host:extension"

[temporal]
address = "{address}"
task_queue = "{task_queue}"
heartbeat_seconds = 2
"""
    path = folder / "aptix.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.decision("D556", "D536")
async def test_a_durable_turn_runs_with_hooks_recording_mcp_files_retrieval_and_streaming(
    tmp_path: Path,
    temporal_address: str,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APTIX_DURABLE_FILES_KEY", FILES_KEY)
    monkeypatch.setenv(HOST_ENV, "hooks,files")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_service_config(_config(tmp_path, temporal_address, task_queue))
    try:
        pipeline = build_pipeline(config)
        durable = await durable_pipeline(config)
        async with await durable_worker(config, pipeline):
            report = await durable.run({"Instruction": "Keep a note, export the table."}, ANA)
            items = [item async for item in durable.stream({"Instruction": "Stream."}, ANA)]
    finally:
        config.close()

    # The MCP tool and the host's file tool ran in the worker's activities.
    assert report.successful, report.result.errors
    assert [call.name for call in report.tool_calls] == ["remember", "export"]
    stored = list((tmp_path / "files").rglob("*"))
    assert any(path.is_file() and path.read_bytes() == CSV for path in stored)
    # The host hook edited every prompt (in the model activity), retrieval gave passages.
    model = pipeline.ports.llm
    prompts = getattr(model, "requests", None) or []
    assert prompts, "the scripted model keeps the requests it answered"
    assert all(request.messages[-1] == NOTE for request in prompts)
    assert report.trace is not None
    [retrieval] = [
        e for e in json.loads(report.trace.to_json())["entries"] if e["kind"] == "retrieval"
    ]
    assert (retrieval["collection"], retrieval["error"]) == ("handbook", None)
    # Streaming: progress, the text in one piece, the result.
    assert isinstance(items[-1], StreamResult)
    assert items[-1].result.successful
    assert [item.name for item in items[-2:]] == ["delta", "result"]
    # Recording: each turn recorded durably, and the first replays on in-process ports.
    recorded = [
        TurnRecording.from_dict(json.loads(p.read_text()))
        for p in recordings_in(tmp_path / "recordings")
    ]
    assert len(recorded) == 2
    first = next(r for r in recorded if r.result.get("Successful") and len(r.calls) > 4)
    outcome = await replay(first)
    assert outcome.ok, outcome.divergence


def _not_about_payroll(ctx: PipelineContext) -> bool | str:
    return "payroll" not in (ctx.envelope.instructions or "").lower() or "payroll is HR's"


PAYROLL = HostRule(
    id="host/durable/no-payroll",
    step=PipelineStep.REASONER,
    message="the assistant does not answer payroll questions",
    code="host.refused_topic",
    check=_not_about_payroll,
)


@pytest.mark.decision("D556")
async def test_a_host_rule_refuses_a_durable_turn_in_the_workflow_as_in_process(
    temporal_address: str, task_queue: str
) -> None:
    client = await durable_client(temporal_address)
    host = pipeline_on(replies=[text("fine")], rules=[PAYROLL])
    local = await pipeline_on(replies=[text("fine")], rules=[PAYROLL]).run(
        {"Instruction": "What is my payroll?"}, ANA
    )
    async with serving_worker(client, host, task_queue):
        refused = await DurablePipeline(client, task_queue=task_queue).run(
            {"Instruction": "What is my payroll?"}, ANA
        )
    assert not refused.successful
    assert refused.result.model_dump() == local.result.model_dump()
    assert str(refused.result.errors[0].code) == "host.refused_topic"
