"""Redaction: a turn recording without user content, that still replays.

User content is everything the client sent or a tool returned, and everything
the model said (DESIGN.md "Observability without leaks"), except what a replay
needs for the turn's structure. What stays:

- ids (``SessionId``, ``TurnId``, ``ToolCallId``, a clipboard image's ``Id``,
  ``AgentContextId``, ``ConversationContextId``), tool names, modes, rule ids,
  error codes and fields, ``Origin``, ``Encoding``, ``Operator``, ``Stream``,
  ``ExecutionMs``, token counts, times, and the shape of everything (keys of the
  engine's own records, list lengths, which fields are present);
- the argument keys a tool's JSON Schema defines (``properties``), and argument
  values the schema enumerates (``enum``, ``const``): catalog data, not content
  (the schemas come from the recording's catalog answers and model requests);
- the ``mode`` and ``branch`` of an ``agent_change_mode`` call (AGN-011 §5.1), so
  a mode change replays.

Everything else is replaced by a placeholder that keeps the request valid under
the same AGN-034 rules (so a replay walks the same path, and a refused request
is still refused by the same rule):

- text becomes ``[redacted]``; empty or blank text stays (it holds nothing, and
  the rules tell it apart: a blank ``Instruction`` is no input, AGN-034 §2.1); text
  that was valid base64 becomes valid base64 (``REDACTED_BASE64``, AGN-034 §4.2,
  §4.3);
- ``RelativePath`` keeps its separators and its ``.``/``..`` segments, every other
  segment becoming ``redacted``; an absolute path becomes ``/redacted`` (AGN-034
  §4.2: a relative path stays relative and inside the root, a bad one stays bad);
- a ``MimeType`` becomes ``image/redacted`` when it was ``image/…``, else
  ``redacted`` (AGN-034 §4.3); an ``Operator`` outside the four is redacted;
- JSON text (``ResultJson``, ``ArgumentsJson``, a server tool's result) stays JSON
  of the same shape: object keys become ``k1``, ``k2``, … in order (distinct keys
  stay distinct, a duplicate key stays a duplicate), strings are redacted,
  numbers become ``0`` (``0.0`` for a float; a schema's ``minimum`` and ``maximum``
  are respected), booleans and nulls stay; text that is not JSON is redacted
  whole and so stays invalid;
- a usage ledger call's ``Charge`` (its ``Tokens`` and ``Cost``), a budget check's
  ``Amount`` and a budget refusal's ``Requested`` become ``0``: a reservation's
  estimate counts the prompt's characters, which a redacted prompt does not have;
- error and warning messages are redacted: they may quote the client's values
  (a path, a MIME type); their code, rule id and field stay;
- a file a server tool made (a ``ToolOutput``'s, ``FileStore.put``'s, a
  ``FileRef``) keeps its size, hash and expiry; its name becomes ``redacted``, its
  MIME type ``<top-level type>/redacted`` and its description ``[redacted]``, a
  name or type unfit to serve staying unfit (``validators/tool_files.py``); a
  file's ``Url`` becomes ``REDACTED_URL`` when it was an absolute URL (AGN-033 §6.3);
- a client's idempotency key becomes ``redacted`` (a stored answer's ``Key``
  ``key:redacted``; ``TurnRecording.redact`` sets the recording's key alike): a
  fixed placeholder, so redaction stays idempotent and a replay saves its answer
  under the keys the redacted calls hold;
- a message's content parts (``ChatMessage.parts``) keep their shape: an image
  part's bytes (``Data``) become ``REDACTED_BASE64``, its ``MimeType`` and an
  artifact's ``RelativePath`` and ``Language`` anywhere in the engine's records
  are redacted as in the request, and its clipboard image ``Id`` stays. An
  image's size goes with its bytes: a redacted recording replays from a request
  whose images are the placeholder (docs/RECORDING.md).

Redaction is idempotent: a redacted recording redacts to itself, so a replay
compares a redacted recording with the redacted form of what the code does now.

Every walk here is iterative, and linear in the size of its input: data of any
depth (a tool result nested 100,000 deep) is redacted without recursion.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from aptix_pipeline.engine.deep_json import Pairs as _Pairs
from aptix_pipeline.engine.deep_json import dump_json, parse_json
from aptix_pipeline.validators import (
    KEY_PREFIX,
    file_name_problem,
    is_base64,
    is_reference_url,
    mime_type_problem,
)

from .depth_cut import read_part_of_text, read_part_of_value
from .records import PortCall, RecordedError

__all__ = [
    "CONTENT_KEYS",
    "JSON_TEXT_KEYS",
    "REDACTED",
    "REDACTED_BASE64",
    "REDACTED_IDEMPOTENCY_KEY",
    "REDACTED_URL",
    "Redactor",
    "redact_json_text",
    "redact_port_call",
    "redact_request",
    "redact_text",
    "redact_value",
]

REDACTED = "[redacted]"
REDACTED_BASE64 = base64.b64encode(b"redacted").decode("ascii")
REDACTED_IDEMPOTENCY_KEY = "redacted"
"""A redacted recording's idempotency key: a valid key, the same for every key (D401)."""
REDACTED_URL = "https://redacted.invalid/redacted"
"""A redacted file URL that was absolute (AGN-033 §6.3): still one, pointing nowhere."""
_REDACTED_WORD = "redacted"  # a path segment, a MIME subtype

