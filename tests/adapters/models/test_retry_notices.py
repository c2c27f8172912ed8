"""A model call being retried is told, one line per retry: on stderr for ``aptix run
--verbose`` (D641: without it, one line when the turn ends), in the service's log for
``aptix serve`` (``adapters/models/retry_notices.py``).

Real processes of the installed ``aptix`` against the fake OpenAI server of
``testing/openai_server.py`` (failing, or not there at all: a port nothing listens
on), and a real pipeline whose model raises for the engine's own retry loop.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from engine_kit import FlakyLLM
from serve_process import free_port, serving

from aptix_pipeline import Caller, PipelineOptions, embedded_pipeline
from aptix_pipeline.adapters.models.retry_notices import LOGGER_NAME, stderr_retry_notices
from aptix_pipeline.testing import FakeOpenAIServer

APTIX = Path(sys.executable).parent / "aptix"
OVERLOADED = {"status": 503, "error": "overloaded", "headers": {"Retry-After": "0"}}


def _config(folder: Path, base_url: str, *, max_attempts: int, more: str = "") -> Path:
    path = folder / "aptix.toml"
    path.write_text(
        f'[store]\nurl = "memory"\n[model]\nkind = "openai"\nmodel = "m"\n'
        f'base_url = "{base_url}"\nmax_attempts = {max_attempts}\n{more}',
        encoding="utf-8",
    )
    return path


def _run(folder: Path, config: Path) -> subprocess.CompletedProcess[str]:
    (folder / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    return subprocess.run(
        [APTIX, "run", "request.json", "--config", config, "--store", "memory", "--verbose"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
    )


@pytest.fixture(autouse=True)
def _retries_logger_restored() -> Iterator[None]:
    """The retries logger's handlers as they were before the test (it installs its own)."""
    logger = logging.getLogger(LOGGER_NAME)
    handlers = list(logger.handlers)
    yield
    logger.handlers[:] = handlers


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer([OVERLOADED, OVERLOADED, {"text": "Back again."}])
    server.start()
    yield server
    server.stop()


@pytest.mark.decision("D386")
def test_aptix_run_tells_each_retry_of_a_failing_model_on_stderr(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    config = _config(tmp_path, fake.base_url, max_attempts=4)

    ran = _run(tmp_path, config)

    assert ran.returncode == 0, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if "model call failed" in line]
    assert lines == [
        "aptix: model call failed (InternalServerError: the model server answered "
        f"503 Service Unavailable: overloaded); attempt {n} of 4 in 0.0 s"
        for n in (2, 3)
    ]
    assert "Back again." in ran.stdout


@pytest.mark.decision("D386")
def test_aptix_run_tells_why_an_unreachable_model_is_retried(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    config = _config(tmp_path, nowhere, max_attempts=2)

    ran = _run(tmp_path, config)

    assert ran.returncode == 1
    (line,) = [line for line in ran.stderr.splitlines() if "model call failed" in line]
    assert line.startswith(
        f"aptix: model call failed (APIConnectionError: could not reach the model server at "
        f"{nowhere}"
    )
    assert "attempt 2 of 2 in " in line
    assert '"Code": "port_failed"' in ran.stdout


@pytest.mark.decision("D386")
def test_aptix_serve_tells_each_retry_in_its_log(tmp_path: Path, fake: FakeOpenAIServer) -> None:
    keys = '[[auth.keys]]\norg = "acme"\nuser = "ana"\nkey_env = "APTIX_TEST_KEY"\n'
    config = _config(tmp_path, fake.base_url, max_attempts=4, more=keys)
    port = free_port()
    command = [APTIX, "serve", "--config", config, "--port", str(port)]
    env = {**os.environ, "APTIX_TEST_KEY": "k", "OTEL_TRACES_EXPORTER": "none"}

    with serving(command, env, port=port, cwd=tmp_path, log=tmp_path / "serve.log") as served:
        answer = httpx.post(
            served.base + "/v1/agent/execute",
            json={"Instruction": "hi"},
            headers={"Authorization": "Bearer k"},
            timeout=30,
        )
        log = served.output()

    assert answer.status_code == 200
    assert log.count("WARNING:  model call failed (InternalServerError: ") == 2
    assert "attempt 3 of 4 in 0.0 s" in log


@pytest.mark.decision("D386")
async def test_the_engines_own_retries_are_told_with_the_exception_and_the_attempts() -> None:
    out = io.StringIO()
    options = PipelineOptions(llm_attempts=3, retry_wait_seconds=0, retry_max_wait_seconds=0)
    pipeline = embedded_pipeline(
        llm=FlakyLLM(failures=2),
        options=options,
        listeners=(stderr_retry_notices(options, stream=out),),
    )

    outcome = await pipeline.execute({"Instruction": "hi"}, Caller(org="acme", user="ana"))

    assert outcome.successful
    assert out.getvalue().splitlines() == [
        "aptix: model call failed (ConnectionError: model unreachable (call 1)); "
        "attempt 2 of 3 in 0.0 s",
        "aptix: model call failed (ConnectionError: model unreachable (call 2)); "
        "attempt 3 of 3 in 0.0 s",
    ]
