"""Fuzzing ``Pipeline.execute``: mutated requests and the invariants every answer keeps.

Shared by the bounded hypothesis fuzz of ``make test`` (tests/engine/test_fuzz_pipeline.py)
and the 100,000-request run of ``make fuzz`` (tests/kits/fuzz_run.py); D240-D242.

A ``FuzzWorld`` is a pipeline on one store (memory or a SQLite file) that records
every turn with redaction on (``RecordingOptions(redact=True)``, delivered in
memory), holding a session with a completed turn and a session whose turn awaits
client tool results (built by real turns of a deterministic model). A ``Case`` is
a valid request of one kind (Initial, FollowOn on the completed turn, Continuation
of the pending turn) after a few ``MUTATIONS`` (drop, duplicate and retype fields,
unknown and server-owned keys, deep nesting, lone surrogates and NUL, huge strings
and lists, wrong ids, ``ResultJson`` garbage, Python-only values, a bad caller),
handed over as a dict, an ``AgentExecuteRequest``, JSON text or bytes, the text
and bytes mutated in turn. About one case in seven also makes the host's own code
hostile (``HostileHost``, ``Case.hostile``): a host rule, a hook, a listener or a
server tool raises an exception holding a secret on its second line and a megabyte
of text, raises ``SystemExit`` or a ``BaseException`` of its own, or returns a
megabyte or junk. ``FuzzWorld.check`` runs one case and says which
invariant it broke, if any (``Outcome``):

- ``Pipeline.execute`` returns (``crash`` otherwise);
- the result serializes: ``to_json()``, UTF-8 encodable, and ``json.dumps`` of
  ``to_wire()`` as strict JSON (``unserializable``);
- a refused request changes nothing stored: a canonical dump of the store (the
  memory store's values, the SQLite file's ``iterdump`` but its usage ledger, which
  keeps the calls a refused turn made, D601, and its turn traces, which keep the
  refusal's own trace, D656) is the same before and after
  (``stored_by_refused``); a successful one stores its turn;
- the turn's recording, when one was delivered, serializes as ``write_recording``
  writes it (``recording_unserializable``), and holds none of the distinctive
  idempotency keys a case may carry (``recording_holds_key``: a redacted
  recording keeps the placeholder ``redacted``, D401);
- hostile host code is told to the caller politely: the result holds no secret of
  the exception's second line and stays under 64,000 characters (``host_leak``,
  D398, D399).

After a turn that stored something the world is reset to its base state, so every
case meets the same sessions and the dump stays small.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import random
import reprlib
import sqlite3
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aptix_pipeline import (
    Hooks,
    HostRule,
    PipelineContext,
    PipelineOptions,
    PipelineStep,
    Ports,
    Recorder,
    RecordingOptions,
    ToolInvocation,
)
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.adapters.tools.builtin import BUILTIN_TOOLS
from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    Caller,
    InvokeResult,
    LLMReply,
    LLMRequest,
    ToolCall,
)
from aptix_pipeline.engine import Pipeline
from aptix_pipeline.engine.replay.recording import TurnRecording

__all__ = [
    "CALLER",
    "ENCODINGS",
    "INVARIANTS",
    "KINDS",
    "MUTATIONS",
    "SECRET_KEYS",
    "STORE_KINDS",
    "Base",
    "Case",
    "Deep",
    "FuzzLLM",
    "FuzzWorld",
    "Outcome",
    "Tally",
    "make_case",
    "serialized_size",
]

KINDS = ("initial", "follow_on", "continuation")
STORE_KINDS = ("memory", "sqlite")
ENCODINGS = ("dict", "model", "text", "bytes")
INVARIANTS = (
    "crash",
    "unserializable",
    "stored_by_refused",
    "recording_unserializable",
    "recording_holds_key",
    "host_leak",
)
"""The broken invariants a ``make fuzz`` run counts as failures."""

CALLER = Caller(org="acme", user="ana")
TOOLS_PLEASE = "please read the file and run the tests"
ADD_PLEASE = "please add the numbers"


class FuzzLLM:
    """A model that answers any request at once, the same way every time.

    A user message asking for tools (``TOOLS_PLEASE``) gets two client tool calls,
    one asking to add (``ADD_PLEASE``) a server tool call; anything else, and any
    round after a tool result, a short final answer.
    """

    def __init__(self) -> None:
        self._calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        """The reply to ``request`` (see the class docstring)."""
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "user" and isinstance(last.content, str):
            if TOOLS_PLEASE in last.content:
                return LLMReply(
                    tool_calls=[
                        self._call("read_file", '{"path": "src/a.py"}'),
                        self._call("run_tests", '{"pattern": "test_a"}'),
                    ],
                    text="Reading the file and running the tests.",
                    model="fuzz",
                    finish_reason="tool_calls",
                )
            if ADD_PLEASE in last.content:
                return LLMReply(
                    tool_calls=[self._call("Add", '{"a": 2, "b": 3}')],
                    model="fuzz",
                    finish_reason="tool_calls",
                )
        return LLMReply(text="Done.", model="fuzz", finish_reason="stop")

    def _call(self, name: str, arguments: str) -> ToolCall:
        self._calls += 1
        return ToolCall(tool_call_id=f"call-{self._calls}", name=name, arguments_json=arguments)


# --- the cases ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Base:
    """The ids of what a world holds before each case."""

    done_session: str
    done_turn: str
    pending_session: str
    pending_turn: str
    pending_calls: tuple[str, ...]


@dataclass(slots=True)
class Case:
    """One fuzzed request: the input as handed to ``execute``, and how it was made."""

    kind: str
    encoding: str
    request: Any
    caller: Any
    mutations: list[str] = field(default_factory=list)
    idempotency_key: str | None = None
    hostile: str | None = None
    """How the host's code misbehaves for this case (``HOSTILITIES``), or ``None``."""

    def describe(self, limit: int = 300) -> str:
        """A short, depth-safe description for a failure report."""
        shown = _REPR.repr(self.request)
        if len(shown) > limit:
            shown = shown[:limit] + "…"
        caller = _REPR.repr(self.caller)
        return (
            f"kind={self.kind} encoding={self.encoding} mutations={self.mutations} "
            f"caller={caller} idempotency_key={self.idempotency_key!r} "
            f"hostile={self.hostile} request={shown}"
        )


