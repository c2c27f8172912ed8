"""Durable turns on Temporal (docs/DURABLE.md): the workflow that walks the machine,
the activities that run the ports, the workers and the host's ``DurablePipeline``.

Needs the ``temporal`` extra; nothing else in the package imports this room, so a
host that does not use Temporal never imports ``temporalio``. May import contracts,
steps, engine and the stores' room (``BufferedTransaction``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .activities import TurnActivities
    from .client import DurablePipeline, DurableProgress, DurableStream
    from .codec import BlobStore, ClaimCheckCodec, DirectoryBlobs
    from .payloads import TurnInput, TurnOutput
    from .worker import (
        DEFAULT_TASK_QUEUE,
        DurableWorker,
        connect,
        data_converter,
        replaying,
    )
    from .workflow import DurableSettings, TurnWorkflow

_EXPORTS: dict[str, str] = {
    "BlobStore": "codec",
    "ClaimCheckCodec": "codec",
    "DEFAULT_TASK_QUEUE": "worker",
    "DirectoryBlobs": "codec",
    "DurablePipeline": "client",
    "DurableProgress": "client",
    "DurableStream": "client",
    "DurableSettings": "workflow",
    "DurableWorker": "worker",
    "TurnActivities": "activities",
    "TurnInput": "payloads",
    "TurnOutput": "payloads",
    "TurnWorkflow": "workflow",
    "connect": "worker",
    "data_converter": "worker",
    "replaying": "worker",
}
"""Each name, and the module it comes from (imported on first use)."""

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "BlobStore",
    "ClaimCheckCodec",
    "DirectoryBlobs",
    "DurablePipeline",
    "DurableProgress",
    "DurableSettings",
    "DurableStream",
    "DurableWorker",
    "TurnActivities",
    "TurnInput",
    "TurnOutput",
    "TurnWorkflow",
    "connect",
    "data_converter",
    "replaying",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
