"""Interceptors: code composed around every turn a ``Pipeline`` runs.

An interceptor sees each turn as a ``TurnCall`` (the request, the caller, the
ports and options the pipeline was built with) and a ``Proceed`` that runs it.
It may run the turn on other ports (wrapping the pipeline's own, as a recorder
taps them), add listeners for this turn only, and look at or add to the
``TurnReport`` that comes back. ``Pipeline(ports, interceptors=[...])`` composes
them: the first one given is the outermost.

This is how recording stays out of the pipeline (STYLE.md "Cross-cutting work
listens; it is not wired in"): ``engine/replay/recorder.py``'s ``Recorder`` is an
interceptor, configured where the pipeline is assembled (``embedded_pipeline``,
the CLI, the HTTP app), and ``Pipeline`` knows nothing of recordings.

A call answered without a turn (a stored answer to a retry, a malformed
idempotency key; ``engine/idempotency.py``) runs no interceptor: nothing ran.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aptix_pipeline.contracts import Caller
from aptix_pipeline.steps import PipelineOptions, Ports

from .events import Listener
from .report import RequestInput, TurnReport
from .telemetry import Telemetry

__all__ = ["Proceed", "TurnCall", "TurnInterceptor"]


@dataclass(frozen=True, slots=True)
class TurnCall:
    """One turn as an interceptor sees it, before it runs.

    ``request`` and ``caller`` are as the host gave them (``caller`` normalized to a
    ``Caller``); ``ports`` are those a turn runs on — the host's, its server tools
    through the store's tool ledger and wrapped by its ``Hooks`` when it has any
    (``Pipeline.turn_ports``), not yet guarded;
    ``options`` are the pipeline's; ``telemetry`` is the pipeline's, with
    ``capture_content`` resolved.
    """

    request: RequestInput
    caller: Caller
    initial_mode: str | None
    idempotency_key: str | None
    ports: Ports
    options: PipelineOptions
    telemetry: Telemetry


class Proceed(Protocol):
    """Runs the turn (or the next interceptor); each turn is run at most once.

    ``ports`` replace the pipeline's for this turn (the engine still guards them,
    ``engine/guarded_ports.py``); ``listeners`` hear this turn's events after the
    trace's and the spans', before the pipeline's own listeners.
    """

    def __call__(
        self, *, ports: Ports | None = None, listeners: Sequence[Listener] = ()
    ) -> Awaitable[TurnReport]: ...


class TurnInterceptor(Protocol):
    """Wraps every turn of a pipeline; see the module docstring.

    ``intercept`` must return a report: the one ``proceed`` returned, or one made
    from it (``dataclasses.replace``). An exception it raises is not caught: like a
    step override, an interceptor is the host's code, trusted to keep
    ``Pipeline.execute``'s promise never to raise for bad input.
    """

    async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
        """Run the turn through ``proceed`` and return its report."""
        ...
