"""``InvokeResult[T]``: how every engine API reports success, errors and warnings.

AGN-033 §2.1: errors and system-level warnings travel *only* here; when the
invocation is not successful the payload (``Result``) is null. Each error carries
a machine-readable ``Code`` and, where a rule failed, the rule's stable id
(``RuleId``), so a log line, a span event, a trace entry and the conformance table
all point at the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Final, Generic, TypeVar

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)

from .wire import WireModel

__all__ = [
    "HOST_ERROR_CODE_PATTERN",
    "BudgetRefusal",
    "ErrorCode",
    "HostErrorCode",
    "InvokeError",
    "InvokeResult",
    "InvokeWarning",
]

T = TypeVar("T")


class ErrorCode(StrEnum):
    """What kind of failure an ``InvokeError`` reports."""

    INVALID_REQUEST = "invalid_request"
    """The request broke AGN-034 (shape or scenario rules)."""
    PIPELINE_RULE_FAILED = "pipeline_rule_failed"
    """An AGN-036 core, PRE or POST rule failed."""
    TOOL_CALL_MANIFEST_INVALID = "tool_call_manifest_invalid"
    """The returned tool results do not match the emitted calls (AGN-036 §5, AGN-033 §3.3)."""
    INVALID_RESPONSE = "invalid_response"
    """A built response broke AGN-033."""
    TOOL_CALL_INVALID = "tool_call_invalid"
    """A model's tool call broke the container design's checks (returned to the LLM)."""
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    PORT_FAILED = "port_failed"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    """The turn ran past ``PipelineOptions.turn_deadline_seconds``; nothing was stored."""
    CANCELLED = "cancelled"
    """The turn's stream consumer went away before it finished; nothing was stored."""
    INTERNAL = "internal"
    UNAUTHORIZED = "unauthorized"
    """HTTP service: the request presents no API key, or an unknown one (401); nothing ran."""
    FORBIDDEN = "forbidden"
    """HTTP service: the caller may not use this resource (403); nothing ran."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """HTTP service: the path exists, not for this method (405)."""
    BODY_TOO_LARGE = "body_too_large"
    """HTTP service: the body is larger than ``[server] max_body_bytes`` (413); nothing ran."""
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    """HTTP service: the body's ``Content-Type`` is not JSON (415); nothing ran."""
    REQUEST_TIMEOUT = "request_timeout"
    """HTTP service: the request was not received within ``read_timeout_seconds`` (408)."""
    UNAVAILABLE = "unavailable"
    """HTTP service: the service is starting or stopping (503); nothing ran."""
    EXPIRED = "expired"
    """HTTP service: a signed file URL whose time has passed (410, docs/FILES.md)."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """A model call would exceed a budget (or has no price and unpriced calls are
    refused): the call was not made and nothing of the turn was stored; the error's
    ``Budget`` says which budget, its window and what remains (429 over HTTP,
    docs/BUDGETS.md)."""


HOST_ERROR_CODE_PATTERN: Final = r"^host\.[a-z0-9]+(?:[._-][a-z0-9]+)*$"
"""A host's own error code: ``host.`` and a lowercase name (``host.closed``)."""

HostErrorCode = Annotated[str, StringConstraints(pattern=HOST_ERROR_CODE_PATTERN)]
"""An error code of the host's own rules (docs/EXTENDING.md "Hooks and host rules").

Its ``host.`` prefix keeps it apart from every ``ErrorCode`` value, so a client can
tell the engine's failures from the host's and no host code ever reads as one of ours.
"""


class BudgetRefusal(WireModel):
    """Which budget refused a model call, and what it had left (docs/BUDGETS.md).

    ``used`` is what the budget had counted before the call, ``requested`` what the
    call's estimate would have added, ``remaining`` the limit less ``used`` (never
    below 0). ``window_ends_at`` is when a day or month window ends;
    ``retry_after_seconds`` is how long until the window has room again (a calendar
    window's end, or when a rolling window's oldest counted call ages out), absent
    for a turn's window, which never refills.
    """

    model_config = ConfigDict(frozen=True)

    budget_id: str
    metric: str
    window: str
    limit: Decimal
    used: Decimal
    requested: Decimal
    remaining: Decimal
    currency: str | None = None
    window_ends_at: datetime | None = None
    retry_after_seconds: int | None = None


class InvokeError(WireModel):
    """One error: a code, a one-line message and, where a rule failed, its id.

    ``Code`` is an ``ErrorCode``, or a host's own ``host.<name>`` code
    (``HostErrorCode``) when one of the host's rules failed.

    ``Field`` names the request or context field at fault (a JSON path such as
    ``InputArtifacts[0].RelativePath``); ``ToolCallId`` and ``ToolName`` name the
    tool a manifest failure is about (AGN-036 §5: "bubbled with tool id, name, and
    reason").
    """

    model_config = ConfigDict(frozen=True)

    code: ErrorCode | HostErrorCode
    message: str
    rule_id: str | None = None
    field: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    budget: BudgetRefusal | None = None
    """The budget that refused the call, on a ``budget_exceeded`` error."""

    @field_validator("message", "field", "tool_call_id", "tool_name", mode="after")
    @classmethod
    def _utf8(cls, value: str | None) -> str | None:
        return None if value is None else encodable_text(value)


class InvokeWarning(WireModel):
    """A non-fatal, system-level warning (AGN-033 §2.1)."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str
    rule_id: str | None = None

    @field_validator("code", "message", mode="after")
    @classmethod
    def _utf8(cls, value: str) -> str:
        return encodable_text(value)


def encodable_text(text: str) -> str:
    """``text`` with each lone surrogate written out as ``\\udXXX``, so it has UTF-8.

    Errors quote client text (a key such as ``"\\ud800"``); every ``InvokeResult``
    must still serialize (AGN-033 §4.1 UTF-8, DESIGN D140).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class InvokeResult(WireModel, Generic[T]):
    """The outcome of an invocation: ``Result`` only when ``Successful`` (AGN-033 §2.1)."""

    model_config = ConfigDict(frozen=True)

    successful: bool
    result: T | None = None
    errors: tuple[InvokeError, ...] = Field(default=())
    warnings: tuple[InvokeWarning, ...] = Field(default=())

    @model_validator(mode="after")
    def _result_only_when_successful(self) -> InvokeResult[T]:
        if self.successful and self.errors:
            raise ValueError("a successful InvokeResult carries no Errors")
        if not self.successful:
            if self.result is not None:
                raise ValueError("Result must be null unless Successful (AGN-033 §2.1)")
            if not self.errors:
                raise ValueError("an unsuccessful InvokeResult names at least one error")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Result is always present, null when unsuccessful (AGN-033 §2.1).
        data: dict[str, Any] = handler(self)
        return data

    @classmethod
    def success(
        cls, result: T | None = None, warnings: Iterable[InvokeWarning] = ()
    ) -> InvokeResult[T]:
        """A successful result carrying ``result``."""
        return cls(successful=True, result=result, warnings=tuple(warnings))

    @classmethod
    def failure(
        cls, errors: Iterable[InvokeError], warnings: Iterable[InvokeWarning] = ()
    ) -> InvokeResult[T]:
        """An unsuccessful result: no payload, at least one error."""
        return cls(successful=False, errors=tuple(errors), warnings=tuple(warnings))

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """The ids of the rules that failed, in order."""
        return tuple(error.rule_id for error in self.errors if error.rule_id)
