"""A server tool that asks the client first (``ToolPause``, docs/MCP.md "Elicitation"):
the turn awaits a client call under the paused call's id, and the continuation's answer
runs the tool again; the model sees only the tool's final result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, continuation, ok, start, text

from aptix_pipeline import embedded_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.contracts import ToolInvocation, ToolPause


class AsksTwice:
    """``Add`` that asks the client to confirm each operand before answering."""

    def __init__(self) -> None:
        self.answers: list[str | None] = []

    async def __call__(self, arguments: dict[str, Any], invocation: ToolInvocation) -> Any:
        self.answers.append(invocation.client_answer)
        if len(self.answers) < 3:
            asked = {"confirm": ["a", "b"][len(self.answers) - 1]}
            return ToolPause(name="confirm", arguments_json=json.dumps(asked))
        return json.dumps({"result": arguments["a"] + arguments["b"]})


def _answer(response: Any, value: str) -> dict[str, Any]:
    [pending] = response.tool_calls
    return continuation(
        response, {"ToolCallId": pending.tool_call_id, "ExecutionMs": 1, "ResultJson": value}
    )


@pytest.mark.decision("D501")
async def test_a_paused_server_tool_resumes_with_each_answer_then_the_model_goes_on() -> None:
    tool = AsksTwice()
    llm = ScriptedLLM(
        [calls(call("m", "Math")), calls(call("add1", "Add", {"a": 2, "b": 3})), text("five")]
    )
    pipeline = embedded_pipeline(llm=llm, demo_tools=True, tools={"Add": tool})

    _, first = await start(pipeline, "add")
    [asked] = first.tool_calls or []
    assert (asked.tool_call_id, asked.name, asked.arguments_json) == (
        "add1",
        "confirm",
        '{"confirm": "a"}',
    )
    second = ok((await pipeline.run(_answer(first, '"yes a"'), CALLER)).result)
    assert [(c.tool_call_id, c.arguments_json) for c in second.tool_calls or []] == [
        ("add1#2", '{"confirm": "b"}')
    ]
    assert len(llm.requests) == 2  # paused again: the model was not asked
    final = ok((await pipeline.run(_answer(second, '"yes b"'), CALLER)).result)

    assert final.primary_output_text == "five"
    assert tool.answers == [None, '"yes a"', '"yes b"']
    [result] = final.tool_results or []
    assert (result.tool_call_id, result.result_json) == ("add1", '{"result": 5}')
    tool_messages = [m for m in llm.requests[-1].messages if m.role.value == "tool"]
    assert [(m.tool_call_id, m.name, m.content) for m in tool_messages][1:] == [
        ("add1", "Add", '{"result": 5}')
    ]
