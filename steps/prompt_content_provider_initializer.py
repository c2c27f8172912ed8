"""AGN-036 §4.7 PromptContentProviderInitializer: the conversation the model will see.

Loads the session's transcript and adds this request's part: the user's message
(instruction, artifacts, images, RAG scope, workspace hints) on Initial and
FollowOn turns, or one tool message per returned result, in the manifest's order,
on a continuation (AGN-036 §5). A result answering a server tool's pause
(``ToolPause``: the pending call has the model's id, or that id and ``#n`` when it
paused again, under another name) is not the
model's: it is kept in ``scope.resumed``, and LLMClient runs that tool again.
When done the provider is Ready (§4.7 POST).

The user's message carries content parts (``contracts/llm.py``) when the request
brings artifacts or images: each clipboard image and base64 ``image/*`` artifact
as an image part, each UTF-8 artifact as a text part labelled with its path and
language, any other base64 artifact as a described reference (name, MIME type,
size), never its bytes. A model without vision — its agent's or its mode's
``vision`` is off (docs/MODELS.md "Images") — is sent every image as its
described reference instead, and the final response says which images of the
turn it did not see (``UserWarnings``, AGN-033 §4.3). The stored transcript keeps
the images, so a continuation or a later turn in a mode with vision shows them.

A transcript longer than ``PipelineOptions.max_transcript_messages`` is cut or
refused by ``transcript_policy`` (``DESIGN/limits/transcript-size``).

The passages a retriever finds for the instruction go before the user's message
(``steps/retrieval.py``, AGN-034 §4.4).
"""

from __future__ import annotations

import base64
import json

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    ArtifactEncoding,
    ChatMessage,
    ChatRole,
    ContextType,
    ImagePart,
    InputArtifact,
    InvokeWarning,
    TextPart,
    ToolCall,
    Transcript,
    last_image_at,
)
from aptix_pipeline.validators import TRANSCRIPT_SIZE, is_image_type

from .faults import StepFaultError
from .retrieval import retrieved_messages
from .scope import TurnScope

__all__ = ["prompt_content_provider_initializer", "user_message"]


def _artifact_part(artifact: InputArtifact) -> TextPart | ImagePart:
    """An artifact as the model gets it: an image, its text, or a described reference."""
    where = artifact.relative_path or artifact.file_name
    if artifact.effective_encoding is ArtifactEncoding.UTF8:
        label = f"{where}, {artifact.language}" if artifact.language else where
        return TextPart(
            text=f"[artifact {label}]\n{artifact.contents}",
            relative_path=artifact.relative_path,
            language=artifact.language,
        )
    data = base64.b64decode(artifact.contents)  # valid: AGN-034/4.2/base64-contents-valid
    if data and is_image_type(artifact.mime_type):
        return ImagePart(
            mime_type=artifact.mime_type or "", data=data, relative_path=artifact.relative_path
        )
    return TextPart(
        text=f"[artifact {where}: {artifact.mime_type or 'binary'}, {len(data)} bytes, not shown]",
        relative_path=artifact.relative_path,
    )


def user_message(request: AgentExecuteRequest) -> ChatMessage:
    """The user's part of a turn as one message, in a fixed, readable layout.

    Instruction, artifacts, clipboard images, RAG scope, workspace hints, in that
    order. A message of text alone (no artifact, no image) has no parts.
    """
    leading = [request.instruction] if request.instruction else []
    trailing: list[str] = []
    if request.rag_scope:
        conditions = [c.model_dump(mode="json", by_alias=True) for c in request.rag_scope]
        trailing.append(f"[rag scope] {json.dumps(conditions, sort_keys=True)}")
    if request.workspace_hints is not None:
        hints = request.workspace_hints.model_dump(mode="json", by_alias=True, exclude_none=True)
        trailing.append(f"[workspace] {json.dumps(hints, sort_keys=True)}")
    if not (request.input_artifacts or request.clipboard_images):  # text alone: no parts
        return ChatMessage(role=ChatRole.USER, content="\n\n".join([*leading, *trailing]))
    parts: list[TextPart | ImagePart] = [TextPart(text=text) for text in leading]
    parts.extend(_artifact_part(artifact) for artifact in request.input_artifacts or [])
    parts.extend(
        ImagePart(
            mime_type=image.mime_type,
            data=base64.b64decode(image.data_base64),  # valid: …/clipboard-data-base64-valid
            clipboard_image_id=image.id,
        )
        for image in request.clipboard_images or []
    )
    parts.extend(TextPart(text=text) for text in trailing)
    return ChatMessage.of_parts(ChatRole.USER, parts)