class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return repr(x) if x.bit_length() < 64 else f"<int of {x.bit_length()} bits>"


_REPR = _ShortRepr()
_REPR.maxlevel = 8
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxdict = 8
_REPR.maxlist = 8


def seed_request(kind: str, base: Base, rng: random.Random) -> dict[str, Any]:
    """A valid wire request of ``kind`` against ``base``, with some optional fields."""
    if kind == "continuation":
        results: list[dict[str, Any]] = []
        for call_id in base.pending_calls:
            if rng.random() < 0.2:
                results.append({"ToolCallId": call_id, "ExecutionMs": 3, "ErrorMessage": "denied"})
            else:
                results.append(
                    {"ToolCallId": call_id, "ExecutionMs": 12, "ResultJson": '{"text": "x = 1"}'}
                )
        return {
            "SessionId": base.pending_session,
            "TurnId": base.pending_turn,
            "ToolResults": results,
        }
    instruction = rng.choice(("Explain this file.", TOOLS_PLEASE, ADD_PLEASE, "And now?"))
    data: dict[str, Any] = {"Instruction": instruction}
    if kind == "follow_on":
        data = {"SessionId": base.done_session, "TurnId": base.done_turn, **data}
    optional: dict[str, Any] = {
        "InputArtifacts": [
            {
                "RelativePath": "src/a.py",
                "FileName": "a.py",
                "Contents": "x = 1\n",
                "Origin": "ide",
                "Language": "python",
            }
        ],
        "ClipboardImages": [{"Id": "img-1", "MimeType": "image/png", "DataBase64": "aGVsbG8="}],
        "RagScope": [{"Key": "repo", "Operator": "==", "Values": ["aptix"]}],
        "SolutionContextText": "A Python project.",
        "WorkspaceHints": {
            "WorkspaceId": "ws-1",
            "RepositoryName": "aptix",
            "LanguageHint": "python",
        },
        "Stream": False,
    }
    if kind == "initial":
        optional |= {"AgentContextId": "assistant", "ConversationContextId": "workspace"}
    for key, value in optional.items():
        if rng.random() < 0.3:
            data[key] = value
    return data


# Values of every JSON type and some only Python has (the host hands a dict).
_GARBAGE: tuple[Callable[[random.Random], Any], ...] = (
    lambda r: None,
    lambda r: r.choice((True, False)),
    lambda r: r.choice((0, -1, 1, 2**63, -(2**63) - 1, 10**40)),
    lambda r: r.choice((0.5, -0.0, 1e308, 5e-324)),
    lambda r: r.choice(("", " ", "x", "0", "true", "null", "{}")),
    lambda r: [],
    lambda r: {},
    lambda r: [r.choice((1, "a", None))],
    lambda r: {"Unexpected": r.choice((1, "a", None))},
)
_PYTHON_ONLY: tuple[Callable[[random.Random], Any], ...] = (
    lambda r: math.nan,
    lambda r: math.inf,
    lambda r: b"bytes",
    lambda r: bytearray(b"\xff"),
    lambda r: (1, "two"),
    lambda r: frozenset({"a"}),
    lambda r: 10**5000,
    lambda r: object(),
    lambda r: {1: "int key"},
    lambda r: {("tuple", "key"): 1},
)

WEIRD_TEXT = (
    "\ud800",
    "\udfff",
    "a\udc80b",
    "\x00",
    "nul\x00inside",
    "\u2028\u2029",
    "\ufeff",
    "\uffff\ufffe",
    "\U0010ffff",
    "\u202e",
    "e\u0301\u0301\u0301",
    "\r\n\t\x0b\x0c",
    "\x7f\x1b[31m",
    "\\ud800",
    "%s%n{}{0}",
    "' OR 1=1 --",
)
"""Text that has broken encoders, databases and terminals somewhere."""

