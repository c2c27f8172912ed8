"""The engine's scenario suite as a catalogue of named, replayable scenarios.

Each scenario runs one or more requests through ``Pipeline.run`` on a given
store and keeps every ``TurnReport`` (setup requests included), so
tests/engine/test_state_traces.py can snapshot the ``StateTrace`` of each and compare
stores. The scenarios are built from the same builders and fault doubles as the
engine scenario tests (tests/kits/engine_kit.py); each checks that it took the path
it is named for, so a snapshot never silently records another one. ``TraceJSON`` is
the snapshot extension the traces are stored with.

Clock and ids come from ``SteppingClock``/``SequentialIds`` (``make_pipeline``),
so the same scenario gives the same traces on every run and on every store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine_kit import (
    CALLER,
    OTHER_ORG,
    THREE_MODES_CONFIG,
    CommitFailingStore,
    FailingLLM,
    FailingModes,
    FlakyLLM,
    ReadFailingStore,
    after,
    call,
    calls,
    change_mode,
    continuation,
    does_nothing,
    fill_session,
    follow_on,
    make_pipeline,
    ok,
    raising_after,
    reply,
    server_calls,
    text,
)
from syrupy.extensions.json import JSONSnapshotExtension

from aptix_pipeline import PipelineOptions
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    LLM,
    AgentExecuteResponse,
    Caller,
    ErrorCode,
    LLMReply,
    PipelineStep,
    StoreConflictError,
    ToolInvocation,
)
from aptix_pipeline.engine import (
    Listener,
    Pipeline,
    Runtime,
    StreamItem,
    Telemetry,
    TurnReport,
)
from aptix_pipeline.steps import StepFunction

__all__ = [
    "CONTENT",
    "SCENARIOS",
    "Kit",
    "Scenario",
    "Store",
    "TraceJSON",
    "run_scenario",
]

Store = MemoryStore | SQLiteStore
NO_WAIT: dict[str, Any] = {"retry_wait_seconds": 0, "retry_max_wait_seconds": 0}
S = PipelineStep

INSTRUCTION: dict[str, Any] = {"Instruction": "Explain a.py."}
READ_A = call("c1", "read_file", {"path": "a.py"})
RUN_TESTS = call("c2", "run_tests")


class TraceJSON(JSONSnapshotExtension):
    """JSON snapshots that keep the trace's own key order (``kind`` first), not sorted keys."""

    @classmethod
    def sort(cls, iterable: Iterable[Any]) -> Iterable[Any]:
        return list(iterable)


@dataclass
class Kit:
    """A scenario's store, the telemetry its pipelines use, and the reports of its requests."""

    store: Store
    telemetry: Telemetry | None = None
    runtime: Runtime = "compiled"
    listeners: Sequence[Listener] = ()
    reports: list[TurnReport] = field(default_factory=list)
    streamed: bool = False
    """Run each request through ``Pipeline.stream`` (its items kept in ``items``)."""
    items: list[list[StreamItem]] = field(default_factory=list)

    def pipeline(
        self,
        replies: Sequence[Mapping[str, Any]] | LLM = (),
        *,
        config: str | None = None,
        tools: Mapping[str, Any] | None = None,
        options: PipelineOptions | None = None,
    ) -> Pipeline:
        """``make_pipeline`` on this kit's store and telemetry."""
        wiring = self.wiring()
        pipeline, _ = make_pipeline(
            self.store, replies, config=config, tools=tools, options=options, **wiring
        )
        return pipeline

    def wiring(self) -> dict[str, Any]:
        """This kit's telemetry, runtime and listeners, as ``Pipeline`` keywords."""
        return {"telemetry": self.telemetry, "runtime": self.runtime, "listeners": self.listeners}

    def rebuilt(
        self,
        base: Pipeline,
        *,
        steps: Mapping[PipelineStep, StepFunction] | None = None,
        **ports: Any,
    ) -> Pipeline:
        """``base`` (same script, clock and ids) with ports or steps replaced."""
        return Pipeline(replace(base.ports, **ports), base.options, steps=steps, **self.wiring())

    async def run(
        self,
        pipeline: Pipeline,
        request: Mapping[str, Any] | str,
        caller: Caller = CALLER,
        *,
        initial_mode: str | None = None,
    ) -> TurnReport:
        """Run one request and keep its report."""
        if self.streamed:
            async with pipeline.stream(request, caller, initial_mode=initial_mode) as stream:
                self.items.append([item async for item in stream])
            assert stream.report is not None
            report = stream.report
        else:
            report = await pipeline.run(request, caller, initial_mode=initial_mode)
        self.reports.append(report)
        return report

    async def ok(
        self, pipeline: Pipeline, request: Mapping[str, Any], *, initial_mode: str | None = None
    ) -> AgentExecuteResponse:
        """Run one request that must succeed; its response."""
        return ok((await self.run(pipeline, request, initial_mode=initial_mode)).result)


