"""Host code fails politely: one policy says what of its exception reaches the caller.

Every place the engine runs a host's code — a host rule, each hook, a server tool,
a listener, the retriever, the store, the catalogs, the model, a step override —
is made to raise an exception planted with secrets: on its first line, on its
second, and a megabyte of text. The caller sees at most the class and the first
line, bounded (``error_detail = "short"``), the class alone (``"class"``), and an
``internal`` fault names no detail; a host rule's own words are bounded to 1 KB.
A ``BaseException`` from host code (``SystemExit``, a class of the host's) is a
fault of the turn and never escapes ``execute``; cancellation still propagates.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from aptix_pipeline import (
    Caller,
    ConfigCatalog,
    Hooks,
    HostRule,
    LLMReply,
    LLMRequest,
    MemoryStore,
    Passage,
    Pipeline,
    PipelineOptions,
    PipelineStep,
    RetrievalQuery,
    ScriptedLLM,
    ToolInvocation,
    embedded_pipeline,
)
from aptix_pipeline.contracts import Session, SessionTransaction
from aptix_pipeline.steps import MAX_RULE_DETAIL_CHARS, SHORT_ERROR_CHARS, ErrorDetail, TurnScope

ANA = Caller(org="acme", user="ana")
FIRST = "first-line-secret hunter2"
SECOND = "second-line-secret s3cr3t"
HUGE = "x" * 1_000_000
LOOKUP: dict[str, Any] = {"id": "c1", "name": "lookup", "arguments": {"id": "T-7"}}
CATALOG = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["lookup"]

[[server_tools]]
name = "lookup"
description = "A ticket's status."
parameters = { type = "object", properties = { id = { type = "string" } } }

[[agents]]
id = "support"
name = "Support"

[[conversations]]
id = "desk"
"""