SERVER_OWNED = (
    "Mode",
    "mode",
    "CorrelationId",
    "correlation_id",
    "TraceId",
    "Diagnostics",
    "ProviderContinuationId",
    "Model",
    "Provider",
    "ResponseType",
    "Successful",
)
_TOP_KEYS = (
    "SessionId", "TurnId", "Instruction", "InputArtifacts", "ClipboardImages", "RagScope",
    "SolutionContextText", "WorkspaceHints", "Stream", "AgentContextId",
    "ConversationContextId", "ToolResults",
)  # fmt: skip
_TEXT_FIELDS = ("Instruction", "SolutionContextText", "ResultJson", "ErrorMessage", "Contents")

RESULT_JSON_GARBAGE: tuple[Any, ...] = (
    "",
    " ",
    "{",
    "}",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999999",
    "-1e999999",
    "123456789012345678901234567890",
    '{"a": 1, "a": 2}',
    "[]",
    "null",
    "true",
    '"text"',
    '"\\ud800"',
    '{"\\ud800": 1}',
    '{"k": "\\u0000"}',
    "\ufeff{}",
    "{} trailing",
    "{'single': 'quotes'}",
    '{"a": 1,}',
    "/* c */ {}",
    "\x00",
    '{"text": "\ud800"}',
    5,
    None,
    {"not": "text"},
    ["x"],
)
"""``ResultJson`` values: malformed, edge and unwanted JSON, and not text at all."""

DEPTHS = (30, 100, 400, 1000, 5000)


@dataclass(frozen=True, slots=True)
class Deep:
    """A placeholder for a value nested ``depth`` deep, expanded when encoding.

    Kept as one leaf while mutating (so no walk of the harness recurses into it),
    then built without recursion: nested lists or objects for a dict input, the
    same in JSON text, or JSON text nested that deep inside a string (``as_text``).
    """

    depth: int
    shape: str  # "list" | "object"
    as_text: bool = False

    def text(self) -> str:
        """The JSON text of the nesting."""
        if self.shape == "list":
            return "[" * self.depth + "]" * self.depth
        return '{"a":' * self.depth + "1" + "}" * self.depth

    def value(self) -> Any:
        """The nesting as Python data, or as JSON text in a string (``as_text``)."""
        if self.as_text:
            return self.text()
        inner: Any = [] if self.shape == "list" else 1
        for _ in range(self.depth - (1 if self.shape == "list" else 0)):
            inner = [inner] if self.shape == "list" else {"a": inner}
        return inner


def _positions(data: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) of ``data``'s values, breadth first, no recursion."""
    found: list[tuple[Any, Any]] = []
    queue: list[Any] = [data]
    while queue:
        here = queue.pop()
        if isinstance(here, dict):
            for key, value in here.items():
                found.append((here, key))
                queue.append(value)
        elif isinstance(here, list):
            for index, value in enumerate(here):
                found.append((here, index))
                queue.append(value)
    return found


def _dicts(data: Any) -> list[dict[Any, Any]]:
    return [data] * isinstance(data, dict) + [
        container[key] for container, key in _positions(data) if isinstance(container[key], dict)
    ]


def _strings(data: Any) -> list[tuple[Any, Any]]:
    return [(c, k) for c, k in _positions(data) if isinstance(c[k], str)]


def _lists(data: Any) -> list[list[Any]]:
    return [c[k] for c, k in _positions(data) if isinstance(c[k], list)]


def _pick_field(data: dict[str, Any], rng: random.Random, names: tuple[str, ...]) -> Any:
    """A position named one of ``names`` (anywhere), else any position; ``None`` if empty."""
    named = [(c, k) for c, k in _positions(data) if k in names]
    pool = named or _positions(data)
    return rng.choice(pool) if pool else None


# Each mutation changes ``data`` in place (or returns a replacement) and may change the caller.
Mutation = Callable[[random.Random, dict[str, Any], "MutationState"], Any]


@dataclass(slots=True)
class MutationState:
    """What mutations share: the world's ids, the caller, whether Python-only values are allowed."""

    base: Base
    caller: Any
    python_values: bool
    huge: int
    extra_text: str | None = None


