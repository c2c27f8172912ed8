"""Wire contracts and the pipeline context (AGN-033, AGN-034, AGN-036, container design).

Pydantic v2 models. JSON uses the DDRs' PascalCase names; Python uses snake_case.
This subpackage imports nothing else of ours (DESIGN.md "Layout and layers").
"""

from .context import (
    DEFAULT_MODE,
    AgentContext,
    Caller,
    ContextType,
    ConversationContext,
    Envelope,
    ModeHistoryEntry,
    PipelineContext,
    PipelineStep,
    ResponsePayload,
    ResponseType,
    Session,
    Turn,
    TurnStatus,
)
from .request import (
    AgentExecuteRequest,
    ArtifactEncoding,
    ArtifactOrigin,
    ClipboardImage,
    InputArtifact,
    RagOperator,
    RagScopeCondition,
    WorkspaceHints,
)
from .response import AgentExecuteResponse, FileRef, ResponseKind, Usage
from .result import ErrorCode, InvokeError, InvokeResult, InvokeWarning
from .tools import (
    CONTAINER_ERROR_TYPE,
    VALIDATION_ERROR_TYPE,
    ArgumentError,
    ContainerInvocationErrorResponse,
    ManifestToolResult,
    SourceType,
    ToolCall,
    ToolCallManifest,
    ToolDefinition,
    ToolResult,
    ValidationErrorResponse,
)
from .wire import WireModel

__all__ = [
    "CONTAINER_ERROR_TYPE",
    "DEFAULT_MODE",
    "VALIDATION_ERROR_TYPE",
    "AgentContext",
    "AgentExecuteRequest",
    "AgentExecuteResponse",
    "ArgumentError",
    "ArtifactEncoding",
    "ArtifactOrigin",
    "Caller",
    "ClipboardImage",
    "ContainerInvocationErrorResponse",
    "ContextType",
    "ConversationContext",
    "Envelope",
    "ErrorCode",
    "FileRef",
    "InputArtifact",
    "InvokeError",
    "InvokeResult",
    "InvokeWarning",
    "ManifestToolResult",
    "ModeHistoryEntry",
    "PipelineContext",
    "PipelineStep",
    "RagOperator",
    "RagScopeCondition",
    "ResponseKind",
    "ResponsePayload",
    "ResponseType",
    "Session",
    "SourceType",
    "ToolCall",
    "ToolCallManifest",
    "ToolDefinition",
    "ToolResult",
    "Turn",
    "TurnStatus",
    "Usage",
    "ValidationErrorResponse",
    "WireModel",
    "WorkspaceHints",
]
