"""The OpenAI-compatible adapter under test, on a loopback ``fake_openai_server``.

``adapter(server)`` builds an ``OpenAICompatibleLLM`` on the fake server with the test
API key ``KEY``, its retry waits recorded (``RecordedWaits``) rather than slept, and
``waits_of`` reads them back; ``ask`` is a one-message request and ``READ_FILE`` a
client tool definition with a schema to advertise.
"""

from __future__ import annotations

from typing import Any

from aptix_pipeline.adapters.models.openai_compatible import OpenAICompatibleLLM
from aptix_pipeline.contracts import ChatMessage, ChatRole, LLMRequest, ToolDefinition
from aptix_pipeline.testing import FakeOpenAIServer

__all__ = ["KEY", "READ_FILE", "RecordedWaits", "adapter", "ask", "waits_of"]

KEY = "sk-test-0123456789abcdef"

READ_FILE = ToolDefinition(
    name="read_file",
    executes_on="client",
    description="Read a file.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
)


class RecordedWaits:
    """A ``sleep`` that records how long it was asked to wait and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def ask(text: str = "hi", **more: Any) -> LLMRequest:
    """A one-message request."""
    return LLMRequest(
        mode="general", messages=[ChatMessage(role=ChatRole.USER, content=text)], **more
    )


def adapter(server: FakeOpenAIServer, **options: Any) -> OpenAICompatibleLLM:
    """An adapter on ``server`` whose waits are recorded, not slept."""
    options.setdefault("sleep", RecordedWaits())
    return OpenAICompatibleLLM(model="fake-model", base_url=server.base_url, api_key=KEY, **options)


def waits_of(llm: OpenAICompatibleLLM) -> list[float]:
    """The waits ``adapter``'s recorded sleep was asked for, in order."""
    sleep = llm._sleep
    assert isinstance(sleep, RecordedWaits)
    return sleep.seconds
