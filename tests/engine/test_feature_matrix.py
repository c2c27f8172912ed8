"""Every feature with every other: a pairwise matrix of scenarios (issue 27, D440).

The features, each a boolean of a row:

- host code: ``rules`` (a ``HostRule`` in the reasoner's guard), ``hooks`` (a
  ``before_model_request`` hook adding a message with ``LLMRequest.replace``),
  ``listeners`` (a listener logging ``TurnStarted`` and ``TurnIdentified``);
- the turn's content: ``streaming``, ``images`` (a clipboard image), ``files`` (a
  server tool that makes a file), ``retrieval`` (an FTS5 index over a folder),
  ``mcp`` (a stdio MCP server's tool, called in a round of its own, D490);
- retries and records: ``ledger`` (the store's tool ledger on, a server tool of
  the host's in a round of its own: each server-tool call of the turn is recorded
  done under its key; off, ``[engine] tool_ledger = false``: no entry),
  ``budgets`` (a price table and an org's daily token budget: each model call of
  the turn is reserved, checked and settled in the SQLite file's usage ledger,
  priced, for the caller; off, ``[engine] usage_ledger = false``: no call kept),
  ``idempotency`` (the request sent twice with one key),
  ``recording`` (a redacted recording), ``replay`` (the recording replayed) and
  ``live_replay`` (replayed with ``LivePorts.of_pipeline``: the model and tools
  live when the recording is not redacted, the catalogs and rules when it is);
- the session: ``fork`` (the turn runs on a session forked, at the row's front door,
  after the second of three settled turns of another session: the model is sent that
  session's first two turns and not its third, D613);
- the front door: ``http`` (a real uvicorn server) or ``cli`` (``aptix run`` in a
  subprocess); neither is the pipeline in process.

``tests/kits/pairwise.py`` makes the rows so that every pair of features takes
each of its four combinations in some row (``http`` and ``cli`` exclude each
other). Every row is one configuration file (``aptix.toml``) with its host code as
``[host] extension`` (``tests/kits/matrix_host.py``) and the model on a loopback
fake OpenAI server that records every request, so all three front doors run the
same code and are observed alike; each row asserts every feature's promise, and
that a feature that is off leaves no trace.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_kit import APTIX
from http_kit import ANA, ENV, KEYS
from httpx_sse import EventSource
from knowledge_kit import write_corpus
from matrix_host import CSV, HOST_ENV, LOG_ENV, NOTE, STAMP, TOPIC, install, read_log
from mcp_kit import DEMO_SERVER
from pairwise import all_pairs, uncovered
from server_thread import server_thread

from aptix_pipeline import (
    Caller,
    ChatMessage,
    ChatRole,
    LivePorts,
    Pipeline,
    Session,
    SQLiteStore,
    StreamDelta,
    StreamResult,
    Turn,
    TurnRecording,
    TurnStatus,
    create_app,
    replay_sync,
    tool_call_key,
)
from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.embedded import build_pipeline
from aptix_pipeline.adapters.retrieval import build_index
from aptix_pipeline.steps import decode_ledger_result
from aptix_pipeline.testing import FakeOpenAIServer, fake_openai_server

FEATURES = (
    "rules",
    "hooks",
    "listeners",
    "streaming",
    "images",
    "files",
    "retrieval",
    "mcp",
    "ledger",
    "budgets",
    "idempotency",
    "recording",
    "replay",
    "live_replay",
    "http",
    "cli",
    "fork",  # last: the greedy generator then keeps to 12 rows
)


def allowed(row: Mapping[str, bool]) -> bool:
    """A row has one front door: HTTP, the CLI, or neither (in process)."""
    return not (row.get("http") and row.get("cli"))


ROWS = all_pairs(FEATURES, allowed)
ANA_CALLER = Caller(org="acme", user="ana")
INSTRUCTION = "How do we deploy the zanzibar service?"
FINAL = "Deploy it with make deploy."
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(60)).decode("ascii")
URL_BASE = "https://files.matrix.example"
KEY_ENV, FILES_ENV = "APTIX_MATRIX_OPENAI_KEY", "APTIX_MATRIX_FILES_KEY"
IDEMPOTENCY_KEY = "matrix-retry-1"
ANA_FLAGS = ("--org", "acme", "--user", "ana")
SOURCE = "matrix-source"
"""The session a ``fork`` row forks: three settled turns of acme/ana (``SOURCE_TURNS``)."""
SOURCE_TURNS = [
    (f"{SOURCE}-t{n}", f"earlier question {n}", f"earlier answer {n}") for n in (1, 2, 3)
]


def row_id(row: Mapping[str, bool]) -> str:
    return "+".join(name for name in FEATURES if row[name]) or "none"


# === the scenario ===============================================================================


def host_parts(row: Mapping[str, bool]) -> list[str]:
    """The parts of matrix_host the row's extension includes."""
    return [name for name in ("rules", "hooks", "listeners", "files", "ledger") if row[name]]


