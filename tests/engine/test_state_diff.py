"""State per step (issue 33 part 3): what each step changed in the turn's context.

A kept trace carries, beside the state trace, one change a step: the mode it set,
the tools it added or removed, the roles of the messages it added (their text only
under content capture) and the response kind it set. Noting them does not change
the state trace a recording replays against.
"""

from __future__ import annotations

import pytest
from engine_kit import CALLER, call, calls, continuation, make_pipeline, ok, text

from aptix_pipeline import PipelineOptions, Telemetry
from aptix_pipeline.adapters import MemoryStore
from aptix_pipeline.engine import StepChange, changes_from_json

SECRET = "the launch code is 0451"


async def _changes(store: MemoryStore) -> list[tuple[StepChange, ...]]:
    kept = await store.list_traces(CALLER.org, CALLER.user)
    return [changes_from_json(trace.steps) for trace in reversed(kept)]


@pytest.mark.decision("D658")
async def test_each_step_of_a_turn_keeps_what_it_changed() -> None:
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, [text("hi")])
    ok(await pipeline.execute({"Instruction": "hello"}, CALLER))

    (steps,) = await _changes(store)

    assert [s.step for s in steps][-2:] == ["response_builder", "complete"]
    assert steps[-1].to == "done"
    changed = {s.step: s.to_dict() for s in steps if s.changed}
    assert changed["agent_session_creator"]["mode"] == [None, "general"]
    assert changed["prompt_content_provider_initializer"]["messages_added"] == ["user"]
    assert "read_file" in changed["reasoner"]["tools_added"]
    assert changed["llm_client"]["messages_added"] == ["assistant"]
    assert changed["llm_client"]["response_type"] == "Final"
    assert list(changed) == [
        "agent_session_creator",
        "prompt_content_provider_initializer",
        "reasoner",
        "llm_client",
    ]
    assert all("texts" not in data for data in changed.values())  # no content by default


@pytest.mark.decision("D658")
async def test_a_continuation_adds_the_tool_results_and_the_answer() -> None:
    store = MemoryStore()
    pipeline, _ = make_pipeline(store, [calls(call("c1", "read_file", {"path": "a"})), text("ok")])
    first = ok(await pipeline.execute({"Instruction": "read a"}, CALLER))
    ok(
        await pipeline.execute(
            continuation(first, {"ToolCallId": "c1", "ExecutionMs": 1, "ResultJson": "1"}), CALLER
        )
    )

    initial, follow = await _changes(store)

    asked = next(s for s in initial if s.step == "llm_client")
    assert (asked.messages_added, asked.response_type) == (("assistant",), "ToolContinuation")
    added = [role for s in follow for role in s.messages_added]
    assert added == ["tool", "assistant"]
    answered = [s.response_type for s in follow if s.response_type]
    assert answered == ["Final"]


@pytest.mark.decision("D658")
async def test_message_text_is_kept_only_under_content_capture() -> None:
    plain, captured = MemoryStore(), MemoryStore()
    for store, telemetry in ((plain, Telemetry()), (captured, Telemetry(capture_content=True))):
        pipeline, _ = make_pipeline(store, [text(SECRET)], telemetry=telemetry)
        ok(await pipeline.execute({"Instruction": "tell me"}, CALLER))

    ((*_, quiet_answer, _, _),) = await _changes(plain)
    ((*_, told_answer, _, _),) = await _changes(captured)
    assert quiet_answer.texts is None
    assert told_answer.texts == (SECRET,)


@pytest.mark.decision("D658")
async def test_noting_changes_leaves_the_state_trace_as_it_was() -> None:
    off = PipelineOptions(keep_traces=False, retry_wait_seconds=0)
    reports = []
    for options in (None, off):
        pipeline, _ = make_pipeline(MemoryStore(), [text("hi")], options=options)
        reports.append(await pipeline.run({"Instruction": "hello"}, CALLER))

    assert reports[0].trace == reports[1].trace


@pytest.mark.decision("D658")
def test_changes_read_back_and_malformed_ones_are_refused() -> None:
    change = StepChange("llm_client", "llm_answered", ("a", "b"), ("x",), ("y",), ("tool",))
    assert StepChange.from_dict(change.to_dict()) == change
    with pytest.raises(ValueError, match="malformed step changes"):
        changes_from_json('{"step": 1}')
    with pytest.raises(ValueError, match="malformed step changes"):
        changes_from_json('[{"to": "done"}]')
