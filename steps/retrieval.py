"""Retrieval for a turn (AGN-034 §4.4): the instruction and the RAG scope to the
``Retriever`` port, and its passages into the prompt as labelled context.

The PromptContentProviderInitializer (AGN-036 §4.7) calls ``retrieved_messages``
while it builds the conversation. A turn retrieves when the pipeline has a
retriever (``Ports.retriever``), the turn is Initial or FollowOn, and its
instruction is not blank: the instruction is the query and the scope only narrows
it, so a scope alone, and a continuation (whose model call carries on from the
turn's stored context), retrieve nothing (docs/CONFORMANCE.md D333). The passages
become one user message labelled ``[retrieved context]``, placed before the user's
own and stored with the turn, so a continuation of the turn and later turns see
what the model saw. A retriever that raises, or answers with something that is not
a list of passages, fails the turn with ``port_failed`` naming the port (D334).

Without a retriever nothing happens here, and the scope reaches the model as the
``[rag scope]`` text of the user's message.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import TypeAdapter

from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ContextType,
    Passage,
    RetrievalQuery,
    Retriever,
)
from aptix_pipeline.validators import utf8_text

from .exception_text import PROPAGATED, port_failed
from .faults import StepFaultError
from .scope import TurnScope

__all__ = [
    "RETRIEVED_CONTEXT_LABEL",
    "collection_of",
    "context_message",
    "retrieval_query",
    "retrieved_messages",
]

RETRIEVED_CONTEXT_LABEL = "[retrieved context]"
"""The first line of the message holding a turn's retrieved passages."""

_PASSAGES: TypeAdapter[list[Passage]] = TypeAdapter(list[Passage])
_RETRIEVING = (ContextType.INITIAL, ContextType.FOLLOW_ON)


def retrieval_query(scope: TurnScope) -> RetrievalQuery | None:
    """What this turn asks its retriever, or ``None`` when it retrieves nothing (D333)."""
    request = scope.request
    if scope.ports.retriever is None or request is None or scope.ctx.type not in _RETRIEVING:
        return None
    instruction = request.instruction
    if instruction is None or not instruction.strip():
        return None
    return RetrievalQuery(
        instruction=instruction,
        conditions=list(request.rag_scope or ()),
        limit=scope.options.retrieval_limit,
    )


def collection_of(retriever: Retriever) -> str:
    """The retriever's ``collection``, or its class name when it names none."""
    name = getattr(retriever, "collection", None)
    return name if isinstance(name, str) and name else type(retriever).__name__


async def retrieved_messages(scope: TurnScope) -> list[ChatMessage]:
    """Ask the retriever for this turn's passages: the context message, or none when the
    turn retrieves nothing or nothing was found."""
    query = retrieval_query(scope)
    retriever = scope.ports.retriever
    if query is None or retriever is None:
        return []
    with scope.observer.retrieval(collection_of(retriever), query) as observation:
        try:
            found = await retriever.retrieve(query)
            passages = _PASSAGES.validate_python(list(found))[: query.limit]
        except (StepFaultError, *PROPAGATED):
            raise
        except BaseException as error:
            raise port_failed("Retriever", "retrieve", error, scope.options.error_detail) from error
        observation.found(passages)
    return [context_message(passages)] if passages else []


def context_message(passages: Sequence[Passage]) -> ChatMessage:
    """The passages as one user message: the label, then each passage numbered, with its
    title and document id, and its text."""
    parts = [RETRIEVED_CONTEXT_LABEL]
    for number, passage in enumerate(passages, start=1):
        source = passage.source
        heading = (
            f"[{number}] {source.title} ({source.document_id})"
            if source.title
            else (f"[{number}] {source.document_id}")
        )
        parts.append(f"{heading}\n{passage.text}")
    return ChatMessage(role=ChatRole.USER, content=utf8_text("\n\n".join(parts)))
