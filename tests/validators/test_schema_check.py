"""ToolDefinition's JSON-Schema check: plain schemas need no jsonschema, and agree with it.

A schema built only from keywords whose meta-schema rules ``_plainly_valid`` checks
is accepted without importing jsonschema (and its format checkers); every other
schema goes to jsonschema. The property test holds the fast path to jsonschema's
own verdict on generated schemas, valid and not. A schema's check is kept by its JSON
text, so a schema that many definitions share is checked once.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from aptix_pipeline.contracts import ToolDefinition
from aptix_pipeline.contracts.tools import _plainly_valid, _schema_problem

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(-2, 2),
    st.text(max_size=3),
    st.lists(st.sampled_from(["a", "b", "a"]), max_size=3),
    st.sampled_from(
        ["object", "string", "number", "integer", "boolean", "null", "array", "strange"]
    ),
)
_KEYS = st.sampled_from(
    [
        "type",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "description",
        "title",
        "format",
        "minLength",
        "maxItems",
        "minimum",
        "exclusiveMaximum",
        "default",
        "const",
        "examples",
        "pattern",
        "$ref",
        "oneOf",
        "minProperties",
    ]
)


def _schemas() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(st.booleans(), st.dictionaries(_KEYS, _VALUES, max_size=4)),
        lambda inner: st.one_of(
            st.dictionaries(_KEYS, st.one_of(_VALUES, inner), max_size=4),
            st.builds(
                lambda p, t: {"type": t, "properties": p},
                st.dictionaries(st.text(max_size=2), inner, max_size=3),
                st.sampled_from(["object", ["object", "null"], ["object", "object"]]),
            ),
        ),
        max_leaves=8,
    )


def _jsonschema_accepts(schema: Any) -> bool:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(_schemas())
def test_a_plainly_valid_schema_is_one_jsonschema_accepts(schema: Any) -> None:
    if _plainly_valid(schema):
        assert _jsonschema_accepts(schema), schema


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {"path": {"type": "string", "minLength": 1}},
            "required": ["path"],
            "additionalProperties": False,
        },
        {"type": ["string", "null"], "enum": ["a", None], "description": "d"},
        {"type": "array", "items": {"type": "number", "minimum": 0}},
        True,
    ],
)
def test_plain_schemas_are_recognised(schema: Any) -> None:
    assert _plainly_valid(schema)
    assert _jsonschema_accepts(schema)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "strange"}, "not a valid JSON Schema"),
        ({"type": "string", "pattern": "("}, "not a valid JSON Schema"),
        ({"type": "object", "required": ["a", "a"]}, "not a valid JSON Schema"),
        ({"minLength": -1}, "not a valid JSON Schema"),
        ({"$ref": "#/$defs/missing"}, "do not resolve"),
    ],
)
def test_other_schemas_are_judged_by_jsonschema(schema: dict[str, Any], message: str) -> None:
    assert not _plainly_valid(schema)
    with pytest.raises(ValueError, match=message):
        ToolDefinition(name="t", executes_on="client", parameters=schema)


def test_a_plain_definition_does_not_import_jsonschema() -> None:
    code = (
        "import sys\n"
        "from aptix_pipeline.contracts import ToolDefinition\n"
        "ToolDefinition(name='t', executes_on='client', parameters={'type': 'object', "
        "'properties': {'a': {'type': 'number'}}, 'required': ['a']})\n"
        "assert 'jsonschema' not in sys.modules, 'jsonschema was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.decision("D126")
def test_a_schema_shared_by_several_definitions_is_checked_once() -> None:
    schema = {"type": "object", "properties": {"checked_once": {"type": "string"}}}
    before = _schema_problem.cache_info()

    tools = [
        ToolDefinition(name=f"tool_{n}", executes_on="client", parameters=dict(schema))
        for n in range(3)
    ]

    after = _schema_problem.cache_info()
    assert [tool.parameters for tool in tools] == [schema] * 3
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)
