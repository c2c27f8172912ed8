"""AGN-033 ``AgentExecuteResponse``: everything a client may see of a turn.

A response is exactly one of two closed kinds (AGN-033 §3.2). Which buckets each
kind requires, allows and forbids is AGN-033 §3.4; the checks live in
``aptix_pipeline.validators.response``. The two constructors
``AgentExecuteResponse.final`` and ``AgentExecuteResponse.client_tool_continuation``
accept only the buckets their kind allows, so engine code cannot build a
forbidden bucket by accident. Absent buckets are omitted from the JSON (§3.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import Field, StrictInt, field_validator

from .tools import ToolCall, ToolResult
from .wire import FrozenWireModel, WireModel

__all__ = ["AgentExecuteResponse", "FileRef", "ResponseKind", "Usage"]


class ResponseKind(StrEnum):
    """The closed set of response kinds (AGN-033 §3.2)."""

    FINAL = "final"
    CLIENT_TOOL_CONTINUATION = "client_tool_continuation"


class FileRef(WireModel):
    """A file produced by the turn, by reference — never embedded (AGN-033 §6.3)."""

    name: str
    mime_type: str
    url: str
    size_bytes: StrictInt
    content_hash: str
    description: str | None = None
    content_expires: datetime | None = None

    @field_validator("content_expires", mode="before")
    @classmethod
    def _iso_8601_only(cls, value: object) -> object:
        # AGN-033 §6.3: ISO-8601 text (or a datetime in Python) — not a Unix number.
        if value is not None and not isinstance(value, str | datetime):
            raise ValueError("ContentExpires must be an ISO-8601 date-time")
        return value


class Usage(FrozenWireModel):
    """Token usage of the turn (AGN-033 §3.4, final responses only), or of one model call.

    ``cached_input_tokens`` (input tokens the model read from its prompt cache, part of
    ``input_tokens``) and ``reasoning_tokens`` (part of ``output_tokens``) are there when
    the model reports them, and absent when it does not: absent is *unknown*, not 0
    (issue 31).
    """

    input_tokens: StrictInt = Field(default=0, ge=0)
    output_tokens: StrictInt = Field(default=0, ge=0)
    total_tokens: StrictInt = Field(default=0, ge=0)
    cached_input_tokens: StrictInt | None = Field(default=None, ge=0)
    reasoning_tokens: StrictInt | None = Field(default=None, ge=0)


class AgentExecuteResponse(WireModel):
    """The AGN-033 response envelope (§3)."""

    session_id: str
    turn_id: str
    mode_display_name: str
    kind: ResponseKind
    primary_output_text: str | None = None
    tool_continuation_message: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_results: list[ToolResult] | None = None
    files: list[FileRef] | None = None
    user_warnings: list[str] | None = None
    usage: Usage | None = None

    @classmethod
    def final(
        cls,
        *,
        session_id: str,
        turn_id: str,
        mode_display_name: str,
        primary_output_text: str,
        files: Sequence[FileRef] | None = None,
        tool_results: Sequence[ToolResult] | None = None,
        user_warnings: Sequence[str] | None = None,
        usage: Usage | None = None,
    ) -> AgentExecuteResponse:
        """A ``final`` response: only the buckets AGN-033 §3.4 allows for it."""
        return cls(
            session_id=session_id,
            turn_id=turn_id,
            mode_display_name=mode_display_name,
            kind=ResponseKind.FINAL,
            primary_output_text=primary_output_text,
            files=None if files is None else list(files),
            tool_results=None if tool_results is None else list(tool_results),
            user_warnings=None if user_warnings is None else list(user_warnings),
            usage=usage,
        )

    @classmethod
    def client_tool_continuation(
        cls,
        *,
        session_id: str,
        turn_id: str,
        mode_display_name: str,
        tool_calls: Sequence[ToolCall],
        tool_continuation_message: str | None = None,
    ) -> AgentExecuteResponse:
        """A ``client_tool_continuation`` response: only the buckets §3.4 allows for it."""
        return cls(
            session_id=session_id,
            turn_id=turn_id,
            mode_display_name=mode_display_name,
            kind=ResponseKind.CLIENT_TOOL_CONTINUATION,
            tool_calls=list(tool_calls),
            tool_continuation_message=tool_continuation_message,
        )
