"""Tools: definitions with container metadata, calls, results and the tool-call manifest.

- ``ToolCall`` is AGN-033 §5.1; ``ToolResult`` is AGN-033 §5.2 / AGN-034 §5.
- ``ToolDefinition`` carries the container metadata of the container parameter
  validation design (IsContainer, PluginName, FunctionNames, FunctionCount,
  SourceType), a JSON Schema for its arguments, and where it runs
  (``executes_on``, required: AGN-011 §4.3 merges client and server tools, and
  a call of one goes where its definition says), and for a server tool whether
  running a call again is safe (``idempotent``, ``Idempotence``: the tool ledger,
  docs/TOOLS.md).
- ``ToolCallManifest`` is the pairing of emitted calls and returned results that
  AGN-036 §5 validates.
- ``ContainerInvocationErrorResponse`` and ``ValidationErrorResponse`` are the
  structured errors returned to the LLM, with the snake_case JSON keys that design
  shows.
"""

from __future__ import annotations

import json
from enum import StrEnum
from functools import lru_cache
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from .wire import FrozenWireModel, WireModel

__all__ = [
    "CONTAINER_ERROR_TYPE",
    "VALIDATION_ERROR_TYPE",
    "ArgumentError",
    "ContainerInvocationErrorResponse",
    "Idempotence",
    "ManifestToolResult",
    "SourceType",
    "ToolCall",
    "ToolCallManifest",
    "ToolDefinition",
    "ToolResult",
    "ValidationErrorResponse",
]

CONTAINER_ERROR_TYPE: Final = "container_invocation_error"
VALIDATION_ERROR_TYPE: Final = "validation_error"

_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _local_refs(schema: object) -> list[str]:
    """The ``$ref`` values of a schema, skipping subschemas that set their own ``$id``."""
    refs: list[str] = []
    pending: list[tuple[object, bool]] = [(schema, True)]
    while pending:
        node, is_root = pending.pop()
        if isinstance(node, dict):
            if not is_root and "$id" in node:
                continue
            ref = node.get("$ref")
            if isinstance(ref, str):
                refs.append(ref)
            pending.extend((value, False) for value in node.values())
        elif isinstance(node, list):
            pending.extend((item, False) for item in node)
    return refs


def _unresolved_refs(schema: dict[str, Any]) -> list[str]:
    """``$ref`` values that do not resolve inside ``schema`` (no remote retrieval)."""
    from referencing import Registry, Resource  # jsonschema's, imported on first use
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    base = resource.id() or ""
    resolver = Registry().with_resource(base, resource).resolver(base_uri=base)
    missing = []
    for ref in _local_refs(schema):
        try:
            resolver.lookup(ref)
        except Unresolvable:
            missing.append(ref)
    return missing


class SourceType(StrEnum):
    """Where a container's functions come from (container design, "Metadata Structure")."""

    PLUGIN = "Plugin"
    MCP = "MCP"
    FRONTEND = "Frontend"
    SKILL = "Skill"


class ToolCall(FrozenWireModel):
    """A tool call emitted by the model (AGN-033 §5.1): id, name and JSON arguments."""

    tool_call_id: str
    name: str
    arguments_json: str


class ToolResult(FrozenWireModel):
    """A tool's result (AGN-033 §5.2, AGN-034 §5): exactly one of ResultJson / ErrorMessage.

    The "exactly one" rule is checked by the validators (``AGN-034/5/…``,
    ``AGN-033/5.2/…``) so that a bad result gets an error with a rule id, not a
    bare parse failure.
    """

    tool_call_id: str
    execution_ms: StrictInt
    result_json: str | None = None
    error_message: str | None = None


class ManifestToolResult(WireModel):
    """One result inside a ToolCallManifest (AGN-036 §5): paired with a call by id and name."""

    tool_call_id: str
    name: str | None = None
    result_json: str | None = None
    execution_ms: StrictInt | None = None


class ToolCallManifest(WireModel):
    """The emitted client tool calls and the results returned for them (AGN-036 §5)."""

    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_results: list[ManifestToolResult] = Field(default_factory=list)


Idempotence = Literal["by_key", "naturally"]
"""How a server tool makes a second run of one call safe (docs/TOOLS.md "Exactly once"):
``"by_key"`` — it honours ``ToolInvocation.idempotency_key`` itself (a second run with
the same key acts once); ``"naturally"`` — running it again does no harm (a read)."""


