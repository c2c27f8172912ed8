"""Every error the HTTP service answers has one shape: the ``InvokeResult`` envelope.

A real uvicorn server on 127.0.0.1 (in a thread of this process) and a real HTTP
client. The app is ``create_app`` on a configuration with the scripted model; the
statuses no route of the service answers by itself (403, 422, 500) come from routes
a host adds to that app, which the service's error handlers answer like its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, HTTPException
from http_kit import ANA, ENV, write_config
from serve_process import free_port
from server_thread import WAIT, server_thread

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import EXECUTE_PATH, HEALTH_PATH, create_app
from aptix_pipeline.contracts import AgentExecuteResponse, InvokeResult


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def _app(folder: Path) -> FastAPI:
    """The service on a scripted model, plus three routes of a host's own."""
    config = write_config(folder, [{"text": "hello"}], more="[server]\nmax_body_bytes = 64\n")
    app = create_app(load_service_config(config))

    @app.get("/host/secret")
    async def secret() -> None:
        raise HTTPException(403, "only the org's admins may read this")

    @app.get("/host/items")
    async def items(limit: int) -> dict[str, int]:
        return {"limit": limit}

    @app.get("/host/broken")
    async def broken() -> None:
        raise RuntimeError("a host route failed with a secret detail")

    return app


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of the service, running for the module's tests."""
    folder = tmp_path_factory.mktemp("service")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ENV.items():
            patch.setenv(name, value)
        app = _app(folder)
        with server_thread(app) as port:
            yield f"http://127.0.0.1:{port}"


def _envelope(answer: httpx.Response) -> InvokeResult[AgentExecuteResponse]:
    """The answer's body read as an ``InvokeResult``; it must be one."""
    assert answer.headers["content-type"] == "application/json"
    return InvokeResult[AgentExecuteResponse].model_validate_json(answer.content)


REQUESTS: dict[str, tuple[str, str, dict[str, Any], int, str, str | None]] = {
    # name: method, path, httpx keyword arguments, status, Code, Field
    "no-key": (
        "POST",
        EXECUTE_PATH,
        {"json": {"Instruction": "hi"}},
        401,
        "unauthorized",
        "Authorization",
    ),
    "forbidden": ("GET", "/host/secret", {}, 403, "forbidden", None),
    "unknown-path": ("GET", "/v1/nothing-here", {}, 404, "not_found", None),
    "wrong-method": ("GET", EXECUTE_PATH, {}, 405, "method_not_allowed", None),
    "too-large": (
        "POST",
        EXECUTE_PATH,
        {"headers": ANA, "json": {"Instruction": "x" * 100}},
        413,
        "body_too_large",
        None,
    ),
    "not-json": (
        "POST",
        EXECUTE_PATH,
        {"headers": {**ANA, "Content-Type": "text/plain"}, "content": b'{"Instruction": "hi"}'},
        415,
        "unsupported_media_type",
        "Content-Type",
    ),
    "bad-parameter": ("GET", "/host/items?limit=many", {}, 422, "invalid_request", "query.limit"),
    "unexpected": ("GET", "/host/broken", {}, 500, "internal", None),
    "engine-refusal": (
        "POST",
        EXECUTE_PATH,
        {"headers": ANA, "json": {}},
        400,
        "invalid_request",
        None,
    ),
}


@pytest.mark.decision("D382")
@pytest.mark.parametrize("name", REQUESTS)
def test_every_error_status_answers_the_invoke_result_envelope(base: str, name: str) -> None:
    method, path, arguments, status, code, field = REQUESTS[name]

    answer = httpx.request(method, base + path, timeout=WAIT, **arguments)

    assert answer.status_code == status
    result = _envelope(answer)
    assert result.successful is False
    assert result.result is None
    assert result.errors[0].code == code
    assert result.errors[0].message
    if field is not None:
        assert result.errors[0].field == field
    assert "detail" not in answer.json()


