"""What the pipeline sends to a language model and what it gets back.

The LLM port (``contracts/ports.py``) takes an ``LLMRequest`` — the messages of the
turn and the tools advertised for this call — and answers an ``LLMReply``: text,
tool calls, or both (AGN-036 §4.9). ``ChatMessage`` is also what a session's
transcript keeps, so a continuation or a follow-on turn can show the model what
came before.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .response import Usage
from .tools import ToolCall, ToolDefinition
from .wire import FrozenWireModel, WireModel

__all__ = ["ChatMessage", "ChatRole", "LLMReply", "LLMRequest"]


class ChatRole(StrEnum):
    """Who a message is from."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ChatMessage(FrozenWireModel):
    """One message of a conversation with the model.

    An assistant message may carry ``tool_calls``; a tool message answers one call,
    named by ``tool_call_id`` and ``name``, with its JSON result as ``content``.
    """

    role: ChatRole
    content: str = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


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


class LLMReply(FrozenWireModel):
    """The model's answer: text, tool calls, or both; usage when the model reports it."""

    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None