MCP_ARGUMENTS = {"key": "deploy", "value": "make deploy"}
MCP_RESULT = "kept deploy"  # what the demo server's ``remember`` answers
STAMP_ARGUMENTS = {"what": "the deploy"}


def model_script(row: Mapping[str, bool]) -> list[dict[str, Any]]:
    """The fake model's replies for one turn: the export tool first when files are on,
    then the MCP server's ``remember`` when mcp is, then ``stamp`` when ledger is."""
    export = {"id": "r1", "tool_calls": [{"id": "x1", "name": "export", "arguments": {}}]}
    remember = {
        "id": "r3",
        "tool_calls": [{"id": "m1", "name": "remember", "arguments": MCP_ARGUMENTS}],
    }
    stamp = {
        "id": "r4",
        "tool_calls": [{"id": "l1", "name": "stamp", "arguments": STAMP_ARGUMENTS}],
    }
    return [
        *([export] if row["files"] else []),
        *([remember] if row["mcp"] else []),
        *([stamp] if row["ledger"] else []),
        {"id": "r2", "text": FINAL},
    ]


def write_config(tmp: Path, row: Mapping[str, bool], base_url: str) -> Path:
    """The row's ``aptix.toml`` (and its documents, index and host module) in ``tmp``."""
    tools = ", ".join(
        name for name, on in (('"export"', row["files"]), ('"stamp"', row["ledger"])) if on
    )
    text = f"""
[model]
kind = "openai"
base_url = "{base_url}"
model = "fake-model"
api_key_env = "{KEY_ENV}"
max_attempts = 1

[store]
url = "sqlite:{tmp / "aptix.db"}"

[engine]
llm_attempts = 1
tool_ledger = {"true" if row["ledger"] else "false"}
usage_ledger = {"true" if row["budgets"] else "false"}
{KEYS}
[[modes]]
name = "general"
display_name = "General"
server_tools = [{tools}]

[[agents]]
id = "assistant"
name = "Assistant"
default = true

[[conversations]]
id = "chat"
name = "Chat"
default = true
"""
    if row["files"]:
        text += f"""
[[server_tools]]
name = "export"
description = "Export the table as CSV."

[files]
directory = "files"
url_base = "{URL_BASE}"
signing_key_env = "{FILES_ENV}"
"""
    if row["budgets"]:
        text += """
[prices.default]
input = "1.00"
output = "2.00"

[[budgets]]
id = "matrix-daily"
metric = "tokens"
limit = 100000000
window = "day"
"""
    if row["ledger"]:
        text += """
[[server_tools]]
name = "stamp"
description = "Stamp what is asked."
"""
    if row["mcp"]:
        command, script = json.dumps(sys.executable), json.dumps(str(DEMO_SERVER))
        text += f"""
[[mcp_servers]]
name = "demo"
command = {command}
args = [{script}, "stdio"]
tools = ["remember"]
modes = ["general"]
"""
    if row["retrieval"]:
        build_index(write_corpus(tmp / "docs"), tmp / "index.db")
        text += '\n[retrieval]\nfolder = "docs"\nindex = "index.db"\ncollection = "handbook"\n'
    if row["recording"] or row["replay"] or row["live_replay"]:
        # A replay needs a recording: a redacted one when recording is the row's feature.
        redact = "true" if row["recording"] else "false"
        text += f'\n[recording]\ndirectory = "recordings"\nredact = {redact}\n'
    if host_parts(row):
        install(tmp)
        text += '\n[host]\nextension = "matrix_host:extension"\n'
    config = tmp / "aptix.toml"
    config.write_text(text, encoding="utf-8")
    return config


