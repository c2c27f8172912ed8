"""Durable turns are an extra: a host that does not use Temporal never imports temporalio
(docs/DURABLE.md "Workers and the service")."""

from __future__ import annotations

import subprocess
import sys

import pytest

import aptix_pipeline


def _printed_by(code: str) -> str:
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return run.stdout.strip()


@pytest.mark.decision("D554")
def test_importing_the_root_and_the_durable_helpers_names_does_not_import_temporalio() -> None:
    loaded = _printed_by(
        "import sys, aptix_pipeline; aptix_pipeline.embedded_pipeline; "
        "aptix_pipeline.durable_pipeline; aptix_pipeline.TemporalConfig; "
        "from aptix_pipeline.adapters.http import create_app; "
        "print('temporalio' in sys.modules)"
    )
    assert loaded == "False"


@pytest.mark.decision("D554")
def test_a_durable_name_of_the_root_imports_temporalio_when_used() -> None:
    loaded = _printed_by(
        "import sys, aptix_pipeline; aptix_pipeline.DurablePipeline; "
        "print('temporalio' in sys.modules)"
    )
    assert loaded == "True"


@pytest.mark.decision("D554")
def test_the_root_exports_the_durable_names() -> None:
    from aptix_pipeline.adapters.temporal import DurablePipeline, DurableWorker

    assert aptix_pipeline.DurablePipeline is DurablePipeline
    assert aptix_pipeline.DurableWorker is DurableWorker
    assert {"durable_pipeline", "durable_worker", "TemporalConfig"} <= set(aptix_pipeline.__all__)
