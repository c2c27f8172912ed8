"""AGN-036 §2: the validator is stateless and non-mutating — a property test.

Hypothesis draws a context from any step of any path, breaks any subset of its
parts, and runs every entry point on it: none may change the context (or the
snapshot passed as ``before``), none may raise, and the same input always gives
the same answer.
"""

from __future__ import annotations

from collections.abc import Callable

from builders import PATHS, context_after, context_before
from hypothesis import given
from hypothesis import strategies as st

from aptix_pipeline.contracts import ContextType, PipelineContext, PipelineStep, ResponseType
from aptix_pipeline.validators import (
    validate_core,
    validate_post_step,
    validate_pre_step,
    validate_tool_call_manifest,
)

Breaker = Callable[[PipelineContext], None]


def _clear(name: str) -> Breaker:
    return lambda ctx: setattr(ctx, name, None)


def _swap_results(ctx: PipelineContext) -> None:
    if ctx.tool_call_manifest is not None:
        ctx.tool_call_manifest.tool_call_results.reverse()


def _blank_ids(ctx: PipelineContext) -> None:
    ctx.envelope.session_id = ""
    ctx.envelope.turn_id = None


BREAKERS: list[Breaker] = [
    _clear("session"), _clear("turn"), _clear("agent_context"), _clear("conversation_context"),
    _clear("tool_call_manifest"), _clear("response_payload"), _clear("response"),
    _clear("time_stamp"), _clear("response_type"), _swap_results, _blank_ids,
    lambda ctx: setattr(ctx, "correlation_id", ""),
    lambda ctx: setattr(ctx, "prompt_provider_ready", not ctx.prompt_provider_ready),
    lambda ctx: setattr(ctx, "response_type", ResponseType.TOOL_CONTINUATION),
    lambda ctx: setattr(ctx, "type", "Bogus"),
]  # fmt: skip

STEP_ON_PATH = st.sampled_from([(kind, step) for kind, path in PATHS.items() for step in path])


@given(
    where=STEP_ON_PATH,
    after=st.booleans(),
    breakers=st.lists(st.sampled_from(BREAKERS), max_size=4),
    checked=st.sampled_from(list(PipelineStep)),
)
def test_validators_never_mutate_the_context(
    where: tuple[ContextType, PipelineStep],
    after: bool,
    breakers: list[Breaker],
    checked: PipelineStep,
) -> None:
    kind, step = where
    ctx = (context_after if after else context_before)(step, kind)
    for breaker in breakers:
        breaker(ctx)
    before = context_before(step, kind)
    ctx_copy, before_copy = ctx.model_copy(deep=True), before.model_copy(deep=True)

    answers = [
        validate_core(ctx),
        validate_pre_step(ctx, checked),
        validate_post_step(ctx, checked, before=before),
    ]
    if ctx.tool_call_manifest is not None:
        answers.append(validate_tool_call_manifest(ctx.tool_call_manifest))

    assert ctx == ctx_copy
    assert before == before_copy
    again = [
        validate_core(ctx),
        validate_pre_step(ctx, checked),
        validate_post_step(ctx, checked, before=before),
    ]
    assert answers[:3] == again
    for answer in answers:
        assert answer.successful == (not answer.errors)
        assert all(error.rule_id for error in answer.errors)