def _drop(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    pool = _positions(data)
    if pool:
        container, key = rng.choice(pool)
        del container[key]
    return data


def _duplicate(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    lists = [lst for lst in _lists(data) if lst]
    if lists and rng.random() < 0.7:
        target = rng.choice(lists)
        target.append(copy.deepcopy(target[rng.randrange(len(target))]))
        return data
    # The same field under a name that differs in case or spelling only.
    pool = _positions(data)
    if pool:
        container, key = rng.choice(pool)
        if isinstance(key, str):
            variant = rng.choice((key.lower(), key.upper(), key + " ", f"_{key}"))
            container[variant] = container[key]
    return data


def _garbage(rng: random.Random, state: MutationState) -> Any:
    makers = _GARBAGE + (_PYTHON_ONLY if state.python_values else ())
    return rng.choice(makers)(rng)


def _retype(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    if rng.random() < 0.05:
        return _garbage(rng, state)  # the whole request is not an object
    pool = _positions(data)
    if pool:
        container, key = rng.choice(pool)
        container[key] = _garbage(rng, state)
    return data


def _unknown_key(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    target = rng.choice(_dicts(data) or [data])
    name = rng.choice(("Extra", "x", "", " ", "instruction ", "__proto__", "$ref", "a.b"))
    if rng.random() < 0.3:
        name = rng.choice(WEIRD_TEXT) + name  # e.g. {"\ud800": 1}: a key with no UTF-8 form
    target[name] = _garbage(rng, state)
    return data


def _server_owned(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    target = data if rng.random() < 0.8 else rng.choice(_dicts(data) or [data])
    target[rng.choice(SERVER_OWNED)] = rng.choice(("review", "x", 1, None))
    return data


def _deep(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    deep = Deep(rng.choice(DEPTHS), rng.choice(("list", "object")), as_text=rng.random() < 0.5)
    if deep.as_text:
        position = _pick_field(data, rng, _TEXT_FIELDS)
    else:
        position = rng.choice(_positions(data)) if _positions(data) else None
    if position is None:
        data["Instruction"] = deep
    else:
        container, key = position
        container[key] = deep
    return data


def _weird_text(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    weird = state.extra_text if state.extra_text is not None else rng.choice(WEIRD_TEXT)
    strings = _strings(data)
    if rng.random() < 0.25 or not strings:
        target = rng.choice(_dicts(data) or [data])
        target[weird] = rng.choice((1, "x", weird))  # a weird key
        return data
    container, key = rng.choice(strings)
    value = container[key]
    spot = rng.randrange(len(value) + 1)
    container[key] = value[:spot] + weird + value[spot:] if rng.random() < 0.7 else weird
    return data


def _huge_string(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    size = rng.choice((1_000, 10_000, state.huge))
    text = rng.choice(("x", "é", "\U0001f600", "a\x00")) * (size // 2)
    position = _pick_field(data, rng, (*_TEXT_FIELDS, "SessionId", "ToolCallId", "RelativePath"))
    if position is None:
        data["Instruction"] = text
    else:
        container, key = position
        container[key] = text
    return data


def _huge_list(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    count = rng.choice((100, 1_000, state.huge // 100))
    if rng.random() < 0.3:  # many unknown keys: the answer must stay bounded
        for n in range(count):
            data[f"k{n}"] = n
        return data
    name = rng.choice(("InputArtifacts", "ClipboardImages", "RagScope", "ToolResults"))
    items = data.get(name) if isinstance(data.get(name), list) and data.get(name) else None
    item: Any = items[0] if items else {"Key": "k", "Operator": "==", "Values": ["v"]}
    data[name] = [copy.deepcopy(item) for _ in range(count)]
    return data


def _wrong_id(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    base = state.base
    key = rng.choice(("SessionId", "TurnId", "ToolCallId"))
    choices = (
        base.done_session,
        base.done_turn,
        base.pending_session,
        base.pending_turn,
        *base.pending_calls,
        "session-999",
        "turn-999",
        "call-999",
        "",
        "   ",
        " session-1",
        "SESSION-1",
        "session-1\x00",
        "x" * 300,
        "../session-1",
        "%",
    )
    targets = [(c, k) for c, k in _positions(data) if k == key]
    if targets:
        container, name = rng.choice(targets)
        container[name] = rng.choice(choices)
    else:
        data[key] = rng.choice(choices)
    return data


def _result_json(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    results = data.get("ToolResults")
    garbage = rng.choice(RESULT_JSON_GARBAGE)
    if rng.random() < 0.2:
        garbage = Deep(rng.choice(DEPTHS), rng.choice(("list", "object")), as_text=True)
    if isinstance(results, list) and results and isinstance(results[0], dict):
        target = rng.choice([r for r in results if isinstance(r, dict)])
        field_name = rng.choice(("ResultJson", "ResultJson", "ErrorMessage", "ExecutionMs"))
        if field_name == "ExecutionMs":
            target[field_name] = rng.choice((-1, 1.5, True, "5", 10**30, None, math.nan))
        else:
            target[field_name] = garbage
    else:
        data["ToolResults"] = [{"ToolCallId": "call-1", "ExecutionMs": 1, "ResultJson": garbage}]
    return data


def _cross_kind(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    base = state.base
    extra: dict[str, Any] = rng.choice(
        (
            {"ToolResults": []},
            {"ToolResults": [{"ToolCallId": "call-1", "ExecutionMs": 1, "ResultJson": "{}"}]},
            {"Instruction": "also this"},
            {"SessionId": base.done_session},
            {"TurnId": base.pending_turn},
            {"AgentContextId": "nobody"},
            {"ConversationContextId": "assistant"},
            {"Stream": "yes"},
        )
    )
    data.update(extra)
    return data


def _caller(rng: random.Random, data: dict[str, Any], state: MutationState) -> Any:
    state.caller = rng.choice(
        (
            Caller(org="globex", user="ana"),
            Caller(org="acme", user="bob"),
            {"org": "acme", "user": "ana"},
            {"Org": "acme", "User": "ana", "Extra": 1},
            {"org": "", "user": "ana"},
            {"org": "acme", "user": None},
            {"org": 5, "user": ["ana"]},
            {"org": "acme\x00", "user": "ana\ud800"},
            {},
            "acme/ana",
            None,
        )
    )
    return data


MUTATIONS: dict[str, Mutation] = {
    "drop": _drop,
    "duplicate": _duplicate,
    "retype": _retype,
    "unknown_key": _unknown_key,
    "server_owned": _server_owned,
    "deep": _deep,
    "weird_text": _weird_text,
    "huge_string": _huge_string,
    "huge_list": _huge_list,
    "wrong_id": _wrong_id,
    "result_json": _result_json,
    "cross_kind": _cross_kind,
    "caller": _caller,
}
"""Every mutation by name (see the module docstring)."""

_WEIGHTS = {
    "drop": 3, "duplicate": 2, "retype": 4, "unknown_key": 2, "server_owned": 1, "deep": 2,
    "weird_text": 4, "huge_string": 1, "huge_list": 1, "wrong_id": 3, "result_json": 3,
    "cross_kind": 2, "caller": 1,
}  # fmt: skip


def _expand(value: Any) -> Any:
    """``value`` with every ``Deep`` placeholder built (only the placeholders nest deep)."""
    if isinstance(value, Deep):
        return value.value()
    if isinstance(value, dict):
        return {key: _expand(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_expand(item) for item in value]
    return value


def _to_text(value: Any, rng: random.Random) -> str:
    """JSON text of ``value``; a ``Deep`` placeholder becomes its nesting in the text."""
    nested: list[Deep] = []

    def placeholder(item: object) -> Any:
        if isinstance(item, Deep):
            nested.append(item)
            return f"__deep_{len(nested) - 1}__"
        if isinstance(item, bytes | bytearray):
            return item.decode("latin-1")
        if isinstance(item, tuple | frozenset | set):
            return list(item)
        return repr(item)

    def keyed(item: Any) -> Any:  # non-text keys (a Python-only dict) as text
        if isinstance(item, dict):
            return {
                k if isinstance(k, str | int | float | bool) or k is None else repr(k): keyed(v)
                for k, v in item.items()
            }
        if isinstance(item, list):
            return [keyed(v) for v in item]
        return item

    text = json.dumps(keyed(value), default=placeholder, ensure_ascii=rng.random() < 0.5)
    for index, deep in enumerate(nested):
        inner = json.dumps(deep.text()) if deep.as_text else deep.text()
        text = text.replace(f'"__deep_{index}__"', inner, 1)
    return text


def _mutate_text(text: str, rng: random.Random) -> str:
    """A textual change JSON-level mutations cannot make."""
    choice = rng.randrange(10)
    if choice == 0 and text:
        return text[: rng.randrange(len(text))]  # truncated
    if choice == 1 and text.startswith("{"):
        return '{"Instruction": "first",' + text[1:]  # a duplicate key, or a new one
    if choice == 2:
        return "\ufeff" + text
    if choice == 3:
        return text + rng.choice((" trailing", ",", "}", "\x00", "\n\n", " // comment"))
    if choice == 4:
        return rng.choice(("", " ", "null", "[]", "1", '"text"', "NaN", "{}", "{" * 10_000))
    if choice == 5 and text:
        spot = rng.randrange(len(text))
        return text[:spot] + rng.choice(('"', "\\", "\x00", "\ud800", "{", "]")) + text[spot + 1 :]
    return text


def _to_bytes(text: str, rng: random.Random) -> bytes:
    choice = rng.randrange(8)
    if choice == 0:
        return text.encode("utf-16", "surrogatepass")
    if choice == 1:
        return text.encode("latin-1", "replace")
    if choice == 2:
        raw = bytearray(text.encode("utf-8", "surrogatepass"))
        for _ in range(rng.randint(1, 3)):
            if raw:
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    if choice == 3:
        return b"\xef\xbb\xbf" + text.encode("utf-8", "surrogatepass")
    # Lone surrogates as their (invalid) UTF-8 form: what a careless client sends.
    return text.encode("utf-8", "surrogatepass")


def make_case(
    kind: str,
    base: Base,
    rng: random.Random,
    *,
    huge: int = 100_000,
    extra_text: str | None = None,
    mutations: int | None = None,
) -> Case:
    """A mutated request of ``kind``: ``rng`` decides everything, so a seed replays it.

    ``huge`` bounds the biggest strings (characters) and lists (``huge // 100``);
    ``extra_text``, when given, is the weird text ``weird_text`` inserts (the
    hypothesis module draws it); ``mutations`` is their count (default 0 to 3).
    """
    data = seed_request(kind, base, rng)
    encoding = rng.choice(ENCODINGS)
    state = MutationState(
        base, CALLER, python_values=encoding == "dict", huge=huge, extra_text=extra_text
    )
    names = list(_WEIGHTS)
    weights = list(_WEIGHTS.values())
    count = mutations if mutations is not None else rng.choice((0, 1, 1, 1, 2, 2, 3))
    applied: list[str] = []
    value: Any = data
    for _ in range(count):
        name = rng.choices(names, weights)[0]
        if not isinstance(value, dict):
            break
        value = MUTATIONS[name](rng, value, state)
        applied.append(name)
    request: Any
    if encoding in ("dict", "model"):
        request = _expand(value)
        if encoding == "model":
            try:
                request = AgentExecuteRequest.model_validate(request)
            except Exception:
                encoding = "dict"  # only a valid request can be a model
    else:
        text = _to_text(value, rng)
        if rng.random() < 0.3:
            text = _mutate_text(text, rng)
            applied.append("text")
        request = text if encoding == "text" else _to_bytes(text, rng)
    key = rng.choice(IDEMPOTENCY_KEYS) if rng.random() < 0.2 else None
    hostile = rng.choice(HOSTILITIES) if rng.random() < 0.15 else None
    return Case(kind, encoding, request, state.caller, applied, key, hostile)


HOST_SECRET = "host-secret-9c41"
"""What hostile host code hides on its exception's second line: never told to a caller."""
HOSTILITIES: tuple[str, ...] = (
    "rule_raises",
    "rule_megabyte",
    "rule_exits",
    "rule_base_exception",
    "hook_raises",
    "hook_exits",
    "hook_junk",
    "listener_exits",
    "tool_raises",
    "tool_base_exception",
)
"""The ways ``HostileHost`` misbehaves."""


class HostBaseError(BaseException):
    """A host's own ``BaseException``, outside ``Exception``."""


def _planted() -> RuntimeError:
    return RuntimeError(f"the host broke {'x' * 1_000_000}\n{HOST_SECRET}\n{'y' * 1_000_000}")


class HostileHost:
    """The host code of a fuzz world: a rule, a hook, a listener and a tool wrapper that
    behave until ``mode`` (set for one case) says how to misbehave."""

    def __init__(self) -> None:
        self.mode: str | None = None

    def _misbehave(self, where: str) -> None:
        mode = self.mode
        if mode is None or not mode.startswith(where):
            return
        if mode.endswith("_raises"):
            raise _planted()
        if mode.endswith("_exits"):
            raise SystemExit(f"the host exits\n{HOST_SECRET}")
        if mode.endswith("_base_exception"):
            raise HostBaseError(f"the host's own\n{HOST_SECRET}")

    def check(self, ctx: PipelineContext) -> bool | str:
        """The host rule's check."""
        self._misbehave("rule")
        return f"{'m' * 1_000_000}{HOST_SECRET}" if self.mode == "rule_megabyte" else True

    def before_model_request(self, request: LLMRequest) -> Any:
        """The hook before each model request."""
        self._misbehave("hook")
        return {"not": "a request"} if self.mode == "hook_junk" else None

    def listener(self, event: object) -> None:
        """A listener of every event."""
        self._misbehave("listener")

    def tool(self, inner: Any) -> Any:
        """A server tool's executor that misbehaves before running ``inner``."""

        async def run(arguments: dict[str, Any], invocation: ToolInvocation) -> Any:
            self._misbehave("tool")
            return await inner(arguments, invocation)

        return run

    def rule(self) -> HostRule:
        """The host rule, in the reasoner's guard."""
        return HostRule(
            id="host/fuzz/hostile",
            step=PipelineStep.REASONER,
            message="the fuzz host checks the turn",
            code="host.fuzz",
            check=self.check,
        )


SECRET_KEYS: tuple[str, ...] = (
    "retry-1",
    "fuzz-secret-key-2b7e",
    "key:nested-2b7e",
    "continuation:" + "2b7e" * 16,
)
"""Keys no recording holds after redaction (``recording_holds_key``): distinctive enough
that nothing else in a recording spells them; they look like the engine's own keys too."""

IDEMPOTENCY_KEYS: tuple[str, ...] = (
    *SECRET_KEYS,
    "redacted",
    "~" * 255,
    "",
    " ",
    "two words",
    "x" * 256,
    "é",
    "\ud800",
    "\x00",
    "line\n",
)
"""Idempotency keys a fuzzed request may carry, well-formed or not (D182)."""


# --- the checks ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one case did: success or refusal, and the invariant it broke (``None``: none).

    ``where`` is the innermost frame of the package in the exception's traceback
    (``file:line function``), ``error`` the exception's type and message;
    ``recorded`` whether a recording was delivered.
    """

    successful: bool
    broken: str | None = None
    error: str = ""
    where: str = ""
    recorded: bool = False
    size: int = 0
    """The serialized result's bytes."""
    logged: int = 0
    """Errors the ``aptix_pipeline`` logger logged during the turn (e.g. a lost recording)."""

    @property
    def failure_class(self) -> tuple[str, str, str]:
        """(invariant, exception type, where): one class of failure."""
        return (self.broken or "", self.error.split(":", 1)[0], self.where)


def _where(error: BaseException, stage: str) -> str:
    """The innermost frame of the package that raised, else what the harness was doing."""
    frames = [
        f for f in traceback.extract_tb(error.__traceback__) if "aptix_pipeline/" in f.filename
    ]
    if not frames:
        return stage
    frame = frames[-1]
    return f"{frame.filename.split('aptix_pipeline/', 1)[1]}:{frame.lineno} {frame.name}"


def _failed(
    broken: str,
    error: BaseException,
    successful: bool = False,
    recorded: bool = False,
    stage: str = "",
) -> Outcome:
    message = "maximum recursion depth" if isinstance(error, RecursionError) else str(error)[:160]
    where = _where(error, stage)
    return Outcome(successful, broken, f"{type(error).__name__}: {message}", where, recorded)


def serialized_size(result: InvokeResult[Any]) -> int:
    """The size of ``result`` as the HTTP service sends it; raises unless it serializes.

    ``to_json()`` encoded as UTF-8 (the HTTP body, ``aptix run``'s output), and
    ``to_wire()`` as strict JSON (no NaN) for a host that encodes it itself.
    """
    body = result.to_json().encode("utf-8")
    json.dumps(result.to_wire(), allow_nan=False, ensure_ascii=False).encode("utf-8")
    return len(body)


_LOGGER = logging.getLogger("aptix_pipeline")


class _ErrorCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


class FuzzWorld:
    """A recording, redacting pipeline on one store, with a completed and a pending turn.

    ``kind`` is ``memory`` or ``sqlite`` (a file in ``directory``). Use ``start``
    first and ``close`` last; ``check`` runs one case (see the module docstring).
    """

    def __init__(self, kind: str, directory: Path) -> None:
        if kind not in STORE_KINDS:
            raise ValueError(f"store kind must be one of {STORE_KINDS}, not {kind!r}")
        self.kind = kind
        self.directory = directory
        self.recordings: list[TurnRecording] = []
        self.store: MemoryStore | SQLiteStore | None = None
        self.pipeline: Pipeline | None = None
        self.base: Base | None = None
        self._reader: sqlite3.Connection | None = None
        self._generation = 0
        self.host = HostileHost()

    @property
    def ready(self) -> tuple[Pipeline, Base]:
        """The pipeline and base ids (after ``start``)."""
        assert self.pipeline is not None
        assert self.base is not None
        return self.pipeline, self.base

    async def start(self) -> None:
        """A fresh store holding the base sessions (also: the reset after a stored turn)."""
        await self.close()
        self._generation += 1
        store: MemoryStore | SQLiteStore
        if self.kind == "memory":
            store = MemoryStore()
        else:
            path = self.directory / f"fuzz-{self._generation}.db"
            store = SQLiteStore(path)
            self._reader = sqlite3.connect(path, isolation_level=None)
        self.store = store
        catalog = ConfigCatalog.default()
        ports = Ports(
            store=store,
            llm=FuzzLLM(),
            modes=catalog,
            agents=catalog,
            clock=SteppingClock(),
            ids=SequentialIds(),
            tools={name: self.host.tool(run) for name, run in BUILTIN_TOOLS.items()},
        )
        self.pipeline = Pipeline(
            ports,
            PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0),
            rules=[self.host.rule()],
            hooks=Hooks(before_model_request=self.host.before_model_request),
            listeners=[self.host.listener],
            interceptors=[
                Recorder(
                    RecordingOptions(redact=True, sink=self.recordings.append, config_digest="fuzz")
                )
            ],
        )
        done = await self.pipeline.execute({"Instruction": "hello"}, CALLER)
        pending = await self.pipeline.execute({"Instruction": TOOLS_PLEASE}, CALLER)
        assert done.result is not None, done.to_json()
        assert pending.result is not None, pending.to_json()
        self.base = Base(
            done_session=done.result.session_id,
            done_turn=done.result.turn_id,
            pending_session=pending.result.session_id,
            pending_turn=pending.result.turn_id,
            pending_calls=tuple(c.tool_call_id for c in pending.result.tool_calls or ()),
        )
        self.recordings.clear()

    async def close(self) -> None:
        """Close the store (and the SQLite reader)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if isinstance(self.store, SQLiteStore):
            await self.store.aclose()
            self.store.path.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.store.path}{suffix}").unlink(missing_ok=True)
        self.store = None

    def dump(self) -> str:
        """A canonical dump of everything stored."""
        if self._reader is not None:
            # The usage ledger keeps the model calls a refused turn made: they were spent
            # (D601); the trace log keeps the refusal's trace (D656). Everything else a
            # refused turn must leave as it was.
            return "\n".join(
                line
                for line in self._reader.iterdump()
                if '"usage_calls"' not in line and "turn_traces" not in line
            )
        store = self.store
        assert isinstance(store, MemoryStore)
        parts = [
            sorted((key, repr(value.model_dump())) for key, value in store._sessions.items()),
            sorted(
                (sid, tid, repr(turn.model_dump()))
                for sid, turns in store._turns.items()
                for tid, turn in turns.items()
            ),
            sorted((sid, sorted(ids)) for sid, ids in store._pending.items() if ids),
            sorted(
                (sid, [repr(m.model_dump()) for m in messages])
                for sid, messages in store._transcript.items()
            ),
            sorted((key, repr(answer.model_dump())) for key, answer in store._outcomes.items()),
        ]
        return repr(parts)

    async def check(self, case: Case) -> Outcome:
        """Run ``case`` and check the invariants (module docstring); reset after a stored turn."""
        pipeline, _ = self.ready
        before = self.dump()
        self.recordings.clear()
        errors = _ErrorCounter()
        _LOGGER.addHandler(errors)
        self.host.mode = case.hostile
        try:
            result = await pipeline.execute(
                case.request, case.caller, idempotency_key=case.idempotency_key
            )
        except (Exception, SystemExit, HostBaseError) as error:  # host code must not escape
            await self.start()
            return _failed("crash", error, stage="Pipeline.execute")
        finally:
            self.host.mode = None
            _LOGGER.removeHandler(errors)
        successful, recorded = result.successful, bool(self.recordings)
        outcome = Outcome(successful, recorded=recorded, logged=errors.count)
        try:
            size = serialized_size(result)
        except Exception as error:
            outcome = _failed("unserializable", error, successful, recorded, "InvokeResult")
        else:
            outcome = replace(outcome, size=size)
            if case.hostile is not None and outcome.broken is None:
                told = result.to_json()
                if HOST_SECRET in told or len(told) > 64_000:
                    where = "a secret" if HOST_SECRET in told else f"{len(told)} characters"
                    outcome = Outcome(successful, "host_leak", where, case.hostile, recorded)
        after = self.dump()
        if after != before and not successful and outcome.broken is None:
            difference = _first_difference(before, after)
            outcome = Outcome(False, "stored_by_refused", difference, "store", recorded)
        elif after == before and successful and outcome.broken is None:
            outcome = Outcome(True, "success_stored_nothing", recorded=recorded)
        for recording in self.recordings:
            try:
                written = recording.to_json()
                written.encode("utf-8")  # as write_recording writes it
            except Exception as error:
                if outcome.broken is None:
                    outcome = _failed(
                        "recording_unserializable", error, successful, recorded, "TurnRecording"
                    )
                continue
            key = case.idempotency_key
            if outcome.broken is None and key in SECRET_KEYS and key in written:
                outcome = Outcome(successful, "recording_holds_key", key, "redaction", True)
        if after != before:
            await self.start()
        return replace(outcome, logged=errors.count)


def _first_difference(before: str, after: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), 0)
    return f"stored: …{after[max(0, at - 60) : at + 100]!r}"


@dataclass(slots=True)
class Tally:
    """Counts of a fuzz run, per kind, and one example of each failure class."""

    by_kind: dict[str, dict[str, int]] = field(
        default_factory=lambda: {
            kind: dict.fromkeys(("requests", "successful", "refused", *INVARIANTS), 0)
            for kind in KINDS
        }
    )
    failures: dict[tuple[str, str, str], tuple[int, str]] = field(default_factory=dict)
    """(invariant, exception type, where) → (count, the first case's description)."""
    other: dict[str, int] = field(default_factory=dict)
    """Notes that are not failures (``success_stored_nothing``, ``no_recording``,
    ``largest result bytes``, ``errors logged``)."""

    def add(self, case: Case, outcome: Outcome, label: str = "") -> None:
        """Count one checked case."""
        counts = self.by_kind[case.kind]
        counts["requests"] += 1
        counts["successful" if outcome.successful else "refused"] += 1
        if not outcome.recorded and outcome.broken != "crash":
            self.other["no_recording"] = self.other.get("no_recording", 0) + 1
        if outcome.logged:
            self.other["errors logged"] = self.other.get("errors logged", 0) + outcome.logged
        largest = self.other.get("largest result bytes", 0)
        self.other["largest result bytes"] = max(largest, outcome.size)
        if outcome.broken in INVARIANTS:
            counts[outcome.broken] += 1
            key = outcome.failure_class
            count, example = self.failures.get(key, (0, ""))
            detail = f"{label} {outcome.error} | {case.describe()}".strip()
            self.failures[key] = (count + 1, example or detail)
        elif outcome.broken is not None:
            self.other[outcome.broken] = self.other.get(outcome.broken, 0) + 1

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts to these."""
        for kind, counts in other.by_kind.items():
            for name, value in counts.items():
                self.by_kind[kind][name] += value
        for key, (count, example) in other.failures.items():
            mine = self.failures.get(key, (0, example))
            self.failures[key] = (mine[0] + count, mine[1] or example)
        for name, value in other.other.items():
            combine = max if name.startswith("largest") else int.__add__
            self.other[name] = combine(self.other.get(name, 0), value)

    def total(self, name: str) -> int:
        """The count ``name`` over all kinds."""
        return sum(counts[name] for counts in self.by_kind.values())

    @property
    def bad(self) -> int:
        """Cases that broke an invariant."""
        return sum(self.total(name) for name in INVARIANTS)

    def report(self) -> str:
        """The counts as a table, then each failure class with its first example."""
        columns = ("requests", "successful", "refused", *INVARIANTS)
        heads = (
            "requests",
            "successful",
            "refused",
            "unhandled exceptions",
            "unserializable results",
            "changes stored by refused input",
            "unserializable recordings",
            "recordings holding a client's key",
            "host code told to the caller",
        )
        lines = []
        width = max(len(h) for h in heads)
        for head, name in zip(heads, columns, strict=True):
            row = "  ".join(f"{kind}={self.by_kind[kind][name]}" for kind in KINDS)
            lines.append(f"{head:<{width}}  {self.total(name):>7}   ({row})")
        for name, value in sorted(self.other.items()):
            lines.append(f"{'note: ' + name:<{width}}  {value:>7}")
        if self.failures:
            lines.append("")
            lines.append("failure classes (invariant, exception, where):")
            for (broken, kind, where), (count, example) in sorted(
                self.failures.items(), key=lambda item: -item[1][0]
            ):
                lines.append(f"- {broken} {kind} at {where}: {count} times")
                lines.append(f"    e.g. {example[:600]}")
        return "\n".join(lines)