class ToolDefinition(WireModel):
    """A tool the model may call, with its argument schema and container metadata.

    ``executes_on`` has no default: ``"server"`` means the engine runs a call of
    it with the executor registered under its name (``Ports.tools``), ``"client"``
    means the call ends the turn and the client runs it (AGN-011 §4.3). Leaving it
    out is refused, naming the tool.

    A *container* (``is_container``) groups the functions named in
    ``function_names``; it must be called with no arguments to expand (container
    design, "Validation Decision Tree"). A member function names its container in
    ``member_of``.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(_EMPTY_OBJECT_SCHEMA))
    executes_on: Literal["client", "server"]
    is_container: bool = False
    plugin_name: str | None = None
    function_names: tuple[str, ...] | None = None
    function_count: int | None = Field(default=None, ge=0)
    source_type: SourceType | None = None
    member_of: str | None = None
    idempotent: Idempotence | None = None
    """A server tool's declaration that a call may run again (``Idempotence``); ``None``:
    it may not, and a call an earlier attempt started but did not finish is not run
    again (``PipelineOptions.possibly_executed_policy``)."""

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ToolDefinition:
        # A definition is a frozen value shared by every turn that advertises it:
        # copying a context (AGN-036 §4.10's PRE snapshot) need not copy its schemas.
        return self

    @model_validator(mode="before")
    @classmethod
    def _says_where_it_runs(cls, data: Any) -> Any:
        if isinstance(data, dict) and "executes_on" not in data and "ExecutesOn" not in data:
            name = data.get("name", data.get("Name"))
            raise ValueError(
                f"tool {name!r} does not say where it runs: give executes_on='server' "
                "(an executor registered under its name runs it) or executes_on='client' "
                "(the client runs it)"
            )
        return data

    @field_validator("parameters")
    @classmethod
    def _parameters_is_a_json_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            text = json.dumps(schema)
        except (TypeError, ValueError):  # not JSON data: checked afresh, and refused there
            problem = _schema_problem_of(schema)
        else:
            problem = _schema_problem(text)
        if problem is not None:
            raise ValueError(problem)
        return schema

    @model_validator(mode="after")
    def _container_metadata_is_consistent(self) -> ToolDefinition:
        names, count = self.function_names, self.function_count
        if names is not None and count is not None and count != len(names):
            raise ValueError(
                f"FunctionCount ({count}) does not match the {len(names)} FunctionNames"
            )
        if not self.is_container and self.function_names:
            raise ValueError("FunctionNames is container metadata; set IsContainer to true")
        if self.idempotent is not None and self.executes_on != "server":
            raise ValueError("idempotent is a server tool's declaration (the tool ledger)")
        return self


_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_TEXT_KEYWORDS = frozenset({"title", "description", "format", "$comment"})
_COUNT_KEYWORDS = frozenset(
    {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}
)
_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_ANY_KEYWORDS = frozenset({"default", "const"})


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _plainly_valid(node: object) -> bool:
    """Whether ``node`` is a JSON Schema built only from keywords whose Draft 2020-12
    meta-schema rules are checked here: types, properties, required, items, enum and
    the like, with values of the types the meta-schema asks for.

    Such a schema is valid and has no ``$ref``, so the check needs no jsonschema
    (which, with its format checkers, costs ~100 ms to import). Anything else —
    another keyword, a pattern, a ``$ref`` — is left to jsonschema.
    """
    if isinstance(node, bool):
        return True
    if not isinstance(node, dict):
        return False
    for key, value in node.items():
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            if not kinds or not all(isinstance(k, str) and k in _JSON_TYPES for k in kinds):
                return False
            if len(set(kinds)) != len(kinds):
                return False
        elif key == "properties":
            if not isinstance(value, dict) or not all(_plainly_valid(v) for v in value.values()):
                return False
        elif key in ("items", "additionalProperties"):
            if not _plainly_valid(value):
                return False
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return False
            if len(set(value)) != len(value):
                return False
        elif key in ("enum", "examples"):
            if not isinstance(value, list):
                return False
        elif key in _TEXT_KEYWORDS:
            if not isinstance(value, str):
                return False
        elif key in _COUNT_KEYWORDS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return False
        elif key in _NUMBER_KEYWORDS:
            if not _is_number(value):
                return False
        elif key not in _ANY_KEYWORDS:
            return False
    return True


def _schema_problem_of(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a usable argument schema, or ``None``."""
    if _plainly_valid(schema):
        return None
    # jsonschema and its format checkers cost ~100 ms to import: only when a schema needs it.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return f"Parameters is not a valid JSON Schema: {error.message}"
    unresolved = _unresolved_refs(schema)
    if unresolved:
        return (
            f"Parameters has $ref(s) that do not resolve within the schema: {unresolved} "
            "(remote schemas are never fetched)"
        )
    return None


@lru_cache(maxsize=1024)
def _schema_problem(text: str) -> str | None:
    # The same few schemas are validated again and again (every catalog answer a
    # replay decodes, every request's tools): checking one costs ~2 ms.
    return _schema_problem_of(json.loads(text))


class _SnakeCaseModel(BaseModel):
    """Error payloads keep the snake_case JSON keys the container design shows."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ContainerInvocationErrorResponse(_SnakeCaseModel):
    """Returned to the LLM when it calls a container with arguments (container design)."""

    error_type: Literal["container_invocation_error"] = CONTAINER_ERROR_TYPE
    container_name: str
    attempted_parameters: Any
    available_functions: list[str]
    error_message: str
    retry_guidance: str


class ArgumentError(_SnakeCaseModel):
    """One argument problem inside a ValidationErrorResponse (container design)."""

    property: str
    attempted_value: Any
    error_message: str
    error_code: str


class ValidationErrorResponse(_SnakeCaseModel):
    """Returned to the LLM when a tool's arguments fail its JSON Schema (container design)."""

    error_type: Literal["validation_error"] = VALIDATION_ERROR_TYPE
    errors: list[ArgumentError]
    retry_guidance: str
