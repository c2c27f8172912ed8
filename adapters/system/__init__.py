"""What the process gives a turn: the system clock and random ids (and their
deterministic stand-ins for tests and replays), and OpenTelemetry set up from the
``OTEL_*`` environment.

May import contracts, validators, steps and engine; never another room of adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .clocks import SteppingClock, SystemClock
    from .ids import RandomIds, SequentialIds
    from .tracing import TelemetrySetupError, configure_tracing

_EXPORTS: dict[str, str] = {
    "SteppingClock": "clocks",
    "SystemClock": "clocks",
    "RandomIds": "ids",
    "SequentialIds": "ids",
    "configure_tracing": "tracing",
    "TelemetrySetupError": "tracing",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "RandomIds",
    "SequentialIds",
    "SteppingClock",
    "SystemClock",
    "TelemetrySetupError",
    "configure_tracing",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
