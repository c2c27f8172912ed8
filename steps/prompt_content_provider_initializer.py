"""AGN-036 §4.7 PromptContentProviderInitializer: the conversation the model will see.

Loads the session's transcript and adds this request's part: the user's message
(instruction, artifacts, images, RAG scope, workspace hints) on Initial and
FollowOn turns, or one tool message per returned result, in the manifest's order,
on a continuation (AGN-036 §5). When done the provider is Ready (§4.7 POST).

A transcript longer than ``PipelineOptions.max_transcript_messages`` is cut or
refused by ``transcript_policy`` (``DESIGN/limits/transcript-size``).

The passages a retriever finds for the instruction go before the user's message
(``steps/retrieval.py``, AGN-034 §4.4).
"""

from __future__ import annotations

import json

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    ArtifactEncoding,
    ChatMessage,
    ChatRole,
    ContextType,
    InvokeWarning,
)
from aptix_pipeline.validators import TRANSCRIPT_SIZE

from .faults import StepFaultError
from .retrieval import retrieved_messages
from .scope import TurnScope

__all__ = ["prompt_content_provider_initializer", "user_message"]


def user_message(request: AgentExecuteRequest) -> ChatMessage:
    """The user's part of a turn as one message, in a fixed, readable layout."""
    parts: list[str] = []
    if request.instruction:
        parts.append(request.instruction)
    for artifact in request.input_artifacts or []:
        where = artifact.relative_path or artifact.file_name
        if artifact.effective_encoding is ArtifactEncoding.BASE64:
            parts.append(f"[artifact {where}: {artifact.mime_type or 'binary'}, base64, not shown]")
        else:
            parts.append(f"[artifact {where}]\n{artifact.contents}")
    for image in request.clipboard_images or []:
        parts.append(f"[image {image.id}: {image.mime_type}]")
    if request.rag_scope:
        conditions = [c.model_dump(mode="json", by_alias=True) for c in request.rag_scope]
        parts.append(f"[rag scope] {json.dumps(conditions, sort_keys=True)}")
    if request.workspace_hints is not None:
        hints = request.workspace_hints.model_dump(mode="json", by_alias=True, exclude_none=True)
        parts.append(f"[workspace] {json.dumps(hints, sort_keys=True)}")
    return ChatMessage(role=ChatRole.USER, content="\n\n".join(parts))


def _within_limit(
    scope: TurnScope, session_id: str, history: list[ChatMessage]
) -> list[ChatMessage]:
    """The stored history the model is sent, by ``transcript_policy`` (docs/CONFIGURATION.md).

    ``truncate`` leaves out the oldest messages, and then any tool results left at the
    front without the assistant message that called them, so what is sent still pairs
    every result with its call; the stored transcript keeps them all.
    """
    limit = scope.options.max_transcript_messages
    if len(history) <= limit:
        return history
    if scope.options.transcript_policy == "refuse":
        raise StepFaultError(
            [
                TRANSCRIPT_SIZE.error(
                    f"session {session_id!r} holds {len(history)} messages, limit {limit}",
                    field="SessionId",
                )
            ]
        )
    start = len(history) - limit
    while start < len(history) and history[start].role is ChatRole.TOOL:
        start += 1
    scope.warn(
        InvokeWarning(
            code="transcript_truncated",
            rule_id=TRANSCRIPT_SIZE.id,
            message=(
                f"the model was sent the newest {len(history) - start} of the {len(history)} "
                f"messages of session {session_id!r} (limit {limit}); the oldest were left out"
            ),
        )
    )
    return history[start:]


async def prompt_content_provider_initializer(scope: TurnScope) -> None:
    """Build ``scope.messages`` and mark the prompt provider Ready."""
    ctx = scope.ctx
    session_id = ctx.session.id if ctx.session is not None else ""
    if ctx.type is ContextType.INITIAL:
        history: list[ChatMessage] = []
    else:
        history = await scope.transaction.load_transcript(session_id)
    if ctx.type is ContextType.CLIENT_TOOL_CALL_CONTINUATION and ctx.tool_call_manifest:
        added = [
            ChatMessage(
                role=ChatRole.TOOL,
                tool_call_id=result.tool_call_id,
                name=result.name,
                content=result.result_json or "",
            )
            for result in ctx.tool_call_manifest.tool_call_results
        ]
    elif scope.request is not None:
        added = [*await retrieved_messages(scope), user_message(scope.request)]
    else:
        added = []
    scope.messages = [*_within_limit(scope, session_id, history), *added]
    scope.new_messages = list(added)
    ctx.prompt_provider_ready = True