def _described(message: ChatMessage) -> ChatMessage:
    """``message`` with each image part replaced by its described reference."""
    if not message.images:
        return message
    parts = tuple(
        TextPart(text=part.reference(), relative_path=part.relative_path)
        if isinstance(part, ImagePart)
        else part
        for part in message.parts or ()
    )
    return message.model_copy(update={"parts": parts})


async def _as_the_model_sees(scope: TurnScope, messages: list[ChatMessage]) -> list[ChatMessage]:
    """The messages, some holding images, for the model: images described when its agent
    or mode has no vision.

    The turn's own images (those of its newest user message) that the model is not
    shown are named in the final response's ``UserWarnings``; older turns' images
    are described without a warning (their turn warned already).
    """
    ctx = scope.ctx
    agent = ctx.agent_context
    mode = await scope.ports.modes.get_mode(ctx.mode or "")
    if agent is not None and not agent.vision:
        blind = f"agent {agent.id!r} has no vision"
    elif mode is not None and not mode.vision:
        blind = f"mode {mode.name!r} has no vision"
    else:
        return messages
    newest = next((m for m in reversed(messages) if m.role is ChatRole.USER), None)
    for image in newest.images if newest is not None else ():
        scope.user_warnings.append(
            f"{image.source} ({image.mime_type}, {image.size_bytes} bytes) was not shown "
            f"to the model: {blind}; it was told of the image instead"
        )
    return [_described(message) for message in messages]


def _sent_from(scope: TurnScope, session_id: str, history: list[ChatMessage]) -> int:
    """Where the stored history the model is sent starts, by ``transcript_policy``
    (docs/CONFIGURATION.md).

    ``truncate`` leaves out the oldest messages, and then any tool results left at the
    front without the assistant message that called them, so what is sent still pairs
    every result with its call; the stored transcript keeps them all.
    """
    limit = scope.options.max_transcript_messages
    if len(history) <= limit:
        return 0
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
    return start


def _model_calls(history: list[ChatMessage]) -> dict[str, ToolCall]:
    """The tool calls of the newest assistant message that made any, by id: the calls a
    continuation answers. One the pending turn names otherwise paused (``ToolPause``)."""
    for message in reversed(history):
        if message.role is ChatRole.ASSISTANT and message.tool_calls:
            return {call.tool_call_id: call for call in message.tool_calls}
    return {}


async def prompt_content_provider_initializer(scope: TurnScope) -> None:
    """Build ``scope.messages`` and mark the prompt provider Ready."""
    ctx = scope.ctx
    session_id = ctx.session.id if ctx.session is not None else ""
    if ctx.type is ContextType.INITIAL:
        history: list[ChatMessage] = []
    else:
        history = await scope.transaction.load_transcript(session_id)
    if ctx.type is ContextType.CLIENT_TOOL_CALL_CONTINUATION and ctx.tool_call_manifest:
        made = _model_calls(history)
        added = []
        for result in ctx.tool_call_manifest.tool_call_results:
            call = made.get(result.tool_call_id)
            if call is None:  # a call that paused again: its id is the model's with "#n"
                base, mark, count = result.tool_call_id.rpartition("#")
                call = made.get(base) if mark and count.isdigit() else None
            if call is not None and (
                call.name != result.name or call.tool_call_id != result.tool_call_id
            ):
                # A server tool's pause (``ToolPause``): the answer is the tool's, not the model's.
                scope.resumed.append((call, result.tool_call_id, result.result_json or ""))
                continue
            added.append(
                ChatMessage(
                    role=ChatRole.TOOL,
                    tool_call_id=result.tool_call_id,
                    name=result.name,
                    content=result.result_json or "",
                )
            )
    elif scope.request is not None:
        added = [*await retrieved_messages(scope), user_message(scope.request)]
    else:
        added = []
    start = _sent_from(scope, session_id, history)
    messages = [*(history[start:] if start else history), *added]
    # Whether an image is sent, without looking into each message of a long history
    # when the store's Transcript knows where its newest image is (Transcript.last_image).
    newest_image = history.last_image if isinstance(history, Transcript) else last_image_at(history)
    if newest_image >= start or last_image_at(added) >= 0:
        messages = await _as_the_model_sees(scope, messages)
    scope.messages = messages
    scope.new_messages = list(added)
    ctx.prompt_provider_ready = True