CONTENT_KEYS = frozenset(
    {
        # AGN-034 request
        "Instruction",
        "Contents",
        "DataBase64",
        "SolutionContextText",
        "ErrorMessage",
        # messages (an image part's bytes), model replies and the AGN-033 response
        "Data",
        "Content",
        "Text",
        "PrimaryOutputText",
        "ToolContinuationMessage",
        # AGN-011 ModeHistory
        "Reason",
        # errors and warnings of a result: they may quote a client's value
        "Message",
        # the state trace (content capture) and set_solution_context's argument
        "text",
        "reason",
        # a stored answer's request digest: a hash of user content (D181)
        "RequestDigest",
    }
)
"""Keys of the engine's records whose values are user content."""

JSON_TEXT_KEYS = frozenset({"ArgumentsJson", "ResultJson"})
"""Keys whose values are JSON text holding user content."""

_MODE_CHANGE = "agent_change_mode"
_MODE_CHANGE_KEPT = frozenset({"mode", "branch"})
_SCHEMA_KEY = "Parameters"  # a tool definition's JSON Schema: catalog data
_RAG_OPERATORS = frozenset({"==", "!=", "contains", "does_not_contain"})
_NOTHING: frozenset[str] = frozenset()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def redact_text(text: str) -> str:
    """The placeholder for one piece of user text (base64 stays base64).

    Empty or blank text stays as it is: it holds no content, and the engine's
    rules tell it apart (an empty model reply has no outcome, AGN-036 §4.9; a
    blank ``Instruction`` is no input, AGN-034 §2.1). Text holding a lone surrogate
    keeps one after the placeholder: the engine refuses such text
    (AGN-034/4.1/text-utf8), and the redacted request must be refused alike.
    """
    if not text.strip():
        return text
    placeholder = REDACTED_BASE64 if is_base64(text) else REDACTED
    # Text holding a lone surrogate is refused (AGN-034/4.1/text-utf8): its placeholder
    # holds one too, so the redacted request is refused alike (D164).
    surrogate = _LONE_SURROGATE.search(text)
    return placeholder + surrogate.group() if surrogate else placeholder


# --- rules: what each part of the data becomes ----------------------------------------------


class _Rule:
    """How one part of JSON data (and, by default, everything under it) is redacted."""

    def keys(self, keys: list[Any]) -> list[Any]:
        """The object's keys after redaction."""
        return keys

    def child(self, node: Any, key: str) -> _Rule | None:
        """The rule for an object's value under ``key``; ``None`` keeps it as it is."""
        return self

    def item(self) -> _Rule | None:
        """The rule for a list's items."""
        return self

    def leaf(self, value: Any) -> Any:
        """A string, number, boolean or null after redaction."""
        return value


