"""Helpers for engine scenario tests: a pipeline on either store, request builders,
readers of what a turn did, what the model was given and what the store holds, and the
doubles that make a turn fail: custom catalogs, misbehaving steps, and stores, catalogs
and models that fail.

Every scenario runs on both stores (``store`` fixture: the in-memory store and the
SQLite store on a real file). Clock and ids are deterministic (SteppingClock,
SequentialIds), so the same scenario gives the same ids on every run:
``session-1``, ``turn-1``, ``turn-2``, …
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from aptix_pipeline import PipelineOptions, Ports
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.postgres import PostgresStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.stores.unit_of_work import BufferedTransaction
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.contracts import (
    LLM,
    AgentExecuteResponse,
    Caller,
    ChatMessage,
    ChatRole,
    InvokeResult,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    PipelineStep,
    Session,
    SessionStore,
    SessionTransaction,
    ToolCall,
    ToolExecutor,
    Turn,
)
from aptix_pipeline.engine import Listener, Pipeline, Runtime, Telemetry, TurnReport
from aptix_pipeline.steps import STEP_FUNCTIONS, StepFunction, TurnScope

__all__ = [
    "AGENT_AND_CONVERSATION",
    "ALL_STORE_KINDS",
    "CALLER",
    "EXPAND_MATH",
    "NOTHING_STORED",
    "OTHER_ORG",
    "OTHER_USER",
    "READ_A",
    "REPORT_CATALOG",
    "STORE_KINDS",
    "SUPPORT_CATALOG",
    "THREE_MODES_CONFIG",
    "CommitFailingStore",
    "CommitFailingTransaction",
    "FailingLLM",
    "FailingModes",
    "FlakyLLM",
    "Mutation",
    "ReadFailingStore",
    "StoreView",
    "after",
    "assert_refused",
    "call",
    "calls",
    "change_mode",
    "content_request",
    "continuation",
    "does_nothing",
    "fill_session",
    "follow_on",
    "make_pipeline",
    "make_store",
    "ok",
    "open_store_of_kind",
    "raising_after",
    "reply",
    "scripted",
    "server_calls",
    "session_of",
    "start",
    "stored",
    "system_text",
    "text",
    "tool_messages",
    "warning_codes",
]

CALLER = Caller(org="acme", user="ana")
OTHER_ORG = Caller(org="globex", user="ana")
OTHER_USER = Caller(org="acme", user="bob")
STORE_KINDS = ("memory", "sqlite")
ALL_STORE_KINDS = (*STORE_KINDS, "postgres")
"""The store contract tests (tests/adapters/stores/test_stores.py) run on PostgreSQL too."""


def make_store(kind: str, directory: Path) -> Iterator[MemoryStore | SQLiteStore]:
    """A fresh store of this kind; the SQLite one is a real file, closed afterwards."""
    if kind == "memory":
        yield MemoryStore()
        return
    store = SQLiteStore(directory / "aptix.db")
    try:
        yield store
    finally:
        store.close()


@asynccontextmanager
async def open_store_of_kind(
    kind: str, request: pytest.FixtureRequest, directory: Path
) -> AsyncIterator[MemoryStore | SQLiteStore | PostgresStore]:
    """A fresh store of any kind; ``postgres`` is a fresh database on the test server."""
    store: MemoryStore | SQLiteStore | PostgresStore
    if kind == "memory":
        yield MemoryStore()
        return
    if kind == "sqlite":
        store = SQLiteStore(directory / "aptix.db")
    else:
        store = PostgresStore(request.getfixturevalue("postgres_db_url"), max_size=4)
    try:
        yield store
    finally:
        await store.aclose()  # both close off the event loop


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore | SQLiteStore]:
    """Each scenario once on the memory store and once on a SQLite file."""
    yield from make_store(request.param, tmp_path)


def make_pipeline(
    store: SessionStore,
    replies: Sequence[Mapping[str, Any]] | LLM = (),
    *,
    config: str | None = None,
    tools: Mapping[str, ToolExecutor] | None = None,
    options: PipelineOptions | None = None,
    steps: Mapping[PipelineStep, StepFunction] | None = None,
    telemetry: Telemetry | None = None,
    runtime: Runtime = "compiled",
    listeners: Sequence[Listener] = (),
) -> tuple[Pipeline, ScriptedLLM | None]:
    """A pipeline on ``store`` with deterministic clock and ids.

    ``replies`` is a ScriptedLLM script (returned too, to inspect ``requests``) or
    any LLM port. ``config`` is catalog TOML text (default: the built-in catalog);
    ``tools`` adds server tool executors to the catalog's own (the built-in catalog's
    demo tools; none for ``config``). Retries do not wait.
    ``telemetry`` is the pipeline's (default: spans to the global provider, the
    API's no-op unless a test configured the SDK); ``runtime`` the turn runner's;
    ``listeners`` get every event of every turn.
    """
    llm: LLM
    scripted: ScriptedLLM | None
    if isinstance(replies, Sequence):
        scripted = ScriptedLLM(list(replies))
        llm = scripted
    else:
        scripted, llm = None, replies
    catalog = ConfigCatalog.from_toml(config) if config else ConfigCatalog.default()
    ports = Ports(
        store=store,
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=SteppingClock(),
        ids=SequentialIds(),
        tools={**catalog.tools, **(tools or {})},
    )
    opts = options or PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)
    pipeline = Pipeline(
        ports, opts, steps=steps, telemetry=telemetry, runtime=runtime, listeners=listeners
    )
    return pipeline, scripted


def ok(result: InvokeResult[AgentExecuteResponse]) -> AgentExecuteResponse:
    """The response of a successful result; fails the test with the errors otherwise."""
    assert result.successful, [error.model_dump() for error in result.errors]
    assert result.result is not None
    return result.result


async def start(
    pipeline: Pipeline,
    request: str | Mapping[str, Any] = "hello",
    *,
    initial_mode: str | None = None,
) -> tuple[TurnReport, AgentExecuteResponse]:
    """An Initial turn of ``CALLER`` that must succeed: ``request`` is its instruction or the
    whole wire request."""
    data = {"Instruction": request} if isinstance(request, str) else dict(request)
    report = await pipeline.run(data, CALLER, initial_mode=initial_mode)
    return report, ok(report.result)


def assert_refused(report: TurnReport, rule_id: str, faulted_step: str) -> None:
    """The turn faulted at ``faulted_step`` on ``rule_id`` alone and returned no response."""
    assert not report.successful
    assert report.result.result is None
    assert report.states[-1] == "faulted"
    assert report.faulted_step == faulted_step
    assert report.result.rule_ids == (rule_id,)


def warning_codes(report: TurnReport) -> list[str]:
    """The codes of the result's warnings, in order."""
    return [warning.code for warning in report.result.warnings]


