"""State per step: what each step of a turn changed in its context, as a diff
(issue 33 part 3, docs/UI.md "State per step").

``StepChanges`` watches a turn's transitions: after each one it reads the few
things of the turn's state a person follows (the mode, the tool set, the messages
the turn has added to the session, the response kind) and keeps a ``StepChange``
naming the step and what it changed since the step before. The turn browser shows
them in the timeline beside each step.

A change holds no user content: messages are counted by role, tools by name.
With content capture on, each added message's text is kept too (``texts``).
The changes are kept beside the state trace in the store (``KeptTrace.steps``), not
in it: the trace a recording replays against is the same with them or without.

``changes_to_json`` / ``changes_from_json`` give the compact JSON form.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aptix_pipeline.contracts import ChatMessage, ToolDefinition
from aptix_pipeline.steps import TurnScope

from .records import quick_init
from .trace import TransitionRecord

__all__ = ["StepChange", "StepChanges", "changes_from_json", "changes_to_json"]


@quick_init
@dataclass(frozen=True, slots=True)
class StepChange:
    """What one step changed: ``mode`` (before, after) when it changed; the tools it
    added to and removed from the turn's tool set; the roles of the messages it added
    (``texts``: their text, under content capture only); the response kind it set;
    and the state the turn went to (``to``)."""

    step: str
    to: str
    mode: tuple[str | None, str | None] | None = None
    tools_added: tuple[str, ...] = ()
    tools_removed: tuple[str, ...] = ()
    messages_added: tuple[str, ...] = ()
    texts: tuple[str, ...] | None = None
    response_type: str | None = None

    @property
    def changed(self) -> bool:
        """Whether the step changed anything shown."""
        return bool(
            self.mode
            or self.tools_added
            or self.tools_removed
            or self.messages_added
            or self.response_type
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``step`` and ``to``, then only what changed."""
        data: dict[str, Any] = {"step": self.step, "to": self.to}
        if self.mode is not None:
            data["mode"] = list(self.mode)
        if self.tools_added:
            data["tools_added"] = list(self.tools_added)
        if self.tools_removed:
            data["tools_removed"] = list(self.tools_removed)
        if self.messages_added:
            data["messages_added"] = list(self.messages_added)
        if self.texts is not None:
            data["texts"] = list(self.texts)
        if self.response_type is not None:
            data["response_type"] = self.response_type
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> StepChange:
        """The change ``to_dict`` wrote."""
        mode = data.get("mode")
        texts = data.get("texts")
        return StepChange(
            step=str(data["step"]),
            to=str(data["to"]),
            mode=None if mode is None else (mode[0], mode[1]),
            tools_added=tuple(data.get("tools_added", ())),
            tools_removed=tuple(data.get("tools_removed", ())),
            messages_added=tuple(data.get("messages_added", ())),
            texts=None if texts is None else tuple(texts),
            response_type=data.get("response_type"),
        )


def changes_to_json(changes: Sequence[StepChange]) -> str:
    """The compact JSON list of ``changes`` (``json.dumps`` of their ``to_dict``), each
    change's text remembered when it holds no text: they repeat turn after turn."""
    return f"[{', '.join([_change_json(change) for change in changes])}]"


_CHANGE_JSON: dict[StepChange, str] = {}
_CHANGE_JSON_MAX = 4096
"""The most changes' text remembered; past it the memory starts again."""


def _change_json(change: StepChange) -> str:
    if change.texts is not None:  # content: never remembered
        return _ENCODE(change.to_dict())
    text = _CHANGE_JSON.get(change)
    if text is None:
        if len(_CHANGE_JSON) >= _CHANGE_JSON_MAX:
            _CHANGE_JSON.clear()
        text = _CHANGE_JSON[change] = _ENCODE(change.to_dict())
    return text


def changes_from_json(text: str) -> tuple[StepChange, ...]:
    """The changes ``changes_to_json`` wrote; ``ValueError`` when the text is not such a list."""
    try:
        data = json.loads(text)
        if not isinstance(data, list):
            raise TypeError("not a list")
        return tuple(StepChange.from_dict(item) for item in data)
    except (TypeError, KeyError, IndexError, json.JSONDecodeError) as error:
        raise ValueError(f"malformed step changes: {error}") from None


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)``, without making an encoder each call."""


def _tool_names(tools: list[ToolDefinition] | None) -> tuple[str, ...]:
    return () if not tools else tuple(tool.name for tool in tools)


def _text(message: ChatMessage) -> str:
    content: Any = message.content
    return content if isinstance(content, str) else json.dumps(str(content))


class StepChanges:
    """The changes of one turn's steps, in order (module docstring)."""

    __slots__ = (
        "_capture",
        "_messages",
        "_mode",
        "_response",
        "_scope",
        "_tools",
        "_tools_of",
        "changes",
    )

    def __init__(self, scope: TurnScope, capture_content: bool) -> None:
        self._scope = scope
        self._capture = capture_content
        self._mode: str | None = None
        self._tools_of: object = None
        self._tools: tuple[str, ...] = ()
        self._messages = 0
        self._response: str | None = None
        self.changes: list[StepChange] = []

    def wrap(self, keep: Callable[[TransitionRecord], None]) -> Callable[[TransitionRecord], None]:
        """``keep``, noting each transition's change first."""

        def keep_and_note(record: TransitionRecord) -> None:
            self.took(record)
            keep(record)

        return keep_and_note

    def took(self, record: TransitionRecord) -> None:
        """The turn took ``record``: keep what its step changed (a step changes the tool
        set by replacing it, so an unchanged list is not compared again)."""
        ctx = self._scope.context
        if ctx is None:
            mode, tools_of, response_kind = None, None, None
        else:
            mode, tools_of, response_kind = ctx.mode, ctx.tools, ctx.response_type
        tools = self._tools
        added_tools: tuple[str, ...] = ()
        removed_tools: tuple[str, ...] = ()
        if tools_of is not self._tools_of:
            tools = _tool_names(tools_of)
            before, after = set(self._tools), set(tools)
            added_tools = tuple(name for name in tools if name not in before)
            removed_tools = tuple(name for name in self._tools if name not in after)
        messages = self._scope.new_messages
        added = messages[self._messages :] if len(messages) > self._messages else ()
        response = None if response_kind is None else str(response_kind)
        self.changes.append(
            StepChange(
                record.event,
                record.target,
                (self._mode, mode) if mode != self._mode else None,
                added_tools,
                removed_tools,
                tuple([str(message.role.value) for message in added]) if added else (),
                tuple([_text(message) for message in added]) if self._capture and added else None,
                response if response != self._response else None,
            )
        )
        self._mode, self._tools_of, self._tools = mode, tools_of, tools
        self._messages += len(added)
        self._response = response
