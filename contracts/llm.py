"""What the pipeline sends to a language model and what it gets back.

The LLM port (``contracts/ports.py``) takes an ``LLMRequest`` — the messages of the
turn and the tools advertised for this call — and answers an ``LLMReply``: text,
tool calls, or both (AGN-036 §4.9). ``ChatMessage`` is also what a session's
transcript keeps, so a continuation or a follow-on turn can show the model what
came before.

A user message may carry content parts (``ChatMessage.parts``) next to its text:
``TextPart`` for the instruction and each UTF-8 artifact, ``ImagePart`` for each
clipboard image and base64 image artifact (AGN-034 §4.2, §4.3), each keeping where
it came from. ``content`` stays the whole message as text, each image written as
its described reference (``ImagePart.reference``), so code that reads only
``content`` sees everything but the image bytes. On the wire an image's bytes are
base64 (``Data``); the stored transcript keeps them (docs/CONTRACTS.md "Content
parts").
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from enum import Enum, StrEnum
from typing import Annotated, Final, Literal, Self

from pydantic import Field, field_serializer, field_validator, model_validator

from .response import Usage
from .tools import ToolCall, ToolDefinition
from .wire import FrozenWireModel, WireModel

__all__ = [
    "ChatMessage",
    "ChatRole",
    "ContentPart",
    "ImagePart",
    "LLMReply",
    "LLMRequest",
    "TextPart",
    "Transcript",
    "last_image_at",
]


class ChatRole(StrEnum):
    """Who a message is from."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class TextPart(FrozenWireModel):
    """Text the model reads: the instruction, an artifact's contents, a reference.

    An artifact's part names it: ``relative_path`` (AGN-034 §4.2) and, when the
    client gave one, its ``language``; ``text`` then starts with that label.
    """

    type: Literal["text"] = "text"
    text: str
    relative_path: str | None = None
    language: str | None = None


