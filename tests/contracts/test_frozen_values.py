"""Sessions, turns, messages and the values inside them are frozen: shared, never copied.

Stores and steps hand these objects from one to another without defensive copies
(``FrozenWireModel``), so none of them may change in place; a change is a new object.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    LLMReply,
    ModeHistoryEntry,
    Session,
    ToolCall,
    ToolResult,
    Turn,
    TurnStatus,
    Usage,
)
from aptix_pipeline.contracts.wire import FrozenWireModel

T0 = datetime(2026, 1, 2, tzinfo=UTC)
CALL = ToolCall(tool_call_id="c1", name="read_file", arguments_json="{}")
ENTRY = ModeHistoryEntry(previous_mode="general", new_mode="review", timestamp=T0)

VALUES: list[tuple[FrozenWireModel, str, object]] = [
    (Session(id="s1", org="acme", user="ana", mode="general", mode_history=[ENTRY]),
     "mode", "review"),
    (Turn(id="t1", session_id="s1", pending_tool_calls=[CALL]), "status", TurnStatus.COMPLETED),
    (ENTRY, "new_mode", "debug"),
    (ChatMessage(role=ChatRole.ASSISTANT, tool_calls=[CALL]), "content", "changed"),
    (LLMReply(text="hi", tool_calls=[CALL]), "text", "changed"),
    (CALL, "name", "write_file"),
    (ToolResult(tool_call_id="c1", execution_ms=1, result_json="{}"), "execution_ms", 2),
    (Usage(input_tokens=1), "input_tokens", 2),
]  # fmt: skip
IDS = [type(value).__name__ for value, _, _ in VALUES]


@pytest.mark.parametrize(("value", "field", "new"), VALUES, ids=IDS)
def test_a_value_refuses_a_change_in_place(value: FrozenWireModel, field: str, new: object) -> None:
    before = value.model_dump()

    with pytest.raises(ValidationError, match="frozen"):
        setattr(value, field, new)

    assert value.model_dump() == before


@pytest.mark.parametrize(("value", "field", "new"), VALUES, ids=IDS)
def test_a_changed_value_is_a_new_object(value: FrozenWireModel, field: str, new: object) -> None:
    before = value.model_dump()

    changed = value.model_copy(update={field: new})

    assert getattr(changed, field) == new
    assert value.model_dump() == before


@pytest.mark.parametrize(("value", "field", "new"), VALUES, ids=IDS)
def test_a_deep_copy_of_a_value_is_the_value_itself(
    value: FrozenWireModel, field: str, new: object
) -> None:
    assert copy.deepcopy(value) is value
    assert value.model_copy(deep=True) is value