def seed_source(db: Path) -> None:
    """``SOURCE`` in the row's SQLite file, written through the store's own port."""
    store = SQLiteStore(db)
    try:
        asyncio.run(_seed(store))
    finally:
        store.close()


async def _seed(store: SQLiteStore) -> None:
    tx = store.begin("acme", "ana")
    await tx.create_session(Session(id=SOURCE, org="acme", user="ana", mode="general"))
    await tx.commit()
    for turn_id, question, answer in SOURCE_TURNS:
        tx = store.begin("acme", "ana")
        await tx.open_turn(
            Turn(id=turn_id, session_id=SOURCE, mode="general", status=TurnStatus.COMPLETED)
        )
        await tx.append_transcript(
            SOURCE,
            turn_id,
            [
                ChatMessage(role=ChatRole.USER, content=question),
                ChatMessage(role=ChatRole.ASSISTANT, content=answer),
            ],
        )
        await tx.commit()


def request_of(row: Mapping[str, bool], fork: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"Instruction": INSTRUCTION}
    if fork is not None:  # the turn after the one the fork was made after
        request |= {"SessionId": fork, "TurnId": SOURCE_TURNS[1][0]}
    if row["streaming"]:
        request["Stream"] = True
    if row["images"]:
        request["ClipboardImages"] = [{"Id": "img1", "MimeType": "image/png", "DataBase64": PNG}]
    return request


@dataclass
class Answer:
    """One request's answer at a front door."""

    result: dict[str, Any]
    streamed: str | None = None
    status: int | None = None  # HTTP only
    replayed: bool | None = None  # HTTP only: the Idempotent-Replayed header


class InProcess:
    """The pipeline the configuration builds, driven in this process on one event loop."""

    def __init__(self, config: Path, stack: ExitStack) -> None:
        self.runner = stack.enter_context(asyncio.Runner())
        service = load_service_config(config)
        stack.callback(service.close)  # its MCP servers, when the row has them
        self.pipeline = build_pipeline(service)

    def send(self, request: dict[str, Any], key: str | None = None) -> Answer:
        return self.runner.run(self._send(request, key))

    def fork(self, session_id: str, turn_id: str) -> str:
        forked = self.runner.run(self.pipeline.fork(session_id, turn_id, ANA_CALLER))
        assert forked.result is not None, forked.errors
        return forked.result.id

    async def _send(self, request: dict[str, Any], key: str | None) -> Answer:
        if not request.get("Stream"):
            result = await self.pipeline.execute(request, ANA_CALLER, idempotency_key=key)
            return Answer(result.to_wire())
        deltas: list[str] = []
        async with self.pipeline.stream(request, ANA_CALLER, idempotency_key=key) as stream:
            async for item in stream:
                if isinstance(item, StreamDelta):
                    deltas.append(item.text)
                elif isinstance(item, StreamResult):
                    final = item.result
        return Answer(final.to_wire(), "".join(deltas))


class OverHttp:
    """``create_app`` on the configuration, served by a real uvicorn server."""

    def __init__(self, config: Path, stack: ExitStack) -> None:
        port = stack.enter_context(server_thread(create_app(config)))
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/v1/agent/execute"
        self.client = stack.enter_context(httpx.Client(timeout=30))

    def fork(self, session_id: str, turn_id: str) -> str:
        url = f"{self.base}/v1/sessions/{session_id}/fork"
        response = self.client.post(url, json={"TurnId": turn_id}, headers=ANA)
        assert response.status_code == 201, response.text
        fork_id: str = response.json()["Result"]["Id"]
        return fork_id

    def send(self, request: dict[str, Any], key: str | None = None) -> Answer:
        headers = {**ANA, **({"Idempotency-Key": key} if key else {})}
        if not request.get("Stream"):
            response = self.client.post(self.url, json=request, headers=headers)
            replayed = response.headers.get("Idempotent-Replayed") == "true"
            return Answer(response.json(), None, response.status_code, replayed)
        with self.client.stream("POST", self.url, json=request, headers=headers) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = list(EventSource(response).iter_sse())
            replayed = response.headers.get("Idempotent-Replayed") == "true"
        assert events[-1].event == "result"
        text = "".join(event.json()["text"] for event in events if event.event == "delta")
        return Answer(events[-1].json(), text, response.status_code, replayed)


