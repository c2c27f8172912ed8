"""Streamed answers over HTTP (``adapters/http/sse.py``, AGN-034 §4.7, DESIGN.md R11).

A request with ``"Stream": true`` (or, for a continuation, ``Accept:
text/event-stream``) is answered with Server-Sent Events: ``progress``, ``delta`` and
last one ``result`` event. The end-to-end cases start ``aptix serve`` as a real
process on 127.0.0.1 with the scripted model on SQLite, and read the stream with a
real client (httpx + httpx-sse). The script sets the chunk size and, where the test
needs a slow model, the delay between chunks; the tests wait generously for what
they expect and never assert how long anything took.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_kit import (
    ANA,
    ANA_KEY,
    ENV,
    KEYS,
    app_client,
    aptix_serve,
    continuation_body,
    follow_on_body,
    host_app,
    session_count,
)
from httpx_sse import EventSource, ServerSentEvent
from starlette.requests import ClientDisconnect

from aptix_pipeline.adapters.config.service import ApiKey, ConfigError, load_service_config
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.http.app import (
    EXECUTE_PATH,
    IDEMPOTENCY_KEY_HEADER,
    REPLAYED_HEADER,
    ApiKeyAuthenticator,
    create_app,
)
from aptix_pipeline.adapters.http.sse import accepts_event_stream
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.engine import TurnEvent, TurnFinished, asks_to_stream

SSE = {**ANA, "Accept": "text/event-stream"}
ANSWER = "app.py is fine; line 3 could use a clearer name."
TOOL_CALL: dict[str, Any] = {
    "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "app.py"}}]
}
Body = Mapping[str, Any] | bytes
"""A request body: JSON data, or bytes as sent."""
WAIT = 20.0
"""How long a test waits for something the server does after the client left."""


def _script_config(folder: Path, script: Mapping[str, Any], server: str = "") -> Path:
    """An ``aptix serve`` configuration playing ``script`` (a script object) on SQLite."""
    (folder / "script.json").write_text(json.dumps(script), encoding="utf-8")
    path = folder / "aptix.toml"
    path.write_text(
        '[store]\nurl = "sqlite:aptix.db"\n[model]\nkind = "scripted"\nscript = "script.json"\n'
        f"{server}\n{KEYS}",
        encoding="utf-8",
    )
    return path


@dataclass
class _Answer:
    """One answer: its status and headers, and its events or its JSON body."""

    status: int
    headers: httpx.Headers
    events: list[ServerSentEvent] = field(default_factory=list)
    body: Any = None

    @property
    def streamed(self) -> bool:
        return self.headers["content-type"].startswith("text/event-stream")

    @property
    def names(self) -> list[str]:
        return [event.event for event in self.events]

    @property
    def result(self) -> Any:
        """The ``InvokeResult``: the ``result`` event's data, or the JSON body."""
        if not self.streamed:
            return self.body
        [result] = [event.json() for event in self.events if event.event == "result"]
        return result

    @property
    def text(self) -> str:
        """The text of the ``delta`` events, joined."""
        return "".join(event.json()["text"] for event in self.events if event.event == "delta")


def _post(client: httpx.Client, body: Body, headers: Mapping[str, str] = ANA) -> _Answer:
    """POST ``body``; the answer, its event stream read to the end when it is one."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {**headers, "Content-Type": "application/json"}
    with client.stream("POST", EXECUTE_PATH, content=content, headers=sent) as response:
        answer = _Answer(response.status_code, response.headers)
        if answer.streamed:
            answer.events = list(EventSource(response).iter_sse())
        else:
            answer.body = json.loads(response.read())
    return answer


def _without_ids(result: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` with its SessionId and TurnId left out (each session has its own)."""
    inner = {k: v for k, v in result["Result"].items() if k not in ("SessionId", "TurnId")}
    return {**result, "Result": inner}


@contextmanager
def _served(config: Path, env: Mapping[str, str] = ENV) -> Iterator[httpx.Client]:
    with aptix_serve(config, env) as (base, _), httpx.Client(base_url=base, timeout=WAIT) as client:
        yield client


