"""A host imports everything it needs from ``aptix_pipeline`` (STYLE.md "A small public surface").

The root names the pipeline and its options, the request and response models, every
port protocol with the values it carries, the embedded defaults, the event types,
and the recording and replay API; each name is the very object its subpackage
defines, imported on first use.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Protocol

import pytest

import aptix_pipeline
import aptix_pipeline.engine.replay
from aptix_pipeline import contracts, engine
from aptix_pipeline.contracts import ports


@pytest.mark.decision("D250")
def test_every_root_name_resolves() -> None:
    missing = [name for name in aptix_pipeline.__all__ if not hasattr(aptix_pipeline, name)]

    assert missing == []


@pytest.mark.decision("D250")
def test_every_port_protocol_and_port_error_is_at_the_root() -> None:
    protocols = {
        name
        for name, value in vars(ports).items()
        if inspect.isclass(value)
        and value.__module__ == ports.__name__
        and not name.startswith("_")
        and (Protocol in value.__mro__ or issubclass(value, Exception))
    }

    assert protocols, "contracts.ports declares no protocols"
    assert protocols <= set(aptix_pipeline.__all__)


@pytest.mark.decision("D250")
def test_every_value_a_port_carries_is_at_the_root() -> None:
    carried = {
        "LLMRequest",
        "LLMReply",
        "ChatMessage",
        "ChatRole",
        "ToolDefinition",
        "ToolInvocation",
        "ModeSpec",
        "AgentContext",
        "ConversationContext",
        "Session",
        "Turn",
        "ModeHistoryEntry",
        "StoredOutcome",
        "ToolCall",
        "ToolResult",
        "Usage",
    }

    assert carried <= set(aptix_pipeline.__all__)
    assert all(getattr(aptix_pipeline, name) is getattr(contracts, name) for name in carried)


@pytest.mark.decision("D250")
def test_every_event_type_is_at_the_root() -> None:
    events = {
        name
        for name in engine.events.__all__
        if inspect.isclass(value := getattr(engine.events, name))
        and issubclass(value, engine.TurnEvent)
    }

    assert "TurnFinished" in events
    assert events <= set(aptix_pipeline.__all__)


@pytest.mark.parametrize(
    "name",
    [
        "Pipeline",
        "PipelineOptions",
        "Caller",
        "Ports",
        "TurnReport",
        "Telemetry",
        "AgentExecuteRequest",
        "AgentExecuteResponse",
        "InvokeResult",
        "InvokeError",
        "embedded_pipeline",
        "RecordingOptions",
        "TurnRecording",
        "replay",
        "assert_replays",
        "pipeline_diagram",
        "Listener",
    ],
)
@pytest.mark.decision("D250")
def test_a_host_word_is_at_the_root(name: str) -> None:
    assert name in aptix_pipeline.__all__


@pytest.mark.decision("D250")
def test_root_names_are_the_subpackages_own_objects() -> None:
    assert aptix_pipeline.Pipeline is engine.Pipeline
    assert aptix_pipeline.Caller is contracts.Caller
    assert aptix_pipeline.replay is engine.replay.replay
    assert aptix_pipeline.Recorder is engine.replay.Recorder


def _printed_by(code: str) -> str:
    """What ``code`` prints in a fresh interpreter: what it imports starts from nothing."""
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return run.stdout.strip()


@pytest.mark.decision("D250")
def test_importing_the_root_loads_only_its_lazy_table() -> None:
    loaded = _printed_by(
        "import sys, aptix_pipeline; "
        "print(sorted(m for m in sys.modules if m.startswith('aptix_pipeline.')))"
    )

    assert loaded == "['aptix_pipeline.lazy']"


@pytest.mark.decision("D250")
def test_an_adapter_name_loads_only_its_adapter() -> None:
    heavy = _printed_by(
        "import sys, aptix_pipeline; aptix_pipeline.MemoryStore; "
        "print(any(m in sys.modules for m in ('psycopg', 'openai', 'fastapi')))"
    )

    assert heavy == "False"


@pytest.mark.decision("D250")
def test_dir_of_the_root_lists_its_lazy_names() -> None:
    assert {"Pipeline", "embedded_pipeline", "replay"} <= set(dir(aptix_pipeline))


@pytest.mark.decision("D250")
def test_the_root_docstring_example_runs() -> None:
    namespace: dict[str, object] = {}
    docstring = aptix_pipeline.__doc__ or ""
    example = docstring.split("::", 1)[1].split("\n\nThe names", 1)[0]

    exec(inspect.cleandoc(example), namespace)

    result = namespace["result"]
    assert isinstance(result, aptix_pipeline.InvokeResult)
    assert result.successful
    assert result.result is not None
    assert result.result.primary_output_text == "Hello."
