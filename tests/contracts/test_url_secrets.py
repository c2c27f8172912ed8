"""Credentials in URLs are never echoed (decision D220).

``scrub_urls`` masks userinfo and secret-looking parameters in any text; these tests
check each URL form, then each surface a URL reaches when the model endpoint cannot be
reached or times out: the ``InvokeResult``, logs, spans, a recording, a ``ConfigError``.
The model errors are genuine: the real openai SDK against a closed port, and against a
server that answers too late (``fake_openai_server``).
"""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import pytest
from engine_kit import CALLER
from replay_kit import recording_pipeline
from span_kit import Recorded, values_of

from aptix_pipeline.adapters.models.openai_compatible import OpenAICompatibleLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import ErrorCode
from aptix_pipeline.contracts.url_secrets import (
    MASK,
    is_secret_name,
    scrub_secret,
    scrub_urls,
    shown_url,
)
from aptix_pipeline.engine.replay.records import RecordedError
from aptix_pipeline.steps.faults import described
from aptix_pipeline.testing import fake_openai_server

pytestmark = pytest.mark.decision("D220")

SECRET = "s3cr3t-Zq9"
"""Planted in every URL; must never come back."""

NAMES = [
    "key", "api-key", "api_key", "apikey", "API-KEY", "Api_Key", "token", "access_token",
    "refresh_token", "id_token", "secret", "client_secret", "password", "passwd", "pwd",
    "sig", "signature", "auth", "authorization", "credential", "credentials", "code",
    "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "subscription-key",
    "api%2Dkey", "session", "sessionid",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lead", ["?", "&", ";", "#"])
def test_each_secret_parameter_is_masked(name: str, lead: str) -> None:
    url = f"https://host.example/v1?model=m{lead if lead != '?' else '&'}{name}={SECRET}&x=1"
    if lead == "?":
        url = f"https://host.example/v1?{name}={SECRET}&x=1"
    scrubbed = scrub_urls(f"could not reach {url}: refused")
    assert SECRET not in scrubbed
    assert f"{name}={MASK}" in scrubbed
    assert "x=1" in scrubbed
    assert "host.example" in scrubbed


@pytest.mark.parametrize(
    "text",
    [
        f"http://user:{SECRET}@host/v1",
        f"http://{SECRET}@host/v1",  # a user only (a token as user name)
        f"http://user%40corp:{SECRET}%21@host:8080/v1",  # percent-encoded
        f"http://user:p@ss{SECRET}@host/v1",  # a raw "@" in the password
        f"https://user:{SECRET}@[::1]:8443/v1?stream=1",  # an IPv6 host
        f"https://user:{SECRET}@[2001:db8::1]/v1",
        f"postgresql://app:{SECRET}@db.internal:5432/aptix?sslmode=require",
        f"see 'http://u:{SECRET}@h/v1' and (https://u2:{SECRET}@h2/)",  # inside a message
        f"Request URL: URL('https://h/v1/chat?api-key={SECRET}')",  # httpx repr
        f"https://h/cb#access_token={SECRET}&state=1",  # a fragment
        f"host=db user=app password={SECRET} dbname=aptix",  # libpq key/value
        f"host=db password='{SECRET} x' dbname=aptix",
    ],
)
def test_each_url_form_is_scrubbed(text: str) -> None:
    scrubbed = scrub_urls(text)
    assert SECRET not in scrubbed, scrubbed
    assert MASK in scrubbed


def test_harmless_text_is_left_alone() -> None:
    text = "GET https://host/v1/chat?model=gpt&stream=true failed: email a@b.c; x=1"
    assert scrub_urls(text) == text
    assert scrub_urls(scrub_urls(f"http://u:{SECRET}@h/")) == f"http://{MASK}@h/"
    assert not is_secret_name("model")
    assert is_secret_name("Client-Secret")


def test_exception_text_becomes_scrubbed_errors_and_recordings() -> None:
    error = ConnectionError(f"cannot reach http://u:{SECRET}@h/v1?token={SECRET}")
    assert SECRET not in described(error)
    recorded = RecordedError.of(error)
    assert SECRET not in recorded.message
    assert SECRET not in str(recorded.to_exception())


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _all_text(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


async def _turn_with(
    base_url: str, caplog: pytest.LogCaptureFixture, api_key: str = "sk-test", **options: Any
) -> str:
    """Run one turn whose model is at ``base_url``; everything it surfaced, as text."""
    recorded = Recorded()
    recordings: list[Any] = []
    async with OpenAICompatibleLLM(
        model="m", base_url=base_url, api_key=api_key, max_attempts=1, **options
    ) as llm:
        from aptix_pipeline import RecordingOptions

        pipeline = recording_pipeline(
            MemoryStore(),
            llm,
            recording=RecordingOptions(sink=recordings.append),
            telemetry=recorded.telemetry(),
        )
        with caplog.at_level(logging.DEBUG):
            report = await pipeline.run({"Instruction": "hi"}, CALLER)
    result = report.result
    assert not result.successful
    assert [e.code for e in result.errors] == [ErrorCode.PORT_FAILED]
    assert "model server" in result.errors[0].message
    surfaces = [result.to_json(), caplog.text, _all_text([r.to_dict() for r in recordings])]
    for span in recorded.spans:
        surfaces.append(_all_text(dict(values_of(span))))
        surfaces.append(str(span.status.description))
        surfaces.extend(_all_text(dict(event.attributes or {})) for event in span.events)
    return "\n".join(surfaces)


@pytest.mark.parametrize(
    "secret_part",
    [f"user:{SECRET}@", f"{SECRET}@", f"u%3A:{SECRET}%40@"],
    ids=["user+password", "user only", "percent-encoded"],
)
async def test_an_unreachable_model_never_echoes_its_url_credentials(
    secret_part: str, caplog: pytest.LogCaptureFixture
) -> None:
    base_url = f"http://{secret_part}127.0.0.1:{_closed_port()}/v1?api-key={SECRET}"
    surfaced = await _turn_with(base_url, caplog)
    assert "could not reach" in surfaced
    assert SECRET not in surfaced


async def test_a_model_timeout_never_echoes_its_url_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with fake_openai_server([{"delay": 2, "text": "late"}]) as server:
        base_url = server.base_url.replace("://", f"://user:{SECRET}@", 1)
        surfaced = await _turn_with(base_url, caplog, timeout_seconds=0.2)
    assert "did not answer in time" in surfaced
    assert SECRET not in surfaced


async def test_the_502_body_over_http_never_echoes_the_url_credentials(tmp_path: Any) -> None:
    import hashlib

    import httpx

    from aptix_pipeline.adapters.config.service import ApiKey
    from aptix_pipeline.adapters.embedded import embedded_pipeline
    from aptix_pipeline.adapters.http.app import EXECUTE_PATH, ApiKeyAuthenticator, create_app

    base_url = f"http://user:{SECRET}@127.0.0.1:{_closed_port()}/v1?api_key={SECRET}"
    async with OpenAICompatibleLLM(model="m", base_url=base_url, max_attempts=1) as llm:
        keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(b"k").digest())]
        app = create_app(
            embedded_pipeline(llm=llm, store=MemoryStore()),
            authenticator=ApiKeyAuthenticator(keys),
        )
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://app"
            ) as client,
        ):
            answer = await client.post(
                EXECUTE_PATH, json={"Instruction": "hi"}, headers={"Authorization": "Bearer k"}
            )
    assert answer.status_code == 502
    assert "could not reach" in answer.text
    assert SECRET not in answer.text


