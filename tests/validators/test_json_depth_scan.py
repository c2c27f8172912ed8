"""The depth scan of JSON text (``DESIGN/limits/json-depth``): where text first nests too deep.

``text_too_deep_at`` steps over runs of brackets and skips strings whole; it must
answer as a scan of one character at a time does — the same place, for text and for
bytes, whatever the quotes, escapes and stray brackets — and a megabyte of brackets
is cut just past the limit. The JSON text of a ``ResultJson`` or ``ArgumentsJson`` in
any object of request text is held to the same limit, looked at as the text is
parsed (docs/CONFORMANCE.md D424).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aptix_pipeline.validators import parse_request, text_depth_exceeds, text_too_deep_at

DEPTH_RULE = "DESIGN/limits/json-depth"


def one_character_at_a_time(text: str, limit: int) -> int | None:
    """The scan as the rule says it: brackets outside strings, a closing one with nothing
    open ignored, a backslash escaping the next character in a string."""
    depth, in_string, escaped = 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return index + 1
        elif char in "]}":
            depth = max(depth - 1, 0)
    return None


_PIECES = st.sampled_from(["[", "]", "{", "}", '"', "\\", "a", ",", " ", "[" * 70, "]" * 70, "é"])


@pytest.mark.decision("D424")
@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(_PIECES, max_size=60).map("".join), st.integers(min_value=1, max_value=80))
@example('"a\\"[[[" [[[', 2)
@example("]]]][[[", 2)
def test_the_scan_finds_where_a_one_character_scan_does(text: str, limit: int) -> None:
    expected = one_character_at_a_time(text, limit)

    assert text_too_deep_at(text, limit) == expected
    at_in_bytes = text_too_deep_at(text.encode(), limit)
    assert at_in_bytes == (None if expected is None else len(text[:expected].encode()))
    assert text_depth_exceeds(text, limit) is (expected is not None)


@pytest.mark.decision("D424")
def test_a_megabyte_of_brackets_is_cut_just_past_the_limit() -> None:
    body = '{"Instruction":"x","Artifacts":' + "[" * 500_000 + "]" * 500_000 + "}"

    at = text_too_deep_at(body, 64)

    assert at == len('{"Instruction":"x","Artifacts":') + 64  # the object, then 64 arrays
    assert at is not None
    assert body[:at].count("[") == 64


@pytest.mark.decision("D424")
@pytest.mark.parametrize(
    ("key", "depth", "refused"),
    [
        ("ResultJson", 65, True),
        ("ArgumentsJson", 65, True),
        ("ResultJson", 64, False),
        ("Other", 65, False),
    ],
)
def test_json_text_in_any_object_of_request_text_is_held_to_the_limit(
    key: str, depth: int, refused: bool
) -> None:
    inner = json.dumps({key: "[" * depth + "]" * depth})
    text = '{"Instruction": "hi", "WorkspaceHints": {"a": [[' + inner + "]]}}"

    result = parse_request(text, max_json_depth=64)

    assert (DEPTH_RULE in [error.rule_id for error in result.errors]) is refused
