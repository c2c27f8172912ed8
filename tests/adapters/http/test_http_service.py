"""The HTTP service (adapters/http/app.py) and ``aptix serve``.

The detailed cases run the app in process through httpx's ASGI transport (the
app's lifespan included). The end-to-end cases start ``aptix serve`` as a real
process on 127.0.0.1 and talk to it with a real httpx client: the scripted model
on SQLite, the OpenAI-compatible adapter against the loopback fake server, and
two uvicorn workers on one PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_kit import (
    ANA,
    ANA_KEY,
    BOB,
    ENV,
    KEYS,
    READ_THEN_ANSWER,
    app_client,
    aptix_serve,
    continuation_body,
    follow_on_body,
    host_app,
    session_count,
    write_config,
)

from aptix_pipeline.adapters.config.service import ConfigError, load_service_config
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.http.app import (
    _YOUNG_COLLECTION_THRESHOLD,
    CONFIG_ENV,
    EXECUTE_PATH,
    HEALTH_PATH,
    _ExecuteFastPath,
    create_app,
    http_status,
)
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    Caller,
    ErrorCode,
    InvokeError,
    InvokeResult,
)
from aptix_pipeline.testing import fake_openai_server

# --- in process ---------------------------------------------------------------------------------


async def test_initial_continuation_and_follow_on_over_http(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, READ_THEN_ANSWER), env=ENV))

    async with app_client(app) as client:
        first = await client.post(EXECUTE_PATH, json={"Instruction": "Review app.py"}, headers=ANA)
        one = first.json()["Result"]
        second = await client.post(EXECUTE_PATH, json=continuation_body(one), headers=ANA)
        two = second.json()["Result"]
        third = await client.post(EXECUTE_PATH, json=follow_on_body(two), headers=ANA)

    assert (first.status_code, one["Kind"]) == (200, "client_tool_continuation")
    assert first.headers["content-type"] == "application/json"
    assert [call["ToolCallId"] for call in one["ToolCalls"]] == ["c1"]
    assert (second.status_code, two["Kind"], two["TurnId"]) == (200, "final", one["TurnId"])
    assert third.status_code == 200
    assert third.json()["Result"]["PrimaryOutputText"] == "Follow-on answer."
    assert third.json()["Result"]["TurnId"] != one["TurnId"]
    assert session_count(tmp_path / "aptix.db") == 1


@pytest.mark.decision("D81")
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-key"},
        {"X-API-Key": "wrong-key"},
        {"Authorization": f"Basic {ANA_KEY}"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Bearer {ANA_KEY[:-1]}"},
    ],
    ids=["no-key", "wrong-bearer", "wrong-x-api-key", "not-bearer", "empty", "prefix-of-a-key"],
)
async def test_no_key_or_a_wrong_key_is_401_and_nothing_runs(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    app, llm, store = host_app(tmp_path)

    async with app_client(app) as client:
        answer = await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=headers)

    assert answer.status_code == 401
    assert answer.json()["Errors"][0]["Code"] == "unauthorized"
    assert answer.headers["www-authenticate"] == "Bearer"
    assert (store.begun, llm.requests, llm.remaining) == (0, [], 3)
    assert session_count(tmp_path / "host.db") == 0


@pytest.mark.decision("D81")
async def test_the_key_maps_to_the_caller_and_sessions_stay_the_callers(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, READ_THEN_ANSWER), env=ENV))

    async with app_client(app) as client:
        first = await client.post(EXECUTE_PATH, json={"Instruction": "Review"}, headers=ANA)
        as_bob = await client.post(
            EXECUTE_PATH, json=continuation_body(first.json()["Result"]), headers=BOB
        )

    assert first.status_code == 200
    assert as_bob.status_code == 404  # bob's hashed key works, ana's session is not his
    assert [e["RuleId"] for e in as_bob.json()["Errors"]] == ["AGN-033/3.1/session-found"]


@pytest.mark.decision("D82")
@pytest.mark.parametrize(
    ("body", "rule_id"),
    [
        (b"{", "AGN-034/3/envelope-object"),
        (b"", "AGN-034/3/envelope-object"),
        (b'{"Instruction": "hi", "Mode": "review"}', "AGN-034/3/server-owned-field"),
        (b'{"SessionId": "s1", "Instruction": "hi"}', "AGN-034/3/session-turn-pair"),
    ],
    ids=["not-json", "empty", "mode-field", "session-without-turn"],
)
async def test_a_malformed_body_gets_the_engines_invoke_result(
    tmp_path: Path, body: bytes, rule_id: str
) -> None:
    app, llm, _ = host_app(tmp_path)

    async with app_client(app) as client:
        answer = await client.post(
            EXECUTE_PATH, content=body, headers={**ANA, "Content-Type": "application/json"}
        )

    assert answer.status_code == 400
    data = answer.json()
    assert (data["Successful"], data["Result"]) == (False, None)
    assert rule_id in [error["RuleId"] for error in data["Errors"]]
    assert data["Errors"][0]["Code"] == "invalid_request"
    assert llm.requests == []


@pytest.mark.decision("D84")
async def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(tmp_path: Path) -> None:
    app, llm, store = host_app(tmp_path)
    padded = json.dumps({"Instruction": "x" * 5000}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(padded), 1000):
            yield padded[start : start + 1000]

    async with app_client(app) as client:
        declared = await client.post(EXECUTE_PATH, content=padded, headers=ANA)
        streamed = await client.post(EXECUTE_PATH, content=chunks(), headers=ANA)

    assert "content-length" not in {k.lower() for k in streamed.request.headers}
    assert (declared.status_code, streamed.status_code) == (413, 413)
    assert declared.json()["Errors"][0]["Code"] == "body_too_large"
    assert (store.begun, llm.requests) == (0, [])


@pytest.mark.decision("D84")
async def test_a_body_at_the_limit_is_accepted(tmp_path: Path) -> None:
    app, _, _ = host_app(tmp_path)
    body = json.dumps({"Instruction": "x"}).encode()
    body = body.replace(b'"x"', b'"' + b"x" * (4096 - len(body) + 1) + b'"')

    async with app_client(app) as client:
        answer = await client.post(EXECUTE_PATH, content=body, headers=ANA)

    assert len(body) == 4096
    assert answer.status_code == 200, answer.text


@pytest.mark.decision("D82")
async def test_a_failing_model_is_502_with_the_invoke_result(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, [{"text": "only"}]), env=ENV))

    async with app_client(app) as client:
        await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
        answer = await client.post(EXECUTE_PATH, json={"Instruction": "again"}, headers=ANA)

    assert answer.status_code == 502  # the script has run out: the model port failed
    assert answer.json()["Errors"][0]["Code"] == "port_failed"
    assert session_count(tmp_path / "aptix.db") == 1  # the failed turn stored nothing


@pytest.mark.decision("D82")
async def test_a_follow_on_while_tool_results_are_pending_is_400(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, READ_THEN_ANSWER), env=ENV))

    async with app_client(app) as client:
        first = await client.post(EXECUTE_PATH, json={"Instruction": "Review"}, headers=ANA)
        early = await client.post(
            EXECUTE_PATH, json=follow_on_body(first.json()["Result"]), headers=ANA
        )

    assert early.status_code == 400
    assert early.json()["Errors"][0]["Code"] == "invalid_request"


def _error(code: ErrorCode) -> InvokeResult[AgentExecuteResponse]:
    return InvokeResult[AgentExecuteResponse].failure([InvokeError(code=code, message="m")])


@pytest.mark.decision("D82")
@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ErrorCode.INVALID_REQUEST, 400),
        (ErrorCode.TOOL_CALL_MANIFEST_INVALID, 400),
        (ErrorCode.NOT_FOUND, 404),
        (ErrorCode.CONFLICT, 409),
        (ErrorCode.PORT_FAILED, 502),
        (ErrorCode.PIPELINE_RULE_FAILED, 500),
        (ErrorCode.INVALID_RESPONSE, 500),
        (ErrorCode.TOOL_CALL_INVALID, 500),
        (ErrorCode.INTERNAL, 500),
    ],
)
def test_the_status_follows_the_first_errors_code(code: ErrorCode, status: int) -> None:
    assert http_status(_error(code)) == status


@pytest.mark.decision("D82")
def test_a_successful_result_is_200() -> None:
    assert http_status(InvokeResult[AgentExecuteResponse].success(None)) == 200


@pytest.mark.decision("D86")
async def test_a_pluggable_async_authenticator_decides_the_caller(tmp_path: Path) -> None:
    class HeaderAuthenticator:
        async def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
            await asyncio.sleep(0)
            user = headers.get("x-trusted-user")
            return Caller(org="proxy", user=user) if user else None

    config = load_service_config(write_config(tmp_path, [{"text": "hello"}]), env=ENV)
    app = create_app(config, authenticator=HeaderAuthenticator())

    async with app_client(app) as client:
        refused = await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
        allowed = await client.post(
            EXECUTE_PATH, json={"Instruction": "hi"}, headers={"X-Trusted-User": "zoe"}
        )

    assert (refused.status_code, allowed.status_code) == (401, 200)
    with sqlite3.connect(tmp_path / "aptix.db") as db:
        assert db.execute("SELECT org, user FROM sessions").fetchall() == [("proxy", "zoe")]


@pytest.mark.decision("D87")
async def test_openapi_documents_the_path_with_the_wire_schemas(tmp_path: Path) -> None:
    app, _, _ = host_app(tmp_path)

    async with app_client(app) as client:
        document = (await client.get("/openapi.json")).json()

    operation = document["paths"][EXECUTE_PATH]["post"]
    schemas = document["components"]["schemas"]
    body_ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    ok_ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert body_ref == "#/components/schemas/AgentExecuteRequest"
    assert ok_ref == "#/components/schemas/InvokeResult"
    assert {"Instruction", "SessionId", "TurnId", "ToolResults"} <= set(
        schemas["AgentExecuteRequest"]["properties"]
    )
    assert {"Successful", "Result", "Errors", "Warnings"} <= set(
        schemas["InvokeResult"]["properties"]
    )
    assert {"401", "404", "409", "413", "502"} <= set(operation["responses"])
    refs = [
        part.split('"')[0] for part in json.dumps(document).split('"$ref": "#/components/schemas/')
    ][1:]
    assert set(refs) <= set(schemas)  # every reference resolves


@pytest.mark.decision("D85")
async def test_health_answers_once_the_store_is_open(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, [{"text": "only"}]), env=ENV))
    transport = httpx.ASGITransport(app=app)

    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        before = await client.get(HEALTH_PATH)  # no lifespan yet: the store is not open
    async with app_client(app) as client:
        during = await client.get(HEALTH_PATH)

    assert (before.status_code, during.status_code) == (503, 200)
    assert during.json() == {"status": "ok"}


async def test_the_execute_path_answers_the_same_with_and_without_the_fast_path(
    tmp_path: Path,
) -> None:
    """``POST /v1/agent/execute`` skips FastAPI's routing (``_ExecuteFastPath``); the
    route it skips answers alike, and every other method or path still reaches FastAPI."""
    replies = [{"text": "fast"}, {"text": "under a root path"}, {"text": "routed"}]
    app = create_app(load_service_config(write_config(tmp_path, replies), env=ENV))

    async with app_client(app) as client:
        fast = await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
        refused = await client.post(EXECUTE_PATH, json={"Instruction": "hi"})
        method = await client.get(EXECUTE_PATH, headers=ANA)
        other = await client.post(EXECUTE_PATH + "/more", json={}, headers=ANA)
        rooted = httpx.ASGITransport(app=app, root_path="/aptix")
        async with httpx.AsyncClient(transport=rooted, base_url="http://app") as behind:
            proxied = await behind.post(
                "/aptix" + EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA
            )
        # The same app without the fast path: the declared FastAPI route answers.
        fast_path: object = _ExecuteFastPath
        app.user_middleware = [m for m in app.user_middleware if m.cls is not fast_path]
        app.middleware_stack = app.build_middleware_stack()
        slow = await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
        slow_refused = await client.post(EXECUTE_PATH, json={"Instruction": "hi"})

    assert (fast.status_code, proxied.status_code, slow.status_code) == (200, 200, 200)
    assert [r.json()["Result"]["PrimaryOutputText"] for r in (fast, proxied, slow)] == [
        "fast",
        "under a root path",
        "routed",
    ]
    assert fast.headers["content-type"] == slow.headers["content-type"] == "application/json"
    assert (refused.status_code, refused.json()) == (slow_refused.status_code, slow_refused.json())
    assert refused.headers["www-authenticate"] == slow_refused.headers["www-authenticate"]
    assert (method.status_code, other.status_code) == (405, 404)


@pytest.mark.decision("D482")
async def test_a_serving_app_collects_young_objects_less_often_and_puts_it_back(
    tmp_path: Path,
) -> None:
    before = gc.get_threshold()
    app = create_app(load_service_config(write_config(tmp_path, [{"text": "hi"}]), env=ENV))

    async with app_client(app) as client:
        serving = gc.get_threshold()
        frozen = gc.get_freeze_count()
        answer = await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)

    assert answer.status_code == 200
    assert serving == (_YOUNG_COLLECTION_THRESHOLD, *before[1:])
    assert before[0] < _YOUNG_COLLECTION_THRESHOLD
    assert frozen > 0  # what start-up built is out of the collector's sight meanwhile
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, 0)


@pytest.mark.decision("D85")
def test_create_app_reads_the_config_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, [{"text": "only"}])
    monkeypatch.setenv("APTIX_TEST_KEY_ANA", ANA_KEY)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with pytest.raises(ConfigError, match=CONFIG_ENV):
        create_app()

    monkeypatch.setenv(CONFIG_ENV, str(path))
    app = create_app()

    assert EXECUTE_PATH in {getattr(route, "path", None) for route in app.routes}


@pytest.mark.decision("D85")
def test_create_app_on_a_host_pipeline_needs_an_authenticator() -> None:
    pipeline = embedded_pipeline(llm=ScriptedLLM([]))

    with pytest.raises(ConfigError, match="authenticator"):
        create_app(pipeline)


# --- real server processes ----------------------------------------------------------------------


@pytest.mark.decision("D84")
def test_aptix_serve_answers_a_session_with_the_scripted_model_on_sqlite(tmp_path: Path) -> None:
    config = write_config(tmp_path, READ_THEN_ANSWER, more="[server]\nmax_body_bytes = 2048\n")

    with aptix_serve(config, ENV) as (base, _), httpx.Client(base_url=base, timeout=10) as client:
        refused = client.post(EXECUTE_PATH, json={"Instruction": "hi"})
        streamed = client.post(EXECUTE_PATH, content=iter([b"{" + b" " * 1500] * 2), headers=ANA)
        first = client.post(EXECUTE_PATH, json={"Instruction": "Review app.py"}, headers=ANA)
        one = first.json()["Result"]
        second = client.post(EXECUTE_PATH, json=continuation_body(one), headers=ANA)
        third = client.post(EXECUTE_PATH, json=follow_on_body(second.json()["Result"]), headers=ANA)
        openapi = client.get("/openapi.json")

    assert (refused.status_code, streamed.status_code) == (401, 413)
    assert (first.status_code, one["Kind"]) == (200, "client_tool_continuation")
    assert (second.status_code, second.json()["Result"]["Kind"]) == (200, "final")
    assert third.json()["Result"]["PrimaryOutputText"] == "Follow-on answer."  # script in order:
    assert EXECUTE_PATH in openapi.json()["paths"]  # the refused requests consumed no reply
    assert session_count(tmp_path / "aptix.db") == 1


@pytest.mark.parametrize(
    ("table", "args", "logged"),
    [("", (), False), ("[server]\naccess_log = true\n", (), True), ("", ("--access-log",), True)],
    ids=["default-off", "config-on", "option-on"],
)
def test_aptix_serve_logs_a_line_per_request_only_when_asked(
    tmp_path: Path, table: str, args: tuple[str, ...], logged: bool
) -> None:
    config = write_config(tmp_path, [{"text": "hello"}], more=table)

    with aptix_serve(config, ENV, *args) as (base, log), httpx.Client(base_url=base) as client:
        answered = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
    output = log.read_text(errors="replace")

    assert answered.status_code == 200
    assert "Application startup complete" in output
    assert (f"POST {EXECUTE_PATH}" in output) is logged


def test_aptix_serve_exports_each_requests_spans_as_otel_variables_say(tmp_path: Path) -> None:
    config = write_config(tmp_path, READ_THEN_ANSWER)
    env = {**ENV, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "aptix-http"}

    with aptix_serve(config, env) as (base, log), httpx.Client(base_url=base, timeout=10) as client:
        first = client.post(EXECUTE_PATH, json={"Instruction": "Review app.py"}, headers=ANA)
        refused = client.post(EXECUTE_PATH, json={"Instruction": "hi"})
    output = log.read_text(errors="replace")

    assert (first.status_code, refused.status_code) == (200, 401)
    assert output.count('"name": "invoke_agent Aptix assistant"') == 1  # a 401 runs no turn
    assert '"name": "step llm_client"' in output
    assert '"service.name": "aptix-http"' in output
    assert first.json()["Result"]["SessionId"] in output  # gen_ai.conversation.id


@pytest.mark.decision("D83")
def test_aptix_serve_with_the_openai_compatible_adapter(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "app.py"}}]},
        {"text": "Reviewed by the model.", "usage": {"prompt_tokens": 30, "completion_tokens": 5}},
        {"status": 400, "error": "model refuses"},
    ]
    with fake_openai_server(replies) as server:
        config = tmp_path / "aptix.toml"
        config.write_text(
            '[store]\nurl = "sqlite:aptix.db"\n'
            f'[model]\nkind = "openai"\nbase_url = "{server.base_url}"\nmodel = "fake-model"\n'
            'api_key_env = "APTIX_TEST_OPENAI_KEY"\ntimeout_seconds = 10\nmax_attempts = 1\n'
            f"{KEYS}",
            encoding="utf-8",
        )
        env = {**ENV, "APTIX_TEST_OPENAI_KEY": "sk-loopback"}
        with (
            aptix_serve(config, env) as (base, log),
            httpx.Client(base_url=base, timeout=20) as client,
        ):
            first = client.post(EXECUTE_PATH, json={"Instruction": "Review app.py"}, headers=ANA)
            one = first.json()["Result"]
            second = client.post(EXECUTE_PATH, json=continuation_body(one), headers=ANA)
            failed = client.post(EXECUTE_PATH, json={"Instruction": "again"}, headers=ANA)
        calls = server.completions()
    shutdown = log.read_text(errors="replace")

    assert (first.status_code, one["Kind"]) == (200, "client_tool_continuation")
    assert second.status_code == 200
    assert second.json()["Result"]["PrimaryOutputText"] == "Reviewed by the model."
    assert (failed.status_code, failed.json()["Errors"][0]["Code"]) == (502, "port_failed")
    assert len(calls) == 3
    assert calls[0].headers["authorization"] == "Bearer sk-loopback"
    assert calls[0].body["model"] == "fake-model"
    assert "Application shutdown complete" in shutdown  # the model client and store closed
    assert "Traceback" not in shutdown[shutdown.index("Shutting down") :]
    assert shutdown.count("step llm_client faulted (port_failed)") == 1  # the 400, logged once


def _workers_started(log: Path, *, expected: int, seconds: float = 30.0) -> int:
    """How many worker processes ``log`` says started, waiting up to ``seconds`` for ``expected``.

    The service answers once its first worker is up; a second worker may still be
    starting when the turns are done, so its line is waited for, not assumed.
    """
    deadline = time.monotonic() + seconds
    while True:
        started = log.read_text(errors="replace").count("Started server process")
        if started >= expected or time.monotonic() > deadline:
            return started
        time.sleep(0.1)


@pytest.mark.decision("D85")
def test_aptix_serve_two_workers_share_one_postgresql_database(
    tmp_path: Path, postgres_db_url: str
) -> None:
    sessions = 6
    # Every worker plays its own copy of the script; the URL (with its password) from the env.
    replies: list[dict[str, Any]] = [{"text": "answer"}] * (2 * sessions)
    config = write_config(tmp_path, replies, store='url_env = "APTIX_TEST_PG_URL"')
    env = {**ENV, "APTIX_TEST_PG_URL": postgres_db_url}

    async def turns(base: str) -> tuple[list[httpx.Response], list[httpx.Response]]:
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            firsts = await asyncio.gather(
                *(
                    client.post(EXECUTE_PATH, json={"Instruction": f"s{n}"}, headers=ANA)
                    for n in range(sessions)
                )
            )
            follow = await asyncio.gather(
                *(
                    client.post(EXECUTE_PATH, json=follow_on_body(r.json()["Result"]), headers=ANA)
                    for r in firsts
                )
            )
        return firsts, follow

    with aptix_serve(config, env, "--workers", "2") as (base, log):
        firsts, follow = asyncio.run(turns(base))
        started = _workers_started(log, expected=2)

    assert [r.status_code for r in firsts + follow] == [200] * (2 * sessions), [
        r.text for r in firsts + follow if r.status_code != 200
    ]
    assert len({r.json()["Result"]["SessionId"] for r in firsts}) == sessions
    assert started == 2


@pytest.mark.decision("D140", "D141")
async def test_a_lone_surrogate_key_and_deep_json_are_answered_not_500(tmp_path: Path) -> None:
    app, llm, store = host_app(tmp_path)
    surrogate = b'{"\\ud800": 1, "Instruction": "hi"}'
    deep = b'{"Instruction": "hi", "X": ' + b"[" * 1_000 + b"]" * 1_000 + b"}"

    async with app_client(app) as client:
        answers = [
            await client.post(
                EXECUTE_PATH,
                content=body,
                headers={**ANA, "Content-Type": "application/json"},
            )
            for body in (surrogate, deep)
        ]

    assert [answer.status_code for answer in answers] == [400, 400]
    assert [answer.json()["Errors"][0]["RuleId"] for answer in answers] == [
        "AGN-034/4.1/text-utf8",
        "DESIGN/limits/json-depth",
    ]
    assert (store.begun, llm.requests) == (0, [])