class OnTheCommandLine:
    """``aptix run --config`` in a subprocess, one per request."""

    def __init__(self, config: Path, env: Mapping[str, str]) -> None:
        self.config, self.env = config, {**os.environ, **env}

    def fork(self, session_id: str, turn_id: str) -> str:
        run = subprocess.run(
            [str(APTIX), "fork", session_id, turn_id, "--config", str(self.config), *ANA_FLAGS],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.config.parent,
            env=self.env,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    def send(self, request: dict[str, Any], key: str | None = None) -> Answer:
        folder = self.config.parent
        (folder / "request.json").write_text(json.dumps(request), encoding="utf-8")
        streaming = ["--stream"] if request.get("Stream") else []
        run = subprocess.run(
            [str(APTIX), "run", "request.json", "--config", str(self.config)]
            + ["--org", "acme", "--user", "ana", "--compact", *streaming]
            + (["--idempotency-key", key] if key else []),
            capture_output=True,
            text=True,
            check=False,
            cwd=folder,
            env=self.env,
        )
        assert run.returncode in (0, 1), run.stderr
        assert run.stdout, run.stderr
        *text, last = run.stdout.splitlines()
        return Answer(json.loads(last), "\n".join(text) if streaming else None)


@dataclass
class Scenario:
    """One row run: what the front door answered and what the host code and model saw."""

    row: Mapping[str, bool]
    tmp: Path
    server: FakeOpenAIServer
    door: InProcess | OverHttp | OnTheCommandLine
    first: Answer
    model_bodies: list[dict[str, Any]]
    log: list[dict[str, Any]]
    recordings: list[Path]
    stack: ExitStack
    retry: Answer | None = None
    fork: str | None = None
    model_calls_after_retry: int = 0
    checked: list[str] = field(default_factory=list)

    @property
    def response(self) -> dict[str, Any]:
        result: dict[str, Any] = self.first.result["Result"]
        return result

    def host_pipeline(self) -> Pipeline:
        """A pipeline on the row's configuration, for its replays' host code (and its
        MCP servers, closed with the row)."""
        service = load_service_config(self.tmp / "aptix.toml")
        self.stack.callback(service.close)
        return build_pipeline(service)


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {
        **ENV,
        KEY_ENV: "sk-matrix-0123456789",
        FILES_ENV: "a signing key of 16 bytes or more",
        LOG_ENV: str(tmp_path / "host.jsonl"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def run_row(row: Mapping[str, bool], tmp: Path, env: dict[str, str], stack: ExitStack) -> Scenario:
    """Run the row's turn (and its retry) at its front door; what it observed."""
    env = {**env, HOST_ENV: ",".join(host_parts(row))}
    os.environ[HOST_ENV] = env[HOST_ENV]  # the monkeypatch of ``environment`` restores it
    server = stack.enter_context(fake_openai_server(model_script(row)))
    config = write_config(tmp, row, server.base_url)
    if row["fork"]:
        seed_source(tmp / "aptix.db")
    door: InProcess | OverHttp | OnTheCommandLine
    if row["http"]:
        door = OverHttp(config, stack)
    elif row["cli"]:
        door = OnTheCommandLine(config, env)
    else:
        door = InProcess(config, stack)
    key = IDEMPOTENCY_KEY if row["idempotency"] else None
    fork = door.fork(SOURCE, SOURCE_TURNS[1][0]) if row["fork"] else None
    first = door.send(request_of(row, fork), key)
    scenario = Scenario(
        row=row,
        tmp=tmp,
        server=server,
        door=door,
        first=first,
        model_bodies=[r.body for r in server.completions()],
        log=read_log(tmp / "host.jsonl"),
        recordings=sorted((tmp / "recordings").glob("*.json")),
        stack=stack,
        fork=fork,
    )
    if row["idempotency"]:
        scenario.retry = door.send(request_of(row, fork), key)
        scenario.model_calls_after_retry = len(server.completions())
    return scenario


# === each feature's promise =====================================================================


def messages_text(body: Mapping[str, Any]) -> Iterator[str]:
    """The text of each message of a chat-completions request body (parts joined)."""
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield "".join(part.get("text", "") for part in content)


def image_parts(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def check_rules(s: Scenario) -> None:
    ran = [entry for entry in s.log if entry["kind"] == "rule"]
    if not s.row["rules"]:
        assert ran == []
        return
    assert ran  # the rule's check ran in the reasoner's guard, and let the turn through
    for path in s.recordings:
        assert TurnRecording.load(path).host_rules == (TOPIC.id,)


def check_refusal(s: Scenario) -> None:
    """Last, after the recordings were read: the rule refuses a payroll question."""
    if not s.row["rules"]:
        s.server.add({"id": "r9", "text": "Ask HR."})  # without the rule the model answers
    refused = s.door.send({"Instruction": "Show me the payroll"})
    if not s.row["rules"]:
        assert refused.result["Successful"]
        return
    [error] = refused.result["Errors"]
    assert (error["Code"], error["RuleId"]) == (TOPIC.code, TOPIC.id)
    if isinstance(s.door, OverHttp):
        assert refused.status == 403


def check_hooks(s: Scenario) -> None:
    assert s.model_bodies
    note = {"role": "system", "content": NOTE.content}
    for body in s.model_bodies:  # every model request, each round
        if s.row["hooks"]:
            assert body["messages"][-1] == note  # the hook's edit reached the model
        else:
            assert note not in body["messages"]


def check_listeners(s: Scenario) -> None:
    heard = [entry for entry in s.log if entry["kind"] in ("TurnStarted", "TurnIdentified")]
    if not s.row["listeners"]:
        assert heard == []
        return
    started = [e for e in heard if e["kind"] == "TurnStarted"]
    assert [(e["org"], e["user"]) for e in started] == [("acme", "ana")]
    [identified] = [e for e in heard if e["kind"] == "TurnIdentified"]
    assert (identified["org"], identified["user"]) == ("acme", "ana")
    assert identified["session_id"] == s.response["SessionId"]
    assert identified["turn_id"] == s.response["TurnId"]


def check_streaming(s: Scenario) -> None:
    if not s.row["streaming"]:
        assert s.first.streamed is None
        assert all(not body.get("stream") for body in s.model_bodies)
        return
    assert s.first.streamed == s.response["PrimaryOutputText"] == FINAL
    assert all(body.get("stream") for body in s.model_bodies)  # the model was asked to stream


def check_images(s: Scenario) -> None:
    if not s.row["images"]:
        assert all(image_parts(body) == [] for body in s.model_bodies)
        return
    for body in s.model_bodies:  # each round's prompt holds the user's image
        [image] = image_parts(body)
        assert image["image_url"]["url"] == f"data:image/png;base64,{PNG}"


def check_files(s: Scenario) -> None:
    files = s.response.get("Files") or []
    if not s.row["files"]:
        assert files == []
        return
    [ref] = files  # aptix run keeps them in [files]' store too (D404)
    assert ref["Name"] == "table.csv"
    assert ref["SizeBytes"] == len(CSV)
    assert ref["Url"].startswith(f"{URL_BASE}/v1/files/{ref['ContentHash']}?")
    assert (s.tmp / "files").is_dir()


def check_retrieval(s: Scenario) -> None:
    contexts = [t for body in s.model_bodies for t in messages_text(body) if "[retrieved" in t]
    if not s.row["retrieval"]:
        assert contexts == []
        return
    assert len(contexts) == len(s.model_bodies)  # each round's prompt holds the passages
    assert all("[retrieved context]" in t and "web.md" in t for t in contexts)


def check_mcp(s: Scenario) -> None:
    """The MCP server's tool ran, its answer reached the model in the next round; with
    mcp off no round carries it."""
    answers = [
        message
        for body in s.model_bodies
        for message in body["messages"]
        if message.get("role") == "tool" and message.get("tool_call_id") == "m1"
    ]
    offered = [
        tool["function"]["name"] for body in s.model_bodies for tool in body.get("tools", [])
    ]
    if not s.row["mcp"]:
        assert answers == []
        assert "remember" not in offered
        return
    assert "remember" in offered  # the server's tool joined the catalog as a server tool
    assert answers  # the round after the call holds the server's answer
    assert all(MCP_RESULT in str(message["content"]) for message in answers)


def check_ledger(s: Scenario) -> None:
    """Each server-tool call of the turn is done in the ledger under its key, with its
    answer; the retry, the replays and the refused turn add none. Off: no entry."""
    with closing(sqlite3.connect(s.tmp / "aptix.db")) as db:
        entries = db.execute("SELECT org, user, key, result FROM tool_ledger").fetchall()
    if not s.row["ledger"]:
        assert entries == []
        return
    session_id, turn_id = s.response["SessionId"], s.response["TurnId"]
    calls = {"l1": STAMP_ARGUMENTS}
    if s.row["files"]:
        calls["x1"] = {}
    if s.row["mcp"]:
        calls["m1"] = MCP_ARGUMENTS
    keys = {
        tool_call_key(session_id, turn_id, call_id, args): call_id
        for call_id, args in calls.items()
    }
    assert {(org, user, key) for org, user, key, _ in entries} == {
        ("acme", "ana", key) for key in keys
    }
    results = {keys[key]: result for _, _, key, result in entries}
    assert all(result is not None for result in results.values())  # done, not just reserved
    assert decode_ledger_result(results["l1"]) == STAMP


def check_budgets(s: Scenario) -> None:
    """Each model call of the first turn was reserved against the budget and settled,
    priced, for the caller; the retry and the replays add none. Off: nothing kept."""
    with closing(sqlite3.connect(s.tmp / "aptix.db")) as db:
        calls = db.execute(
            "SELECT org, user, turn_id, settled, failed, charge_model_calls, reported, priced, "
            "currency, charge_tokens "
            "FROM usage_calls ORDER BY at_us"
        ).fetchall()
    if not s.row["budgets"]:
        assert calls == []
        return
    turn_id = s.response["TurnId"]
    first_turn = [call for call in calls if call[2] == turn_id]
    assert len(first_turn) == len(model_script(s.row))
    assert {call[:2] for call in calls} == {("acme", "ana")}
    assert [call[3:6] for call in first_turn] == [(1, 0, 1)] * len(first_turn)
    for *_, reported, priced, currency, tokens in first_turn:
        # a call that reported its usage is priced at the default price; one that did not
        # is charged its estimate, never zero
        assert (priced, currency) == ((1, "USD") if reported else (0, None))
        assert tokens > 0


def check_idempotency(s: Scenario) -> None:
    if not s.row["idempotency"]:
        assert s.retry is None
        return
    assert s.retry is not None
    assert s.retry.result == s.first.result  # the stored answer
    assert s.model_calls_after_retry == len(s.model_bodies)  # no model call for the retry
    if s.row["streaming"]:
        assert s.retry.streamed == ""  # a stored answer streams no text
    if isinstance(s.door, OverHttp):
        assert s.retry.replayed is True


def check_recording(s: Scenario) -> None:
    if not (s.row["recording"] or s.row["replay"] or s.row["live_replay"]):
        assert s.recordings == []
        return
    [path] = s.recordings  # the first turn's; its retry, answered as stored, writes none
    text = path.read_text(encoding="utf-8")
    recording = TurnRecording.load(path)
    assert recording.result["Successful"]
    if s.row["recording"]:  # redacted: none of the user's, the model's or a tool's content
        assert recording.redacted
        for secret in ("zanzibar", FINAL, PNG, "make deploy", "name,count", MCP_RESULT):
            assert secret not in text
    else:
        assert not recording.redacted
        assert "zanzibar" in text


def check_replay(s: Scenario) -> None:
    if not s.row["replay"]:
        return
    [path] = s.recordings
    outcome = replay_sync(path, rules=s.host_pipeline().rules)
    assert outcome.ok, "\n".join(outcome.describe())


def check_live_replay(s: Scenario) -> None:
    if not s.row["live_replay"]:
        return
    [path] = s.recordings
    live = LivePorts.of_pipeline(s.host_pipeline())
    if s.row["recording"]:  # redacted: the model and tools would be asked about placeholders
        live = replace(live, llm=None, tools={}, retriever=None)
        with pytest.raises(ValueError, match="the recording is redacted"):
            replay_sync(path, live=LivePorts.of_pipeline(s.host_pipeline()))
    else:
        s.server.add(*model_script(s.row))  # the live model answers again, as it did
    calls = len(s.server.completions())
    outcome = replay_sync(path, live=live)
    assert outcome.ok, "\n".join(outcome.describe())
    if not s.row["recording"]:
        assert len(s.server.completions()) == calls + len(s.model_bodies)  # the model ran live
        if s.row["hooks"]:  # with the host's hook around it
            assert s.server.completions()[-1].body["messages"][-1]["content"] == NOTE.content


def check_fork(s: Scenario) -> None:
    """On a fork: the turn is the fork's, and every model request holds the source's first
    two turns and not its third; the source keeps its three. Off: no source at all."""
    earlier = [text for body in s.model_bodies for text in messages_text(body) if "earlier" in text]
    if not s.row["fork"]:
        assert s.fork is None
        assert earlier == []
        return
    assert s.response["SessionId"] == s.fork != SOURCE
    shared = [text for _, question, answer in SOURCE_TURNS[:2] for text in (question, answer)]
    for body in s.model_bodies:
        said = [text for text in messages_text(body) if "earlier" in text]
        assert said == shared  # in order, the third turn left out
    with closing(sqlite3.connect(s.tmp / "aptix.db")) as db:
        kept = db.execute(
            "SELECT count(*) FROM transcript WHERE session_id = ?", (SOURCE,)
        ).fetchone()[0]
        parent = db.execute(
            "SELECT parent_id, parent_turn_id FROM sessions WHERE id = ?", (s.fork,)
        ).fetchone()
    assert kept == 2 * len(SOURCE_TURNS)
    assert parent == (SOURCE, SOURCE_TURNS[1][0])


CHECKS = (
    check_fork,
    check_rules,
    check_hooks,
    check_listeners,
    check_streaming,
    check_images,
    check_files,
    check_retrieval,
    check_mcp,
    check_idempotency,
    check_recording,
    check_replay,
    check_live_replay,
    check_refusal,
    check_ledger,  # last: nothing after the first turn adds an entry
    check_budgets,
)


# === the tests ==================================================================================


@pytest.mark.decision("D440")
def test_the_rows_cover_every_pair_of_features() -> None:
    assert uncovered(ROWS, FEATURES, allowed) == []
    assert all(allowed(row) for row in ROWS)
    assert len(ROWS) <= 12  # pairwise, not all 2**16 combinations
    doors = {"http" if r["http"] else "cli" if r["cli"] else "in-process" for r in ROWS}
    assert doors == {"http", "cli", "in-process"}


@pytest.mark.decision("D440")
def test_the_generator_finds_a_missing_pair_and_honours_exclusions() -> None:
    names = ("a", "b", "c")
    rows = all_pairs(names, lambda row: not (row.get("a") and row.get("b")))
    assert uncovered(rows, names) == [("a", True, "b", True)]  # excluded, so never made
    assert uncovered(rows[:-1], names, lambda row: not (row.get("a") and row.get("b")))
    with pytest.raises(ValueError, match="repeat"):
        all_pairs(("a", "a"))


@pytest.mark.decision("D440", "D441", "D567", "D596", "D613")  # D441: CLI rows run [host]
@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_every_feature_keeps_its_promise_beside_the_others(
    row: dict[str, bool], tmp_path: Path, environment: dict[str, str]
) -> None:
    with ExitStack() as stack:
        scenario = run_row(row, tmp_path, environment, stack)
        assert scenario.first.result["Successful"], scenario.first.result
        for check in CHECKS:
            check(scenario)
