"""The scripted model's usage: a script may give cached and reasoning tokens (issue 31).

Left out, they stay unknown (``None``), as from a model that does not report them;
given, they are whole numbers of 0 or more, else the script is refused naming the
reply and the key. A streamed reply ends with the same usage.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aptix_pipeline import ReplyFinished, Usage
from aptix_pipeline.adapters.models.scripted import ScriptedLLM, ScriptError
from aptix_pipeline.contracts import ChatMessage, ChatRole, LLMRequest

REQUEST = LLMRequest(mode="general", messages=[ChatMessage(role=ChatRole.USER, content="hi")])


@pytest.mark.decision("D584")
@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {
                "input_tokens": 10,
                "output_tokens": 5,
                "cached_input_tokens": 4,
                "reasoning_tokens": 2,
            },
            Usage(
                input_tokens=10,
                output_tokens=5,
                total_tokens=15,
                cached_input_tokens=4,
                reasoning_tokens=2,
            ),
        ),
        (
            {"input_tokens": 10, "output_tokens": 5},
            Usage(input_tokens=10, output_tokens=5, total_tokens=15),
        ),
        (
            {"input_tokens": 10, "cached_input_tokens": 0},
            Usage(input_tokens=10, total_tokens=10, cached_input_tokens=0),
        ),
    ],
    ids=["both", "neither", "zero cached"],
)
async def test_a_scripts_usage_may_give_cached_and_reasoning_tokens(
    usage: dict[str, Any], expected: Usage
) -> None:
    script = json.dumps([{"text": "ok", "usage": usage}, {"text": "again", "usage": usage}])
    llm = ScriptedLLM.from_json(script)

    assert (await llm.complete(REQUEST)).usage == expected
    finished = [c async for c in llm.stream(REQUEST) if isinstance(c, ReplyFinished)]
    assert [f.usage for f in finished] == [expected]


@pytest.mark.decision("D584")
@pytest.mark.parametrize(
    ("usage", "problem"),
    [
        ({"cached_input_tokens": -1}, r"replies\[0\]\.usage\.cached_input_tokens must be"),
        ({"reasoning_tokens": "3"}, r"replies\[0\]\.usage\.reasoning_tokens must be"),
        ({"reasoning_tokens": True}, r"usage\.reasoning_tokens must be a whole number"),
        ({"cache_tokens": 3}, r"unknown keys \['cache_tokens'\]"),
    ],
    ids=["negative", "text", "bool", "misspelt"],
)
def test_a_malformed_usage_detail_is_refused_naming_it(usage: dict[str, Any], problem: str) -> None:
    with pytest.raises(ScriptError, match=problem):
        ScriptedLLM.from_json(json.dumps([{"text": "ok", "usage": usage}]))