Scenario = Callable[[Kit], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}
"""Every scenario by name, in the order defined here."""


def scenario(function: Scenario) -> Scenario:
    """Register ``function`` under its name."""
    SCENARIOS[function.__name__] = function
    return function


async def run_scenario(
    name: str,
    store: Store,
    telemetry: Telemetry | None = None,
    runtime: Runtime = "compiled",
    listeners: Sequence[Listener] = (),
    *,
    streamed: bool = False,
) -> Kit:
    """Run scenario ``name`` on ``store`` with ``runtime`` (each request through
    ``Pipeline.stream`` when ``streamed``); the kit holds its reports."""
    kit = Kit(store, telemetry, runtime, listeners, streamed=streamed)
    await SCENARIOS[name](kit)
    return kit


def faulted(
    report: TurnReport, step: str, code: ErrorCode, rule_id: str | None = None
) -> TurnReport:
    """Check that the turn faulted at ``step`` with ``code`` (and ``rule_id``)."""
    assert report.faulted_step == step, (report.faulted_step, report.result.errors)
    assert code in [error.code for error in report.result.errors], report.result.errors
    if rule_id is not None:
        assert rule_id in report.result.rule_ids, report.result.rule_ids
    return report


def outcomes(report: TurnReport) -> list[tuple[str, str]]:
    """(name, outcome) of the turn's tool calls."""
    return [(c.name, c.outcome) for c in report.tool_calls]


# --- the three paths (DESIGN.md "The machine") ------------------------------------------


@scenario
async def initial_final_answer(kit: Kit) -> None:
    """An Initial turn answered at once."""
    await kit.ok(kit.pipeline([text("All done.")]), INSTRUCTION)


@scenario
async def initial_client_tool_then_continuation(kit: Kit) -> None:
    """Initial → client tool call (read_file) → continuation → final answer."""
    pipeline = kit.pipeline([calls(READ_A), text("a.py defines x.")])
    pending = await kit.ok(pipeline, INSTRUCTION)
    await kit.ok(pipeline, continuation(pending))


@scenario
async def follow_on_turn(kit: Kit) -> None:
    """A completed Initial turn, then a FollowOn turn in the same session."""
    pipeline = kit.pipeline([text("First."), text("Second.")])
    first = await kit.ok(pipeline, INSTRUCTION)
    await kit.ok(pipeline, follow_on(first, "And the tests?"))


@scenario
async def continuation_with_several_results_and_an_error(kit: Kit) -> None:
    """Two client calls; the continuation answers one with ResultJson, one with
    ErrorMessage (DESIGN.md R3); the model asks again, then answers."""
    pipeline = kit.pipeline(
        [
            calls(READ_A, RUN_TESTS),
            calls(call("c3", "read_file", {"path": "b.py"})),
            text("all good"),
        ]
    )
    first = await kit.ok(pipeline, {"Instruction": "look at a.py"})
    second = await kit.ok(
        pipeline,
        continuation(
            first,
            {"ToolCallId": "c1", "ExecutionMs": 2, "ResultJson": '{"text": "a"}'},
            {"ToolCallId": "c2", "ExecutionMs": 9, "ErrorMessage": "pytest not installed"},
        ),
    )
    await kit.ok(pipeline, continuation(second))


