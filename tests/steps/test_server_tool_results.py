"""What a server tool's answer becomes in a turn: RFC 8259 JSON and UTF-8 text.

Text that is strict JSON is passed on as it is; text that is not (``NaN``,
``Infinity``) is passed on as a JSON string; a Python value that cannot be strict
JSON makes the call a failed one (D40). A lone surrogate in a tool's text, result
or exception is escaped, so the result still serializes (D47). The model sees
what the response's ``ToolResults`` carry. Every scenario runs on the memory store
and on a SQLite file.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine_kit import (
    CALLER,
    call,
    calls,
    make_pipeline,
    ok,
    scripted,
    start,
    text,
    tool_messages,
)

from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import ResponseKind, ToolInvocation
from aptix_pipeline.engine import Pipeline
from aptix_pipeline.validators.json_text import strict_json_loads

Store = MemoryStore | SQLiteStore


def checklist_turn(store: Store, executor: Any, answer: str) -> tuple[Pipeline, ScriptedLLM | None]:
    """A pipeline whose model calls ``review_checklist`` (run by ``executor``), then answers."""
    return make_pipeline(
        store,
        [calls(call("k1", "review_checklist")), text(answer)],
        tools={"review_checklist": executor},
    )


@pytest.mark.decision("D40")
@pytest.mark.parametrize("answer", ["Infinity", '{"x": NaN}', "-Infinity", "[1, NaN]"])
async def test_server_tool_text_that_is_not_strict_json_is_quoted(
    store: Store, answer: str
) -> None:
    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return answer

    pipeline, llm = checklist_turn(store, checklist, "checked")

    report, response = await start(pipeline, initial_mode="review")

    [message] = tool_messages(scripted(llm).requests[1], "k1")
    assert message.content == json.dumps(answer)
    assert strict_json_loads(message.content) == answer
    assert response.kind is ResponseKind.FINAL
    [result] = response.tool_results or []
    assert result.tool_call_id == "k1"
    assert result.error_message is None
    assert result.result_json is not None
    assert strict_json_loads(result.result_json) == answer
    assert [(c.name, c.outcome) for c in report.tool_calls] == [("review_checklist", "executed")]


@pytest.mark.decision("D40")
async def test_server_tool_text_that_is_strict_json_is_kept_as_is(store: Store) -> None:
    answer = '{"x":  1.5, "y": [true, null]}'

    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return answer

    pipeline, llm = checklist_turn(store, checklist, "checked")

    _, response = await start(pipeline, initial_mode="review")

    assert [m.content for m in tool_messages(scripted(llm).requests[1], "k1")] == [answer]
    assert [r.result_json for r in response.tool_results or []] == [answer]


@pytest.mark.decision("D40")
@pytest.mark.parametrize(
    "value",
    [{"x": float("inf")}, {"x": float("nan")}, [float("-inf")]],
    ids=["inf", "nan", "minus-inf-in-list"],
)
async def test_server_tool_value_that_cannot_be_strict_json_is_a_tool_failure(
    store: Store, value: object
) -> None:
    async def checklist(arguments: dict[str, Any], invocation: ToolInvocation) -> Any:
        return value

    pipeline, llm = checklist_turn(store, checklist, "it failed")

    report, response = await start(pipeline, initial_mode="review")

    assert response.kind is ResponseKind.FINAL
    assert response.primary_output_text == "it failed"
    [result] = response.tool_results or []
    assert result.tool_call_id == "k1"
    assert result.result_json is None
    assert result.error_message
    [message] = tool_messages(scripted(llm).requests[1], "k1")
    assert set(strict_json_loads(message.content)) == {"error"}
    assert [(c.name, c.outcome) for c in report.tool_calls] == [("review_checklist", "failed")]


@pytest.mark.decision("D40")
async def test_adding_two_huge_numbers_gives_strict_json_not_infinity(store: Store) -> None:
    pipeline, llm = make_pipeline(
        store,
        [
            calls(call("x1", "Math")),
            calls(call("a1", "Add", {"a": 1e308, "b": 1e308})),
            text("too big"),
        ],
    )

    _, response = await start(pipeline)

    assert response.primary_output_text == "too big"
    [message] = tool_messages(scripted(llm).requests[2], "a1")
    strict_json_loads(message.content)
    added = [r for r in response.tool_results or [] if r.tool_call_id == "a1"]
    assert len(added) == 1
    assert added[0].result_json is not None
    assert "Infinity" in strict_json_loads(added[0].result_json)  # the executor's text, quoted


@pytest.mark.decision("D47")
async def test_server_tool_text_with_a_lone_surrogate_is_escaped(store: Store) -> None:
    async def broken(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        raise ValueError("bad \udcff")

    pipeline, _ = checklist_turn(store, broken, "done")

    report = await pipeline.run({"Instruction": "hello"}, CALLER, initial_mode="review")

    final = ok(report.result)
    [result] = final.tool_results or []
    assert result.error_message == "ValueError: bad \\udcff"
    assert json.loads(report.result.to_json())["Successful"] is True


@pytest.mark.decision("D47")
async def test_server_tool_json_with_a_lone_surrogate_is_escaped(store: Store) -> None:
    async def odd(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return '{"text": "\ud800"}'

    pipeline, _ = checklist_turn(store, odd, "done")

    report = await pipeline.run({"Instruction": "hello"}, CALLER, initial_mode="review")

    [result] = ok(report.result).tool_results or []
    assert result.result_json == '{"text": "\\ud800"}'