# --- the event stream ---------------------------------------------------------------------------


@pytest.mark.decision("D260", "D262")
def test_a_streamed_turn_sends_progress_then_deltas_then_one_result_with_increasing_ids(
    tmp_path: Path,
) -> None:
    script = {"replies": [{"text": ANSWER}], "chunk_size": 8, "chunk_delay_seconds": 0.01}
    config = _script_config(tmp_path, script)

    with _served(config) as client:
        answer = _post(client, {"Instruction": "Review app.py", "Stream": True})

    assert (answer.status, answer.streamed) == (200, True)
    assert answer.headers["cache-control"] == "no-cache"
    assert answer.headers["x-accel-buffering"] == "no"
    assert [event.id for event in answer.events] == [
        str(n) for n in range(1, len(answer.events) + 1)
    ]
    assert answer.names[-1] == "result"
    assert answer.names.count("result") == 1
    assert answer.names.index("progress") < answer.names.index("delta")
    assert answer.names.count("delta") > 1
    assert answer.text == ANSWER == answer.result["Result"]["PrimaryOutputText"]
    assert answer.events[0].json() == {"kind": "turn_started"}


@pytest.mark.decision("D260", "D262")
def test_every_path_streamed_ends_with_the_result_it_gets_unstreamed(tmp_path: Path) -> None:
    session = [TOOL_CALL, {"text": ANSWER}, {"text": "Follow-on answer."}]
    config = _script_config(tmp_path, {"replies": session * 2, "chunk_size": 5})

    with _served(config) as client:
        plain = [_post(client, {"Instruction": "Review app.py"})]
        plain.append(_post(client, continuation_body(plain[0].result["Result"])))
        plain.append(_post(client, follow_on_body(plain[1].result["Result"])))
        streamed = [_post(client, {"Instruction": "Review app.py", "Stream": True})]
        streamed.append(_post(client, continuation_body(streamed[0].result["Result"]), SSE))
        streamed.append(
            _post(client, {**follow_on_body(streamed[1].result["Result"]), "Stream": True})
        )

    assert [a.streamed for a in plain] == [False] * 3
    assert [a.streamed for a in streamed] == [True] * 3
    assert [a.status for a in plain + streamed] == [200] * 6
    assert [_without_ids(a.result) for a in streamed] == [_without_ids(a.result) for a in plain]
    assert [a.text for a in streamed] == ["", ANSWER, "Follow-on answer."]
    assert session_count(tmp_path / "aptix.db") == 2


@pytest.mark.decision("D262", "D264")
def test_keep_alive_comments_fill_the_silences_of_a_slow_model(tmp_path: Path) -> None:
    script = {"replies": [{"text": "slow words"}], "chunk_size": 2, "chunk_delay_seconds": 0.3}
    config = _script_config(tmp_path, script, "[server]\nsse_keepalive_seconds = 0.05\n")

    with _served(config) as client:
        body = {"Instruction": "hi", "Stream": True}
        with client.stream("POST", EXECUTE_PATH, json=body, headers=ANA) as response:
            lines = list(response.iter_lines())

    deltas = [n for n, line in enumerate(lines) if line == "event: delta"]
    between = lines[deltas[0] : deltas[-1]]
    assert len(deltas) > 1
    assert ": keep-alive" in between  # silent for 0.3 s between two chunks
    assert {line for line in lines if line.startswith(":")} == {": keep-alive"}
    ids = [int(line.removeprefix("id: ")) for line in lines if line.startswith("id: ")]
    assert ids == list(range(1, len(ids) + 1))  # a keep-alive takes no id


# --- which requests stream, and their status -----------------------------------------------------


