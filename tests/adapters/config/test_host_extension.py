"""``[host] extension``: a host's rules, hooks, listeners and tools reach every command.

The configuration names ``module:attribute``; the module beside the file is found.
``aptix run --config`` runs the host's rule, and a recording it made replays clean
with ``aptix replay --live CONFIG`` — and says in one line that the rule is missing
without it. A name that cannot be had is a ``ConfigError`` naming ``[host].extension``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_kit import aptix_run
from repo import ROOT

from aptix_pipeline import Caller, HostExtension, ScriptedLLM
from aptix_pipeline.adapters.config import ConfigError, load_service_config
from aptix_pipeline.adapters.embedded import build_pipeline

APTIX = ROOT / ".venv" / "bin" / "aptix"
HOST_MODULE = """
from aptix_pipeline import Hooks, HostExtension, HostRule, PipelineStep

STARTED = []


def no_payroll(ctx):
    return "payroll" not in (ctx.envelope.instructions or "") or "payroll is HR's"


def brief(request):
    return None


EXTENSION = HostExtension(
    rules=[
        HostRule(
            id="host/no-payroll",
            step=PipelineStep.REASONER,
            message="the assistant does not answer payroll questions",
            code="host.refused_topic",
            check=no_payroll,
        )
    ],
    hooks=Hooks(before_model_request=brief),
    listeners=[STARTED.append],
)


def make():
    return EXTENSION


NOT_ONE = 42
"""


def write_host(tmp: Path, spec: str = "acme_host_{n}:EXTENSION") -> Path:
    """A host module beside a configuration naming it; the configuration's path.

    Each test's module has its own name: ``sys.modules`` keeps what one imported.
    """
    name = f"acme_host_{tmp.name.replace('-', '_')}"
    (tmp / f"{name}.py").write_text(HOST_MODULE, encoding="utf-8")
    config = tmp / "aptix.toml"
    config.write_text(f'[host]\nextension = "{spec.format(n=tmp.name.replace("-", "_"))}"\n')
    return config


@pytest.mark.decision("D427")
@pytest.mark.parametrize("attribute", ["EXTENSION", "make"])
def test_the_named_extension_is_loaded_and_built_into_the_pipeline(
    tmp_path: Path, attribute: str
) -> None:
    config = load_service_config(write_host(tmp_path, "acme_host_{n}:" + attribute), env={})

    assert isinstance(config.host, HostExtension)
    pipeline = build_pipeline(config, llm=ScriptedLLM([{"text": "Sure."}]), store="memory")
    refused = pipeline.run_sync({"Instruction": "the payroll"}, Caller(org="acme", user="ana"))

    assert [r.id for r in pipeline.rules] == ["host/no-payroll"]
    assert pipeline.hooks is config.host.hooks
    assert refused.result.errors[0].rule_id == "host/no-payroll"
    assert len(config.host.listeners) == 1


@pytest.mark.decision("D427")
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_here:EXTENSION", "no module 'no_such_module_here'"),
        ("acme_host_{n}:MISSING", "has no attribute 'MISSING'"),
        ("acme_host_{n}:NOT_ONE", "is a int, not a HostExtension"),
        ("not a name", "string should match pattern"),
    ],
)
def test_an_extension_that_cannot_be_had_is_a_config_error_naming_the_key(
    tmp_path: Path, spec: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=r"\[?host\]?") as raised:
        load_service_config(write_host(tmp_path, spec), env={})

    assert message in str(raised.value).lower() or message in str(raised.value)


@pytest.mark.decision("D427")
def test_a_host_extension_refuses_what_is_not_its_part() -> None:
    with pytest.raises(TypeError, match=r"HostExtension\.rules: a list"):
        HostExtension(rules="host/x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"HostExtension\.hooks"):
        HostExtension(hooks=print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"HostExtension\.listeners"):
        HostExtension(listeners=[42])  # type: ignore[list-item]


@pytest.mark.decision("D397")
def test_aptix_replay_live_carries_the_configurations_host_rules(tmp_path: Path) -> None:
    config = write_host(tmp_path)
    records = tmp_path / "records"
    run = aptix_run(
        tmp_path,
        {"Instruction": "Show me the payroll"},
        [{"text": "never asked"}],
        "--config",
        str(config),
        "--record",
        str(records),
    )
    assert run.returncode != 0, run.stderr
    assert "host.refused_topic" in run.stdout + run.stderr
    [recorded] = list(records.glob("*.json"))
    assert json.loads(recorded.read_text())["host_rules"] == ["host/no-payroll"]

    live = subprocess.run(
        [str(APTIX), "replay", str(recorded), "--live", str(config)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    bare = subprocess.run(
        [str(APTIX), "replay", str(recorded)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )

    assert live.returncode == 0, live.stdout + live.stderr
    assert bare.returncode != 0
    assert "host rule(s) host/no-payroll, which this replay was not given" in bare.stdout


@pytest.mark.decision("D427")
def test_a_module_the_extension_imports_missing_is_named_as_its_import_failure(
    tmp_path: Path,
) -> None:
    name = f"prefix_host_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("import prefix_host  # not there\n", encoding="utf-8")
    config = tmp_path / "aptix.toml"
    config.write_text(f'[host]\nextension = "{name}:EXTENSION"\n', encoding="utf-8")

    with pytest.raises(ConfigError) as raised:
        load_service_config(config, env={})

    assert f"importing {name} failed: ModuleNotFoundError" in str(raised.value)
    assert "no module" not in str(raised.value)
