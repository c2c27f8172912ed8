"""Every InvokeResult serializes, whatever the input (D141)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aptix_pipeline.validators import parse_request, parse_response

_text = st.text(alphabet=st.characters(codec=None), max_size=12) | st.sampled_from(
    ["\ud800", "\udfff", "Instruction", "ArtifactEncoding", "ToolResults", "ResponseType"]
)
_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_text, _values, max_size=6) | _values)
def test_parse_results_always_serialize(data: Any) -> None:
    parse_request(data).to_json().encode("utf-8")
    parse_response(data).to_json().encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | _text)
def test_parse_results_of_any_text_serialize(data: bytes | str) -> None:
    parse_request(data).to_json().encode("utf-8")