@pytest.mark.decision("D260")
def test_a_continuation_streams_when_accept_asks_for_the_event_stream(tmp_path: Path) -> None:
    config = _script_config(tmp_path, {"replies": [TOOL_CALL, {"text": ANSWER}] * 2})

    with _served(config) as client:
        first = _post(client, {"Instruction": "Review app.py", "Stream": True})
        continuation = continuation_body(first.result["Result"])
        flagged = _post(client, {**continuation, "Stream": True}, SSE)
        streamed = _post(client, continuation, SSE)
        other = _post(client, {"Instruction": "Review app.py"})
        plain = _post(client, continuation_body(other.result["Result"]))

    assert (first.streamed, first.result["Result"]["Kind"]) == (True, "client_tool_continuation")
    assert (flagged.status, flagged.streamed) == (400, False)
    assert [e["RuleId"] for e in flagged.body["Errors"]] == ["AGN-034/2.2/stream-forbidden"]
    assert (streamed.status, streamed.streamed, streamed.text) == (200, True, ANSWER)
    assert streamed.result["Result"]["Kind"] == "final"
    assert (plain.status, plain.streamed) == (200, False)
    assert plain.body["Result"]["PrimaryOutputText"] == ANSWER


@pytest.mark.decision("D261")
def test_a_request_refused_before_its_model_call_gets_the_json_answer_and_status(
    tmp_path: Path,
) -> None:
    config = _script_config(tmp_path, {"replies": [TOOL_CALL]})
    unknown = {"SessionId": "session_none", "TurnId": "turn_none", "Instruction": "more"}
    wrong_call = [{"ToolCallId": "c9", "ExecutionMs": 1, "ResultJson": "{}"}]

    with _served(config) as client:
        pending = _post(client, {"Instruction": "Review app.py"}).result["Result"]
        unmatched = {**continuation_body(pending), "ToolResults": wrong_call}
        ask = {"Accept": "text/event-stream"}
        cases: list[tuple[Body, Body, dict[str, str]]] = [  # streamed, unstreamed, headers
            (b'{"Instruction": "hi", "Stream": true', b'{"Instruction": "hi"', ask),  # not JSON
            (  # a server-owned field
                {"Instruction": "hi", "Stream": True, "Mode": "x"},
                {"Instruction": "hi", "Mode": "x"},
                {},
            ),
            ({"Stream": True}, {}, {}),  # no input
            ({**unknown, "Stream": True}, unknown, {}),  # no such session
            (unmatched, unmatched, ask),  # results for calls the turn did not make
            (  # a malformed Idempotency-Key
                {"Instruction": "hi", "Stream": True},
                {"Instruction": "hi"},
                {IDEMPOTENCY_KEY_HEADER: "a b"},
            ),
        ]
        streamed = [_post(client, body, {**ANA, **extra}) for body, _, extra in cases]
        extras = [{k: v for k, v in extra.items() if k != "Accept"} for _, _, extra in cases]
        plain = [
            _post(client, body, {**ANA, **extra})
            for (_, body, _), extra in zip(cases, extras, strict=True)
        ]

    assert [a.streamed for a in streamed] == [False] * 6
    assert [a.status for a in streamed] == [400, 400, 400, 404, 400, 400]
    assert [a.status for a in streamed] == [a.status for a in plain]
    assert [a.body["Errors"][0]["RuleId"] for a in streamed] == [
        a.body["Errors"][0]["RuleId"] for a in plain
    ]
    assert session_count(tmp_path / "aptix.db") == 1  # the pending turn's session only


@pytest.mark.decision("D261")
def test_a_model_failure_after_the_stream_began_is_a_200_whose_result_says_so(
    tmp_path: Path,
) -> None:
    config = _script_config(tmp_path, {"replies": [{"text": ANSWER}]})

    with _served(config) as client:
        _post(client, {"Instruction": "hi"})  # the one reply: every later model call fails
        streamed = _post(client, {"Instruction": "hi", "Stream": True})
        plain = _post(client, {"Instruction": "hi"})

    assert (plain.status, plain.streamed) == (502, False)
    assert (streamed.status, streamed.streamed) == (200, True)
    assert streamed.names[-1] == "result"
    assert "progress" in streamed.names
    assert "delta" not in streamed.names
    assert streamed.result == plain.body  # the same unsuccessful InvokeResult
    assert streamed.result["Errors"][0]["Code"] == "port_failed"