def follow_on(response: AgentExecuteResponse, instruction: str = "next") -> dict[str, Any]:
    """A FollowOn request after ``response``."""
    return {
        "SessionId": response.session_id,
        "TurnId": response.turn_id,
        "Instruction": instruction,
    }


def content_request(secrets: Mapping[str, str]) -> dict[str, Any]:
    """An Initial request carrying user content in every field that holds some (AGN-034 §4).

    ``secrets`` gives the ``instruction``, ``artifact`` contents, ``image`` data
    (base64) and ``solution context``: distinctive strings a test then searches for.
    """
    return {
        "Instruction": secrets["instruction"],
        "InputArtifacts": [
            {
                "RelativePath": "notes.txt",
                "FileName": "notes.txt",
                "Contents": secrets["artifact"],
                "Origin": "user",
            }
        ],
        "ClipboardImages": [
            {"Id": "img-1", "MimeType": "image/png", "DataBase64": secrets["image"]}
        ],
        "SolutionContextText": secrets["solution context"],
    }


def continuation(response: AgentExecuteResponse, *results: Mapping[str, Any]) -> dict[str, Any]:
    """A continuation after ``response``: ``results`` are wire ToolResults; by default one
    ``{"ok": true}`` result per pending call, in order."""
    calls = response.tool_calls or []
    tool_results = list(results) or [
        {"ToolCallId": call.tool_call_id, "ExecutionMs": 1, "ResultJson": '{"ok": true}'}
        for call in calls
    ]
    return {
        "SessionId": response.session_id,
        "TurnId": response.turn_id,
        "ToolResults": tool_results,
    }


# --- scripted replies ---------------------------------------------------------------------


def call(call_id: str, name: str, arguments: Any = None) -> dict[str, Any]:
    """One scripted tool call; ``arguments`` as an object or JSON text (default ``{}``)."""
    return {"id": call_id, "name": name, "arguments": {} if arguments is None else arguments}


