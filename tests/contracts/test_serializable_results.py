"""Every InvokeResult serializes, whatever the input (D141, D47).

The wire parsers answer arbitrary data and text with a result that has a UTF-8
form; so does a turn whose model port fails with, or whose model names a tool
with, text holding a lone surrogate. Turns run on the memory store and on a
SQLite file.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, make_pipeline, ok, scripted, text, tool_messages
from hypothesis import given, settings
from hypothesis import strategies as st

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import ErrorCode, LLMReply, LLMRequest
from aptix_pipeline.validators import parse_request, parse_response

Store = MemoryStore | SQLiteStore

_text = st.text(alphabet=st.characters(codec=None), max_size=12) | st.sampled_from(
    ["\ud800", "\udfff", "Instruction", "ArtifactEncoding", "ToolResults", "ResponseType"]
)
_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=30,
)


@pytest.mark.decision("D141")
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_text, _values, max_size=6) | _values)
def test_parse_results_always_serialize(data: Any) -> None:
    parse_request(data).to_json().encode("utf-8")
    parse_response(data).to_json().encode("utf-8")


@pytest.mark.decision("D141")
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | _text)
def test_parse_results_of_any_text_serialize(data: bytes | str) -> None:
    parse_request(data).to_json().encode("utf-8")


# --- turns whose ports and model hand back text with no UTF-8 form ---------------------


class SurrogateLLM:
    """A model port whose failure message holds a lone surrogate."""

    async def complete(self, request: LLMRequest) -> LLMReply:
        raise RuntimeError("model down \ud800")


@pytest.mark.decision("D47")
async def test_a_port_error_with_a_lone_surrogate_still_serializes(store: Store) -> None:
    pipeline, _ = make_pipeline(store, SurrogateLLM())

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    [error] = report.result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert "model down \\ud800" in error.message
    assert json.loads(report.result.to_json())["Successful"] is False
    assert json.dumps(report.to_dict())


@pytest.mark.decision("D47")
async def test_a_tool_name_with_a_lone_surrogate_is_refused_to_the_model(store: Store) -> None:
    pipeline, llm = make_pipeline(store, [calls(call("a", "x\ud800")), text("ok")])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert ok(report.result).primary_output_text == "ok"
    [answer] = tool_messages(scripted(llm).requests[1], "a")
    assert json.loads(answer.content)["error_type"] == "validation_error"
    assert report.tool_calls[0].rule_id == "CPV/tool-known"
