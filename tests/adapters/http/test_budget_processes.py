"""Budgets hold across processes: 50 concurrent turns of one org over two ``aptix serve``
processes on one PostgreSQL database (issue 31).

The model is the host extension of ``tests/kits/budget_host.py``: a hook that answers
in the model's place after a short wait, reporting the engine's own estimate of the
prompt (times a factor) and the output cap. With exact estimates the org's daily
token budget is never overspent; with usage twice the estimate it is overspent by no
more than what the reservations in flight could hide.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from serve_process import free_port, serving

from aptix_pipeline import UsageQuery
from aptix_pipeline.adapters.stores import PostgresStore

APTIX = Path(sys.executable).parent / "aptix"
KITS = Path(__file__).resolve().parents[2] / "kits"
TURNS = 50
LIMIT = 6_000
CAP = 50


def _config(folder: Path, url: str) -> Path:
    shutil.copy(KITS / "budget_host.py", folder / "budget_host.py")
    path = folder / "aptix.toml"
    path.write_text(
        f'[store]\nurl = "{url}"\n'
        '[model]\nkind = "scripted"\nscript = "script.json"\n'
        f"[engine]\nmax_output_tokens = {CAP}\n"
        '[host]\nextension = "budget_host:EXTENSION"\n'
        '[[auth.keys]]\norg = "acme"\nuser = "ana"\nkey_env = "APTIX_TEST_KEY"\n'
        '[[budgets]]\nid = "org-daily"\nmetric = "tokens"\n'
        f'limit = {LIMIT}\nwindow = "day"\n',
        encoding="utf-8",
    )
    (folder / "script.json").write_text('[{"text": "unused: the hook answers"}]', encoding="utf-8")
    return path


async def _fire(bases: list[str]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{bases[n % 2]}/v1/agent/execute",
                    json={"Instruction": f"Turn {n}."},
                    headers={"Authorization": "Bearer k"},
                )
                for n in range(TURNS)
            )
        )


async def _spent(url: str) -> tuple[int, int, int]:
    store = PostgresStore(url)
    try:
        calls = await store.usage_calls(UsageQuery(org="acme"))
    finally:
        await store.aclose()
    made = [call for call in calls if call.charge.model_calls]
    one = max(call.charge.tokens for call in made)
    return sum(call.charge.tokens for call in made), len(made), one


def _run(tmp_path: Path, url: str, factor: int) -> tuple[list[httpx.Response], int, int, int]:
    config = _config(tmp_path, url)
    env = {
        **os.environ,
        "APTIX_TEST_KEY": "k",
        "OTEL_TRACES_EXPORTER": "none",
        "APTIX_TEST_USAGE_FACTOR": str(factor),
        "APTIX_TEST_MODEL_DELAY": "0.05",
    }
    ports = [free_port(), free_port()]
    with ExitStack() as stack:
        bases = [
            stack.enter_context(
                serving(
                    [APTIX, "serve", "--config", config, "--port", str(port)],
                    env,
                    port=port,
                    cwd=tmp_path,
                    log=tmp_path / f"serve-{port}.log",
                )
            ).base
            for port in ports
        ]
        answers = asyncio.run(_fire(bases))
    spent, made, one = asyncio.run(_spent(url))
    return answers, spent, made, one


@pytest.mark.decision("D600")
def test_exact_estimates_never_overspend_an_org_across_two_processes(
    tmp_path: Path, postgres_db_url: str
) -> None:
    answers, spent, made, one = _run(tmp_path, postgres_db_url, factor=1)

    statuses = sorted({answer.status_code for answer in answers})
    assert statuses == [200, 429]
    assert sum(answer.status_code == 200 for answer in answers) == made
    assert spent <= LIMIT  # never overspent
    assert LIMIT - spent < one  # and the refused turns found no room for one more call
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.headers["Retry-After"].isdigit()
    error = refused.json()["Errors"][0]
    assert error["Code"] == "budget_exceeded"
    assert error["Budget"]["BudgetId"] == "org-daily"
    assert Decimal(error["Budget"]["Remaining"]) < Decimal(error["Budget"]["Requested"])


@pytest.mark.decision("D600")
def test_underestimated_calls_overspend_by_no_more_than_the_reservations_in_flight(
    tmp_path: Path, postgres_db_url: str
) -> None:
    answers, spent, made, one = _run(tmp_path, postgres_db_url, factor=2)

    assert sum(answer.status_code == 200 for answer in answers) == made
    assert made < TURNS
    # Each call takes its prompt twice over: what its reservation hid from the others is
    # one prompt. Reservations in flight at once fit within the limit, so what they hid
    # is at most a limit's worth of prompts, and never more than one per call made.
    excess = (one - CAP) // 2
    in_flight_at_most = LIMIT // (excess + CAP)
    assert spent - LIMIT <= min(made, in_flight_at_most) * excess