def calls(*tool_calls: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    """One scripted reply with tool calls (and optionally text)."""
    reply: dict[str, Any] = {"tool_calls": list(tool_calls)}
    if text is not None:
        reply["text"] = text
    return reply


def text(answer: str) -> dict[str, Any]:
    """One scripted final answer."""
    return {"text": answer}


def change_mode(call_id: str, mode: str, reason: str = "the user asked", **more: Any) -> Any:
    """A scripted ``agent_change_mode`` call."""
    return call(call_id, "agent_change_mode", {"mode": mode, "reason": reason, **more})


READ_A = call("c1", "read_file", {"path": "a.py"})
"""A client tool call: ``read_file`` of ``a.py``, id ``c1``."""


def scripted(llm: ScriptedLLM | None) -> ScriptedLLM:
    """The scripted model ``make_pipeline`` returned."""
    assert llm is not None
    return llm


# --- what the model was given ---------------------------------------------------------------


def system_text(request: LLMRequest) -> str:
    """The system message the model was given in one call."""
    first = request.messages[0]
    assert first.role is ChatRole.SYSTEM
    return first.content


def tool_messages(request: LLMRequest, call_id: str | None = None) -> list[ChatMessage]:
    """The tool messages the model saw in one call, in order; only those answering
    ``call_id`` when it is given."""
    return [
        m
        for m in request.messages
        if m.role is ChatRole.TOOL and (call_id is None or m.tool_call_id == call_id)
    ]


# --- what the store holds -------------------------------------------------------------------

StoreView = tuple[Session | None, tuple[Turn | None, ...], tuple[ChatMessage, ...]]


async def stored(
    store: MemoryStore | SQLiteStore | PostgresStore, session_id: str = "session-1"
) -> StoreView:
    """What the store holds for CALLER's session: the session, turns 1-5, transcript."""
    org, user = CALLER.org, CALLER.user
    session = await store.read_session(org, user, session_id)
    turns = [await store.read_turn(org, user, session_id, f"turn-{n}") for n in range(1, 6)]
    transcript = await store.read_transcript(org, user, session_id)
    return session, tuple(turns), tuple(transcript)


NOTHING_STORED: StoreView = (None, (None,) * 5, ())
"""``stored`` of a store where the turn left nothing."""


async def session_of(store: SessionStore, session_id: str = "session-1") -> Session:
    """The committed session as a transaction of ``CALLER`` loads it; it must exist."""
    tx = store.begin(CALLER.org, CALLER.user)
    try:
        session = await tx.load_session(session_id)
    finally:
        await tx.rollback()
    assert session is not None, f"no session {session_id!r}"
    return session


# --- catalogs -------------------------------------------------------------------------------

AGENT_AND_CONVERSATION = """
[[agents]]
id = "assistant"
name = "Aptix assistant"
default = true
model = "scripted"
system_prompt = "You are a test assistant."

[[agents.client_tools]]
name = "read_file"
description = "Read a file."
[agents.client_tools.parameters]
type = "object"
required = ["path"]
additionalProperties = false
[agents.client_tools.parameters.properties.path]
type = "string"
minLength = 1

[[agents.client_tools]]
name = "run_tests"
description = "Run the tests."
[agents.client_tools.parameters]
type = "object"
additionalProperties = false
[agents.client_tools.parameters.properties.pattern]
type = "string"

[[conversations]]
id = "workspace"
name = "Workspace conversation"
default = true
instructions = "Tests."
"""
"""The agent (client tools ``read_file`` and ``run_tests``) and conversation that the
custom catalogs of the engine tests append to their modes."""

THREE_MODES_CONFIG = (
    """
[[modes]]
name = "general"
display_name = "General"

[[modes]]
name = "review"
display_name = "Code Review"

[[modes]]
name = "docs"
display_name = "Documentation"
"""
    + AGENT_AND_CONVERSATION
)
"""Three modes: general, review and docs (no server tools), with ``AGENT_AND_CONVERSATION``."""

REPORT_CATALOG = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["make_report"]

[[server_tools]]
name = "make_report"
description = "Write a short Markdown report."
executes_on = "server"

[server_tools.parameters]
type = "object"
required = ["title", "points"]
additionalProperties = false
properties.title = { type = "string" }
properties.points = { type = "array", items = { type = "string" } }

[[agents]]
id = "assistant"
name = "Assistant"
default = true

[[conversations]]
id = "chat"
name = "Chat"
default = true
"""
"""A catalog whose one mode offers the server tool ``make_report`` (its files: docs/FILES.md)."""

SUPPORT_CATALOG = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["lookup"]

[[server_tools]]
name = "lookup"
description = "A ticket's status, by its id."

[[agents]]
id = "support"
name = "Support"

[[agents.client_tools]]
name = "open_file"

[[conversations]]
id = "desk"
"""
"""A catalog whose mode offers the server tool ``lookup`` (no ``executes_on``: the table
says where it runs) and whose agent ``support`` has the client tool ``open_file``."""

EXPAND_MATH: dict[str, Any] = {"tool_calls": [{"id": "call-math", "name": "Math"}]}
"""A scripted reply that expands the Math container (its id ``call-math``)."""


# --- misbehaving steps ----------------------------------------------------------------------

Mutation = Callable[[TurnScope], None]
"""A change a misbehaving step makes to the turn's scope after the real step ran."""


def after(step: PipelineStep, mutate: Mutation) -> StepFunction:
    """The real step, then ``mutate``."""
    real = STEP_FUNCTIONS[step]

    async def misbehaving(scope: TurnScope) -> None:
        await real(scope)
        mutate(scope)

    return misbehaving


async def does_nothing(scope: TurnScope) -> None:
    """A step that skips its job."""
    del scope


def _stray_session() -> Session:
    """A session no turn of the test made: ``session-stray`` of ``CALLER``."""
    return Session(id="session-stray", org=CALLER.org, user=CALLER.user, mode="general")


def fill_session(scope: TurnScope) -> None:
    """A mutation that gives the turn a stray session it should not have yet."""
    scope.ctx.session = _stray_session()


def raising_after(step: PipelineStep) -> StepFunction:
    """The real step (its writes buffered), then a RuntimeError."""
    real = STEP_FUNCTIONS[step]

    async def raising(scope: TurnScope) -> None:
        await real(scope)
        raise RuntimeError(f"{step.value} blew up")

    return raising


# --- failing ports --------------------------------------------------------------------------


class CommitFailingTransaction(BufferedTransaction):
    """A turn's transaction whose commit fails before writing anything."""

    def __init__(
        self, backend: MemoryStore | SQLiteStore, org: str, user: str, error: Exception
    ) -> None:
        super().__init__(backend, org, user)
        self.error = error
        self.rolled_back = False

    async def commit(self) -> None:
        raise self.error

    async def rollback(self) -> None:
        self.rolled_back = True
        await super().rollback()


class CommitFailingStore:
    """A store whose turns never commit; it records their transactions."""

    def __init__(self, backend: MemoryStore | SQLiteStore, error: Exception) -> None:
        self.backend = backend
        self.error = error
        self.transactions: list[CommitFailingTransaction] = []

    def begin(self, org: str, user: str) -> CommitFailingTransaction:
        tx = CommitFailingTransaction(self.backend, org, user, self.error)
        self.transactions.append(tx)
        return tx


class ReadFailingStore:
    """A store whose transactions fail to read sessions (a database that went away), or
    whose ``begin`` fails, with ``error``."""

    def __init__(
        self,
        inner: MemoryStore | SQLiteStore,
        error: Exception | None = None,
        *,
        at_begin: bool = False,
    ) -> None:
        self.inner, self.at_begin = inner, at_begin
        self.error = error or OSError("database is unavailable")

    def begin(self, org: str, user: str) -> SessionTransaction:
        if self.at_begin:
            raise self.error
        tx = self.inner.begin(org, user)

        async def load_session(session_id: str) -> Session | None:
            raise self.error

        tx.load_session = load_session  # type: ignore[method-assign]
        return tx


class FailingModes:
    """A Mode Catalog that is down."""

    async def get_mode(self, mode: str) -> None:
        raise ConnectionError("catalog service unreachable")

    async def list_modes(self) -> list[Any]:
        raise ConnectionError("catalog service unreachable")


class FlakyLLM:
    """Raises ``failures`` times, then answers ``text``; counts every call."""

    def __init__(self, failures: int, text: str = "Recovered.") -> None:
        self.failures = failures
        self.text = text
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError(f"model unreachable (call {self.calls})")
        return LLMReply(text=self.text)


class FailingLLM:
    """Plays a script but fails permanently on the ``fail_on``-th model call."""

    def __init__(self, replies: Sequence[Mapping[str, Any]], fail_on: int) -> None:
        self.script = ScriptedLLM(list(replies))
        self.fail_on = fail_on
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        """The next scripted reply, or a permanent failure on call ``fail_on``."""
        self.calls += 1
        if self.calls == self.fail_on:
            raise PermanentPortError("the model is gone")
        return await self.script.complete(request)


# --- more scripted replies --------------------------------------------------------------


def reply(*tool_calls: tuple[str, str, str]) -> LLMReply:
    """A model reply with tool calls given as (id, name, arguments JSON); ids may be empty."""
    return LLMReply(
        tool_calls=[ToolCall(tool_call_id=i, name=n, arguments_json=a) for i, n, a in tool_calls],
        finish_reason="tool_calls",
    )


def server_calls(tool: str, count: int) -> list[dict[str, Any]]:
    """``count`` replies that each call a server tool (Math is expanded by the first)."""
    if tool == "review_checklist":
        return [
            {"tool_calls": [{"id": f"call-{n}", "name": "review_checklist", "arguments": {}}]}
            for n in range(1, count + 1)
        ]
    adds = [
        {"tool_calls": [{"id": f"call-{n}", "name": "Add", "arguments": {"a": n, "b": 1}}]}
        for n in range(2, count + 1)
    ]
    return [EXPAND_MATH, *adds]
