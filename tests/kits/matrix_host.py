"""The host code of the feature matrix (tests/engine/test_feature_matrix.py), as a
``[host] extension`` module: ``[host] extension = "matrix_host:extension"``.

The same module runs in the test process (``build_pipeline``, the HTTP app) and in
``aptix run`` (copied beside the configuration, ``install``). What it includes comes
from the environment, read each time ``extension`` is called, and what it sees it
writes as JSON lines to a log file, so a test reads it whichever process ran it:

- ``APTIX_MATRIX_HOST``: the parts to include, comma-separated — ``rules`` (``TOPIC``,
  refusing instructions about payroll), ``hooks`` (``add_note``: every prompt gets
  ``NOTE`` as its last message), ``listeners`` (``heard``: logs ``TurnStarted`` and
  ``TurnIdentified`` with their caller), ``files`` (the ``export`` server tool,
  which makes ``table.csv``) and ``ledger`` (the ``stamp`` server tool, answering
  ``STAMP``);
- ``APTIX_MATRIX_LOG``: the log file (``read_log``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from aptix_pipeline import (
    ChatMessage,
    ChatRole,
    Hooks,
    HostExtension,
    HostRule,
    LLMRequest,
    PipelineContext,
    PipelineStep,
    ToolFile,
    ToolInvocation,
    ToolOutput,
    TurnEvent,
    TurnIdentified,
    TurnStarted,
)

__all__ = [
    "CSV",
    "HOST_ENV",
    "LOG_ENV",
    "NOTE",
    "STAMP",
    "TOPIC",
    "extension",
    "install",
    "read_log",
]

HOST_ENV, LOG_ENV = "APTIX_MATRIX_HOST", "APTIX_MATRIX_LOG"
NOTE = ChatMessage(role=ChatRole.SYSTEM, content="Host note: answer in one line.")
CSV = b"name,count\nfiles,1\n"
STAMP = '{"stamped": "ledger"}'


def _log(entry: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")


def read_log(path: Path) -> list[dict[str, Any]]:
    """The entries the host code wrote to ``path``, in order (none: no file)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def not_about_payroll(ctx: PipelineContext) -> bool | str:
    """Payroll questions go to HR: refused."""
    asked = ctx.envelope.instructions or ""
    _log({"kind": "rule", "step": "reasoner"})
    return "payroll" not in asked.lower() or "payroll is HR's"


TOPIC = HostRule(
    id="host/matrix/no-payroll",
    step=PipelineStep.REASONER,
    message="the assistant does not answer payroll questions",
    code="host.refused_topic",
    check=not_about_payroll,
    http_status=403,
)


def add_note(request: LLMRequest) -> LLMRequest:
    """Every prompt gets ``NOTE`` as its last message (the typed edit)."""
    return request.replace(messages=[*request.messages, NOTE])


def heard(event: TurnEvent) -> None:
    """A listener: logs who each turn is for."""
    if isinstance(event, TurnStarted):
        _log({"kind": "TurnStarted", "org": event.org, "user": event.user})
    elif isinstance(event, TurnIdentified):
        _log(
            {
                "kind": "TurnIdentified",
                "org": event.org,
                "user": event.user,
                "session_id": event.session_id,
                "turn_id": event.turn_id,
            }
        )


async def export(arguments: dict[str, Any], invocation: ToolInvocation) -> ToolOutput:
    """The ``export`` server tool: a CSV file beside its result."""
    table = ToolFile(name="table.csv", mime_type="text/csv", content=CSV, description="The table")
    return ToolOutput(result_json=json.dumps({"rows": 1}), files=[table])


async def stamp(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """The ``stamp`` server tool: ``STAMP``, whatever it is asked."""
    return STAMP


def extension() -> HostExtension:
    """The parts ``APTIX_MATRIX_HOST`` names (the module docstring)."""
    parts = set(filter(None, os.environ.get(HOST_ENV, "").split(",")))
    return HostExtension(
        rules=[TOPIC] if "rules" in parts else [],
        hooks=Hooks(before_model_request=add_note) if "hooks" in parts else None,
        listeners=[heard] if "listeners" in parts else [],
        tools={
            **({"export": export} if "files" in parts else {}),
            **({"stamp": stamp} if "ledger" in parts else {}),
        },
    )


def install(folder: Path) -> None:
    """Copy this module into ``folder``, beside a configuration that names it."""
    shutil.copy(Path(__file__), folder / "matrix_host.py")
