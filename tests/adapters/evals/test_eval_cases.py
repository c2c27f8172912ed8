"""A case folder: its recordings and ``expectations.toml`` (docs/EVALS.md, D622)."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_kit import case_folder

from aptix_pipeline.adapters.evals import load_cases


@pytest.mark.decision("D622")
def test_cases_are_named_by_their_path_and_read_their_table(tmp_path: Path) -> None:
    folder = case_folder(tmp_path, "01-initial", "04-follow-on")
    (folder / "nightly").mkdir()
    (folder / "04-follow-on.json").rename(folder / "nightly" / "04-follow-on.json")
    (folder / "expectations.toml").write_text(
        '[01-initial]\nkind = "client_tool_continuation"\ncalls = ["read_file"]\n'
        '["nightly/04-follow-on"]\ntext_contains = "checklist"\nmax_cost = 0.01\n',
        encoding="utf-8",
    )

    cases = load_cases(folder)

    assert [case.name for case in cases] == ["01-initial", "nightly/04-follow-on"]
    assert cases[0].expectations.kind == "client_tool_continuation"
    assert [call.tool for call in cases[0].expectations.calls] == ["read_file"]
    assert cases[1].expectations.text_contains == ("checklist",)
    assert str(cases[1].expectations.max_cost) == "0.01"


@pytest.mark.decision("D622")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[01-initial]\nmust_call = ["read_file"]\n', "[01-initial]: unknown key 'must_call'"),
        ('[02-missing]\nkind = "final"\n', "[02-missing]: no recording 02-missing.json in"),
        ("[01-initial\n", "not valid TOML"),
    ],
)
def test_a_bad_expectations_file_is_refused_naming_file_case_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    folder = case_folder(tmp_path, "01-initial")
    (folder / "expectations.toml").write_text(text, encoding="utf-8")

    with pytest.raises(ValueError, match=r"expectations\.toml") as raised:
        load_cases(folder)

    assert str(folder / "expectations.toml") in str(raised.value)
    assert message in str(raised.value)


@pytest.mark.decision("D622")
def test_a_folder_without_recordings_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no recordings"):
        load_cases(tmp_path)