@pytest.mark.decision("D265")
def test_a_streamed_request_retried_with_its_key_gets_its_stored_result_streamed(
    tmp_path: Path,
) -> None:
    config = _script_config(tmp_path, {"replies": [{"text": ANSWER}], "chunk_size": 8})
    keyed = {**ANA, IDEMPOTENCY_KEY_HEADER: "order-42"}
    body = {"Instruction": "Review app.py", "Stream": True}

    with _served(config) as client:
        first = _post(client, body, keyed)
        retry = _post(client, body, keyed)
        reused = _post(client, {**body, "Instruction": "Something else"}, keyed)

    assert (first.status, first.streamed, REPLAYED_HEADER in first.headers) == (200, True, False)
    assert (retry.status, retry.streamed) == (200, True)
    assert retry.headers[REPLAYED_HEADER] == "true"
    assert [(e.id, e.event) for e in retry.events] == [("1", "result")]
    assert retry.result == first.result
    assert (reused.status, reused.streamed) == (409, False)
    assert reused.body["Errors"][0]["RuleId"] == "DESIGN/idempotency/key-reused"


# --- a client that leaves -------------------------------------------------------------------------


def _wait_for(log: Path, text: str) -> str:
    """The server's log once it holds ``text`` (waiting up to ``WAIT`` seconds)."""
    deadline = time.monotonic() + WAIT
    while True:
        output = log.read_text(errors="replace")
        if text in output or time.monotonic() > deadline:
            return output
        time.sleep(0.05)


@pytest.mark.decision("D263")
def test_a_client_that_leaves_mid_stream_cancels_the_turn_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    long_text = "A long answer, written slowly. " * 10
    script = {
        "replies": [{"text": long_text}, {"text": "Next answer."}],
        "chunk_size": 4,
        "chunk_delay_seconds": 0.1,
    }
    config = _script_config(tmp_path, script)
    env = {**ENV, "OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "50"}

    with (
        aptix_serve(config, env) as (base, log),
        httpx.Client(base_url=base, timeout=WAIT) as client,
    ):
        seen: list[ServerSentEvent] = []
        body = {"Instruction": "hi", "Stream": True}
        with client.stream("POST", EXECUTE_PATH, json=body, headers=ANA) as response:
            for event in EventSource(response).iter_sse():
                seen.append(event)
                if event.event == "delta":
                    break  # leaving the block closes the connection
        output = _wait_for(log, "DESIGN/streaming/consumer-gone")
        stored_after_leaving = session_count(tmp_path / "aptix.db")
        next_turn = _post(client, {"Instruction": "hi again"})

    assert seen[-1].event == "delta"
    assert "result" not in [e.event for e in seen]
    assert '"error.type": "cancelled"' in output
    assert stored_after_leaving == 0
    assert next_turn.body["Result"]["PrimaryOutputText"] == "Next answer."
    assert session_count(tmp_path / "aptix.db") == 1
    assert "Traceback" not in output


@pytest.mark.decision("D263")
async def test_a_response_whose_client_left_ends_only_once_its_cancelled_turn_has_ended() -> None:
    finished: list[TurnFinished] = []

    async def heard(event: TurnEvent) -> None:  # a turn ends once its listeners have heard it
        if isinstance(event, TurnFinished):
            await asyncio.sleep(0.1)
            finished.append(event)

    llm = ScriptedLLM(
        [{"text": "A long answer, written slowly. " * 10}], chunk_size=4, chunk_delay_seconds=0.05
    )
    pipeline = embedded_pipeline(llm=llm, listeners=[heard])
    keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(ANA_KEY.encode()).digest())]
    app = create_app(pipeline, authenticator=ApiKeyAuthenticator(keys))
    body = json.dumps({"Instruction": "hi", "Stream": True}).encode()
    scope = _asgi_scope("2.3")
    first_delta = asyncio.Event()
    sent: list[bytes] = []
    requests = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive() -> dict[str, Any]:
        request = next(requests, None)
        if request is not None:
            return request
        await first_delta.wait()  # the client reads one delta, then leaves
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message.get("body", b""))
        if b"event: delta" in message.get("body", b""):
            first_delta.set()

    await asyncio.wait_for(app(scope, receive, send), WAIT)

    assert any(b"event: delta" in chunk for chunk in sent)
    assert not any(b"event: result" in chunk for chunk in sent)
    assert [event.result.errors[0].rule_id for event in finished] == [
        "DESIGN/streaming/consumer-gone"
    ]


