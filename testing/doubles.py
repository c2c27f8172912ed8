"""Deterministic stand-ins a host's tests run turns on: a scripted model, a stepping
clock and sequential ids (the adapters' own, re-exported for the kit's one door)."""

from __future__ import annotations

from aptix_pipeline.adapters import (
    ScriptedLLM,
    ScriptError,
    ScriptExhaustedError,
    SequentialIds,
    SteppingClock,
)

__all__ = ["ScriptError", "ScriptExhaustedError", "ScriptedLLM", "SequentialIds", "SteppingClock"]
