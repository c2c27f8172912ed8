"""The one TOML configuration (adapters/config/service.py) and ``aptix run --config``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_kit import SUPPORT_CATALOG
from http_kit import ANA, aptix_serve, write_config
from http_kit import ENV as HTTP_ENV
from repo import ROOT

from aptix_pipeline import PipelineOptions, SpanMode
from aptix_pipeline.adapters.config.service import (
    DEFAULT_STORE_URL,
    ConfigError,
    OpenAIModelConfig,
    ScriptedModelConfig,
    ServerConfig,
    load_service_config,
)
from aptix_pipeline.adapters.embedded import build_pipeline
from aptix_pipeline.adapters.http.app import EXECUTE_PATH, ApiKeyAuthenticator
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import Caller
from aptix_pipeline.testing import fake_openai_server

EXAMPLE = ROOT / "examples" / "aptix.toml"
APTIX = Path(sys.executable).parent / "aptix"
EXAMPLE_ENV = {"APTIX_KEY_ANA": "ana-secret", "OPENAI_API_KEY": "sk-test"}

SCRIPTED = '[model]\nkind = "scripted"\nscript = "replies.json"\n'


def _write(folder: Path, text: str, *, replies: list[dict[str, str]] | None = None) -> Path:
    script = replies if replies is not None else [{"text": "hi"}]
    (folder / "replies.json").write_text(json.dumps(script), encoding="utf-8")
    path = folder / "aptix.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.decision("D80")
def test_the_committed_example_loads_completely() -> None:
    config = load_service_config(EXAMPLE, env=EXAMPLE_ENV)

    assert config.store_url is None  # the data folder's file: nothing written into the clone
    assert config.model == OpenAIModelConfig(
        model="qwen2.5-coder-7b-instruct",
        base_url="http://127.0.0.1:8000/v1",
        api_key="sk-test",
        timeout_seconds=60,
        max_attempts=3,
        max_total_seconds=180,
    )
    assert config.server == ServerConfig(
        host="127.0.0.1", port=8080, workers=1, max_body_bytes=1_048_576
    )
    assert config.options == PipelineOptions(
        max_server_tool_rounds=8, llm_attempts=3, retry_wait_seconds=0.2, retry_max_wait_seconds=2
    )
    assert [(key.org, key.user) for key in config.api_keys] == [("acme", "ana"), ("acme", "bob")]


@pytest.mark.decision("D81")
async def test_the_examples_catalog_and_keys_are_the_ones_used() -> None:
    config = load_service_config(EXAMPLE, env=EXAMPLE_ENV)
    authenticator = ApiKeyAuthenticator(config.api_keys)

    review = await config.catalog.get_mode("review")
    agent = await config.catalog.get_agent_context(None)

    assert review is not None
    assert [tool.name for tool in review.server_tools] == ["review_checklist"]
    assert agent is not None
    assert [tool.name for tool in agent.client_tools] == ["read_file", "run_tests"]
    ana = {"authorization": "Bearer ana-secret"}
    bob = {"x-api-key": "bob-example-key"}  # the example's hashed key
    assert authenticator.authenticate(ana) == Caller(org="acme", user="ana")
    assert authenticator.authenticate(bob) == Caller(org="acme", user="bob")
    assert authenticator.authenticate({"x-api-key": "ee4200402badd92c9f4ab4b3"}) is None


@pytest.mark.decision("D80")
def test_secrets_stay_out_of_the_configs_repr() -> None:
    config = load_service_config(EXAMPLE, env=EXAMPLE_ENV)

    shown = repr(config)

    assert "sk-test" not in shown
    assert "ana-secret" not in shown


@pytest.mark.decision("D80")
def test_a_catalog_only_file_keeps_working_with_defaults_for_the_rest(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[[modes]]\nname = "general"\ndisplay_name = "Everyday"\n'
        '[[agents]]\nid = "a"\nname = "A"\n[[conversations]]\nid = "c"\n',
    )

    config = load_service_config(path, env={})

    assert (config.store_url, config.model, config.api_keys) == (None, None, ())
    assert config.server == ServerConfig()
    assert config.options == PipelineOptions()


@pytest.mark.decision("D80")
async def test_an_empty_file_uses_the_built_in_catalog(tmp_path: Path) -> None:
    config = load_service_config(_write(tmp_path, ""), env={})

    modes = await config.catalog.list_modes()

    assert [mode.name for mode in modes] == ["general", "review"]


@pytest.mark.decision("D80")
def test_relative_paths_are_resolved_against_the_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    path = _write(folder, f'[store]\nurl = "sqlite:data/a.db"\n{SCRIPTED}')
    monkeypatch.chdir(tmp_path)

    config = load_service_config(Path("conf") / "aptix.toml", env={})

    assert config.store_url == f"sqlite:{folder / 'data' / 'a.db'}"
    assert config.model == ScriptedModelConfig(script=path.parent / "replies.json")


@pytest.mark.decision("D80")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[stor]\nurl = 'memory'\n", "unknown table(s) ['stor']"),
        ("[server]\nprot = 1\n", "[server].prot: Extra inputs are not permitted"),
        ("[server]\nport = 70000\n", "[server].port: Input should be less than or equal to 65535"),
        ("[server]\nport = '80'\n", "[server].port: Input should be a valid integer"),
        ("[server]\nmax_body_bytes = 0\n", "[server].max_body_bytes: Input should be greater"),
        ("[server]\nworkers = 0\n", "[server].workers: Input should be greater"),
        ("server = 3\n", "[server] must be a table"),
        ("[model]\nkind = 'gpt'\n", "[model].kind must be 'scripted' or 'openai', not 'gpt'"),
        ("[model]\nscript = 'replies.json'\n", "[model].kind must be 'scripted' or 'openai'"),
        ("[model]\nkind = 'openai'\n", "[model].model: Field required"),
        ("[model]\nkind = 'openai'\nmodel = 'm'\nbase_url = 'ftp://x'\n", "[model].base_url"),
        ("[model]\nkind = 'openai'\nmodel = 'm'\ntimeout_seconds = 0\n", "[model].timeout_seconds"),
        ("[model]\nkind = 'openai'\nmodel = 'm'\nmax_attempts = 0\n", "[model].max_attempts"),
        ("[model]\nkind = 'openai'\nmodel = 'm'\napi_key_env = '1X'\n", "[model].api_key_env"),
        ("[model]\nkind = 'scripted'\nscript = 'absent.json'\n", "[model].script: "),
        ("[model]\nkind = 'scripted'\n", "[model].script: Field required"),
        ("[store]\nurl = 'mysql://db/x'\n", "[store].url: unknown store 'mysql'"),
        ("[store]\nurl = 'sqlite:'\n", "[store].url: sqlite: needs a file path"),
        ("[store]\n", "[store]: give exactly one of url and url_env"),
        (
            "[store]\nurl = 'memory'\nurl_env = 'U'\n",
            "[store]: give exactly one of url and url_env",
        ),
        ("[store]\nurl = 'a.db'\npassword_env = 'P'\n", "[store].password_env applies to postgres"),
        (
            "[store]\nurl = 'postgresql://u:pw@h/d'\npassword_env = 'P'\n",
            "the URL already holds a password",
        ),
        ("[[auth.keys]]\norg = 'a'\nuser = 'b'\n", "[auth].keys[0]: give exactly one of key_env"),
        (
            "[[auth.keys]]\norg = 'a'\nuser = 'b'\nkey_env = 'K'\nkey_sha256 = '"
            + "a" * 64
            + "'\n",
            "[auth].keys[0]: give exactly one of key_env and key_sha256",
        ),
        ("[[auth.keys]]\norg = 'a'\nuser = 'b'\nkey_sha256 = 'xyz'\n", "[auth].keys[0].key_sha256"),
        ("[[auth.keys]]\nuser = 'b'\nkey_sha256 = '" + "a" * 64 + "'\n", "[auth].keys[0].org"),
        ("[[auth.keys]]\norg = 'a'\nuser = ''\nkey_env = 'K'\n", "[auth].keys[0].user"),
        ("[auth]\nkey = 'plain'\n", "[auth].key: Extra inputs are not permitted"),
        (
            "[[auth.keys]]\norg = 'a'\nuser = 'b'\nkey_sha256 = '" + "a" * 64 + "'\n"
            "[[auth.keys]]\norg = 'c'\nuser = 'd'\nkey_sha256 = '" + "A" * 64 + "'\n",
            "[auth].keys[1]: the same key as [auth].keys[0]",
        ),
        ("[engine]\nllm_attempts = 0\n", "[engine].llm_attempts: Input should be greater"),
        ("[engine]\nmax_server_tool_rounds = -1\n", "[engine].max_server_tool_rounds"),
        ("[engine]\nretries = 2\n", "[engine].retries: Extra inputs are not permitted"),
        (
            "[engine]\nidempotency_ttl_seconds = -1\n",
            "[engine].idempotency_ttl_seconds: Input should be greater than or equal to 0",
        ),
        ("[engine]\nidempotency_ttl_seconds = nan\n", "[engine].idempotency_ttl_seconds"),
        ("[engine]\nidempotency_ttl_seconds = 1e12\n", "[engine].idempotency_ttl_seconds"),
        ("[engine]\nidempotency_ttl_seconds = '1d'\n", "[engine].idempotency_ttl_seconds"),
        ("[engine]\ntool_error_detail = 'traceback'\n", "[engine].tool_error_detail"),
        ("[[modes]]\nname = 'review'\ndisplay_name = 'R'\n", "agents: Field required"),
        ("[server\n", "not valid TOML"),
    ],
)
def test_every_bad_value_is_named_with_its_file_table_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)

    with pytest.raises(ConfigError) as caught:
        load_service_config(path, env={"K": "k", "U": "memory", "P": "p"})

    assert message in str(caught.value)
    assert str(caught.value).startswith(str(path))


@pytest.mark.decision("D183")
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("", 86_400.0),
        ("[engine]\nidempotency_ttl_seconds = 3600\n", 3600.0),
        ("[engine]\nidempotency_ttl_seconds = 0.5\n", 0.5),
        ("[engine]\nidempotency_ttl_seconds = 0\n", None),
    ],
    ids=["default-a-day", "an-hour", "half-a-second", "zero-keeps-for-good"],
)
def test_idempotency_ttl_seconds_sets_how_long_stored_answers_hold(
    tmp_path: Path, text: str, seconds: float | None
) -> None:
    config = load_service_config(_write(tmp_path, text), env={})

    assert config.options.idempotency_ttl_seconds == seconds


@pytest.mark.decision("D80")
@pytest.mark.parametrize(
    ("text", "variable", "where"),
    [
        (
            "[[auth.keys]]\norg = 'a'\nuser = 'b'\nkey_env = 'APTIX_KEY_ANA'\n",
            "APTIX_KEY_ANA",
            "[auth].keys[0].key_env",
        ),
        (
            "[model]\nkind = 'openai'\nmodel = 'm'\napi_key_env = 'OPENAI_API_KEY'\n",
            "OPENAI_API_KEY",
            "[model].api_key_env",
        ),
        (
            "[store]\nurl = 'postgresql://aptix@db/aptix'\npassword_env = 'APTIX_PG_PASSWORD'\n",
            "APTIX_PG_PASSWORD",
            "[store].password_env",
        ),
        ("[store]\nurl_env = 'APTIX_STORE_URL'\n", "APTIX_STORE_URL", "[store].url_env"),
    ],
)
def test_a_missing_environment_variable_is_named(
    tmp_path: Path, text: str, variable: str, where: str
) -> None:
    path = _write(tmp_path, text)

    for env in ({}, {variable: "  "}):
        with pytest.raises(ConfigError) as caught:
            load_service_config(path, env=env)
        assert f"{where}: environment variable {variable} is not set" in str(caught.value)


@pytest.mark.decision("D80")
def test_the_postgresql_password_comes_from_the_environment_url_quoted(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "[store]\nurl = 'postgresql://aptix@db.internal:5433/aptix'\npassword_env = 'PW'\n",
    )

    config = load_service_config(path, env={"PW": "p@ss:w/rd"})

    assert config.store_url == "postgresql://aptix:p%40ss%3Aw%2Frd@db.internal:5433/aptix"
    assert "p%40ss" not in repr(config)


@pytest.mark.decision("D80")
def test_the_store_url_can_come_whole_from_the_environment(tmp_path: Path) -> None:
    path = _write(tmp_path, "[store]\nurl_env = 'APTIX_STORE_URL'\n")

    config = load_service_config(path, env={"APTIX_STORE_URL": "sqlite:/var/lib/aptix/a.db"})

    assert config.store_url == "sqlite:/var/lib/aptix/a.db"


@pytest.mark.decision("D81")
def test_a_key_given_by_environment_is_kept_only_as_its_digest(tmp_path: Path) -> None:
    path = _write(tmp_path, "[[auth.keys]]\norg = 'acme'\nuser = 'ana'\nkey_env = 'K'\n")

    config = load_service_config(path, env={"K": "the-key"})

    assert config.api_keys[0].sha256 == hashlib.sha256(b"the-key").digest()


@pytest.mark.decision("D80")
def test_a_bad_file_opens_no_store(tmp_path: Path) -> None:
    path = _write(tmp_path, "[store]\nurl = 'sqlite:a.db'\n[engine]\nllm_attempts = 0\n")

    with pytest.raises(ConfigError):
        load_service_config(path, env={})

    assert not (tmp_path / "a.db").exists()


async def test_build_pipeline_runs_a_turn_on_the_configured_store_model_and_options(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        f"[store]\nurl = 'sqlite:turns.db'\n{SCRIPTED}[engine]\nmax_server_tool_rounds = 3\n",
        replies=[{"text": "configured answer"}],
    )
    config = load_service_config(path, env={})
    pipeline = build_pipeline(config)
    store = pipeline.ports.store
    assert isinstance(store, SQLiteStore)

    try:
        result = await pipeline.execute({"Instruction": "hi"}, Caller(org="acme", user="ana"))
    finally:
        await store.aclose()

    assert result.successful, result.errors
    assert result.result is not None
    assert result.result.primary_output_text == "configured answer"
    assert pipeline.options.max_server_tool_rounds == 3
    with sqlite3.connect(tmp_path / "turns.db") as db:
        assert db.execute("SELECT count(*) FROM sessions").fetchone() == (1,)


def test_build_pipeline_overrides_take_the_place_of_the_files(tmp_path: Path) -> None:
    config = load_service_config(_write(tmp_path, SCRIPTED), env={})
    llm = ScriptedLLM([{"text": "override"}])

    pipeline = build_pipeline(config, llm=llm, store="memory")

    assert pipeline.ports.llm is llm
    assert type(pipeline.ports.store).__name__ == "MemoryStore"


def test_build_pipeline_without_a_model_is_refused(tmp_path: Path) -> None:
    config = load_service_config(_write(tmp_path, ""), env={})

    with pytest.raises(ConfigError, match=r"no \[model\] table"):
        build_pipeline(config)
    assert DEFAULT_STORE_URL == "sqlite:aptix.db"


# --- aptix run --config ----------------------------------------------------------------------


def _aptix(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(APTIX), *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=60
    )


@pytest.mark.decision("D80")
def test_aptix_run_takes_model_and_store_from_the_config(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    path = _write(folder, f"[store]\nurl = 'sqlite:run.db'\n{SCRIPTED}", replies=[{"text": "ok"}])
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")

    run = _aptix(tmp_path, "run", "request.json", "--config", str(path), "--compact")

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["Result"]["PrimaryOutputText"] == "ok"
    assert (folder / "run.db").is_file()  # beside the config, not in the working directory
    assert not (tmp_path / "aptix.db").exists()


@pytest.mark.decision("D80")
def test_aptix_run_options_override_the_configs_model_and_store(tmp_path: Path) -> None:
    path = _write(tmp_path, f"[store]\nurl = 'sqlite:run.db'\n{SCRIPTED}")
    (tmp_path / "other.json").write_text('[{"text": "from the option"}]', encoding="utf-8")
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")

    run = _aptix(
        tmp_path,
        "run",
        "request.json",
        "--config",
        str(path),
        "--llm-script",
        "other.json",
        "--store",
        "memory",
        "--compact",
    )

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["Result"]["PrimaryOutputText"] == "from the option"
    assert not (tmp_path / "run.db").exists()


@pytest.mark.decision("D80")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "give --llm-script, or a --config with a [model] table"),
        ("[engine]\nllm_attempts = 0\n", "[engine].llm_attempts"),
    ],
)
def test_aptix_run_without_a_model_or_with_a_bad_config_is_a_usage_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")

    run = _aptix(tmp_path, "run", "request.json", "--config", str(path))

    assert run.returncode == 2
    assert message in run.stderr
    assert not (tmp_path / "aptix.db").exists()


@pytest.mark.decision("D85")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nport = -1\n", "[server].port"),
        ("", "a [model] table is required to serve"),
        (SCRIPTED, "no [[auth.keys]]"),
    ],
)
def test_aptix_serve_refuses_a_config_it_cannot_serve(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)

    run = _aptix(tmp_path, "serve", "--config", str(path))

    assert run.returncode == 2
    assert message in run.stderr


def test_the_configuration_page_links_the_example_and_explains_every_key() -> None:
    page = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    keys = set(re.findall(r"^#? *(\w+) *=", EXAMPLE.read_text(encoding="utf-8"), re.MULTILINE))

    assert "](../examples/aptix.toml)" in page
    assert keys >= {"url", "kind", "host", "key_env", "turn_deadline_seconds", "directory"}
    missing = sorted(key for key in keys if f"`{key}`" not in page and f"{key} =" not in page)
    assert not missing, f"docs/CONFIGURATION.md does not explain {missing}"


@pytest.mark.decision("D83")
async def test_the_built_in_catalog_leaves_the_model_name_to_the_model_table(
    tmp_path: Path,
) -> None:
    config = load_service_config(_write(tmp_path, SCRIPTED), env={})

    agent = await config.catalog.get_agent_context(None)

    assert agent is not None
    assert agent.id == "assistant"
    assert agent.model is None  # default_config.toml's placeholder "scripted" is dropped


def test_aptix_run_with_the_configs_openai_compatible_model(tmp_path: Path) -> None:
    with fake_openai_server([{"text": "From the endpoint."}]) as server:
        path = _write(
            tmp_path,
            "[store]\nurl = 'memory'\n"
            f"[model]\nkind = 'openai'\nmodel = 'm1'\nbase_url = '{server.base_url}'\n"
            "api_key_env = 'APTIX_TEST_OPENAI_KEY'\nmax_attempts = 1\n",
        )
        (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
        run = subprocess.run(
            [str(APTIX), "run", "request.json", "--config", str(path), "--compact"],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
            timeout=60,
            env={**os.environ, "APTIX_TEST_OPENAI_KEY": "sk-run"},
        )
        calls = server.completions()

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["Result"]["PrimaryOutputText"] == "From the endpoint."
    assert [(c.body["model"], c.headers["authorization"]) for c in calls] == [
        ("m1", "Bearer sk-run")
    ]


@pytest.mark.decision("D284")
def test_a_config_whose_server_tool_has_no_executor_is_refused_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path, SUPPORT_CATALOG + SCRIPTED)

    with pytest.raises(ConfigError, match=r"aptix\.toml: server tool 'lookup' .* has no executor"):
        load_service_config(path)


def test_aptix_run_refuses_a_config_whose_server_tool_has_no_executor(tmp_path: Path) -> None:
    path = _write(tmp_path, SUPPORT_CATALOG + SCRIPTED)
    request = tmp_path / "request.json"
    request.write_text('{"Instruction": "hi"}', encoding="utf-8")

    run = subprocess.run(
        [str(APTIX), "run", str(request), "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert run.returncode == 2
    assert "server tool 'lookup'" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.decision("D289")
@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "short"),
        ("[engine]\nerror_detail = 'class'\n", "class"),
        ("[engine]\ntool_error_detail = 'full'\n", "full"),  # the former name
    ],
    ids=["default-short", "class", "former-name"],
)
def test_error_detail_sets_what_failing_host_code_tells_the_client(
    tmp_path: Path, text: str, detail: str
) -> None:
    config = load_service_config(_write(tmp_path, text), env={})

    assert config.options.error_detail == detail


@pytest.mark.decision("D289")
def test_error_detail_and_its_former_name_must_agree(tmp_path: Path) -> None:
    text = "[engine]\nerror_detail = 'class'\ntool_error_detail = 'full'\n"
    with pytest.raises(ConfigError, match="error_detail and tool_error_detail disagree"):
        load_service_config(_write(tmp_path, text), env={})


@pytest.mark.decision("D453")
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", SpanMode.FULL),
        ("[telemetry]\n", SpanMode.FULL),
        ("[telemetry]\nspan_mode = 'full'\n", SpanMode.FULL),
        ("[telemetry]\nspan_mode = 'compact'\n", SpanMode.COMPACT),
    ],
)
def test_the_telemetry_table_sets_the_span_mode(
    tmp_path: Path, text: str, expected: SpanMode
) -> None:
    config = load_service_config(_write(tmp_path, text))

    assert config.span_mode is expected


@pytest.mark.decision("D453")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[telemetry]\nspan_mode = 'tiny'\n", "[telemetry].span_mode: Input should be 'full' or"),
        ("[telemetry]\nspan_mode = true\n", "[telemetry].span_mode: Input should be 'full' or"),
        ("[telemetry]\nspans = 'compact'\n", "[telemetry].spans: Extra inputs are not permitted"),
        ("telemetry = 'compact'\n", "[telemetry] must be a table"),
    ],
)
def test_a_bad_telemetry_table_is_named_with_its_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)

    with pytest.raises(ConfigError) as caught:
        load_service_config(path)

    assert message in str(caught.value)


def _console_spans(stderr: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed (one JSON object each), in order."""
    decoder, spans, at = json.JSONDecoder(), [], stderr.find("{")
    while at != -1:
        span, end = decoder.raw_decode(stderr, at)
        spans.append(span)
        at = stderr.find("{", end)
    return spans


