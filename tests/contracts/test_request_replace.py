"""``LLMRequest.replace``: the typed way for a hook to change a request."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aptix_pipeline import ChatMessage, ChatRole, LLMRequest

HELLO = ChatMessage(role=ChatRole.USER, content="Hello")
REMINDER = ChatMessage(role=ChatRole.SYSTEM, content="Answer briefly.")


@pytest.mark.decision("D426")
def test_replace_changes_the_fields_given_and_keeps_the_others() -> None:
    request = LLMRequest(model="m1", mode="general", messages=[HELLO])

    changed = request.replace(messages=[*request.messages, REMINDER])

    assert changed.messages == [HELLO, REMINDER]
    assert (changed.model, changed.mode, changed.tools) == ("m1", "general", [])
    assert request.messages == [HELLO]  # the original is untouched
    assert request.replace(model=None).model is None  # None is a value, not "keep"
    assert request.replace() is request


@pytest.mark.decision("D426")
def test_a_misspelt_keyword_fails_where_model_copy_drops_it() -> None:
    request = LLMRequest(mode="general", messages=[HELLO])

    assert request.model_copy(update={"mesages": []}).messages == [HELLO]  # silently ignored
    with pytest.raises(TypeError, match="unexpected keyword argument 'mesages'"):
        request.replace(mesages=[])  # type: ignore[call-arg]


@pytest.mark.decision("D426")
def test_a_value_of_the_wrong_type_is_refused_naming_the_field() -> None:
    request = LLMRequest(mode="general", messages=[HELLO])

    with pytest.raises(ValidationError, match="messages"):
        request.replace(messages="Hello")  # type: ignore[arg-type]
