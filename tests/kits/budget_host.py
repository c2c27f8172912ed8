"""A host extension whose hook answers in the model's place, reporting a known usage.

``aptix serve --config`` with ``[host] extension = "budget_host:EXTENSION"`` (this
file copied beside the configuration) runs every turn without a model: the
``before_model_request`` hook answers after ``APTIX_TEST_MODEL_DELAY`` seconds
(so concurrent turns overlap), reporting as input tokens the engine's own estimate
of the prompt times ``APTIX_TEST_USAGE_FACTOR`` (1: exact) and as output tokens the
request's output cap. With a factor of 1 the reservation equals what the call
takes, so budgets can never be overspent.
"""

from __future__ import annotations

import asyncio
import os

from aptix_pipeline import (
    Hooks,
    HostExtension,
    LLMReply,
    LLMRequest,
    Usage,
    estimate_prompt_tokens,
)

__all__ = ["EXTENSION"]


async def _answer(request: LLMRequest) -> LLMReply:
    await asyncio.sleep(float(os.environ.get("APTIX_TEST_MODEL_DELAY", "0.02")))
    factor = int(os.environ.get("APTIX_TEST_USAGE_FACTOR", "1"))
    prompt = estimate_prompt_tokens(request) * factor
    output = request.max_output_tokens or 0
    return LLMReply(
        text="Done.",
        usage=Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output),
    )


EXTENSION = HostExtension(hooks=Hooks(before_model_request=_answer))
