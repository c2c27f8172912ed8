"""``bench/ledger.py``: the ledger section times the same turn with the ledger on and off,
per store, and reports min and median beside the 5 % target (D528). Figures are not
judged here (no timed assertion in a test): only that the section measures what it says."""

from __future__ import annotations

import pytest
from bench_kit import bench_module


@pytest.mark.decision("D528")
def test_the_ledger_section_reports_on_and_off_for_memory_and_sqlite() -> None:
    module = bench_module("ledger")

    figures = module.ledger_rows(number=1, rounds=3)

    assert module.TARGET == 1.05
    assert set(figures) == {"memory", "sqlite"}
    for row in figures.values():
        assert set(row) == {
            "off_min_us",
            "off_median_us",
            "on_min_us",
            "on_median_us",
            "ratio_min",
            "ratio_median",
        }
        assert row["ratio_min"] == row["on_min_us"] / row["off_min_us"]
