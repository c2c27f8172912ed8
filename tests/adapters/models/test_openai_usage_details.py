"""OpenAICompatibleLLM's usage details and output cap, over a real loopback HTTP server.

Cached input tokens (``usage.prompt_tokens_details.cached_tokens``) and reasoning
tokens (``usage.completion_tokens_details.reasoning_tokens``) reach ``Usage`` whether
the reply is streamed (the ``include_usage`` chunk) or not; a server that leaves them
out leaves them unknown, and one that sends something else than a count is refused
(issue 31). ``LLMRequest.max_output_tokens`` goes out as ``max_completion_tokens``.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_kit import adapter, ask

from aptix_pipeline import OpenAICompatibleLLM, PermanentPortError, ReplyFinished, Usage
from aptix_pipeline.contracts import LLMRequest
from aptix_pipeline.testing import fake_openai_server


async def usage_of(llm: OpenAICompatibleLLM, streamed: bool, request: LLMRequest) -> Usage | None:
    """The usage of one reply, asked for with ``complete`` or with ``stream``."""
    if not streamed:
        return (await llm.complete(request)).usage
    finished = [c async for c in llm.stream(request) if isinstance(c, ReplyFinished)]
    assert len(finished) == 1
    return finished[0].usage


BOTH = pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])


@pytest.mark.decision("D583")
@BOTH
@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {
                "prompt_tokens": 40,
                "completion_tokens": 30,
                "prompt_tokens_details": {"cached_tokens": 32},
                "completion_tokens_details": {"reasoning_tokens": 24},
            },
            Usage(
                input_tokens=40,
                output_tokens=30,
                total_tokens=70,
                cached_input_tokens=32,
                reasoning_tokens=24,
            ),
        ),
        (
            {"prompt_tokens": 40, "completion_tokens": 30},
            Usage(input_tokens=40, output_tokens=30, total_tokens=70),
        ),
        (
            {
                "prompt_tokens": 40,
                "completion_tokens": 30,
                "prompt_tokens_details": {"audio_tokens": 0},
                "completion_tokens_details": None,
            },
            Usage(input_tokens=40, output_tokens=30, total_tokens=70),
        ),
        (
            {
                "prompt_tokens": 40,
                "completion_tokens": 30,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
            Usage(input_tokens=40, output_tokens=30, total_tokens=70, cached_input_tokens=0),
        ),
    ],
    ids=["both details", "no details", "details without the counts", "zero cached is zero"],
)
async def test_cached_and_reasoning_tokens_are_read_when_reported_and_unknown_when_not(
    streamed: bool, usage: dict[str, Any], expected: Usage
) -> None:
    with fake_openai_server([{"text": "Hello.", "usage": usage}]) as server:
        async with adapter(server) as llm:
            got = await usage_of(llm, streamed, ask())

    assert got == expected  # a count left out is None (unknown), never 0


@pytest.mark.decision("D583")
@BOTH
async def test_a_reply_without_usage_is_unreported_never_zero(streamed: bool) -> None:
    with fake_openai_server([{"text": "No usage."}]) as server:
        async with adapter(server) as llm:
            assert await usage_of(llm, streamed, ask()) is None


@pytest.mark.decision("D583")
@BOTH
@pytest.mark.parametrize(
    ("details", "problem"),
    [
        ({"prompt_tokens_details": {"cached_tokens": -3}}, r"prompt_tokens_details\.cached_tokens"),
        ({"prompt_tokens_details": {"cached_tokens": "many"}}, r"cached_tokens is 'many'"),
        (
            {"completion_tokens_details": {"reasoning_tokens": 1.5}},
            r"completion_tokens_details\.reasoning_tokens is 1\.5",
        ),
        ({"completion_tokens_details": 7}, r"usage\.completion_tokens_details is int"),
    ],
    ids=["negative cached", "cached as text", "fractional reasoning", "details not an object"],
)
async def test_a_malformed_usage_detail_is_refused_naming_it(
    streamed: bool, details: dict[str, Any], problem: str
) -> None:
    usage = {"prompt_tokens": 4, "completion_tokens": 2, **details}
    with fake_openai_server([{"text": "Hi.", "usage": usage}, {"text": "never"}]) as server:
        async with adapter(server) as llm:
            with pytest.raises(PermanentPortError, match=problem):
                await usage_of(llm, streamed, ask())
    assert len(server.completions()) == 1  # a malformed reply is not retried


@pytest.mark.decision("D583")
@BOTH
async def test_the_output_cap_is_sent_as_max_completion_tokens(streamed: bool) -> None:
    with fake_openai_server([{"text": "a"}, {"text": "b"}]) as server:
        async with adapter(server) as llm:
            await usage_of(llm, streamed, ask(max_output_tokens=77))
            await usage_of(llm, streamed, ask())

    capped, uncapped = server.completions()
    assert capped.body["max_completion_tokens"] == 77
    assert "max_tokens" not in capped.body
    assert "max_completion_tokens" not in uncapped.body  # no cap: none is sent
