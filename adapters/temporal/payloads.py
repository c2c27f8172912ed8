"""What crosses Temporal's wire for a durable turn: the workflow's input and output, and
the envelopes of the activities whose answers are unions or carry who ran them.

Every payload is a pydantic model or a dataclass of them, turned into JSON by
temporalio's pydantic data converter (``temporalio.contrib.pydantic``); large
payloads (a request's images, a tool's files) leave the history through the
claim-check codec (``codec.py``), so none reaches Temporal's 2 MB cap.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aptix_pipeline.contracts import ToolFile, ToolOutput, ToolPause

__all__ = [
    "ApplyAnswer",
    "FileWithBytes",
    "ModelAnswer",
    "ToolAnswer",
    "TurnInput",
    "TurnOutput",
]


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TurnInput(_Payload):
    """One turn to run: the request as the host gave it and who asks.

    ``request`` is the raw request (a JSON object, or JSON text): the workflow
    validates it exactly as ``Pipeline.run`` does (AGN-036 §4), so a bad request is
    an unsuccessful result, never a failed workflow.
    """

    request: Any
    org: str
    user: str
    initial_mode: str | None = None
    idempotency_key: str | None = None
    progress: bool = False
    """Whether the workflow keeps its progress events for a query (``DurablePipeline.stream``)."""


class TurnOutput(_Payload):
    """What a durable turn answers: ``TurnReport.to_dict(content=True)``, the workers
    whose activities ran it, and whether its answer came from a stored one."""

    report: dict[str, Any]
    workers: list[str] = Field(default_factory=list)
    workflow_id: str
    run_id: str


class ModelAnswer(_Payload):
    """A model call's reply (``LLMReply`` as JSON, so the model's own fields pass
    untouched) and the worker that made it."""

    reply: dict[str, Any]
    worker: str
    attempt: int = 1
    """Which attempt of the activity answered (Temporal's ``activity.info().attempt``)."""


class FileWithBytes(_Payload):
    """A ``ToolFile`` with its bytes: a ``ToolFile``'s JSON form leaves them out (its
    ``content`` is never serialised), so they cross the wire here, in base64."""

    name: str
    mime_type: str
    description: str | None = None
    content_base64: str

    @classmethod
    def of(cls, file: ToolFile) -> FileWithBytes:
        """``file`` with its bytes."""
        return cls(
            name=file.name,
            mime_type=file.mime_type,
            description=file.description,
            content_base64=base64.b64encode(file.content).decode("ascii"),
        )

    def tool_file(self) -> ToolFile:
        """The ``ToolFile`` again (its size and hash from its bytes)."""
        return ToolFile(
            name=self.name,
            mime_type=self.mime_type,
            description=self.description,
            content=base64.b64decode(self.content_base64),
        )


class ToolAnswer(_Payload):
    """A server tool's answer: JSON text, files, a pause, or the tool's error. The
    files of an ``output`` travel with their bytes in ``files``."""

    kind: Literal["text", "output", "pause", "error"]
    text: str | None = None
    output: ToolOutput | None = None
    files: list[FileWithBytes] = Field(default_factory=list)
    pause: ToolPause | None = None
    error_type: str | None = None
    error: str | None = None
    worker: str
    attempt: int = 1
    """Which attempt of the activity answered (Temporal's ``activity.info().attempt``)."""


class ApplyAnswer(_Payload):
    """The commit's answer: applied now, or found applied by an earlier attempt."""

    applied: Literal["now", "before"]
    worker: str
    attempt: int = 1
    """Which attempt of the activity answered (Temporal's ``activity.info().attempt``)."""
