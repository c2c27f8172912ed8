"""Server-tool effects exactly once, where the tool can promise it (issue 29, docs/TOOLS.md).

Each server-tool call of a turn has a stable idempotency key (``tool_call_key``),
which its executor receives (``ToolInvocation.idempotency_key``). A ``ToolLedger``
(``contracts/ledger.py``; the memory, SQLite and PostgreSQL stores have one)
records reserve → done for each key, each write committed at once. Before a call
runs, ``run_ledgered`` reserves its key:

- the key is **done** (an earlier attempt ran it and recorded its answer, then the
  turn did not commit — a crash, a cancelled request, a failed model call): the
  recorded answer is returned; the executor is not called;
- the key is **reserved but not done** (an earlier attempt started it and never
  finished — it crashed, raised or timed out): the call runs again only when the
  tool declares itself idempotent (``ToolDefinition.idempotent``: ``"by_key"`` or
  ``"naturally"``); otherwise ``possibly_executed_policy`` applies: ``"fail"``
  raises ``ToolPossiblyExecutedError``, which the model is told as the call's error
  (code ``tool_possibly_executed``, rule ``DESIGN/ledger/possibly-executed``), and
  the call is never run blindly;
- else the key is now reserved: the executor runs, and its answer is recorded as
  done. A ``ToolPause`` is not an answer: the reservation is released, so the call
  runs again when the client has answered. A call that raises (or is cancelled,
  or times out) stays reserved: it may have acted.

The recorded answer is JSON text: ``{"text": …}`` for a JSON-text answer,
``{"output": {"result_json": …, "files": [{name, mime_type, description,
content_base64}]}}`` for a ``ToolOutput`` — its files' bytes included, so a done
call answered from the ledger hands the engine the very same files (the
``FileStore`` keeps them by content hash: kept once).

``LedgeredTool`` is ``run_ledgered`` as a ``ToolExecutor``; ``ledgered_tools`` wraps
a pipeline's server tools with it (``engine/pipeline.py``), inside the recording
tap, so a recording holds what the turn saw and a replay never reads the ledger.
The durable runtime calls ``run_ledgered`` (or a ``LedgeredTool``) from its
activity.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from aptix_pipeline.contracts import (
    AptixPipelineError,
    Clock,
    ToolExecutor,
    ToolFile,
    ToolInvocation,
    ToolLedger,
    ToolOutput,
    ToolPause,
    scrubbed_logger,
)

__all__ = [
    "POSSIBLY_EXECUTED_POLICIES",
    "TOOL_CALL_KEY_PREFIX",
    "TOOL_POSSIBLY_EXECUTED",
    "LedgeredTool",
    "PossiblyExecutedPolicy",
    "ToolPossiblyExecutedError",
    "decode_ledger_result",
    "encode_ledger_result",
    "ledgered_tools",
    "run_ledgered",
    "tool_call_key",
]

logger = scrubbed_logger(__name__)

PossiblyExecutedPolicy = Literal["fail"]
"""What a call reserved by an earlier attempt, never done, of a tool not declared
idempotent becomes: ``"fail"`` — a tool error ``tool_possibly_executed`` (module
docstring). Asking the client instead is not built yet."""
POSSIBLY_EXECUTED_POLICIES: Final[tuple[PossiblyExecutedPolicy, ...]] = get_args(
    PossiblyExecutedPolicy
)
TOOL_POSSIBLY_EXECUTED: Final = "tool_possibly_executed"
"""The code a possibly executed call's error message starts with."""
TOOL_CALL_KEY_PREFIX: Final = "tk1-"
"""What every idempotency key starts with (version 1 of the recipe, ``tool_call_key``)."""
_AGENT_CHANGE_MODE: Final = "agent_change_mode"  # the engine's own: written in the turn


class ToolPossiblyExecutedError(AptixPipelineError, RuntimeError):
    """An earlier attempt started this call and did not finish; it is not run again.

    The model is told the call failed with this message; it may have acted.
    """


def _canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def tool_call_key(
    session_id: str, turn_id: str, tool_call_id: str, arguments: Mapping[str, Any]
) -> str:
    """The idempotency key of one server-tool call (docs/TOOLS.md "The key").

    ``"tk1-"`` and the first 40 hex digits of the SHA-256 of the canonical JSON
    array ``[session_id, turn_id, tool_call_id, sha256(canonical arguments)]``,
    where canonical JSON has sorted keys, no spaces and UTF-8 text (not ``\\u``
    escapes). The turn is named by its session too: a turn id is only unique in
    its session (AGN-033 §3.1). The org and user are not in it: the ledger keeps
    entries per org and user.
    """
    arguments_digest = hashlib.sha256(_canonical_json(arguments).encode("utf-8")).hexdigest()
    named = _canonical_json([session_id, turn_id, tool_call_id, arguments_digest])
    return TOOL_CALL_KEY_PREFIX + hashlib.sha256(named.encode("utf-8")).hexdigest()[:40]


