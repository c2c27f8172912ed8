"""``Pipeline(replaying=...)``: a replayed part of a turn keeps its side channels quiet
(D532), and ``TurnReport.from_dict`` reads back what ``to_dict(content=True)`` wrote."""

from __future__ import annotations

import pytest
from engine_kit import CALLER, SUPPORT_CATALOG, call, calls, make_pipeline, text
from span_kit import Recorded

from aptix_pipeline import MemoryStore, TurnEvent, TurnReport
from aptix_pipeline.engine import WhileReplayingQuiet

LOOKUP = [calls(call("s1", "lookup", {"id": "T-1"})), text("open")]


async def lookup(arguments: dict[str, object], invocation: object) -> str:
    return '{"status": "open"}'


@pytest.mark.decision("D532")
async def test_listeners_are_deaf_while_replaying_and_the_trace_is_whole() -> None:
    replaying = True
    heard: list[str] = []
    heard_later: list[str] = []

    def listener(event: TurnEvent) -> None:
        heard.append(type(event).__name__)

    async def async_listener(event: TurnEvent) -> None:
        heard_later.append(type(event).__name__)

    quiet, _ = make_pipeline(MemoryStore(), [text("hi")], listeners=[listener, async_listener])
    from aptix_pipeline import Pipeline

    pipeline = Pipeline(
        quiet.ports,
        quiet.options,
        listeners=[listener, async_listener],
        replaying=lambda: replaying,
    )
    report = await pipeline.run({"Instruction": "hi"}, CALLER)
    assert report.successful
    assert heard == []
    assert heard_later == []
    assert report.trace is not None
    assert report.trace.states[-1] == "done"
    replaying = False
    pipeline2, _ = make_pipeline(MemoryStore(), [text("hi")])
    live = Pipeline(
        pipeline2.ports, pipeline2.options, listeners=[listener], replaying=lambda: replaying
    )
    await live.run({"Instruction": "hi"}, CALLER)
    assert heard[0] == "TurnStarted"
    assert heard[-1] == "TurnFinished"


@pytest.mark.decision("D532")
async def test_spans_started_while_replaying_are_resumed_when_the_live_part_needs_them() -> None:
    """The first half of a turn replays (nothing exported); the live half hangs under a
    resumed root; nothing is exported twice."""
    recorded = Recorded()
    base, _ = make_pipeline(MemoryStore(), LOOKUP, config=SUPPORT_CATALOG, tools={"lookup": lookup})
    state = {"replaying": True}
    from aptix_pipeline import Pipeline, Ports

    class Flip:
        """A tool that marks the end of the replay: from its call on, the turn is live."""

        async def __call__(self, arguments: dict[str, object], invocation: object) -> str:
            state["replaying"] = False
            return '{"status": "open"}'

    ports: Ports = base.ports
    from dataclasses import replace

    pipeline = Pipeline(
        replace(ports, tools={"lookup": Flip()}),
        base.options,
        telemetry=recorded.telemetry(),
        replaying=lambda: state["replaying"],
    )
    report = await pipeline.run({"Instruction": "hi"}, CALLER)
    assert report.successful
    names = [span.name for span in recorded.spans]
    assert names.count("invoke_agent Support") == 1
    # Exactly the spans that ended once the turn was live, in the order they ended:
    # the tail of the same turn's spans in process, from the tool call on.
    local = Recorded()
    fresh, _ = make_pipeline(
        MemoryStore(), LOOKUP, config=SUPPORT_CATALOG, tools={"lookup": lookup}
    )
    local_pipeline = Pipeline(fresh.ports, fresh.options, telemetry=local.telemetry())
    await local_pipeline.run({"Instruction": "hi"}, CALLER)
    local_names = [span.name for span in local.spans]
    assert names == local_names[local_names.index("execute_tool lookup") :]
    root = next(span for span in recorded.spans if span.name.startswith("invoke_agent"))
    assert root.attributes is not None
    assert root.attributes.get("aptix.durable.resumed") is True
    # No replayed span that ended during the replay was exported.
    assert "step request_handler" not in names
    ids = {span.context.span_id for span in recorded.spans}
    assert all(span.parent is None or span.parent.span_id in ids for span in recorded.spans)


@pytest.mark.decision("D532")
def test_while_replaying_quiet_gives_a_span_that_records_nothing() -> None:
    recorded = Recorded()
    tracer = WhileReplayingQuiet(recorded.provider.get_tracer("t"), lambda: True)
    span = tracer.start_span("quiet")
    assert not span.is_recording()
    span.end()
    assert recorded.spans == ()


@pytest.mark.decision("D539")
async def test_a_report_reads_back_from_its_dict() -> None:
    pipeline, _ = make_pipeline(
        MemoryStore(), LOOKUP, config=SUPPORT_CATALOG, tools={"lookup": lookup}
    )
    report = await pipeline.run({"Instruction": "hi"}, CALLER)
    again = TurnReport.from_dict(report.to_dict(content=True))
    assert again.result == report.result
    assert again.states == report.states
    assert again.transitions == report.transitions
    assert again.checks == report.checks
    assert again.tool_calls == report.tool_calls
    assert again.trace == report.trace
    assert (again.session_id, again.turn_id, again.llm_calls) == (
        report.session_id,
        report.turn_id,
        report.llm_calls,
    )
    with pytest.raises(ValueError, match="not a turn report"):
        TurnReport.from_dict({"states": []})
