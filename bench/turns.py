"""Whole-turn cost per path: the engine, its reference runtime and three baselines, side by side.

Every variant runs the same step functions with the same PRE/POST checks and the
same commit, on one memory store with a fixed-reply model and tracing off:

- **engine** — ``Pipeline.run`` with the default runtime (``runtime="compiled"``);
- **statechart** — ``Pipeline.run`` with ``runtime="statechart"``: python-statemachine's
  own runtime, the reference;
- **plain** — the steps and checks called in a plain ``for`` loop: no state machine
  (``plain_turn``; its per-step work is ``run_step``, which the peers share; §4.10's
  "nothing but Response changed" compares against ``snapshot_context`` where the
  validators have it, as the engine does, else against a deep copy), doing what
  the engine does that a user needs beside the steps: the stored answer of a
  request with answer keys (a continuation: read, digest, store; D181) and the turn
  deadline around the walk;
- **plain bare** — the same loop without the stored answer and the deadline (what
  the table called *plain* before: the engine's extra work is the difference);
- **burr** / **langgraph** — the same nodes as an Apache Burr application and a
  LangGraph ``StateGraph`` (``bench/peers.py``), when the ``bench`` extra is installed;
- **raw psm** — python-statemachine alone: a fresh async ``StateChart`` taking the
  same number of transitions with no-op callbacks (what the library itself costs).

The variants are interleaved: each round runs every variant ``number`` times, in an
order rotated from round to round, so machine noise hits them alike. The table
reports the minimum over the rounds and their median.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from builders import PATHS
from statemachine import State, StateChart

from aptix_pipeline import PipelineOptions, Ports, validators
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.system.clocks import SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds
from aptix_pipeline.contracts import (
    LLM,
    AgentExecuteResponse,
    Caller,
    ContextType,
    LLMReply,
    LLMRequest,
    PipelineContext,
    PipelineStep,
    SessionStore,
    ToolCall,
)
from aptix_pipeline.engine import Pipeline, Telemetry
from aptix_pipeline.engine.idempotency import AnswerBook, RequestKeys, request_keys
from aptix_pipeline.steps import STEP_FUNCTIONS, TurnScope, complete_turn
from aptix_pipeline.validators import validate_post_step, validate_pre_step

__all__ = [
    "BEFORE_RESPONSE",
    "CALLER",
    "RUNTIME_NOTE",
    "VARIANTS",
    "FixedLLM",
    "TurnRow",
    "bench_ports",
    "engine_pipeline",
    "plain_turn",
    "run_step",
    "turn_rows",
]

CALLER = Caller(org="acme", user="ana")
S = PipelineStep
CLIENT_CALL = LLMReply(
    tool_calls=[ToolCall(tool_call_id="c1", name="read_file", arguments_json='{"path": "a.py"}')]
)
FINAL = LLMReply(text="done")
VARIANTS = ("engine", "statechart", "plain", "plain bare", "burr", "langgraph", "raw psm")

RUNTIME_NOTE: list[str] = []
"""Set by ``engine_pipeline`` when ``Pipeline`` has no ``runtime=`` keyword yet."""


class FixedLLM:
    """Answers every call with the same reply (the benchmark's model)."""

    def __init__(self) -> None:
        self.reply = FINAL

    async def complete(self, request: LLMRequest) -> LLMReply:
        return self.reply


def bench_ports(llm: LLM, store: SessionStore | None = None) -> Ports:
    """The benchmarks' ports: ``store`` (a new memory store by default), the built-in catalog."""
    catalog = ConfigCatalog.default()
    return Ports(
        store=store or MemoryStore(),
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=SystemClock(),
        ids=RandomIds(),
        tools=catalog.tools,  # the built-in catalog's demo tools
    )


def engine_pipeline(ports: Ports, runtime: str = "compiled", **kwargs: Any) -> Pipeline:
    """``Pipeline(ports, options, runtime=runtime)`` with tracing off.

    Until ``Pipeline`` takes ``runtime=``, the default pipeline, and a note in
    ``RUNTIME_NOTE`` for the tables.
    """
    extra: dict[str, Any] = {"runtime": runtime}
    try:
        return Pipeline(ports, PipelineOptions(), telemetry=Telemetry.off(), **extra, **kwargs)
    except TypeError as error:
        if "runtime" not in str(error):
            raise
        note = "Pipeline has no runtime= yet: engine and statechart both ran the default runtime"
        if note not in RUNTIME_NOTE:
            RUNTIME_NOTE.append(note)
        return Pipeline(ports, PipelineOptions(), telemetry=Telemetry.off(), **kwargs)


_SNAPSHOT: Callable[[PipelineContext], Any] | None = getattr(validators, "snapshot_context", None)
BEFORE_RESPONSE = "snapshot_context" if _SNAPSHOT is not None else "a deep copy"
"""How the plain loop keeps the context for §4.10's check: as the engine does, the
validators' cheap snapshot where they have one, else a deep copy."""


def _before_response(ctx: PipelineContext) -> Any:
    return _SNAPSHOT(ctx) if _SNAPSHOT is not None else ctx.model_copy(deep=True)


async def run_step(scope: TurnScope, step: PipelineStep) -> None:
    """One node's work, the same in the plain loop and in every peer: PRE, step, POST."""
    if step is not S.REQUEST_HANDLER:  # AGN-036 §4.1 has no PRE set
        assert validate_pre_step(scope.ctx, step).successful
    # §4.10: "nothing but Response changed" needs the context as it was.
    before = _before_response(scope.ctx) if step is S.RESPONSE_BUILDER else None
    await STEP_FUNCTIONS[step](scope)
    assert validate_post_step(scope.ctx, step, before=before).successful


async def plain_turn(
    ports: Ports, options: PipelineOptions, request: dict[str, Any], *, bare: bool = False
) -> None:
    """The same steps and checks in a plain loop (no state machine), routed by the context
    type; unless ``bare``, with the stored answer and the deadline (the module docstring)."""
    if bare:
        await _walk(TurnScope(ports, options, CALLER, request))
        return
    keys = request_keys(request, CALLER.org, CALLER.user, max_depth=options.max_json_depth)
    answer_keys = None
    if isinstance(keys, RequestKeys):
        assert await AnswerBook(ports.store, ports.clock).stored(keys) is None
        answer_keys = keys.answer_keys(options.idempotency_ttl_seconds)
    scope = TurnScope(ports, options, CALLER, request, answer_keys=answer_keys)
    async with asyncio.timeout(options.turn_deadline_seconds):
        await _walk(scope)


async def _walk(scope: TurnScope) -> None:
    await run_step(scope, S.REQUEST_HANDLER)
    for step in PATHS[scope.ctx.type][1:]:
        await run_step(scope, step)
    await complete_turn(scope)
    assert scope.ctx.response is not None


async def _setup(pipeline: Pipeline, llm: FixedLLM, kind: ContextType) -> dict[str, Any]:
    """The request of this path; continuation and follow-on need a turn to follow."""
    if kind is ContextType.INITIAL:
        return {"Instruction": "hi"}
    llm.reply = CLIENT_CALL if kind is ContextType.CLIENT_TOOL_CALL_CONTINUATION else FINAL
    first = await pipeline.execute({"Instruction": "hi"}, CALLER)
    response: AgentExecuteResponse | None = first.result
    assert response is not None, first.errors
    llm.reply = FINAL
    if kind is ContextType.FOLLOW_ON:
        return {
            "SessionId": response.session_id,
            "TurnId": response.turn_id,
            "Instruction": "again",
        }
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


@dataclass(frozen=True)
class TurnRow:
    """One path: µs per turn by variant (min and median over the rounds)."""

    path: str
    transitions: int
    best: Mapping[str, float]
    median: Mapping[str, float]


Runner = Callable[[dict[str, Any]], Awaitable[None]]


async def _measure(kind: ContextType, number: int, rounds: int) -> TurnRow:
    llm = FixedLLM()
    ports = bench_ports(llm)
    options = PipelineOptions()
    engine = engine_pipeline(ports)
    statechart = engine_pipeline(ports, runtime="statechart")

    def pipeline_runner(pipeline: Pipeline) -> Runner:
        async def run(request: dict[str, Any]) -> None:
            report = await pipeline.run(request, CALLER)
            assert report.successful, report.result.errors

        return run

    async def plain(request: dict[str, Any]) -> None:
        await plain_turn(ports, options, request)

    async def plain_bare(request: dict[str, Any]) -> None:
        await plain_turn(ports, options, request, bare=True)

    transitions = 1 + len(PATHS[kind])  # each step plus `complete`
    machine = _raw_machine(transitions)

    async def raw(request: dict[str, Any]) -> None:
        await _raw(machine, transitions)

    runners: dict[str, Runner] = {
        "engine": pipeline_runner(engine),
        "statechart": pipeline_runner(statechart),
        "plain": plain,
        "plain bare": plain_bare,
    }
    from peers import peer_runners  # peers imports this module

    runners.update(peer_runners(ports, options, CALLER))
    runners["raw psm"] = raw
    # Warm up every variant (imports, caches) before timing.
    for run in runners.values():
        for _ in range(2):
            await run(await _setup(engine, llm, kind))
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for index in range(rounds):
        # Each round gets its requests made up front, the same number for every variant.
        requests: dict[str, list[dict[str, Any]]] = {
            name: [await _setup(engine, llm, kind) for _ in range(number)]
            if name != "raw psm"
            else [{}] * number
            for name in names
        }
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            run = runners[name]
            started = time.perf_counter()
            for request in requests[name]:
                await run(request)
            samples[name].append((time.perf_counter() - started) / number * 1e6)
    return TurnRow(
        kind.value,
        transitions,
        {name: min(values) for name, values in samples.items()},
        {name: statistics.median(values) for name, values in samples.items()},
    )


def turn_rows(number: int = 10, rounds: int = 15) -> list[TurnRow]:
    """One ``TurnRow`` per path (see the module docstring)."""
    return [asyncio.run(_measure(kind, number, rounds)) for kind in PATHS]