def encode_ledger_result(answer: object) -> str:
    """A done call's answer as the ledger keeps it (module docstring); ``ValueError``
    for an answer that is not JSON text, a ``ToolOutput`` or a JSON value."""
    if isinstance(answer, ToolOutput):
        files = [
            {
                "name": file.name,
                "mime_type": file.mime_type,
                "description": file.description,
                "content_base64": base64.b64encode(file.content).decode("ascii"),
            }
            for file in answer.files
        ]
        record: dict[str, object] = {"output": {"result_json": answer.result_json, "files": files}}
    elif isinstance(answer, str):
        record = {"text": answer}
    else:  # an executor that answered a JSON value: what the engine would make of it
        record = {"value": answer}
    # ASCII: no raw NUL or lone surrogate reaches a store (PostgreSQL text refuses NUL).
    return json.dumps(record, ensure_ascii=True, allow_nan=False)


def decode_ledger_result(text: str) -> object:
    """The answer ``encode_ledger_result`` kept: JSON text, a ``ToolOutput`` or a JSON value."""
    record = json.loads(text)
    if "output" in record:
        output = record["output"]
        return ToolOutput(
            result_json=output["result_json"],
            files=tuple(
                ToolFile(
                    name=file["name"],
                    mime_type=file["mime_type"],
                    description=file["description"],
                    content=base64.b64decode(file["content_base64"]),
                )
                for file in output["files"]
            ),
        )
    if "text" in record:
        return str(record["text"])
    return record["value"]


async def run_ledgered(
    executor: ToolExecutor,
    arguments: dict[str, Any],
    invocation: ToolInvocation,
    *,
    ledger: ToolLedger | None,
    clock: Clock,
    policy: PossiblyExecutedPolicy = "fail",
) -> str | ToolOutput | ToolPause:
    """Run one server-tool call through ``ledger`` (module docstring); what it answers.

    ``invocation.idempotency_key`` names the call and ``invocation.idempotent`` says
    whether it may run again; without a ledger or a key the executor just runs.
    Raises ``ToolPossiblyExecutedError`` (the policy) or what the executor raised.
    """
    key = invocation.idempotency_key
    if ledger is None or key is None:
        return await executor(arguments, invocation)
    org, user = invocation.org, invocation.user
    entry = await ledger.reserve_tool_call(org, user, key, clock.now())
    if entry is not None:
        if entry.result is not None:
            return decode_ledger_result(entry.result)  # type: ignore[return-value]
        if invocation.idempotent is None:  # policy == "fail", the only one there is
            raise ToolPossiblyExecutedError(
                f"{TOOL_POSSIBLY_EXECUTED}: server tool {invocation.name!r} call "
                f"{invocation.tool_call_id!r} was started by an earlier attempt that did not "
                "finish; it may have acted, so it is not run again"
            )
    answer = await executor(arguments, invocation)
    if isinstance(answer, ToolPause):  # not done: run again once the client answers
        await ledger.release_tool_call(org, user, key)
        return answer
    record = encode_ledger_result(answer)
    try:
        await ledger.complete_tool_call(org, user, key, record, clock.now())
    except Exception as error:  # the call acted: its answer stands; the key stays reserved
        logger.warning(
            "tool ledger: recording server tool %r call %r as done failed (%s); a retry "
            "will find it reserved",
            invocation.name,
            invocation.tool_call_id,
            type(error).__name__,
        )
    return answer


class LedgeredTool:
    """A ``ToolExecutor`` whose calls go through ``run_ledgered``."""

    def __init__(
        self,
        executor: ToolExecutor,
        ledger: ToolLedger,
        clock: Clock,
        policy: PossiblyExecutedPolicy = "fail",
    ) -> None:
        self.executor, self.ledger, self.clock, self.policy = executor, ledger, clock, policy

    async def __call__(
        self, arguments: dict[str, Any], invocation: ToolInvocation
    ) -> str | ToolOutput | ToolPause:
        """See ``ToolExecutor``."""
        return await run_ledgered(
            self.executor,
            arguments,
            invocation,
            ledger=self.ledger,
            clock=self.clock,
            policy=self.policy,
        )


def ledgered_tools(
    tools: Mapping[str, ToolExecutor],
    ledger: ToolLedger,
    clock: Clock,
    policy: PossiblyExecutedPolicy = "fail",
) -> dict[str, ToolExecutor]:
    """``tools`` with each run through the ledger (``agent_change_mode`` aside: a mode
    change is written with the turn)."""
    return {
        name: executor
        if name == _AGENT_CHANGE_MODE
        else LedgeredTool(executor, ledger, clock, policy)
        for name, executor in tools.items()
    }
