"""``bench/live.py``: the live section measures, per store, from another process's commit
to the live page showing the turn, SQLite by the poll and PostgreSQL by the notice, and
reports min, median and max beside the 1 s target (D692). Figures are not judged here
(no timed assertion in a test): only that the section measures what it says."""

from __future__ import annotations

import pytest
from bench_kit import bench_module


@pytest.mark.decision("D692")
def test_the_live_section_reports_the_poll_and_the_notice_beside_the_target(
    postgres_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APTIX_BENCH_PG_URL", postgres_db_url)
    module = bench_module("live")

    figures = module.live_rows(rounds=2)

    assert module.TARGET_S == 1.0
    assert set(figures) == {"sqlite (poll)", "postgresql (notify)"}
    assert figures["postgresql (notify)"]["where"] == "APTIX_BENCH_PG_URL"
    for row in figures.values():
        assert row["rounds"] == 2
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"]
        assert row["target_ms"] == 1000.0
