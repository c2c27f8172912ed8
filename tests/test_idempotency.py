"""Issue 13 item 4: identical continuations in flight at once share one model round."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from engine_kit import CALLER, OTHER_USER, continuation, make_pipeline, ok

from aptix_pipeline.adapters.scripted_llm import ScriptedLLM
from aptix_pipeline.contracts import LLMReply, LLMRequest
from aptix_pipeline.engine.idempotency import continuation_key

READ = {"tool_calls": [{"id": "call-1", "name": "read_file", "arguments": {"path": "a.py"}}]}


class GateLLM:
    """A scripted model that, once armed, holds every call until released; counts calls."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.inner = ScriptedLLM(replies)
        self.armed = False
        self.calls = 0
        self.gate = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        if self.armed:
            await self.gate.wait()
        return await self.inner.complete(request)


async def test_25_identical_concurrent_continuations_cost_one_model_round() -> None:
    from aptix_pipeline.adapters.memory_store import MemoryStore

    llm = GateLLM([READ] + [{"text": "done"}] * 30)
    pipeline, _ = make_pipeline(MemoryStore(), llm)
    pending = ok(await pipeline.execute({"Instruction": "Explain a.py."}, CALLER))
    assert llm.calls == 1
    llm.armed = True
    body = continuation(pending)
    # The same continuation, as dict and as JSON text with other key order and spacing.
    copies: list[Any] = [body if i % 2 else json.dumps(dict(reversed(body.items())), indent=i % 3)
                         for i in range(25)]  # fmt: skip
    tasks = [asyncio.ensure_future(pipeline.execute(c, CALLER)) for c in copies]
    for _ in range(5):
        await asyncio.sleep(0)
    llm.gate.set()
    results = await asyncio.gather(*tasks)

    assert llm.calls == 2  # the initial turn's round and one continuation round, not 25
    assert all(r.successful for r in results)
    assert len({r.to_json() for r in results}) == 1  # every copy got the same answer


def test_continuation_key_is_canonical_and_scoped() -> None:
    body = {
        "SessionId": "s",
        "TurnId": "t",
        "ToolResults": [{"ToolCallId": "c", "ResultJson": "1"}],
    }
    text = '{ "ToolResults":[{"ResultJson":"1","ToolCallId":"c"}], "TurnId":"t","SessionId":"s"}'
    assert continuation_key(body, "acme", "ana") == continuation_key(text, "acme", "ana")
    assert continuation_key(body, "acme", "ana") != continuation_key(body, *OTHER_USER_KEY)
    other = {**body, "ToolResults": [{"ToolCallId": "c", "ResultJson": "2"}]}
    assert continuation_key(other, "acme", "ana") != continuation_key(body, "acme", "ana")
    assert continuation_key({"Instruction": "hi"}, "acme", "ana") is None
    assert continuation_key("[" * 5000, "acme", "ana") is None


OTHER_USER_KEY = (OTHER_USER.org, OTHER_USER.user)


def test_continuation_key_parses_no_user_turn_text_and_nothing_past_the_wire_depth(
    monkeypatch: Any,
) -> None:
    """The key is computed before the turn's own checks: it must not parse a body the
    turn would refuse first (DESIGN/limits/json-depth), nor every user turn's body."""

    def no_parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the request text was parsed")

    monkeypatch.setattr("aptix_pipeline.engine.idempotency.json.loads", no_parse)
    assert continuation_key(b'{"Instruction": "hi"}', "acme", "ana") is None
    assert continuation_key('{"Instruction": "hi"}', "acme", "ana") is None
    nested = "[" * 100 + "]" * 100
    deep = f'{{"SessionId":"s","TurnId":"t","ToolResults":[{{"ResultJson":"1","X":{nested}}}]}}'
    assert continuation_key(deep, "acme", "ana", max_depth=64) is None
    deep_body = {
        "SessionId": "s",
        "TurnId": "t",
        "ToolResults": [{"ResultJson": "1", "X": _nested_list(100)}],
    }
    assert continuation_key(deep_body, "acme", "ana", max_depth=64) is None


def _nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value
