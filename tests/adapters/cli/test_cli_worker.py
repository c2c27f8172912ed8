"""``aptix worker --config FILE`` (adapters/cli/serve.py, docs/DURABLE.md): refusals in
one line, a worker that runs the configuration's turns and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cli_kit import APTIX
from http_kit import ENV, write_config
from temporal_kit import free_port
from worker_process import READY, aptix_worker, temporal_table

from aptix_pipeline import Caller, durable_pipeline
from aptix_pipeline.adapters.config import load_service_config


def _worker(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(APTIX), "worker", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=config.parent,
        env={**os.environ, **ENV},
    )


@pytest.mark.decision("D553")
@pytest.mark.parametrize(
    ("more", "said"),
    [
        ("", "a [temporal] table is required to run a worker"),
        ('[temporal]\naddress = "nowhere"\n', "[temporal].address: 'nowhere' is not host:port"),
        (
            '[temporal]\naddress = "127.0.0.1:7233"\nheartbeat_seconds = -1\n',
            "[temporal].heartbeat_seconds",
        ),
    ],
)
def test_a_file_it_cannot_work_with_is_exit_2_and_one_line(
    tmp_path: Path, more: str, said: str
) -> None:
    run = _worker(write_config(tmp_path, [{"text": "hi"}], more=more))
    assert run.returncode == 2
    assert run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1
    assert run.stderr.startswith("aptix worker: ")
    assert said in run.stderr


@pytest.mark.decision("D553")
def test_a_temporal_that_cannot_be_reached_is_exit_1_and_one_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    run = _worker(write_config(tmp_path, [{"text": "hi"}], more=temporal_table(address, "q")))
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"aptix worker: cannot reach Temporal at {address}: ")
    assert "Traceback" not in run.stderr


@pytest.mark.decision("D553", "D537")
async def test_a_worker_runs_the_configurations_turns_and_stops_on_sigterm(
    tmp_path: Path, temporal_address: str, task_queue: str
) -> None:
    config = write_config(
        tmp_path, [{"text": "from the worker"}], more=temporal_table(temporal_address, task_queue)
    )
    with aptix_worker(config, ENV, "--identity", "worker-one", "--concurrency", "4") as worker:
        ready = [line for line in worker.output().splitlines() if line.startswith(READY)]
        durable = await durable_pipeline(load_service_config(config, env=ENV))
        report, output = await durable.run_with_workers(
            {"Instruction": "hi"}, Caller(org="acme", user="ana")
        )
        code = worker.stop()
    assert ready == [
        f"{READY}: worker-one runs turns from task queue {task_queue!r} of namespace "
        f"'default' at {temporal_address}"
    ]
    assert report.result.result is not None
    assert report.result.result.primary_output_text == "from the worker"
    assert output is not None
    assert output.workers == ["worker-one"]
    assert code == 0
    assert "Traceback" not in worker.output()
    assert worker.output().splitlines()[-1] == "aptix worker: stopping (turns in flight finish)"
