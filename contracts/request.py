"""AGN-034 ``AgentExecuteRequest``: the public request contract.

The request expresses user intent only. Its scenario (new session, follow-on,
tool continuation) is decided by field presence (AGN-034 §3, DESIGN.md R1); the
scenario rules live in ``aptix_pipeline.validators.request``. This module holds
the shape: field names, types and closed value sets. Unknown fields are refused
(``extra="forbid"``), so a mode, a correlation id or a provider continuation id
never slips in (AGN-034 §2.1, §3).

Every optional field defaults to ``None`` = *absent*; an empty list that was sent
stays an empty list (AGN-034 §2.2: presence, not content, is what the rules see).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .tools import ToolResult
from .wire import WireModel

__all__ = [
    "AgentExecuteRequest",
    "ArtifactEncoding",
    "ArtifactOrigin",
    "ClipboardImage",
    "InputArtifact",
    "RagOperator",
    "RagScopeCondition",
    "WorkspaceHints",
]


class ArtifactOrigin(StrEnum):
    """Who supplied an input artifact (AGN-034 §4.2)."""

    IDE = "ide"
    USER = "user"


class ArtifactEncoding(StrEnum):
    """How an artifact's ``Contents`` are encoded (AGN-034 §4.2); ``utf8`` is the default."""

    UTF8 = "utf8"
    BASE64 = "base64"


class RagOperator(StrEnum):
    """The closed set of RAG scope operators (AGN-034 §4.4)."""

    EQUALS = "=="
    NOT_EQUALS = "!="
    CONTAINS = "contains"
    DOES_NOT_CONTAIN = "does_not_contain"


class InputArtifact(WireModel):
    """A file supplied by the client for reasoning (AGN-034 §4.2).

    ``relative_path`` is relative to the opened root folder; absolute paths and
    paths escaping the root are rejected by ``AGN-034/4.2/…`` rules.
    """

    relative_path: str
    file_name: str
    contents: str
    origin: ArtifactOrigin
    mime_type: str | None = None
    language: str | None = None
    encoding: ArtifactEncoding | None = None

    @property
    def effective_encoding(self) -> ArtifactEncoding:
        """The encoding in force: ``utf8`` when none was sent (AGN-034 §4.2)."""
        return self.encoding or ArtifactEncoding.UTF8


class ClipboardImage(WireModel):
    """An image pasted from the clipboard (AGN-034 §4.3)."""

    id: str
    mime_type: str
    data_base64: str


class RagScopeCondition(WireModel):
    """One RAG scope condition; all conditions are ANDed (AGN-034 §4.4)."""

    key: str
    operator: RagOperator
    values: list[str]


class WorkspaceHints(WireModel):
    """Advisory workspace and environment hints (AGN-034 §4.6)."""

    workspace_id: str | None = None
    repository_name: str | None = None
    language_hint: str | None = None


class AgentExecuteRequest(WireModel):
    """The AGN-034 request envelope.

    Scenarios (AGN-034 §2, AGN-036 §3.1, DESIGN.md R1):

    - **Initial** — no ``SessionId`` and no ``TurnId``: the server opens a session.
    - **FollowOn** — both ids, no ``ToolResults``: a new user turn in a session.
    - **ClientToolCallContinuation** — both ids and ``ToolResults``.
    """

    session_id: str | None = None
    turn_id: str | None = None
    instruction: str | None = None
    input_artifacts: list[InputArtifact] | None = None
    clipboard_images: list[ClipboardImage] | None = None
    rag_scope: list[RagScopeCondition] | None = None
    solution_context_text: str | None = None
    workspace_hints: WorkspaceHints | None = None
    stream: bool | None = Field(default=None, strict=True)
    agent_context_id: str | None = None
    conversation_context_id: str | None = None
    tool_results: list[ToolResult] | None = None

    @property
    def wants_stream(self) -> bool:
        """The streaming preference in force: ``false`` when absent (AGN-034 §4.7)."""
        return bool(self.stream)
