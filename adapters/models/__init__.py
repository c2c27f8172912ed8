"""The model ports: the scripted model that plays replies from a file, the
OpenAI-compatible client (the ``openai`` extra, imported only when used), and the
retry notices both front doors print or log.

May import contracts, validators, steps and engine; never another room of adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .openai_compatible import OpenAICompatibleLLM, StreamBrokenError
    from .retry_notices import log_retry_notices, stderr_retry_notices
    from .scripted import ScriptedLLM, ScriptError, ScriptExhaustedError
    from .turn_script import TurnScript, script_position, session_of

_EXPORTS: dict[str, str] = {
    "OpenAICompatibleLLM": "openai_compatible",
    "StreamBrokenError": "openai_compatible",
    "log_retry_notices": "retry_notices",
    "stderr_retry_notices": "retry_notices",
    "TurnScript": "turn_script",
    "script_position": "turn_script",
    "session_of": "turn_script",
    "ScriptedLLM": "scripted",
    "ScriptError": "scripted",
    "ScriptExhaustedError": "scripted",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "OpenAICompatibleLLM",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "StreamBrokenError",
    "TurnScript",
    "log_retry_notices",
    "script_position",
    "session_of",
    "stderr_retry_notices",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