@scenario
async def server_tool_rounds_with_container_expansion(kit: Kit) -> None:
    """The model expands the Math container, then Add runs server-side (R5, R9)."""
    pipeline = kit.pipeline(
        [calls(call("x1", "Math")), calls(call("a1", "Add", {"a": 2, "b": 3})), text("5")]
    )
    await kit.ok(pipeline, {"Instruction": "2+3"})
    assert outcomes(kit.reports[-1]) == [("Math", "expanded"), ("Add", "executed")]


@scenario
async def mixed_server_and_client_calls(kit: Kit) -> None:
    """One reply with a server call and a client call: the server call runs, only the
    client call is emitted (R5); the continuation finishes the turn."""

    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return '{"checklist": ["tests?"]}'

    pipeline = kit.pipeline(
        [calls(call("s1", "review_checklist"), READ_A), text("reviewed")],
        tools={"review_checklist": checklist},
    )
    pending = await kit.ok(pipeline, INSTRUCTION, initial_mode="review")
    await kit.ok(pipeline, continuation(pending))


@scenario
async def failing_server_tool(kit: Kit) -> None:
    """A server tool that raises is an error for the model, not a fault."""

    async def broken_add(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        raise RuntimeError("adder on fire")

    pipeline = kit.pipeline(
        [calls(call("x1", "Math")), calls(call("a1", "Add", {"a": 1, "b": 2})), text("failed")],
        tools={"Add": broken_add},
    )
    await kit.ok(pipeline, {"Instruction": "1+2"})
    assert outcomes(kit.reports[-1])[-1] == ("Add", "failed")


# --- faults --------------------------------------------------------------------------------


@scenario
async def pre_guard_fails(kit: Kit) -> None:
    """A FollowOn whose request handler fills the session: §4.2's PRE fails."""
    base = kit.pipeline([text("First."), text("never")])
    first = await kit.ok(base, INSTRUCTION)
    broken = kit.rebuilt(base, steps={S.REQUEST_HANDLER: after(S.REQUEST_HANDLER, fill_session)})
    report = await kit.run(broken, follow_on(first))
    faulted(
        report, "session_restorer", ErrorCode.PIPELINE_RULE_FAILED, "AGN-036/4.2/PRE/session-null"
    )


@scenario
async def post_exit_hook_fails(kit: Kit) -> None:
    """The agent context resolver does nothing: its POST fails."""
    base = kit.pipeline([text("never")])
    broken = kit.rebuilt(base, steps={S.AGENT_CONTEXT_RESOLVER: does_nothing})
    report = await kit.run(broken, INSTRUCTION)
    faulted(
        report,
        "agent_context_resolver",
        ErrorCode.PIPELINE_RULE_FAILED,
        "AGN-036/4.3/POST/agent-context-populated",
    )


@scenario
async def empty_model_reply_fails_the_llm_client_post(kit: Kit) -> None:
    """An empty reply has no outcome: §4.9's POST fails."""
    report = await kit.run(kit.pipeline([text("")]), INSTRUCTION)
    faulted(
        report, "llm_client", ErrorCode.PIPELINE_RULE_FAILED, "AGN-036/4.9/POST/exactly-one-outcome"
    )


@scenario
async def step_raises(kit: Kit) -> None:
    """The reasoner raises after doing its work: an internal fault."""
    base = kit.pipeline([text("never")])
    broken = kit.rebuilt(base, steps={S.REASONER: raising_after(S.REASONER)})
    faulted(await kit.run(broken, INSTRUCTION), "reasoner", ErrorCode.INTERNAL)


@scenario
async def store_read_fails(kit: Kit) -> None:
    """The store cannot load the session of a FollowOn: port_failed."""
    base = kit.pipeline([text("First."), text("never")])
    first = await kit.ok(base, INSTRUCTION)
    failing = kit.rebuilt(base, store=ReadFailingStore(kit.store))
    faulted(await kit.run(failing, follow_on(first)), "session_restorer", ErrorCode.PORT_FAILED)


@scenario
async def mode_catalog_fails(kit: Kit) -> None:
    """The mode catalog is down: port_failed, nothing stored."""
    failing = kit.rebuilt(kit.pipeline([text("never")]), modes=FailingModes())
    report = await kit.run(failing, INSTRUCTION)
    assert report.result.errors[0].code is ErrorCode.PORT_FAILED


@scenario
async def llm_recovers_after_retries(kit: Kit) -> None:
    """The model fails twice, then answers: two retries in the trace."""
    await kit.ok(kit.pipeline(FlakyLLM(failures=2)), INSTRUCTION)
    assert kit.reports[-1].trace is not None
    assert kit.reports[-1].trace.llm_calls[0].attempts == 3


@scenario
async def llm_fails_after_retries(kit: Kit) -> None:
    """The model fails on every one of three attempts: port_failed."""
    options = PipelineOptions(llm_attempts=3, **NO_WAIT)
    report = await kit.run(kit.pipeline(FlakyLLM(failures=1_000), options=options), INSTRUCTION)
    faulted(report, "llm_client", ErrorCode.PORT_FAILED)


@scenario
async def round_limit(kit: Kit) -> None:
    """A model that keeps calling server tools faults past the round limit (R5)."""
    options = PipelineOptions(max_server_tool_rounds=2, **NO_WAIT)
    pipeline = kit.pipeline([*server_calls("Math", 5), text("never")], options=options)
    faulted(
        await kit.run(pipeline, INSTRUCTION),
        "llm_client",
        ErrorCode.PIPELINE_RULE_FAILED,
        "DESIGN/R5/round-limit",
    )


@scenario
async def commit_conflict(kit: Kit) -> None:
    """Another turn won the session: the commit is a conflict, nothing stored."""
    base = kit.pipeline([text("lost")])
    failing = kit.rebuilt(base, store=CommitFailingStore(kit.store, StoreConflictError("won")))
    faulted(await kit.run(failing, INSTRUCTION), "complete", ErrorCode.CONFLICT)


# --- bad requests (AGN-034, AGN-033 §3.1, R10) ---------------------------------------------

BAD_REQUESTS: list[tuple[Mapping[str, Any] | str, str]] = [
    ({"SessionId": "session-1", "Instruction": "Go on."}, "AGN-034/3/session-turn-pair"),
    ({"Instruction": "Hi", "Mode": "review"}, "AGN-034/3/server-owned-field"),
    ("not json", "AGN-034/3/envelope-object"),
    ({"Instruction": 5}, "AGN-034/3/field-type"),
    ({}, "AGN-034/2.1/input-required"),
    ('{"Instruction": "Hi", "Bogus": 1}', "AGN-034/3/unknown-field"),
]


@scenario
async def bad_requests(kit: Kit) -> None:
    """Requests AGN-034 refuses, one after the other on one pipeline."""
    pipeline = kit.pipeline([text("never")])
    for request, rule_id in BAD_REQUESTS:
        report = await kit.run(pipeline, request)
        faulted(report, "request_handler", ErrorCode.INVALID_REQUEST, rule_id)


@scenario
async def another_callers_session_is_not_found(kit: Kit) -> None:
    """Another org's FollowOn on this caller's session: not_found (AGN-033 §3.1)."""
    pipeline = kit.pipeline([text("First."), text("never")])
    first = await kit.ok(pipeline, INSTRUCTION)
    report = await kit.run(pipeline, follow_on(first), OTHER_ORG)
    faulted(report, "session_restorer", ErrorCode.NOT_FOUND, "AGN-033/3.1/session-found")


@scenario
async def follow_on_of_a_pending_turn_is_refused(kit: Kit) -> None:
    """A FollowOn naming a turn that awaits tool results (R10)."""
    pipeline = kit.pipeline([calls(READ_A), text("never")])
    pending = await kit.ok(pipeline, INSTRUCTION)
    report = await kit.run(pipeline, follow_on(pending))
    faulted(
        report, "session_restorer", ErrorCode.INVALID_REQUEST, "DESIGN/R10/follow-on-turn-settled"
    )


@scenario
async def continuation_of_a_settled_turn_is_refused(kit: Kit) -> None:
    """A continuation naming a turn that awaits nothing (R10)."""
    pipeline = kit.pipeline([text("Done."), text("never")])
    done = await kit.ok(pipeline, INSTRUCTION)
    result = {"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": "{}"}
    report = await kit.run(pipeline, continuation(done, result))
    faulted(
        report,
        "session_restorer",
        ErrorCode.INVALID_REQUEST,
        "DESIGN/R10/continuation-turn-pending",
    )


# --- mode changes (AGN-011 §5) ---------------------------------------------------------------


@scenario
async def one_mode_change(kit: Kit) -> None:
    """One agent_change_mode call, then a FollowOn in the new mode."""
    pipeline = kit.pipeline(
        [calls(change_mode("m1", "review", "review the diff")), text("switched"), text("next")]
    )
    first = await kit.ok(pipeline, {"Instruction": "hello"})
    await kit.ok(pipeline, follow_on(first))
    assert [c.new_mode for c in kit.reports[0].mode_changes] == ["review"]


@scenario
async def several_mode_changes_warn(kit: Kit) -> None:
    """Two mode changes in two rounds: both persisted, the warning (DESIGN.md R8)."""
    pipeline = kit.pipeline(
        [
            calls(change_mode("m1", "review", "first")),
            calls(change_mode("m2", "docs", "second")),
            text("done"),
        ],
        config=THREE_MODES_CONFIG,
    )
    await kit.ok(pipeline, {"Instruction": "hello"})
    assert [w.rule_id for w in kit.reports[-1].warnings] == ["DESIGN/R8/several-mode-changes"]


@scenario
async def unknown_mode_is_refused(kit: Kit) -> None:
    """A change to a mode the catalog lacks is told to the model; the mode stays."""
    pipeline = kit.pipeline([calls(change_mode("m1", "astrology")), text("ok")])
    await kit.ok(pipeline, {"Instruction": "hello"})
    assert outcomes(kit.reports[-1]) == [("agent_change_mode", "mode_refused")]


@scenario
async def change_to_the_same_mode(kit: Kit) -> None:
    """A change to the current mode records no transition (but a branch flag)."""
    pipeline = kit.pipeline([calls(change_mode("m1", "general", branch=True)), text("ok")])
    await kit.ok(pipeline, {"Instruction": "hello"})
    assert outcomes(kit.reports[-1]) == [("agent_change_mode", "mode_unchanged")]


@scenario
async def mode_change_of_a_failed_turn(kit: Kit) -> None:
    """A FollowOn changes mode, then the model fails: nothing persisted."""
    llm = FailingLLM([text("one"), calls(change_mode("m1", "review")), text("three")], fail_on=3)
    pipeline = kit.pipeline(llm)
    first = await kit.ok(pipeline, {"Instruction": "hello"})
    faulted(await kit.run(pipeline, follow_on(first)), "llm_client", ErrorCode.PORT_FAILED)


@scenario
async def several_mode_changes_of_a_failed_turn(kit: Kit) -> None:
    """Two mode changes, then the model fails: the trace keeps both changes and the R8
    warning entry (what happened); the result and ``trace.warnings`` do not warn."""
    llm = FailingLLM(
        [calls(change_mode("m1", "review", "first")), calls(change_mode("m2", "docs", "second"))],
        fail_on=3,
    )
    report = await kit.run(kit.pipeline(llm, config=THREE_MODES_CONFIG), {"Instruction": "hi"})
    faulted(report, "llm_client", ErrorCode.PORT_FAILED)
    assert (report.warnings, report.mode_changes) == ((), ())


# --- the turn's tools (container design) --------------------------------------------------------


@scenario
async def container_called_with_arguments(kit: Kit) -> None:
    """The Math container called with arguments: the container invocation error."""
    pipeline = kit.pipeline(
        [calls(call("x1", "Math", {"function": "Add", "a": 5, "b": 10})), text("sorry")]
    )
    await kit.ok(pipeline, {"Instruction": "5+10"})
    assert outcomes(kit.reports[-1]) == [("Math", "rejected")]


@scenario
async def client_tool_arguments_invalid(kit: Kit) -> None:
    """read_file without its required path: an argument validation error for the model."""
    pipeline = kit.pipeline([calls(call("c1", "read_file", {})), text("oops")])
    await kit.ok(pipeline, {"Instruction": "read it"})
    assert [c.rule_id for c in kit.reports[-1].tool_calls] == ["CPV/arguments-match-schema"]


@scenario
async def tool_not_advertised(kit: Kit) -> None:
    """A call of a tool the turn never advertised: a validation error for the model."""
    pipeline = kit.pipeline([calls(call("t1", "delete_everything")), text("sorry")])
    await kit.ok(pipeline, {"Instruction": "clean up"})
    assert [c.rule_id for c in kit.reports[-1].tool_calls] == ["CPV/tool-known"]


# --- manifests and tool-call ids ----------------------------------------------------------------


@scenario
async def continuation_results_mismatch_the_manifest(kit: Kit) -> None:
    """Results in the wrong order fault the continuation; the right ones then succeed."""
    pipeline = kit.pipeline([calls(READ_A, RUN_TESTS), text("done")])
    pending = await kit.ok(pipeline, INSTRUCTION)
    swapped = [{"ToolCallId": c, "ExecutionMs": 1, "ResultJson": "{}"} for c in ("c2", "c1")]
    report = await kit.run(pipeline, continuation(pending, *swapped))
    faulted(
        report,
        "client_tool_continuation_resolver",
        ErrorCode.TOOL_CALL_MANIFEST_INVALID,
        "AGN-036/5/order-match",
    )
    await kit.ok(pipeline, continuation(pending))


TOOL_CALL_IDS = "AGN-033/5.1/model-tool-call-ids"


@scenario
async def repeated_tool_call_id_in_one_reply(kit: Kit) -> None:
    """Two calls of one reply share an id: the turn faults before either runs."""
    replies: list[LLMReply] = [
        reply(("c1", "read_file", '{"path": "a.py"}'), ("c1", "run_tests", "{}")),
        LLMReply(text="never"),
    ]
    report = await kit.run(kit.pipeline(ScriptedLLM(replies)), INSTRUCTION)
    faulted(report, "llm_client", ErrorCode.PIPELINE_RULE_FAILED, TOOL_CALL_IDS)


@scenario
async def continuation_reply_reuses_an_answered_id(kit: Kit) -> None:
    """The continuation's reply reuses the id of the call it answers."""
    pipeline = kit.pipeline([calls(READ_A), calls(READ_A)])
    pending = await kit.ok(pipeline, INSTRUCTION)
    report = await kit.run(pipeline, continuation(pending))
    faulted(report, "llm_client", ErrorCode.PIPELINE_RULE_FAILED, TOOL_CALL_IDS)


# --- user content (DESIGN.md "Observability without leaks") -------------------------------------

CONTENT = {
    "instruction": "INSTRUCTION-7f3a",
    "model_text": "MODEL-TEXT-91bc",
    "argument": "ARG-PATH-55d2",
    "result": "RESULT-3c4e",
    "error_message": "ERRMSG-d00d",
    "reason": "REASON-a1b2",
    "server_result": "SERVER-RESULT-6e6e",
    "answer": "ANSWER-0f0f",
}
"""Distinctive user content of ``content_everywhere``: none of it may reach a trace
unless the host opts in to content capture."""


@scenario
async def content_everywhere(kit: Kit) -> None:
    """User content in every place a turn carries it: instruction, the model's text, a
    mode change's reason, tool arguments, client results and errors, a server result."""

    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return f'{{"note": "{CONTENT["server_result"]}"}}'

    argument = CONTENT["argument"]
    pipeline = kit.pipeline(
        [
            calls(
                change_mode("m1", "general", CONTENT["reason"]),
                call("s1", "review_checklist"),
                text=CONTENT["model_text"],
            ),
            calls(
                call("c1", "read_file", {"path": argument}),
                call("c2", "run_tests", {"pattern": argument}),
            ),
            text(CONTENT["answer"]),
        ],
        tools={"review_checklist": checklist},
    )
    pending = await kit.ok(pipeline, {"Instruction": CONTENT["instruction"]}, initial_mode="review")
    results = (
        {"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": f'"{CONTENT["result"]}"'},
        {"ToolCallId": "c2", "ExecutionMs": 1, "ErrorMessage": CONTENT["error_message"]},
    )
    await kit.ok(pipeline, continuation(pending, *results))
    assert outcomes(kit.reports[0])[:2] == [
        ("agent_change_mode", "mode_changed"),
        ("review_checklist", "executed"),
    ]
