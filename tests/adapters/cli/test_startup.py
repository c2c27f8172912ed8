"""Start-up: the CLI imports only what a command uses.

Behavioural, not timed: each case runs in a fresh interpreter and reports which
modules ended up in ``sys.modules``. ``make bench`` reports the wall times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aptix_pipeline import __version__
from aptix_pipeline.adapters import cli
from aptix_pipeline.adapters.cli import diagram as cli_diagram
from aptix_pipeline.engine.diagram import DiagramFormat

# Extras a command loads only when it uses them.
HEAVY = ("fastapi", "uvicorn", "openai", "psycopg", "jsonschema", "opentelemetry.sdk")


def _modules_after(code: str, *, cwd: Path | None = None) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; what it printed last, and the modules it loaded."""
    probe = textwrap.dedent(
        """
        import json, sys
        try:
        {code}
        except SystemExit as stop:
            code = stop.code
        else:
            code = None
        print(json.dumps({{"exit": code, "modules": sorted(sys.modules)}}))
        """
    ).format(code=textwrap.indent(textwrap.dedent(code).strip(), "    "))
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
    )
    assert run.returncode == 0, run.stderr
    *output, last = run.stdout.strip().splitlines()
    report: dict[str, object] = json.loads(last)
    report["output"] = "\n".join(output)
    return report


def _loaded(report: dict[str, object], names: tuple[str, ...]) -> list[str]:
    modules = report["modules"]
    assert isinstance(modules, list)
    return [name for name in names if name in modules]


def test_importing_the_cli_loads_no_framework_engine_or_extra() -> None:
    report = _modules_after("import aptix_pipeline.adapters.cli")

    assert _loaded(report, (*HEAVY, "typer", "pydantic", "aptix_pipeline.engine")) == []


def test_aptix_version_is_answered_before_typer_is_imported() -> None:
    report = _modules_after(
        """
        sys.argv = ["aptix", "--version"]
        from aptix_pipeline.adapters.cli import main
        main()
        """
    )

    assert report["exit"] == 0
    assert report["output"] == f"aptix-pipeline {__version__}"
    assert _loaded(report, (*HEAVY, "typer", "pydantic", "aptix_pipeline.engine")) == []


def test_the_typer_app_is_built_without_the_engine() -> None:
    report = _modules_after(
        """
        sys.argv = ["aptix", "--help"]
        from aptix_pipeline.adapters.cli import main
        main()
        """
    )

    assert report["exit"] == 0
    assert "aptix" in str(report["output"])
    assert _loaded(report, (*HEAVY, "aptix_pipeline.engine")) == []


def test_aptix_run_loads_no_extra_and_no_jsonschema_on_the_built_in_catalog(
    tmp_path: Path,
) -> None:
    """The built-in catalog's schemas are plain enough to check without jsonschema, and
    a turn without tool-call arguments checks none: the run loads none of HEAVY."""
    report = _scripted_run(tmp_path)
    assert _loaded(report, HEAVY) == []


def _scripted_run(tmp_path: Path) -> dict[str, object]:
    """What one scripted ``aptix run`` on a SQLite file loaded; it must have answered."""
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    (tmp_path / "script.json").write_text('[{"text": "hello"}]', encoding="utf-8")
    report = _modules_after(
        """
        sys.argv = ["aptix", "run", "request.json", "--llm-script", "script.json",
                    "--store", "sqlite:aptix.db", "--compact"]
        from aptix_pipeline.adapters.cli import main
        main()
        """,
        cwd=tmp_path,
    )
    assert report["exit"] == 0, report["output"]
    assert '"PrimaryOutputText":"hello"' in str(report["output"])
    return report


# What ``aptix run`` without --record, --config or a failing model does not use (D474):
# the replay tooling, the service configuration's models, the file store, tenacity.
LAZY_FOR_RUN = (
    "aptix_pipeline.engine.replay.recorder",
    "aptix_pipeline.engine.replay.recording",
    "aptix_pipeline.engine.replay.replayer",
    "aptix_pipeline.adapters.config.service",
    "aptix_pipeline.adapters.files.local",
    "tenacity",
)


@pytest.mark.decision("D474")
def test_aptix_run_loads_no_replay_tooling_configuration_models_or_retry_library(
    tmp_path: Path,
) -> None:
    report = _scripted_run(tmp_path)
    assert _loaded(report, LAZY_FOR_RUN) == []


@pytest.mark.decision("D474")
def test_aptix_run_with_record_loads_the_replay_tooling_and_records(tmp_path: Path) -> None:
    (tmp_path / "request.json").write_text('{"Instruction": "hi"}', encoding="utf-8")
    (tmp_path / "script.json").write_text('[{"text": "hello"}]', encoding="utf-8")
    report = _modules_after(
        """
        sys.argv = ["aptix", "run", "request.json", "--llm-script", "script.json",
                    "--store", "sqlite:aptix.db", "--compact", "--record", "rec"]
        from aptix_pipeline.adapters.cli import main
        main()
        """,
        cwd=tmp_path,
    )

    assert report["exit"] == 0, report["output"]
    assert "aptix_pipeline.engine.replay.recorder" in report["modules"]  # type: ignore[operator]
    assert len(list((tmp_path / "rec").rglob("*.json"))) == 1


def test_the_cli_diagram_formats_are_the_engines() -> None:
    choices = [choice.value for choice in cli_diagram.DiagramChoice]

    assert choices == [fmt.value for fmt in DiagramFormat]


def test_the_cli_module_builds_its_app_on_first_use_and_has_nothing_else() -> None:
    assert cli.app is cli.app
    with pytest.raises(AttributeError):
        _ = cli.nothing