async def looked_up(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    return '{"status": "open"}'


class HostBaseError(BaseException):
    """A host's own BaseException, outside ``Exception``."""


def planted() -> Exception:
    return RuntimeError(f"{FIRST} {HUGE}\n{SECOND}\n{HUGE}")


Raise = Callable[[], BaseException]


def raiser(make: Raise) -> Callable[..., Any]:
    def run(*args: object) -> Any:
        raise make()

    return run


class RaisingModel:
    def __init__(self, make: Raise) -> None:
        self.make = make

    async def complete(self, request: LLMRequest) -> LLMReply:
        raise self.make()


class RaisingRetriever:
    collection = "docs"

    def __init__(self, make: Raise) -> None:
        self.make = make

    async def retrieve(self, query: RetrievalQuery) -> Sequence[Passage]:
        raise self.make()


class RaisingStore:
    """A memory store whose ``create_session`` raises."""

    def __init__(self, make: Raise) -> None:
        self.inner, self.make = MemoryStore(), make

    def begin(self, org: str, user: str) -> SessionTransaction:
        tx = self.inner.begin(org, user)

        async def create_session(session: Session) -> None:
            raise self.make()

        tx.create_session = create_session  # type: ignore[method-assign]
        return tx


class RaisingCatalog:
    """The test's catalog, whose ``list_modes`` raises."""

    def __init__(self, make: Raise) -> None:
        self.inner, self.make = ConfigCatalog.from_toml(CATALOG), make

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def list_modes(self) -> Any:
        raise self.make()


def _pipeline(site: str, make: Raise, detail: ErrorDetail) -> Pipeline:
    """A pipeline whose host code at ``site`` raises ``make()``."""
    options = PipelineOptions(retry_wait_seconds=0, llm_attempts=1, error_detail=detail)
    script: list[dict[str, Any]] = [{"tool_calls": [LOOKUP]}, {"text": "done"}]
    tool_turn = ScriptedLLM(script)
    base: dict[str, Any] = {
        "llm": ScriptedLLM([{"text": "fine"}]),
        "options": options,
        "catalog": ConfigCatalog.from_toml(CATALOG),
        "tools": {"lookup": looked_up},
    }
    if site == "rule":
        rule = HostRule(
            id="host/raises",
            step=PipelineStep.REASONER,
            message="the host checks the turn",
            code="host.check",
            check=raiser(make),
        )
        return embedded_pipeline(**base, rules=[rule])
    if site == "before_model_request":
        return embedded_pipeline(**base, hooks=Hooks(before_model_request=raiser(make)))
    if site == "after_model_reply":
        return embedded_pipeline(**base, hooks=Hooks(after_model_reply=raiser(make)))
    if site == "after_tool":
        return embedded_pipeline(**{**base, "llm": tool_turn}, hooks=Hooks(after_tool=raiser(make)))
    if site == "tool":

        async def lookup(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
            raise make()

        return embedded_pipeline(**{**base, "llm": tool_turn, "tools": {"lookup": lookup}})
    if site == "listener":
        return embedded_pipeline(**base, listeners=[raiser(make)])
    if site == "retriever":
        return embedded_pipeline(**base, retriever=RaisingRetriever(make))
    if site == "store":
        return embedded_pipeline(**base, store=RaisingStore(make))
    if site == "catalog":
        return embedded_pipeline(**{**base, "catalog": RaisingCatalog(make)})
    if site == "model":
        return embedded_pipeline(**{**base, "llm": RaisingModel(make)})
    if site == "step":

        async def broken(scope: TurnScope) -> None:
            raise make()

        made = embedded_pipeline(**base)
        return Pipeline(made.ports, options, steps={PipelineStep.REASONER: broken})
    raise AssertionError(site)


SITES = [
    "rule",
    "before_model_request",
    "after_model_reply",
    "after_tool",
    "tool",
    "listener",
    "retriever",
    "store",
    "catalog",
    "model",
    "step",
]
INTERNAL = {"before_model_request", "after_model_reply", "after_tool", "step"}
"""Sites whose failure is an ``internal`` fault: no detail of the exception."""


def told(site: str, result_json: str) -> str:
    """What the caller was told of the failure: the errors, or the tool's failure."""
    data = json.loads(result_json)
    if site == "tool" and data["Successful"]:
        return str(data["Result"]["ToolResults"][0]["ErrorMessage"])
    return " | ".join(error["Message"] for error in data["Errors"])


@pytest.mark.decision("D398")
@pytest.mark.parametrize("detail", ["short", "class"])
@pytest.mark.parametrize("site", [s for s in SITES if s != "listener"])
async def test_a_host_exception_reaches_the_caller_bounded_and_per_the_policy(
    site: str, detail: ErrorDetail
) -> None:
    pipeline = _pipeline(site, planted, detail)

    result = await pipeline.execute({"Instruction": "How is T-7?"}, ANA)

    text = told(site, result.to_json())
    assert result.successful is (site == "tool"), result.errors
    assert SECOND not in text
    assert len(text) < SHORT_ERROR_CHARS + 200, len(text)
    assert "RuntimeError" in text
    if detail == "class" or site in INTERNAL:
        assert FIRST not in text
    else:
        assert FIRST in text  # the first line, cut: "short"'s promise


@pytest.mark.decision("D398")
@pytest.mark.parametrize("site", [s for s in SITES if s != "listener"])
async def test_the_full_policy_tells_the_whole_message(site: str) -> None:
    pipeline = _pipeline(site, lambda: RuntimeError(f"{FIRST}\n{SECOND}"), "full")

    result = await pipeline.execute({"Instruction": "How is T-7?"}, ANA)

    assert SECOND in told(site, result.to_json())


@pytest.mark.decision("D398")
async def test_a_failing_listener_tells_the_caller_nothing() -> None:
    pipeline = _pipeline("listener", planted, "short")

    result = await pipeline.execute({"Instruction": "Hi"}, ANA)

    assert result.successful
    assert FIRST not in result.to_json()


@pytest.mark.decision("D398")
@pytest.mark.parametrize("size", [MAX_RULE_DETAIL_CHARS, 1_000_000])
async def test_a_host_rules_own_words_are_bounded_to_1_kb(size: int) -> None:
    words = "w" * size
    rule = HostRule(
        id="host/verbose",
        step=PipelineStep.REASONER,
        message="the host refuses",
        code="host.refused",
        check=lambda ctx: words,
    )
    pipeline = embedded_pipeline(llm=ScriptedLLM([{"text": "no"}]), rules=[rule])

    result = await pipeline.execute({"Instruction": "Hi"}, ANA)

    [error] = result.errors
    detail = error.message.removeprefix("the host refuses: ")
    assert len(detail) == MAX_RULE_DETAIL_CHARS
    assert detail.endswith("…") is (size > MAX_RULE_DETAIL_CHARS)
    assert len(result.to_json()) < 2 * MAX_RULE_DETAIL_CHARS


# === BaseException =============================================================================


@pytest.mark.decision("D399")
@pytest.mark.parametrize("make", [lambda: SystemExit(3), lambda: HostBaseError("boom")])
@pytest.mark.parametrize("site", SITES)
async def test_a_base_exception_from_host_code_is_a_fault_of_the_turn(
    site: str, make: Raise, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = _pipeline(site, make, "short")

    with caplog.at_level(logging.ERROR, logger="aptix_pipeline"):
        result = await pipeline.execute({"Instruction": "How is T-7?"}, ANA)

    assert result.successful is (site == "listener"), result.errors
    if not result.successful:
        assert type(make()).__name__ in told(site, result.to_json())


@pytest.mark.decision("D399")
@pytest.mark.parametrize("site", ["rule", "before_model_request", "tool", "store", "model"])
async def test_cancellation_from_host_code_still_propagates(site: str) -> None:
    pipeline = _pipeline(site, asyncio.CancelledError, "short")

    with pytest.raises(asyncio.CancelledError):
        await pipeline.execute({"Instruction": "How is T-7?"}, ANA)


@pytest.mark.decision("D399")
async def test_keyboard_interrupt_from_host_code_still_propagates() -> None:
    pipeline = _pipeline("rule", KeyboardInterrupt, "short")

    with pytest.raises(KeyboardInterrupt):
        await pipeline.execute({"Instruction": "Hi"}, ANA)


def test_a_sync_turns_logged_traceback_carries_no_chained_loop_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = _pipeline("rule", lambda: ValueError("bad"), "short")

    with caplog.at_level(logging.ERROR, logger="aptix_pipeline"):
        result = pipeline.execute_sync({"Instruction": "Hi"}, ANA)

    assert not result.successful
    [record] = [r for r in caplog.records if "Traceback" in r.getMessage()]
    logged = record.getMessage()
    assert "ValueError" in logged  # the host's exception
    assert "RuntimeError" not in logged  # and nothing of run_sync's loop check
    assert "During handling of the above exception" not in logged