def test_a_store_that_cannot_open_never_echoes_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aptix_pipeline.adapters import embedded
    from aptix_pipeline.adapters.config import service as service_config
    from aptix_pipeline.adapters.models.scripted import ScriptedLLM

    def refuse(url: str) -> None:
        raise OSError(f"driver refused {url}")  # a driver quoting the URL it was given

    monkeypatch.setattr(embedded, "open_store", refuse)
    config = service_config.parse_service_config({}, source="aptix.toml")
    with pytest.raises(service_config.ConfigError) as caught:
        embedded.build_pipeline(
            config, llm=ScriptedLLM([]), store=f"postgresql://app:{SECRET}@db/aptix"
        )
    assert SECRET not in str(caught.value)
    assert "cannot open the store" in str(caught.value)


async def test_the_http_clients_request_log_never_echoes_the_url_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with fake_openai_server([{"text": "fine"}]) as server:
        base_url = server.base_url.replace("://", f"://user:{SECRET}@", 1)
        async with OpenAICompatibleLLM(model="m", base_url=base_url, api_key="k") as llm:
            pipeline = recording_pipeline(MemoryStore(), llm)
            with caplog.at_level(logging.DEBUG):
                report = await pipeline.run({"Instruction": "hi"}, CALLER)
    assert report.result.successful
    assert "HTTP Request" in caplog.text  # httpx logged the request, URL and all
    assert SECRET not in caplog.text


