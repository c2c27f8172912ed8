"""``bench/tracing.py``: the bare-SDK script the span builder is judged against makes the
engine's spans (D454), so the ratio ``make bench`` prints compares like with like."""

from __future__ import annotations

from types import ModuleType

import pytest
from bench_kit import bench_module


@pytest.fixture(scope="module")
def bench_tracing() -> ModuleType:
    """``bench/tracing.py``, loaded from its file (``bench/`` is no package)."""
    return bench_module("tracing")


@pytest.mark.decision("D454")
@pytest.mark.parametrize("workload", ["Initial, final answer", "Initial, mode change + answer"])
def test_the_bare_sdk_script_exports_the_spans_the_engine_exports(
    bench_tracing: ModuleType, workload: str
) -> None:
    assert bench_tracing.same_spans(bench_tracing.WORKLOADS[workload])


@pytest.mark.decision("D454")
def test_the_comparison_sees_a_span_that_differs(bench_tracing: ModuleType) -> None:
    replies = bench_tracing.WORKLOADS["Initial, mode change + answer"]
    script = bench_tracing.span_script(replies)
    assert script.final_name == "invoke_agent Aptix assistant"  # named when the turn ends
    [tool] = [c for step in script.children for c in step.children if c.events]
    assert tool.events[0][0] == "aptix.mode.changed"
    tool.events.clear()

    provider, exporter = bench_tracing._provider()
    bench_tracing.bare_turn(provider.get_tracer("bare"), script)
    changed = bench_tracing.span_shapes(exporter.get_finished_spans())
    exporter.clear()
    bench_tracing.bare_turn(provider.get_tracer("bare"), bench_tracing.span_script(replies))

    assert changed != bench_tracing.span_shapes(exporter.get_finished_spans())
    assert len(changed) == 14