@pytest.mark.decision("D453")
@pytest.mark.parametrize(
    ("table", "spans_made", "step_events"),
    [("", 10, 0), ("[telemetry]\nspan_mode = 'compact'\n", 2, 8)],
)
def test_aptix_run_makes_the_spans_of_the_configured_mode(
    tmp_path: Path, table: str, spans_made: int, step_events: int
) -> None:
    path = _write(tmp_path, f"[store]\nurl = 'memory'\n{SCRIPTED}{table}")
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}

    run = subprocess.run(
        [str(APTIX), "run", "request.json", "--config", str(path), "--compact"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )

    assert run.returncode == 0, run.stderr
    spans = _console_spans(run.stderr)
    assert len(spans) == spans_made
    assert spans[-1]["name"] == "invoke_agent Aptix assistant"
    assert "chat" in [span["name"].split()[0] for span in spans]
    events = [event for event in spans[-1]["events"] if event["name"] == "aptix.step"]
    assert len(events) == step_events


@pytest.mark.decision("D453")
def test_aptix_serve_makes_compact_spans_when_the_config_says(tmp_path: Path) -> None:
    config = write_config(tmp_path, [{"text": "Hello."}], more="[telemetry]\nspan_mode = 'compact'")
    env = {**HTTP_ENV, "OTEL_TRACES_EXPORTER": "console"}

    with aptix_serve(config, env) as (base, log), httpx.Client(base_url=base, timeout=10) as client:
        answered = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
    output = log.read_text(errors="replace")

    assert answered.status_code == 200, answered.text
    assert output.count('"name": "invoke_agent Aptix assistant"') == 1
    assert output.count('"name": "aptix.step"') == 8
    assert '"name": "step ' not in output
