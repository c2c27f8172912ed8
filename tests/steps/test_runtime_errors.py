"""Errors of the runtime hosting the engine pass every boundary (``propagate_also``, D531)."""

from __future__ import annotations

import pytest
from engine_kit import CALLER, make_pipeline, text

from aptix_pipeline import MemoryStore, PipelineStep, TurnScope
from aptix_pipeline.steps import propagate_also, runtime_error_in


class HostRuntimeError(Exception):
    """Stands for a runtime's control error (Temporal's nondeterminism, say)."""


class UnregisteredError(Exception):
    pass


propagate_also(HostRuntimeError)


@pytest.mark.decision("D531")
def test_runtime_error_in_finds_a_registered_error_through_causes_and_contexts() -> None:
    inner = HostRuntimeError("sandbox refused")
    wrapped = ValueError("wrapped")
    wrapped.__cause__ = inner
    assert runtime_error_in(wrapped) is inner
    during = KeyError("while handling")
    during.__context__ = wrapped
    assert runtime_error_in(during) is inner
    during.__suppress_context__ = True  # `raise ... from None`
    assert runtime_error_in(during) is None
    assert runtime_error_in(UnregisteredError("other")) is None


@pytest.mark.decision("D531")
def test_propagate_also_refuses_what_is_not_an_exception_class() -> None:
    with pytest.raises(TypeError, match="not an exception class"):
        propagate_also("HostRuntimeError")  # type: ignore[arg-type]


@pytest.mark.decision("D531")
async def test_a_registered_error_leaves_the_turn_instead_of_faulting_it() -> None:
    async def refused(scope: TurnScope) -> None:
        try:
            raise HostRuntimeError("the runtime refused")
        except HostRuntimeError as error:
            raise RuntimeError("a step wrapped it") from error

    pipeline, _ = make_pipeline(
        MemoryStore(), [text("hi")], steps={PipelineStep.RESPONSE_BUILDER: refused}
    )
    with pytest.raises(HostRuntimeError, match="the runtime refused"):
        await pipeline.run({"Instruction": "hi"}, CALLER)


@pytest.mark.decision("D531")
async def test_an_unregistered_error_still_faults_the_turn_as_internal() -> None:
    async def broken(scope: TurnScope) -> None:
        raise UnregisteredError("a bug")

    store = MemoryStore()
    pipeline, _ = make_pipeline(store, [text("hi")], steps={PipelineStep.RESPONSE_BUILDER: broken})
    report = await pipeline.run({"Instruction": "hi"}, CALLER)
    assert not report.successful
    assert str(report.result.errors[0].code) == "internal"