def _zero(value: int | float, schema: Mapping[str, Any] | None = None) -> int | float:
    """The placeholder of a number: 0 of its type, inside a schema's bounds."""
    placeholder: float = 0
    if schema is not None:
        low, above, high = (_bound(schema, k) for k in ("minimum", "exclusiveMinimum", "maximum"))
        if low is not None and low > placeholder:
            placeholder = low
        if above is not None and above >= placeholder:
            placeholder = above + 1
        if high is not None and high < placeholder:
            placeholder = high
    if isinstance(value, float):
        return float(placeholder)
    return int(placeholder) if float(placeholder).is_integer() else placeholder


def _bound(schema: Mapping[str, Any], keyword: str) -> float | None:
    found = schema.get(keyword)
    return float(found) if isinstance(found, int | float) and not isinstance(found, bool) else None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Content(_Rule):
    """User content: every string and number replaced; keys, booleans and nulls kept."""

    def leaf(self, value: Any) -> Any:
        if isinstance(value, str):
            return redact_text(value)
        if _is_number(value):
            return _zero(value)
        return value


class _Data(_Rule):
    """JSON a client, tool or model made: keys, strings and numbers all replaced.

    Guided by a JSON Schema when the data is a tool's arguments: the keys its
    ``properties`` define and the values it enumerates stay; ``kept`` names
    top-level keys whose values stay (``agent_change_mode``'s mode and branch).
    """

    def __init__(
        self, schema: Mapping[str, Any] | None = None, kept: frozenset[str] = _NOTHING
    ) -> None:
        self.schema = schema
        self.kept = kept

    def _properties(self) -> Mapping[str, Any]:
        found = self.schema.get("properties") if self.schema is not None else None
        return found if isinstance(found, Mapping) else {}

    def keys(self, keys: list[Any]) -> list[Any]:
        defined = self._properties()
        placeholders: dict[Any, str] = {}
        made = []
        for key in keys:
            if key in defined or key in self.kept:
                made.append(key)
                continue
            if key not in placeholders:
                placeholders[key] = f"k{len(placeholders) + 1}"
            made.append(placeholders[key])
        return made

    def child(self, node: Any, key: str) -> _Rule | None:
        if key in self.kept:
            return None
        schema = self._properties().get(key)
        return _Data(schema if isinstance(schema, Mapping) else None)

    def item(self) -> _Rule | None:
        items = self.schema.get("items") if self.schema is not None else None
        return _Data(items if isinstance(items, Mapping) else None)

    def leaf(self, value: Any) -> Any:
        schema = self.schema
        if schema is not None and value is not None and not isinstance(value, bool):
            allowed = schema.get("enum")
            if (isinstance(allowed, list) and value in allowed) or (
                "const" in schema and value == schema["const"]
            ):
                return value
        if isinstance(value, str):
            return redact_text(value)
        if _is_number(value):
            return _zero(value, schema)
        return value


class _JsonText(_Rule):
    """A string that holds JSON text: read, redacted by ``inner``, written back compact.

    Text that is not JSON is redacted whole (and so stays invalid); a value that
    is not a string (a host's odd data) is redacted by ``inner`` as it is. With
    ``max_depth`` (a request's ``ResultJson``), text nested deeper is first cut to
    what the engine reads of it (``depth_cut.py``), and stays nested that deep.
    """

    def __init__(self, inner: _Rule, max_depth: int | None = None) -> None:
        self.inner = inner
        self.max_depth = max_depth

    def leaf(self, value: Any) -> Any:
        if not isinstance(value, str):
            return self.inner.leaf(value)
        part = None if self.max_depth is None else read_part_of_text(value, self.max_depth)
        try:
            parsed = parse_json(value if part is None else part)
        except ValueError:  # a cut that is not JSON keeps its brackets, so its depth
            return redact_text(value) if part is None else _scrambled(part)
        return dump_json(_redacted(parsed, self.inner))


