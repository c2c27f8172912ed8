"""Usage details and the output cap against a real ``llama-server`` (e2e, issue 31).

llama.cpp's server reports the prompt tokens it read from its prompt cache
(``usage.prompt_tokens_details.cached_tokens``), streamed or not, and no reasoning
tokens (this model does not reason); it honours ``max_completion_tokens``, which the
adapter sends for ``LLMRequest.max_output_tokens``. Marked ``e2e``: ``make e2e`` runs
them (D510).
"""

from __future__ import annotations

import pytest
from llama_server import LlamaServer, llama_server
from openai_kit import ask

from aptix_pipeline import OpenAICompatibleLLM, ReplyFinished, Usage

pytestmark = pytest.mark.e2e

__all__ = ["llama_server"]  # the fixture, used by name

PROMPT = "Name three colours."


def local(server: LlamaServer) -> OpenAICompatibleLLM:
    """The adapter on ``server``, at temperature 0 and with a seed; no cap of its own."""
    return OpenAICompatibleLLM(
        model="local",
        base_url=server.base_url,
        temperature=0,
        extra_body={"seed": 7},
        max_attempts=1,
    )


def cache_hit(usage: Usage | None) -> None:
    """The second ask of a prompt read all of it but its last token from the cache."""
    assert usage is not None
    assert usage.cached_input_tokens is not None
    assert 0 < usage.cached_input_tokens < usage.input_tokens
    assert usage.reasoning_tokens is None  # not reported: unknown, not 0


@pytest.mark.decision("D583")
async def test_a_prompt_asked_again_reports_its_cached_input_tokens(
    llama_server: LlamaServer,
) -> None:
    async with local(llama_server) as llm:
        await llm.complete(ask(PROMPT, max_output_tokens=4))
        again = await llm.complete(ask(PROMPT, max_output_tokens=4))

    cache_hit(again.usage)


@pytest.mark.decision("D583")
async def test_a_streamed_reply_reports_its_cached_input_tokens_in_its_usage_chunk(
    llama_server: LlamaServer,
) -> None:
    async with local(llama_server) as llm:
        await llm.complete(ask(PROMPT, max_output_tokens=4))
        chunks = [c async for c in llm.stream(ask(PROMPT, max_output_tokens=4))]

    finished = chunks[-1]
    assert isinstance(finished, ReplyFinished)
    cache_hit(finished.usage)


@pytest.mark.decision("D583")
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_the_output_cap_stops_the_reply(llama_server: LlamaServer, streamed: bool) -> None:
    request = ask("Tell me a long story about a dog.", max_output_tokens=3)
    async with local(llama_server) as llm:
        if streamed:
            chunks = [c async for c in llm.stream(request)]
            finished = chunks[-1]
            assert isinstance(finished, ReplyFinished)
            usage, reason = finished.usage, finished.finish_reason
        else:
            reply = await llm.complete(request)
            usage, reason = reply.usage, reply.finish_reason

    assert usage is not None
    assert usage.output_tokens == 3
    assert reason == "length"