# --- the Accept rule and the flag, as read ------------------------------------------------------


@pytest.mark.decision("D260")
@pytest.mark.parametrize(
    ("accept", "streams"),
    [
        (["text/event-stream"], True),
        (["application/json, text/event-stream"], True),
        (["application/json", "text/event-stream;q=0.5"], True),
        (["TEXT/Event-Stream ; charset=utf-8"], True),
        (["text/event-stream;q=0"], False),
        (["text/event-stream; q=0.000"], False),
        (["text/event-stream;q=nonsense"], False),
        (["*/*"], False),
        (["text/*"], False),
        (["application/json"], False),
        ([], False),
    ],
)
def test_accept_asks_for_the_event_stream_only_by_name_with_a_q_above_0(
    accept: list[str], streams: bool
) -> None:
    assert accepts_event_stream(accept) is streams


@pytest.mark.decision("D260")
@pytest.mark.parametrize(
    ("body", "streams"),
    [
        (b'{"Instruction": "hi", "Stream": true}', True),
        (b'{"Instruction": "hi", "\\u0053tream": true}', True),
        (b'{"Instruction": "hi", "Stream": false}', False),
        (b'{"Instruction": "hi", "Stream": "true"}', False),
        (b'{"Instruction": "Stream it"}', False),
        (b'{"Instruction": "hi", "WorkspaceHints": {"Stream": true}}', False),
        (b'[{"Stream": true}]', False),
        (b'{"Instruction": "hi", "Stream": true', False),
        (b"[" * 5000 + b"]" * 5000, False),
    ],
    ids=["true", "escaped-key", "false", "string", "in-text", "nested", "array", "broken", "deep"],
)
def test_the_stream_flag_is_read_from_the_top_of_the_body(body: bytes, streams: bool) -> None:
    assert asks_to_stream(body) is streams


# --- the configuration and the OpenAPI document -----------------------------------------------


@pytest.mark.decision("D264")
def test_the_keep_alive_interval_defaults_to_15_seconds_and_is_read_from_server(
    tmp_path: Path,
) -> None:
    (tmp_path / "default.toml").write_text("", encoding="utf-8")
    (tmp_path / "set.toml").write_text("[server]\nsse_keepalive_seconds = 2.5\n", encoding="utf-8")

    default = load_service_config(tmp_path / "default.toml")
    given = load_service_config(tmp_path / "set.toml")

    assert (default.server.sse_keepalive_seconds, given.server.sse_keepalive_seconds) == (15, 2.5)


@pytest.mark.decision("D264")
@pytest.mark.parametrize("value", ["0", "-1", '"fast"', "nan", "inf", "true"])
def test_a_bad_keep_alive_interval_is_refused_naming_the_key(tmp_path: Path, value: str) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text(f"[server]\nsse_keepalive_seconds = {value}\n", encoding="utf-8")

    with pytest.raises(ConfigError, match=r"\[server\]\.sse_keepalive_seconds"):
        load_service_config(path)


@pytest.mark.decision("D264")
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_create_app_refuses_a_bad_keep_alive_interval(value: float) -> None:
    pipeline = embedded_pipeline(llm=ScriptedLLM([]))
    keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(ANA_KEY.encode()).digest())]

    with pytest.raises(ValueError, match="sse_keepalive_seconds"):
        create_app(pipeline, authenticator=ApiKeyAuthenticator(keys), sse_keepalive_seconds=value)