class _Leaf(_Rule):
    """A request field with a placeholder of its own (a path, a MIME type, an operator)."""

    def __init__(self, placeholder: Any) -> None:
        self.placeholder = placeholder

    def leaf(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.placeholder(value)
        return _CONTENT.leaf(value)

    def child(self, node: Any, key: str) -> _Rule | None:
        return _CONTENT

    def item(self) -> _Rule | None:
        return _CONTENT


class _Fields(_Rule):
    """An object of known fields, each with its rule; unknown fields are all content.

    Also the rule of a list of such objects (the items get it), so a request
    whose field has the wrong shape is redacted all the same.
    """

    def __init__(self, fields: Mapping[str, _Rule | None], unknown: _Rule | None = None) -> None:
        self.fields = fields
        self.unknown = unknown if unknown is not None else _Data()

    def child(self, node: Any, key: str) -> _Rule | None:
        return self.fields.get(key, self.unknown)

    def item(self) -> _Rule | None:
        return self

    def leaf(self, value: Any) -> Any:
        return _CONTENT.leaf(value)


_ABSOLUTE = re.compile(r"^(?:[/\\]|[A-Za-z]:|[A-Za-z][A-Za-z0-9+.\-]+:|~(?:[^/\\$]*[/\\]|$))")
_SEGMENTS = re.compile(r"([\\/])")


def _redacted_path(path: str) -> str:
    """A ``RelativePath`` whose AGN-034 §4.2 rules answer as for ``path``: see the module doc."""
    if not path.strip():
        return path
    if _ABSOLUTE.match(path):
        return "/" + _REDACTED_WORD
    return "".join(
        part if part in ("", ".", "..", "/", "\\") else _REDACTED_WORD
        for part in _SEGMENTS.split(path)
    )


def _redacted_mime(mime: str) -> str:
    if not mime.strip():
        return mime
    return "image/" + _REDACTED_WORD if mime.lower().startswith("image/") else _REDACTED_WORD


def _redacted_operator(operator: str) -> str:
    return operator if operator in _RAG_OPERATORS else redact_text(operator)


_CONTENT = _Content()
_TEXT = _Leaf(redact_text)
_RESULT_JSON = _JsonText(_Data())


def _redacted_url(url: str) -> str:
    if not url.strip():
        return url
    return REDACTED_URL if is_reference_url(url) else REDACTED


def _redacted_file_name(name: str) -> str:
    """``redacted`` — or ``redacted.bin`` when ``name`` is not base64-like: a stored
    answer's JSON redacts base64-like text to another placeholder (``redact_text``),
    so the name a replay makes from the placeholder must be alike to the original."""
    if not name.strip():
        return name
    if file_name_problem(name) is not None:
        return "redacted/redacted"
    return _REDACTED_WORD if is_base64(name) else f"{_REDACTED_WORD}.bin"


def _redacted_file_mime(mime: str) -> str:
    """``<top-level type>/redacted…``, base64-like exactly when ``mime`` was (see
    ``_redacted_file_name``): the subtype padded with ``x`` to whole quanta of four,
    or ended with ``.x`` (no base64 character) when it must not be."""
    if not mime.strip():
        return mime
    if mime_type_problem(mime) is not None:
        return _REDACTED_WORD
    kind = mime.partition("/")[0].lower()
    head = f"{kind if kind in _MEDIA_TYPES else 'application'}/{_REDACTED_WORD}"
    if not is_base64(mime):
        return f"{head}.x"
    return head + "x" * (-len(head) % 4)


_MEDIA_TYPES = frozenset(
    {"application", "audio", "example", "font", "haptics", "image", "message", "model"}
    | {"multipart", "text", "video"}
)
"""IANA's top-level media types: a file's type keeps one of these, never its subtype."""


class _Estimate(_Rule):
    """A figure of a model call's usage estimate (``steps/budget.py``): the prompt's
    characters, counted. A number becomes ``0``, a decimal's text ``"0"`` (D594)."""

    def leaf(self, value: Any) -> Any:
        if isinstance(value, str):
            return "0"
        return _zero(value) if _is_number(value) else value


_ESTIMATE = _Estimate()

_SHAPED: dict[str, _Rule] = {
    # a usage ledger call's charge, a budget check's amount, a refusal's requested
    # amount: each holds the estimate of a prompt, whose size is the user's (D594)
    "Charge": _Fields({"Tokens": _ESTIMATE, "Cost": _ESTIMATE}, _Rule()),
    "Amount": _ESTIMATE,
    "Requested": _ESTIMATE,
    "MimeType": _Leaf(_redacted_mime),
    "RelativePath": _Leaf(_redacted_path),
    "Language": _TEXT,
    # a FileRef's signed URL: whoever holds it may fetch the file until it expires
    "Url": _Leaf(_redacted_url),
}
"""Keys of the engine's records redacted as the request's fields of that name."""


def _redacted_answer_key(key: str) -> str:
    """A stored answer's key: a client's idempotency key is content (D401); a continuation's
    key is a digest of ids, which stay."""
    return KEY_PREFIX + REDACTED_IDEMPOTENCY_KEY if key.startswith(KEY_PREFIX) else key


_ANSWER_KEY = _Leaf(_redacted_answer_key)

_REQUEST = _Fields(
    {
        "SessionId": None,
        "TurnId": None,
        "AgentContextId": None,
        "ConversationContextId": None,
        "Stream": None,
        "Instruction": _TEXT,
        "SolutionContextText": _TEXT,
        "InputArtifacts": _Fields(
            {
                "RelativePath": _Leaf(_redacted_path),
                "FileName": _TEXT,
                "Contents": _TEXT,
                "Origin": None,
                "MimeType": _Leaf(_redacted_mime),
                "Language": _TEXT,
                "Encoding": None,
            }
        ),
        "ClipboardImages": _Fields(
            {"Id": None, "MimeType": _Leaf(_redacted_mime), "DataBase64": _TEXT}
        ),
        "RagScope": _Fields(
            {"Key": _TEXT, "Operator": _Leaf(_redacted_operator), "Values": _CONTENT}
        ),
        "WorkspaceHints": _Fields({}, _CONTENT),
        "ToolResults": _Fields(
            {
                "ToolCallId": None,
                "ExecutionMs": None,
                "ResultJson": _RESULT_JSON,
                "ErrorMessage": _TEXT,
            }
        ),
    }
)
"""The AGN-034 request, field by field (AGN-034 §4, §5); unknown fields are content."""

_RETRIEVER_ARGS = _Fields(
    {
        "collection": None,
        "query": _Fields(
            {
                "Instruction": _TEXT,
                "Conditions": _REQUEST.fields["RagScope"],
                "Limit": None,
            }
        ),
    }
)
"""A ``Retriever.retrieve`` call's arguments: the query is the request's instruction and
RAG scope, redacted as the request's are (a replay builds it from the redacted request);
the collection and the limit are configuration."""
_PASSAGES = _Fields({"Text": _TEXT, "Score": None, "Source": _Fields({}, _CONTENT)})
"""A retriever's passages: their text and their source (document id, title, path,
metadata) are content; the score stays."""


class _File(_Rule):
    """A tool-made file (a ``ToolOutput``'s, ``FileStore.put``'s, a ``FileRef``), or a list
    of them: its name, MIME type and description are the tool's output, replaced so the
    file checks answer alike (``validators/tool_files.py``); its other fields are the
    engine's records (its size, hash and expiry stay; its URL is redacted) (D401)."""

    _FIELDS: Mapping[str, _Rule] = {
        "Name": _Leaf(_redacted_file_name),
        "MimeType": _Leaf(_redacted_file_mime),
        "Description": _TEXT,
    }

    def __init__(self, recorded: _Recorded) -> None:
        self.recorded = recorded

    def child(self, node: Any, key: str) -> _Rule | None:
        return self._FIELDS.get(key) or self.recorded.child(node, key)

    def item(self) -> _Rule | None:
        return self

    def leaf(self, value: Any) -> Any:
        return _CONTENT.leaf(value)


class _Recorded(_Rule):
    """The engine's own records (port call arguments and answers, the trace, the result).

    Their keys and ids stay; the values under ``CONTENT_KEYS`` are content; JSON
    text under ``JSON_TEXT_KEYS`` is redacted as data, a tool call's arguments
    guided by its tool's schema; a tool's schema (``Parameters``) is catalog data.
    """

    def __init__(self, schemas: Mapping[str, Mapping[str, Any]]) -> None:
        self.schemas = schemas
        self.file = _File(self)

    def arguments(self, tool: object) -> _Rule:
        """The rule for the arguments of a call of ``tool``."""
        schema = self.schemas.get(tool) if isinstance(tool, str) else None
        return _Data(schema, _MODE_CHANGE_KEPT if tool == _MODE_CHANGE else _NOTHING)

    def child(self, node: Any, key: str) -> _Rule | None:
        if key == _SCHEMA_KEY:
            return None
        if key in CONTENT_KEYS:
            return _CONTENT
        if key in _SHAPED:
            return _SHAPED[key]
        if key == "ArgumentsJson":
            name = (
                node.get("Name")
                if isinstance(node, Mapping)
                else next((value for name, value in node if name == "Name"), None)
            )
            return _JsonText(self.arguments(name))
        if key == "ResultJson":
            return _RESULT_JSON
        if key == "Files":
            return self.file
        if key == "Key":
            return _ANSWER_KEY
        return self


def _redacted(value: Any, rule: _Rule | None) -> Any:
    """``value`` redacted by ``rule``; iterative, linear.

    Objects are ``_Pairs`` (read from JSON text: duplicate keys kept) or mappings
    (the engine's own data: written back as dicts); tuples become lists.
    """
    root: list[Any] = [None]
    pending: list[tuple[Any, _Rule | None, Any, Any]] = [(value, rule, root, 0)]
    while pending:
        item, applied, holder, slot = pending.pop()
        if applied is None or item is None or type(item) in _SCALARS:
            holder[slot] = item if applied is None else applied.leaf(item)
        elif isinstance(item, _Pairs):
            keys = applied.keys([key for key, _ in item])
            made = _Pairs()
            for new_key, (key, inner) in zip(keys, item, strict=True):
                pair = [new_key, None]
                made.append(pair)
                pending.append((inner, applied.child(item, key), pair, 1))
            holder[slot] = made
        elif isinstance(item, Mapping):
            keys = applied.keys(list(item))
            made_map: dict[Any, Any] = dict.fromkeys(keys)
            holder[slot] = made_map
            pending.extend(
                (inner, applied.child(item, key), made_map, new_key)
                for new_key, (key, inner) in zip(keys, item.items(), strict=True)
            )
        elif isinstance(item, list | tuple):
            copied: list[Any] = [None] * len(item)
            holder[slot] = copied
            inner_rule = applied.item()
            pending.extend((inner, inner_rule, copied, index) for index, inner in enumerate(item))
        else:
            holder[slot] = applied.leaf(item)
    return root[0]


_SCALARS = frozenset({str, int, float, bool})


# --- the recording's parts ------------------------------------------------------------------


def _definitions(value: Any) -> Iterable[Mapping[str, Any]]:
    """The tool definitions (``{"Name", "Parameters", ...}``) among a catalog answer's parts."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            if isinstance(item.get("Name"), str) and isinstance(item.get(_SCHEMA_KEY), Mapping):
                yield item
                continue
            pending.extend(v for v in item.values() if isinstance(v, Mapping | list))
        elif isinstance(item, list):
            pending.extend(v for v in item if isinstance(v, Mapping | list))


class Redactor:
    """Redacts the parts of one recording, knowing its tools' argument schemas.

    ``schemas`` maps a tool's name to its JSON Schema; ``Redactor.of(calls)``
    collects them from a recording's catalog answers and model requests, which
    redaction keeps, so a recording and its redacted form give the same schemas.
    """

    def __init__(self, schemas: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._recorded = _Recorded(dict(schemas or {}))

    @classmethod
    def of(cls, calls: Iterable[PortCall]) -> Redactor:
        """The redactor of a recording with these port calls."""
        schemas: dict[str, Mapping[str, Any]] = {}
        for call in calls:
            if call.port in ("ModeCatalog", "AgentCatalog") and call.error is None:
                found = _definitions(call.answer)
            elif call.port == "LLM":
                request = call.args.get("request")
                tools = request.get("Tools") if isinstance(request, Mapping) else None
                found = _definitions(tools)
            else:
                continue
            for definition in found:
                schemas.setdefault(definition["Name"], definition[_SCHEMA_KEY])
        return cls(schemas)

    def value(self, value: Any) -> Any:
        """The engine's JSON data (a call's arguments or answer, the trace, the result)."""
        return _redacted(value, self._recorded)

    def port_call(
        self,
        port: str,
        call: str,
        args: Mapping[str, Any],
        answer: Any,
        error: RecordedError | None,
    ) -> dict[str, Any]:
        """A port call's ``args``, ``answer`` and ``error`` without user content.

        A server tool's arguments are content but for the keys and values its
        schema defines; its result, and the message of an exception it raised
        (which goes back to the model), are content — but for the ``mode`` and
        ``branch`` a host's own ``agent_change_mode`` answers with.
        """
        if port == "Retriever":
            said = None if error is None else type(error)(error.type, REDACTED, error.classes)
            return {
                "args": _redacted(dict(args), _RETRIEVER_ARGS),
                "answer": _redacted(answer, _PASSAGES),
                "error": said,
            }
        if port == "FileStore":  # put(file): the file is redacted as a ToolOutput's are
            file_args = _Fields({"file": self._recorded.file}, self._recorded)
            return {
                "args": _redacted(dict(args), file_args),
                "answer": self.value(answer),
                "error": error,
            }
        if port != "ToolExecutor":
            return {"args": self.value(dict(args)), "answer": self.value(answer), "error": error}
        arguments = self._recorded.arguments(call)
        # A host's own agent_change_mode answers with the mode it switched to (D29): the
        # engine reads its mode and branch, which stay as its arguments' do.
        result = _JsonText(arguments) if call == _MODE_CHANGE else _RESULT_JSON
        redacted_args = {
            name: _redacted(value, arguments) if name == "arguments" else self.value(value)
            for name, value in args.items()
        }
        return {
            "args": redacted_args,
            "answer": result.leaf(answer) if isinstance(answer, str) else self.value(answer),
            "error": None if error is None else type(error)(error.type, REDACTED, error.classes),
        }

    def request(
        self, request: Mapping[str, Any], *, max_depth: int | None = None
    ) -> dict[str, Any]:
        """A recorded request (``{"json"|"text"|"bytes_json"|"bytes_text"|"base64": ...}``)
        without user content, in the same form.

        Request text is read keeping duplicate keys (a request the engine refuses
        for them must still be refused) and written back compact; text that is
        not JSON keeps its characters' places (the refusal names where parsing
        failed). With ``max_depth`` (the turn's ``max_json_depth``), a request, or
        a ``ResultJson`` in it, nested deeper keeps only what the engine read of it
        before refusing it (``depth_cut.py``, ``DESIGN/limits/json-depth``).
        """
        rule = _request_rule(max_depth)
        for form in ("json", "bytes_json"):
            if form in request:
                value = request[form]
                part = None if max_depth is None else read_part_of_value(value, max_depth)
                return {form: _redacted(value if part is None else part, rule)}
        if "bytes_text" in request:
            return {"bytes_text": _redacted_text(str(request["bytes_text"]), max_depth)}
        if "base64" in request:
            try:
                raw = base64.b64decode(request["base64"], validate=True)
            except (binascii.Error, ValueError):
                return {"base64": REDACTED_BASE64}
            text = raw.decode("utf-8", "surrogateescape")  # bad bytes as lone surrogates
            part = None if max_depth is None else read_part_of_text(text, max_depth)
            if part is not None:
                text = part  # the part read: its bad bytes, if any, come before the cut
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # not UTF-8: keep where its bad bytes are (the error says)
                data = _scrambled(text, in_bytes=True).encode("utf-8", "surrogateescape")
            else:
                data = _redacted_text(text, max_depth).encode("utf-8")
            return {"base64": base64.b64encode(data).decode("ascii")}
        return {"text": _redacted_text(str(request["text"]), max_depth)}


_PLAIN = Redactor()


def redact_json_text(text: str, *, keep: frozenset[str] = _NOTHING) -> str:
    """JSON text as data: keys, strings and numbers replaced (top-level ``keep`` keys kept).

    Text that is not JSON is redacted whole.
    """
    return str(_JsonText(_Data(None, keep)).leaf(text))


def redact_value(value: Any) -> Any:
    """The engine's JSON data without user content (no tool schemas known: see ``Redactor``)."""
    return _PLAIN.value(value)


def redact_port_call(
    port: str, call: str, args: Mapping[str, Any], answer: Any, error: RecordedError | None
) -> dict[str, Any]:
    """``Redactor.port_call`` with no tool schemas known."""
    return _PLAIN.port_call(port, call, args, answer, error)


def redact_request(request: Mapping[str, Any], *, max_depth: int | None = None) -> dict[str, Any]:
    """``Redactor.request``: a recorded request without user content."""
    return _PLAIN.request(request, max_depth=max_depth)


@functools.lru_cache(maxsize=8)
def _request_rule(max_depth: int | None) -> _Fields:
    """The request's rule: ``_REQUEST``, its ``ResultJson`` cut past ``max_depth`` when given."""
    if max_depth is None:
        return _REQUEST
    results = _REQUEST.fields["ToolResults"]
    assert isinstance(results, _Fields)
    bounded = _JsonText(_Data(), max_depth)
    return _Fields(
        {
            **_REQUEST.fields,
            "ToolResults": _Fields({**results.fields, "ResultJson": bounded}, results.unknown),
        },
        _REQUEST.unknown,
    )


def _redacted_text(text: str, max_depth: int | None = None) -> str:
    part = None if max_depth is None else read_part_of_text(text, max_depth)
    if part is not None:
        text = part  # nested past the limit: what the engine read (depth_cut.py)
    try:
        value = parse_json(text)
    except ValueError:
        return _scrambled(text)
    # A kept key or value may hold a lone surrogate the request spelled as a JSON escape
    # ("\ud800"): written back as that escape, the text stays the same JSON, and has UTF-8.
    return _LONE_SURROGATE.sub(
        lambda found: f"\\u{ord(found.group()):04x}",
        dump_json(_redacted(value, _request_rule(max_depth))),
    )


_PUNCTUATION = frozenset('{}[],:"\\')
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_DIGITS = re.compile(r"[0-9]")
_KEPT_WORD = re.compile(r"true|false|null|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _scrambled(text: str, *, in_bytes: bool = False) -> str:
    """Request text that is not JSON, its content replaced where it stands.

    The engine refuses such a request naming where parsing failed (line, column,
    or the byte that is not UTF-8), so the placeholder keeps every position:
    each character of a string or a stray word becomes ``x`` (as many as its
    UTF-8 bytes when ``in_bytes``); each digit of a number becomes ``0`` or ``1``
    (a zero stays a zero, so the number stays as valid as it was); JSON
    punctuation, whitespace, control characters, literals and undecodable bytes
    (surrogate escapes) stay.
    """

    def hidden(part: str) -> str:
        if not in_bytes:
            return "x" * len(part)
        return "".join(
            c if "\udc80" <= c <= "\udcff" else "x" * len(c.encode("utf-8", "surrogatepass"))
            for c in part
        )

    out: list[str] = []
    index, in_string = 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            if char == '"':
                in_string = False
                out.append(char)
            elif char == "\\" and index + 1 < len(text):  # an escape: valid stays valid
                escaped = text[index + 1]
                if escaped == "u" and _HEX4.fullmatch(text[index + 2 : index + 6]):
                    out.append("\\u0078")
                    index += 5
                else:
                    out.append("\\" + (escaped if escaped in '"\\/bfnrt' else hidden(escaped)))
                    index += 1
            elif char < " " or "\udc80" <= char <= "\udcff":
                out.append(char)
            else:
                out.append(hidden(char))
            index += 1
            continue
        if char == '"':
            in_string = True
            out.append(char)
            index += 1
            continue
        if char in _PUNCTUATION or char.isspace() or char < " ":
            out.append(char)
            index += 1
            continue
        end = index
        while end < len(text) and not (
            text[end] in _PUNCTUATION or text[end].isspace() or text[end] < " "
        ):
            end += 1
        word = text[index:end]
        if not _KEPT_WORD.fullmatch(word):
            word = hidden(word)
        elif word[-1].isdigit():  # a number: its digits hidden, its validity kept
            word = _DIGITS.sub(lambda digit: "0" if digit.group() == "0" else "1", word)
        out.append(word)
        index = end
    return "".join(out)
