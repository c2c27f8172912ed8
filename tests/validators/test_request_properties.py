"""AGN-034 ``parse_request`` as a property: any input gets an answer, never an exception.

Hypothesis draws arbitrary JSON objects (with the real wire field names mixed in),
arbitrary text and bytes, and well-formed requests of every scenario with one field
overwritten by any JSON value. For all of them ``parse_request`` either returns the
parsed ``AgentExecuteRequest`` or an unsuccessful result whose errors carry rule ids
and point at a field; it never raises, never changes its input, and what it accepts
survives a trip through its own wire JSON.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from aptix_pipeline.contracts import AgentExecuteRequest, ContextType, RagOperator
from aptix_pipeline.validators import parse_request

Json = Any
"""A JSON value as ``json.loads`` returns it."""

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, database=None)

WIRE_NAMES = (
    # AgentExecuteRequest (AGN-034 §3, §4, §5)
    "SessionId", "TurnId", "Instruction", "InputArtifacts", "ClipboardImages", "RagScope",
    "SolutionContextText", "WorkspaceHints", "Stream", "AgentContextId",
    "ConversationContextId", "ToolResults",
    # InputArtifact, ClipboardImage, RagScopeCondition, WorkspaceHints, ToolResult
    "RelativePath", "FileName", "Contents", "Origin", "MimeType", "Language", "Encoding",
    "Id", "DataBase64", "Key", "Operator", "Values", "WorkspaceId", "RepositoryName",
    "LanguageHint", "ToolCallId", "ExecutionMs", "ResultJson", "ErrorMessage",
    # server-owned and snake_case names, refused on the wire
    "Mode", "CorrelationId", "previous_response_id", "session_id",
)  # fmt: skip

KEYS = st.sampled_from(WIRE_NAMES) | st.text(max_size=12)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
JSON_VALUES: st.SearchStrategy[Json] = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=20,
)
JSON_OBJECTS: st.SearchStrategy[dict[str, Json]] = st.dictionaries(KEYS, JSON_VALUES, max_size=8)

# Well-formed parts of a request (AGN-034 §4.2-§4.4, §5).
IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,15}", fullmatch=True)
NON_BLANK = st.text(min_size=1).filter(lambda text: bool(text.strip()))
SEGMENTS = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}", fullmatch=True)
RELATIVE_PATHS = st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join)
BASE64 = st.binary(max_size=32).map(lambda raw: base64.b64encode(raw).decode("ascii"))


@st.composite
def artifacts(draw: st.DrawFn) -> dict[str, Json]:
    """A valid input artifact: a relative path inside the root, contents matching Encoding."""
    path = draw(RELATIVE_PATHS)
    encoding = draw(st.sampled_from([None, "utf8", "base64"]))
    contents = draw(BASE64 if encoding == "base64" else st.text())
    artifact: dict[str, Json] = {
        "RelativePath": path,
        "FileName": path.rsplit("/", 1)[-1],
        "Contents": contents,
        "Origin": draw(st.sampled_from(["ide", "user"])),
    }
    if encoding is not None:
        artifact["Encoding"] = encoding
    if draw(st.booleans()):
        artifact["Language"] = draw(st.text(max_size=10))
    return artifact


IMAGES = st.fixed_dictionaries(
    {
        "Id": IDS,
        "MimeType": st.sampled_from(["image/png", "image/jpeg", "image/gif"]),
        "DataBase64": st.binary(min_size=1, max_size=32).map(
            lambda raw: base64.b64encode(raw).decode("ascii")
        ),
    }
)
CONDITIONS = st.fixed_dictionaries(
    {
        "Key": NON_BLANK,
        "Operator": st.sampled_from([operator.value for operator in RagOperator]),
        "Values": st.lists(st.text(max_size=10), min_size=1, max_size=3),
    }
)
WORKSPACE_HINTS = st.fixed_dictionaries(
    {},
    optional={
        "WorkspaceId": st.text(max_size=10),
        "RepositoryName": st.text(max_size=10),
        "LanguageHint": st.text(max_size=10),
    },
)


@st.composite
def tool_results(draw: st.DrawFn) -> list[dict[str, Json]]:
    """One or more results with distinct ids, each holding exactly one outcome."""
    call_ids = draw(st.lists(IDS, min_size=1, max_size=4, unique=True))
    results: list[dict[str, Json]] = []
    for call_id in call_ids:
        result: dict[str, Json] = {
            "ToolCallId": call_id,
            "ExecutionMs": draw(st.integers(min_value=0)),
        }
        if draw(st.booleans()):
            result["ResultJson"] = json.dumps(draw(JSON_VALUES))
        else:
            result["ErrorMessage"] = draw(NON_BLANK)
        results.append(result)
    return results


@st.composite
def valid_requests(draw: st.DrawFn) -> dict[str, Json]:
    """A request every AGN-034 rule accepts, of any of the three scenarios."""
    kind = draw(st.sampled_from(ContextType))
    if kind is ContextType.CLIENT_TOOL_CALL_CONTINUATION:
        return {"SessionId": draw(IDS), "TurnId": draw(IDS), "ToolResults": draw(tool_results())}
    data: dict[str, Json] = {}
    if kind is ContextType.FOLLOW_ON:
        data |= {"SessionId": draw(IDS), "TurnId": draw(IDS)}
    inputs = draw(
        st.sets(st.sampled_from(["Instruction", "InputArtifacts", "ClipboardImages"]), min_size=1)
    )
    if "Instruction" in inputs:
        data["Instruction"] = draw(NON_BLANK)
    if "InputArtifacts" in inputs:
        data["InputArtifacts"] = draw(st.lists(artifacts(), min_size=1, max_size=3))
    if "ClipboardImages" in inputs:
        data["ClipboardImages"] = draw(st.lists(IMAGES, min_size=1, max_size=2))
    optional = {
        "RagScope": st.lists(CONDITIONS, max_size=3),
        "SolutionContextText": st.text(),
        "WorkspaceHints": WORKSPACE_HINTS,
        "Stream": st.booleans(),
        "AgentContextId": IDS,
        "ConversationContextId": IDS,
    }
    for name, values in optional.items():
        if draw(st.booleans()):
            data[name] = draw(values)
    return data


@st.composite
def damaged_requests(draw: st.DrawFn) -> dict[str, Json]:
    """A valid request with one field, known or not, set to any JSON value or removed."""
    data = draw(valid_requests())
    name = draw(KEYS)
    if name in data and draw(st.booleans()):
        del data[name]
    else:
        data[name] = draw(JSON_VALUES)
    return data


ANY_OBJECT = JSON_OBJECTS | valid_requests() | damaged_requests()
ANY_TEXT = (
    st.text()
    | st.binary()
    | ANY_OBJECT.map(json.dumps)
    | JSON_VALUES.map(json.dumps)
    | st.text(st.sampled_from('{}[]",:0123456789.eE+-truefalsn \\u'))
)


@PROPERTY_SETTINGS
@given(data=ANY_OBJECT)
@example(data={})
@example(data={"": 1})
def test_any_json_object_is_parsed_or_refused_with_rule_ids_and_a_field(
    data: dict[str, Json],
) -> None:
    result = parse_request(data)

    if result.successful:
        assert isinstance(result.result, AgentExecuteRequest)
        assert result.errors == ()
    else:
        assert result.result is None
        assert result.errors
        assert all(error.rule_id for error in result.errors)
        assert any(error.field is not None for error in result.errors)


@PROPERTY_SETTINGS
@given(text=ANY_TEXT)
@example(text="[" * 100_000 + "]" * 100_000)
@example(text='{"Instruction": "x", "ExecutionMs": NaN}')
@example(text=b"\xff\xfe{")
def test_any_text_is_answered_without_raising(text: str | bytes) -> None:
    result = parse_request(text)

    assert result.successful == (result.result is not None)
    assert all(error.rule_id for error in result.errors)


@PROPERTY_SETTINGS
@given(data=ANY_OBJECT)
def test_accepted_request_round_trips_through_its_wire_json(data: dict[str, Json]) -> None:
    result = parse_request(data)
    if not result.successful:
        return
    assert result.result is not None

    again = parse_request(result.result.to_json())

    assert again.successful, again.errors
    assert again.result == result.result


@PROPERTY_SETTINGS
@given(data=valid_requests())
def test_valid_request_is_accepted_and_its_wire_form_kept(data: dict[str, Json]) -> None:
    result = parse_request(data)

    assert result.successful, result.errors
    assert result.result is not None
    assert result.result.to_wire() == data


@PROPERTY_SETTINGS
@given(data=ANY_OBJECT)
def test_parse_request_does_not_change_the_mapping_it_is_given(data: dict[str, Json]) -> None:
    before = copy.deepcopy(data)

    parse_request(data)

    assert data == before
