"""``[engine] keep_traces`` and ``trace_ttl_seconds`` (D656, D657): every turn's kept
trace, on by default, for thirty days; 0 keeps traces for good."""

from __future__ import annotations

from pathlib import Path

import pytest

from aptix_pipeline.adapters.config.service import ConfigError, load_service_config


def _config(folder: Path, text: str) -> Path:
    path = folder / "aptix.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.decision("D656", "D657")
@pytest.mark.parametrize(
    ("text", "keep", "ttl"),
    [
        ("", True, 2_592_000.0),
        ("[engine]\nkeep_traces = false\ntrace_ttl_seconds = 60\n", False, 60.0),
        ("[engine]\ntrace_ttl_seconds = 0\n", True, None),
    ],
    ids=["default", "off-a-minute", "for-good"],
)
def test_the_engine_table_sets_trace_keeping_and_retention(
    tmp_path: Path, text: str, keep: bool, ttl: float | None
) -> None:
    options = load_service_config(_config(tmp_path, text), env={}).options

    assert (options.keep_traces, options.trace_ttl_seconds) == (keep, ttl)


@pytest.mark.decision("D657")
def test_a_negative_trace_life_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[engine\]\.trace_ttl_seconds"):
        load_service_config(_config(tmp_path, "[engine]\ntrace_ttl_seconds = -1\n"), env={})
