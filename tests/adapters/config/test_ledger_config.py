"""The tool ledger's configuration: ``[engine]`` keys, ``PipelineOptions`` and the catalog's
``idempotent`` declaration (docs/TOOLS.md, docs/CONFIGURATION.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledger_kit import LEDGER_CATALOG

from aptix_pipeline import PipelineOptions
from aptix_pipeline.adapters.config.catalog import CatalogError, ConfigCatalog
from aptix_pipeline.adapters.config.service import ConfigError, load_service_config


def _config(folder: Path, text: str) -> Path:
    path = folder / "aptix.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.decision("D524", "D525")
@pytest.mark.parametrize(
    ("text", "ledger"),
    [("", True), ("[engine]\ntool_ledger = false\n", False)],
    ids=["default-on", "off"],
)
def test_the_engine_table_turns_the_ledger_on_or_off(
    tmp_path: Path, text: str, ledger: bool
) -> None:
    config = load_service_config(_config(tmp_path, text), env={})

    assert config.options.tool_ledger is ledger
    assert config.options.possibly_executed_policy == "fail"


@pytest.mark.decision("D524")
def test_an_unknown_policy_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = _config(tmp_path, "[engine]\npossibly_executed_policy = 'rerun'\n")

    with pytest.raises(ConfigError, match=r"\[engine\]\.possibly_executed_policy"):
        load_service_config(path, env={})
    with pytest.raises(
        ValueError, match="possibly_executed_policy must be one of fail, not 'rerun'"
    ):
        PipelineOptions(possibly_executed_policy="rerun")  # type: ignore[arg-type]


@pytest.mark.decision("D523")
async def test_a_server_tool_declares_its_idempotence_in_the_catalog() -> None:
    catalog = ConfigCatalog.from_toml(LEDGER_CATALOG)

    spec = await catalog.get_mode("general")

    assert spec is not None
    assert {tool.name: tool.idempotent for tool in spec.server_tools} == {
        "send_mail": None,
        "send_mail_by_key": "by_key",
        "lookup": "naturally",
    }


@pytest.mark.decision("D523")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            LEDGER_CATALOG.replace('idempotent = "naturally"', 'idempotent = "maybe"'),
            "server_tools[2]: Input should be 'by_key' or 'naturally' (at idempotent)",
        ),
        (
            LEDGER_CATALOG.replace(
                'name = "read_file"\n', 'name = "read_file"\nidempotent = "naturally"\n'
            ),
            "client_tools[0]: Value error, idempotent is a server tool's declaration",
        ),
    ],
    ids=["unknown-value", "client-tool"],
)
def test_a_wrong_idempotence_is_refused_naming_the_tool(text: str, message: str) -> None:
    with pytest.raises(CatalogError) as caught:
        ConfigCatalog.from_toml(text)

    assert message in str(caught.value)


@pytest.mark.decision("D568")
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("", 604_800.0),
        ("tool_ledger_ttl_seconds = 3600\n", 3600.0),
        ("tool_ledger_ttl_seconds = 0\n", None),
    ],
    ids=["default-seven-days", "an-hour", "zero-keeps-for-good"],
)
def test_the_engine_table_sets_how_long_ledger_entries_are_kept(
    tmp_path: Path, text: str, seconds: float | None
) -> None:
    config = load_service_config(_config(tmp_path, "[engine]\n" + text), env={})

    assert config.options.tool_ledger_ttl_seconds == seconds


@pytest.mark.decision("D568")
@pytest.mark.parametrize("bad", ["-1", "nan", "1e12", "'7d'"])
def test_a_wrong_ledger_ttl_is_refused_naming_the_key(tmp_path: Path, bad: str) -> None:
    path = _config(tmp_path, f"[engine]\ntool_ledger_ttl_seconds = {bad}\n")

    with pytest.raises(ConfigError, match=r"\[engine\]\.tool_ledger_ttl_seconds"):
        load_service_config(path, env={})
    if bad != "'7d'":
        with pytest.raises(ValueError, match="tool_ledger_ttl_seconds must be"):
            PipelineOptions(tool_ledger_ttl_seconds=float(bad))
