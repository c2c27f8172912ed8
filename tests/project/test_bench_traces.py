"""The ``traces`` section of ``make bench`` (bench/traces.py): kept against not, one turn at
a time and 16 together (D646), per store, with wall and CPU figures."""

from __future__ import annotations

import pytest
from bench_kit import bench_module

from aptix_pipeline import MemoryStore, PipelineOptions


@pytest.mark.decision("D646")
def test_the_traces_section_reports_turns_alone_and_sixteen_at_once_per_store() -> None:
    module = bench_module("traces")

    figures = module.trace_rows(number=1, rounds=2)

    assert module.TARGET == 1.10
    assert set(figures) == {"memory", "sqlite", "memory, 16 at once", "sqlite, 16 at once"}
    for row in figures.values():
        for prefix in ("", "cpu_"):
            assert row[f"{prefix}ratio_median"] == (
                row[f"{prefix}on_median_us"] / row[f"{prefix}off_median_us"]
            )
            assert 0 < row[f"{prefix}off_min_us"] <= row[f"{prefix}off_median_us"]


@pytest.mark.decision("D646")
async def test_a_turn_of_the_workload_runs_at_once_turns_each_in_a_session_of_its_own() -> None:
    send = bench_module("send_turn")
    store = MemoryStore()
    pipeline = send.send_pipeline(store, PipelineOptions())

    await send.send_turn(pipeline, at_once=4)()
    await send.send_turn(pipeline)()

    listed = await store.list_sessions(send.CALLER.org, send.CALLER.user)
    assert len(listed) == 5
