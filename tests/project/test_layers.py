"""The import contracts of ``pyproject.toml`` hold (DESIGN.md "Layout and layers").

The five layers point one way; a subpackage is imported only through its
``__init__`` exports (adapters may also import ``aptix_pipeline.engine.replay``);
the engine's runtime never imports the replay tooling built on it; sibling modules
import each other without circles. Imports made for type checkers only are not
dependencies. A broken contract fails here with lint-imports' report, which names
each illegal import and its line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from repo import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = 21


@pytest.mark.decision("D251", "D388")
def test_every_import_contract_is_kept() -> None:
    run = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert f"Contracts: {CONTRACTS} kept, 0 broken." in run.stdout


@pytest.mark.decision("D251")
def test_a_contract_the_code_breaks_fails_the_check(tmp_path: Path) -> None:
    config = tmp_path / "contracts.toml"
    config.write_text(
        (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        + '\n[[tool.importlinter.contracts]]\nname = "probe"\ntype = "forbidden"\n'
        'source_modules = ["aptix_pipeline.steps"]\n'
        'forbidden_modules = ["aptix_pipeline.validators"]\n',
        encoding="utf-8",
    )
    run = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )

    assert run.returncode != 0
    assert "probe BROKEN" in run.stdout