@pytest.mark.decision("D260", "D262")
async def test_openapi_documents_the_json_and_the_event_stream_answers(tmp_path: Path) -> None:
    app, _, _ = host_app(tmp_path)

    async with app_client(app) as client:
        document = (await client.get("/openapi.json")).json()

    operation = document["paths"][EXECUTE_PATH]["post"]
    content = operation["responses"]["200"]["content"]
    schemas = document["components"]["schemas"]
    event = schemas["ExecuteStreamEvent"]
    assert content["application/json"]["schema"]["$ref"] == "#/components/schemas/InvokeResult"
    assert "ExecuteStreamEvent" in content["text/event-stream"]["schema"]["description"]
    assert [option["properties"]["event"]["const"] for option in event["oneOf"]] == [
        "progress",
        "delta",
        "result",
    ]
    assert [option["properties"]["data"]["$ref"] for option in event["oneOf"]] == [
        "#/components/schemas/StreamProgress",
        "#/components/schemas/StreamDelta",
        "#/components/schemas/InvokeResult",
    ]
    assert set(schemas["StreamDelta"]["required"]) == {"text", "round"}
    assert "Accept: text/event-stream" in operation["description"]
    refs = [
        part.split('"')[0] for part in json.dumps(document).split('"$ref": "#/components/schemas/')
    ][1:]
    assert set(refs) <= set(schemas)  # every reference resolves


# --- how the events are written ---------------------------------------------------------------


def _asgi_scope(spec_version: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": EXECUTE_PATH,
        "raw_path": EXECUTE_PATH.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {ANA_KEY}".encode())],
        "server": ("app", 80),
        "client": ("client", 1234),
        "state": {},
    }


def _streaming_app(llm: ScriptedLLM, listeners: list[Any]) -> Any:
    pipeline = embedded_pipeline(llm=llm, listeners=listeners)
    keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(ANA_KEY.encode()).digest())]
    return create_app(pipeline, authenticator=ApiKeyAuthenticator(keys))


@pytest.mark.decision("D459")
async def test_the_result_event_goes_out_with_the_end_of_the_body() -> None:
    app = _streaming_app(ScriptedLLM([{"text": "All done."}], chunk_size=4), [])
    body = json.dumps({"Instruction": "hi", "Stream": True}).encode()
    requests = iter([{"type": "http.request", "body": body, "more_body": False}])
    ended = asyncio.Event()
    messages: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        request = next(requests, None)
        if request is not None:
            return request
        await ended.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        messages.append(message)
        if message.get("more_body") is False:
            ended.set()

    await asyncio.wait_for(app(_asgi_scope("2.3"), receive, send), WAIT)

    bodies = [m for m in messages if m["type"] == "http.response.body"]
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert b"event: result" in bodies[-1]["body"]
    assert not any(b"event: result" in m["body"] for m in bodies[:-1])


@pytest.mark.decision("D459")
async def test_on_an_asgi_2_4_server_a_send_that_fails_cancels_the_turn() -> None:
    finished: list[TurnFinished] = []

    def heard(event: TurnEvent) -> None:
        if isinstance(event, TurnFinished):
            finished.append(event)

    llm = ScriptedLLM(
        [{"text": "A long answer, written slowly. " * 10}], chunk_size=4, chunk_delay_seconds=0.02
    )
    app = _streaming_app(llm, [heard])
    body = json.dumps({"Instruction": "hi", "Stream": True}).encode()
    requests = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive() -> dict[str, Any]:
        request = next(requests, None)
        if request is not None:
            return request
        await asyncio.sleep(WAIT)  # a 2.4 server says nothing: its send fails instead
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if b"event: delta" in message.get("body", b""):
            raise OSError("the client has gone")

    with pytest.raises(ClientDisconnect):
        await asyncio.wait_for(app(_asgi_scope("2.4"), receive, send), WAIT)

    assert [event.result.errors[0].rule_id for event in finished] == [
        "DESIGN/streaming/consumer-gone"
    ]
