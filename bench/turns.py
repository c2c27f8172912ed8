"""Whole-turn cost of the engine, per path, against two baselines from the same run.

- **engine** — ``Pipeline.run`` on the memory store with a fixed-reply model:
  the statechart, its guards and exit hooks, the steps, the commit.
- **plain** — the same step functions with the same PRE/POST checks and the same
  commit, called in a plain ``for`` loop: no state machine.
- **raw psm** — python-statemachine alone: a fresh async ``StateChart`` instance
  taking the same number of transitions, each with no-op async callbacks.

``engine - plain`` is what the machine costs; the ratio to ``raw psm`` says how
much of that is the library itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from statemachine import State, StateChart

from aptix_pipeline.adapters.catalog_config import ConfigCatalog
from aptix_pipeline.adapters.clocks import SystemClock
from aptix_pipeline.adapters.ids import RandomIds
from aptix_pipeline.adapters.memory_store import MemoryStore
from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    Caller,
    ContextType,
    LLMReply,
    LLMRequest,
    PipelineStep,
    ToolCall,
)
from aptix_pipeline.engine import Pipeline, PipelineOptions, Ports
from aptix_pipeline.steps import STEP_FUNCTIONS, TurnScope, complete_turn
from aptix_pipeline.validators import validate_post_step, validate_pre_step

__all__ = ["engine_rows"]

CALLER = Caller(org="acme", user="ana")
S = PipelineStep
PATHS: dict[ContextType, tuple[PipelineStep, ...]] = {
    ContextType.INITIAL: (S.REQUEST_HANDLER, S.AGENT_CONTEXT_RESOLVER, S.AGENT_SESSION_CREATOR,
                          S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER, S.LLM_CLIENT,
                          S.RESPONSE_BUILDER),
    ContextType.FOLLOW_ON: (S.REQUEST_HANDLER, S.SESSION_RESTORER, S.AGENT_CONTEXT_LOADER,
                            S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER, S.LLM_CLIENT,
                            S.RESPONSE_BUILDER),
    ContextType.CLIENT_TOOL_CALL_CONTINUATION: (
        S.REQUEST_HANDLER, S.SESSION_RESTORER, S.CLIENT_TOOL_CONTINUATION_RESOLVER,
        S.AGENT_CONTEXT_LOADER, S.PROMPT_CONTENT_PROVIDER_INITIALIZER, S.REASONER, S.LLM_CLIENT,
        S.RESPONSE_BUILDER),
}  # fmt: skip
CLIENT_CALL = LLMReply(
    tool_calls=[ToolCall(tool_call_id="c1", name="read_file", arguments_json='{"path": "a.py"}')]
)
FINAL = LLMReply(text="done")


class FixedLLM:
    """Answers every call with the same reply (the benchmark's model)."""

    def __init__(self) -> None:
        self.reply = FINAL

    async def complete(self, request: LLMRequest) -> LLMReply:
        return self.reply


def _pipeline() -> tuple[Pipeline, FixedLLM]:
    catalog = ConfigCatalog.default()
    llm = FixedLLM()
    ports = Ports(store=MemoryStore(), llm=llm, modes=catalog, agents=catalog,
                  clock=SystemClock(), ids=RandomIds())  # fmt: skip
    return Pipeline(ports, PipelineOptions()), llm


async def _plain(pipeline: Pipeline, request: dict[str, Any], kind: ContextType) -> None:
    """The same steps and checks in a plain loop (no state machine)."""
    scope = TurnScope(pipeline.ports, pipeline.options, CALLER, request)
    for step in PATHS[kind]:
        if step is not S.REQUEST_HANDLER:
            assert validate_pre_step(scope.ctx, step).successful
        before = scope.ctx.model_copy(deep=True) if step is S.RESPONSE_BUILDER else None
        await STEP_FUNCTIONS[step](scope)
        assert validate_post_step(scope.ctx, step, before=before).successful
    await complete_turn(scope)


async def _setup(pipeline: Pipeline, llm: FixedLLM, kind: ContextType) -> dict[str, Any]:
    """The request of this path; continuation and follow-on need a turn to follow."""
    if kind is ContextType.INITIAL:
        return {"Instruction": "hi"}
    llm.reply = CLIENT_CALL if kind is ContextType.CLIENT_TOOL_CALL_CONTINUATION else FINAL
    first = await pipeline.execute({"Instruction": "hi"}, CALLER)
    response: AgentExecuteResponse | None = first.result
    assert response is not None
    llm.reply = FINAL
    if kind is ContextType.FOLLOW_ON:
        return {"SessionId": response.session_id, "TurnId": response.turn_id,
                "Instruction": "again"}  # fmt: skip
    results = [{"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": "{}"}]
    return {"SessionId": response.session_id, "TurnId": response.turn_id, "ToolResults": results}


def _raw_machine(transitions: int) -> type[StateChart[Any]]:
    """A StateChart with ``transitions`` async no-op transitions in a line."""
    states = {
        f"s{i}": State(initial=i == 0, final=i == transitions) for i in range(transitions + 1)
    }

    async def noop() -> None:
        return None

    body: dict[str, Any] = dict(states)
    for i in range(transitions):
        body[f"t{i}"] = states[f"s{i}"].to(
            states[f"s{i + 1}"], validators=lambda: None, on=noop, after=lambda: None
        )
    return type(f"Raw{transitions}", (StateChart,), body)


async def _raw(machine: type[StateChart[Any]], transitions: int) -> None:
    sm = machine()
    await sm.activate_initial_state()
    for i in range(transitions):
        await sm.send(f"t{i}")


async def _best_us(work: Callable[[], Awaitable[None]], number: int, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            await work()
        best = min(best, (time.perf_counter() - started) / number)
    return best * 1e6


async def _measure(kind: ContextType, number: int) -> tuple[float, float, float, int]:
    pipeline, llm = _pipeline()
    turns = 1 + len(PATHS[kind])  # each step plus `complete`
    requests = [await _setup(pipeline, llm, kind) for _ in range(number * 3 * 2 + 5)]
    engine_requests, plain_requests = iter(requests[::2]), iter(requests[1::2])

    async def engine() -> None:
        report = await pipeline.run(next(engine_requests), CALLER)
        assert report.successful, report.result.errors

    async def plain() -> None:
        await _plain(pipeline, next(plain_requests), kind)

    machine = _raw_machine(turns)

    async def raw() -> None:
        await _raw(machine, turns)

    return (
        await _best_us(engine, number),
        await _best_us(plain, number),
        await _best_us(raw, number),
        turns,
    )


def engine_rows(number: int = 60) -> list[tuple[str, float, float, float, int]]:
    """(path, engine µs, plain µs, raw psm µs, transitions) per path."""
    rows = []
    for kind in PATHS:
        engine, plain, raw, turns = asyncio.run(_measure(kind, number))
        rows.append((kind.value, engine, plain, raw, turns))
    return rows