@pytest.mark.decision("D382")
def test_the_service_refusing_a_request_keeps_its_headers(base: str) -> None:
    unauthorized = httpx.post(base + EXECUTE_PATH, json={"Instruction": "hi"}, timeout=WAIT)
    wrong_method = httpx.get(base + EXECUTE_PATH, timeout=WAIT)

    assert unauthorized.headers["www-authenticate"] == "Bearer"
    assert wrong_method.headers["allow"] == "POST"


@pytest.mark.decision("D382")
def test_an_unexpected_failure_names_no_detail_of_its_exception(base: str) -> None:
    answer = httpx.get(base + "/host/broken", timeout=WAIT)

    assert "secret detail" not in answer.text
    assert "RuntimeError" not in answer.text


@pytest.mark.decision("D383")
@pytest.mark.parametrize(
    "content_type",
    [None, "application/json", "application/json; charset=utf-8", "application/vnd.a+json"],
)
def test_a_body_declared_as_json_or_undeclared_reaches_the_engine(
    base: str, content_type: str | None
) -> None:
    headers = {**ANA, **({"Content-Type": content_type} if content_type else {})}

    answer = httpx.post(base + EXECUTE_PATH, content=b"{}", headers=headers, timeout=WAIT)

    assert answer.status_code == 400
    assert _envelope(answer).rule_ids  # the engine's own refusal, by its rules


@pytest.mark.decision("D383")
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_body_declared_as_something_else_is_415_and_nothing_runs(
    base: str, content_type: str
) -> None:
    headers = {**ANA, "Content-Type": content_type}

    answer = httpx.post(base + EXECUTE_PATH, content=b"{}", headers=headers, timeout=WAIT)

    assert answer.status_code == 415
    assert content_type in _envelope(answer).errors[0].message


@contextmanager
def _without_lifespan(app: FastAPI) -> Iterator[str]:
    """``app`` served with its lifespan off: it never opens its pipeline (starting)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(WAIT)


@pytest.mark.decision("D382")
def test_a_service_not_started_answers_503_unavailable(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, [{"text": "never"}])))

    with _without_lifespan(app) as url:
        health = httpx.get(url + HEALTH_PATH, timeout=WAIT)
        execute = httpx.post(url + EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)

    assert (health.status_code, execute.status_code) == (503, 503)
    assert _envelope(health).errors[0].code == "unavailable"
    assert _envelope(execute).errors[0].code == "unavailable"


# --- the OpenAPI document declares the API keys ------------------------------------------


@pytest.mark.decision("D384")
def test_openapi_declares_the_two_api_key_schemes(base: str) -> None:
    document = httpx.get(base + "/openapi.json", timeout=WAIT).json()

    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKeyHeader"] == {
        **schemes["apiKeyHeader"],
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
    }


@pytest.mark.decision("D384")
def test_openapi_requires_a_key_on_execute_and_none_on_health(base: str) -> None:
    paths = httpx.get(base + "/openapi.json", timeout=WAIT).json()["paths"]

    assert paths[EXECUTE_PATH]["post"]["security"] == [{"bearerAuth": []}, {"apiKeyHeader": []}]
    assert "security" not in paths[HEALTH_PATH]["get"]


@pytest.mark.decision("D384")
@pytest.mark.parametrize("scheme", ["bearerAuth", "apiKeyHeader"])
def test_a_key_sent_as_a_declared_scheme_says_it_authenticates(base: str, scheme: str) -> None:
    declared = httpx.get(base + "/openapi.json", timeout=WAIT).json()["components"]
    key = ANA["Authorization"].removeprefix("Bearer ")
    spec = declared["securitySchemes"][scheme]
    headers = {"Authorization": f"Bearer {key}"} if spec["type"] == "http" else {spec["name"]: key}

    answer = httpx.post(base + EXECUTE_PATH, json={}, headers=headers, timeout=WAIT)

    assert answer.status_code == 400  # past authentication: the engine refused the empty body


@pytest.mark.decision("D382")
def test_openapi_documents_the_error_statuses_with_the_invoke_result(base: str) -> None:
    responses = httpx.get(base + "/openapi.json", timeout=WAIT).json()["paths"][EXECUTE_PATH]
    documented = responses["post"]["responses"]

    for status in ("401", "413", "415", "503"):
        schema = documented[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/InvokeResult"}