class ImagePart(FrozenWireModel):
    """An image the model may see: its bytes, MIME type and provenance.

    ``clipboard_image_id`` is the ``Id`` of the clipboard image it came from
    (AGN-034 §4.3); ``relative_path`` the ``RelativePath`` of the base64 artifact
    (§4.2). In Python ``data`` is the bytes; in JSON it is their base64 (RFC 4648,
    with padding), and base64 text is read back into bytes.
    """

    type: Literal["image"] = "image"
    mime_type: str = Field(min_length=1)
    data: bytes
    clipboard_image_id: str | None = None
    relative_path: str | None = None

    @field_validator("data", mode="before")
    @classmethod
    def _from_base64(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("Data must be base64 (RFC 4648, with padding)") from None
        return value

    @field_serializer("data", when_used="json")
    def _to_base64(self, value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.clipboard_image_id is not None and self.relative_path is not None:
            raise ValueError("an image comes from a clipboard image or an artifact, not both")
        return self

    @property
    def size_bytes(self) -> int:
        """How many bytes the image has."""
        return len(self.data)

    @property
    def source(self) -> str:
        """Where the image came from, as the model and the user read it."""
        if self.clipboard_image_id is not None:
            return f"image {self.clipboard_image_id}"
        if self.relative_path is not None:
            return f"artifact {self.relative_path}"
        return "image"

    def reference(self) -> str:
        """The image described, without its bytes: what a model without vision reads."""
        return f"[{self.source}: {self.mime_type}, {self.size_bytes} bytes, not shown]"

    def data_url(self) -> str:
        """The image as a ``data:`` URI (RFC 2397), as vision APIs take it."""
        return f"data:{self.mime_type};base64,{base64.b64encode(self.data).decode('ascii')}"


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]
"""One part of a message's content, told apart by ``Type`` (``text`` or ``image``)."""


class ChatMessage(FrozenWireModel):
    """One message of a conversation with the model.

    An assistant message may carry ``tool_calls``; a tool message answers one call,
    named by ``tool_call_id`` and ``name``, with its JSON result as ``content``.

    A user message may carry ``parts`` (see the module docstring): then ``content``
    is the same message as text, its parts joined by blank lines, each image as its
    reference. ``ChatMessage.of_parts`` makes such a message.
    """

    role: ChatRole
    content: str = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    parts: tuple[ContentPart, ...] | None = None

    @classmethod
    def of_parts(cls, role: ChatRole, parts: Sequence[TextPart | ImagePart]) -> ChatMessage:
        """A message of these parts, ``content`` being their text (images as references)."""
        text = "\n\n".join(
            part.text if isinstance(part, TextPart) else part.reference() for part in parts
        )
        return cls(role=role, content=text, parts=tuple(parts))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """The message's image parts, in order."""
        if self.parts is None:  # most messages: text alone (asked of each message every turn)
            return ()
        return tuple(part for part in self.parts if isinstance(part, ImagePart))


def last_image_at(messages: Sequence[ChatMessage]) -> int:
    """The index of the newest message holding an image part, or -1 when none does."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.parts and message.images:
            return index
    return -1


class Transcript(list[ChatMessage]):
    """A session's messages, oldest first, that know where the newest image is.

    What ``SessionTransaction.load_transcript`` may answer instead of a plain list:
    ``last_image`` is the index of the newest message holding an image part (-1 when
    none does), so the pipeline need not look into each message of a long transcript
    every turn to learn whether it shows the model an image (docs/PERFORMANCE.md
    "Long sessions"). A store that appends messages keeps it as it goes; without
    ``last_image`` it is found by looking. It describes the list as made: a copy or
    slice is a plain list, and a caller that changes the list in place must not
    trust it afterwards.
    """

    __slots__ = ("last_image",)

    def __init__(self, messages: Iterable[ChatMessage] = (), last_image: int | None = None) -> None:
        super().__init__(messages)
        self.last_image: int = last_image_at(self) if last_image is None else last_image

    def joined(self, more: Sequence[ChatMessage]) -> Transcript:
        """A new transcript of these messages, then ``more``."""
        found = last_image_at(more)
        return Transcript([*self, *more], self.last_image if found < 0 else len(self) + found)


class _Keep(Enum):
    """The default of ``LLMRequest.replace``'s keywords: the field is kept."""

    KEEP = "keep"


KEEP: Final = _Keep.KEEP


class LLMRequest(WireModel):
    """One call to the model: the messages so far and the tools it may call.

    ``mode`` is the in-flight mode of the turn (AGN-011 §5.3): it changes when
    ``agent_change_mode`` succeeds, while ``tools`` stays the set frozen before the
    reasoner loop (AGN-011 §4.4, DESIGN.md R9).
    """

    model: str | None = None
    mode: str
    messages: list[ChatMessage]
    tools: list[ToolDefinition] = Field(default_factory=list)
    max_output_tokens: int | None = Field(default=None, ge=1)
    """The most tokens the reply may hold (``PipelineOptions.max_output_tokens``); an
    adapter sends it as the model API's output cap. ``None``: the model's own."""

    def replace(
        self,
        *,
        model: str | _Keep | None = KEEP,
        mode: str | _Keep = KEEP,
        messages: Sequence[ChatMessage] | _Keep = KEEP,
        tools: Sequence[ToolDefinition] | _Keep = KEEP,
        max_output_tokens: int | _Keep | None = KEEP,
    ) -> LLMRequest:
        """A copy with the fields given changed: the typed way for a hook to change a
        request (docs/EXTENDING.md "Hooks").

        Each keyword is a field, so mypy checks the names and the types, and a
        misspelt one is a ``TypeError`` at run time (``model_copy(update=...)``
        would drop it silently); the new values are validated as a new request's
        are (a ``ValidationError`` naming the field).
        """
        changes = {
            name: value
            for name, value in (
                ("model", model),
                ("mode", mode),
                ("messages", messages),
                ("tools", tools),
                ("max_output_tokens", max_output_tokens),
            )
            if value is not KEEP
        }
        if not changes:
            return self
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self).model_validate({**fields, **changes})


class LLMReply(FrozenWireModel):
    """The model's answer: text, tool calls, or both; usage when the model reports it."""

    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None