def test_aptix_serve_answers_502_without_the_url_credentials(tmp_path: Any) -> None:
    import httpx
    from http_kit import ANA, ENV, KEYS, aptix_serve

    from aptix_pipeline.adapters.http.app import EXECUTE_PATH

    base_url = f"http://user:{SECRET}@127.0.0.1:{_closed_port()}/v1?api-key={SECRET}"
    config = tmp_path / "aptix.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:aptix.db"\n[model]\nkind = "openai"\nmodel = "m"\n'
        f'base_url = "{base_url}"\nmax_attempts = 1\n{KEYS}',
        encoding="utf-8",
    )
    with aptix_serve(config, ENV) as (base, log), httpx.Client(base_url=base, timeout=30) as client:
        answer = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
        served_log = log.read_text(errors="replace")
    assert answer.status_code == 502
    assert "could not reach" in answer.text
    assert SECRET not in answer.text
    assert SECRET not in served_log


@pytest.mark.decision("D220")
async def test_a_raising_steps_logged_traceback_never_echoes_url_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The engine logs the traceback of a step that raised (code ``internal``); its
    exception text may quote a port's URL, and the log must not keep the secrets."""
    from engine_kit import make_pipeline

    from aptix_pipeline.contracts import PipelineStep
    from aptix_pipeline.steps import TurnScope

    async def raising(scope: TurnScope) -> None:
        raise ConnectionError(f"cannot reach http://ana:{SECRET}@models.local/v1?api-key={SECRET}")

    pipeline, _ = make_pipeline(MemoryStore(), steps={PipelineStep.REASONER: raising})
    with caplog.at_level(logging.ERROR, logger="aptix_pipeline"):
        result = await pipeline.execute({"Instruction": "hi"}, CALLER)

    assert [error.code for error in result.errors] == [ErrorCode.INTERNAL]
    logged = logging.Formatter().format(caplog.records[-1])
    assert "Traceback" in logged
    assert "ConnectionError" in logged
    assert MASK in logged
    assert SECRET not in logged
    assert SECRET not in caplog.text
    assert SECRET not in result.to_json()


def _package_loggers() -> dict[str, logging.Logger]:
    """Every logger a module of the package logs through (a module-level ``Logger``)."""
    import importlib
    import pkgutil

    import aptix_pipeline

    found: dict[str, logging.Logger] = {}
    for info in pkgutil.walk_packages(aptix_pipeline.__path__, "aptix_pipeline."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, logging.Logger) and value.name.startswith("aptix_pipeline"):
                found[value.name] = value
    return found


@pytest.mark.decision("D255")
def test_every_logger_of_the_package_scrubs_its_records() -> None:
    """A logger's filter sees only its own records, not its children's: each has one."""
    from aptix_pipeline.contracts.url_secrets import ScrubbingFilter

    loggers = _package_loggers()

    assert "aptix_pipeline.engine.runner" in loggers
    unscrubbed = [
        name
        for name, logger in loggers.items()
        if not any(isinstance(f, ScrubbingFilter) for f in logger.filters)
    ]
    assert unscrubbed == []


@pytest.mark.decision("D255")
def test_a_module_loggers_record_reaches_the_hosts_handler_scrubbed() -> None:
    """The host's handler sits on a parent logger; the record it gets is already masked."""
    from aptix_pipeline.engine import runner

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(self.format(record))

    url = f"http://ana:{SECRET}@models.local/v1?api-key={SECRET}"
    kept, parent = Keep(), logging.getLogger("aptix_pipeline")
    parent.addHandler(kept)
    try:
        try:
            raise ConnectionError(f"cannot reach {url}")
        except ConnectionError:
            runner.logger.error("step %s raised on %s", "reasoner", url, exc_info=True)
    finally:
        parent.removeHandler(kept)

    assert runner.logger.name == "aptix_pipeline.engine.runner"
    [line] = kept.lines
    assert "ConnectionError" in line
    assert MASK in line
    assert SECRET not in line


# --- secrets no pattern recognises: a path segment, a fragment, a model's key (D402) ------


@pytest.mark.decision("D402")
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://host/v1/KEY123/", "https://host/v1/***/"),
        ("https://host/v1#token=abc", "https://host/v1#***"),
        ("https://host/v1#abc", "https://host/v1#***"),
        ("http://u:p@127.0.0.1:9/v1/", "http://***@127.0.0.1:9/v1/"),
        ("https://host/v1beta/openai/", "https://host/v1beta/openai/"),
        ("https://h/openai/deployments/gpt-4o?api-version=1", "https://h/openai/deployments/***?api-version=***"),
        ("https://gateway.test/v1/0f3a9c/my-gateway/openai", "https://gateway.test/v1/***/my-gateway/openai"),
    ],
)  # fmt: skip
def test_an_error_names_a_model_url_without_what_may_be_a_secret(url: str, shown: str) -> None:
    assert shown_url(url) == shown


@pytest.mark.decision("D402")
def test_a_short_key_is_masked_only_as_a_word_of_its_own() -> None:
    text = f"POST https://h/v1?api-key={SECRET} with Bearer k refused (k)"

    scrubbed = scrub_secret(scrub_urls(text), "k")

    assert scrubbed == "POST https://h/v1?api-key=*** with Bearer *** refused (***)"
    assert scrub_secret("a key-k-thing", "k") == "a key-k-thing"
    assert scrub_secret(f"xx{SECRET}yy", SECRET) == "xx***yy"  # a long one anywhere


@pytest.mark.decision("D402")
@pytest.mark.parametrize(
    "path",
    [f"/v1/{SECRET}/", "/v1/KEY123/", f"/v1#token={SECRET}", f"/v1#{SECRET}"],
    ids=["path", "short-path-segment", "fragment-parameter", "fragment"],
)
async def test_an_unreachable_model_never_echoes_a_secret_in_its_path_or_fragment(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "KEY123" if "KEY123" in path else SECRET

    surfaced = await _turn_with(f"http://127.0.0.1:{_closed_port()}{path}", caplog)

    assert "could not reach the model server at http://127.0.0.1:" in surfaced
    assert secret not in surfaced


@pytest.mark.decision("D402")
async def test_a_model_server_quoting_a_secret_path_is_masked_in_errors_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with fake_openai_server([{"text": "never"}]) as server:  # answers 404 "no route <path>"
        surfaced = await _turn_with(f"{server.base_url}/{SECRET}/", caplog)

    assert "404" in surfaced
    assert "no route /v1/***/chat/completions" in surfaced
    assert "HTTP Request" in caplog.text  # httpx logged the request, URL and all
    assert SECRET not in surfaced


@pytest.mark.decision("D402")
async def test_a_short_api_key_never_unmasks_a_query_parameter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    base_url = f"http://127.0.0.1:{_closed_port()}/v1?api-key={SECRET}"

    surfaced = await _turn_with(base_url, caplog, api_key="k")

    assert "api-key=***" in surfaced
    assert "api-***ey" not in surfaced
    assert SECRET not in surfaced


@pytest.mark.decision("D402")
def test_a_models_api_key_is_masked_in_any_error_text_of_the_process() -> None:
    key = "sk-live-" + SECRET
    OpenAICompatibleLLM(model="m", base_url="http://127.0.0.1:9/v1", api_key=key)

    error = RuntimeError(f"a host's tool echoed the model key {key} by mistake")

    assert key not in described(error)
    assert key not in RecordedError.of(error).message
    assert "echoed the model key ***" in described(error)


@pytest.mark.decision("D402")
@pytest.mark.parametrize("key", ["sk-abc\n", "sk abc", "sk-\x00", "sk-\u2603"])
def test_a_key_no_header_can_carry_is_refused_naming_it(key: str) -> None:
    with pytest.raises(ValueError, match="api_key holds") as raised:
        OpenAICompatibleLLM(model="m", base_url="http://127.0.0.1:9/v1", api_key=key)

    assert key not in str(raised.value)
