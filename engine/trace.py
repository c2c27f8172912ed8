"""``StateTrace``: the ordered, deterministic record of what one turn did.

A trace lists, in the order they happened, each transition the machine took
(step, from, to), each guard (PRE) and exit hook (POST) with the rule ids it
checked and those that failed (AGN-036 §4), each retrieval (AGN-034 §4.4), each
model call, each tool call and
what became of it (server or client, the container design's verdict), each mode
change (AGN-011 §5.2), each warning, and the fault that ended a failed turn;
then the outcome and its error codes.

It holds no wall-clock time and no generated value that does not come through
the ports (ids from ``IdSource``), so the same turn on the same ports gives the
same trace byte for byte: tests snapshot it, and a replay compares against it.
User content (the model's text, tool arguments and results, a mode change's
reason) is left out unless the host opts in to content capture (DESIGN.md
"Observability without leaks").

``to_dict``/``to_json`` give the JSON form; ``StateTrace.from_dict`` reads it back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from aptix_pipeline.contracts import InvokeWarning, PriceTable, Usage
from aptix_pipeline.steps import ModeChange, ToolCallFate, ToolCallRecord, ToolCallSide

from .records import quick_init

__all__ = [
    "TRACE_FORMAT",
    "CallUsage",
    "CheckRecord",
    "FaultRecord",
    "LLMCallRecord",
    "RetrievalRecord",
    "StateTrace",
    "TraceEntry",
    "TransitionRecord",
    "entry_from_dict",
    "entry_to_dict",
]

TRACE_FORMAT = "aptix.state-trace/1"
"""The version of the JSON form; a reader refuses any other."""


@quick_init
@dataclass(frozen=True, slots=True)
class CallUsage:
    """One model call's usage and cost, as its ``llm_client`` transition and its ``chat``
    span keep them (issue 31).

    ``reported`` is ``False`` when the model reported no usage: its tokens are unknown
    (``None``), never 0. ``cached_input_tokens`` (part of ``input_tokens``) and
    ``reasoning_tokens`` (part of ``output_tokens``) are ``None`` when the model does
    not report them. ``priced`` says whether the price table has a price for the
    model; ``cost`` (exact, in ``currency``) is there when it has one and the model
    reported its usage.
    """

    reported: bool
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    priced: bool = False
    cost: Decimal | None = None
    currency: str | None = None

    @staticmethod
    def of(usage: Usage | None, model: str | None, prices: PriceTable | None) -> CallUsage:
        """The usage a model reported (``None``: none) on ``model``, priced by ``prices``
        (``None``: no price table, every call unpriced)."""
        price = prices.price(model) if prices is not None else None
        if usage is None:
            return CallUsage(False, priced=price is not None)
        return CallUsage(
            True,
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.reasoning_tokens,
            price is not None,
            price.cost(usage) if price is not None else None,
            price.currency if price is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the counts known, or ``unreported``; the cost as exact decimal
        text and its currency, or ``unpriced``."""
        data: dict[str, Any] = {}
        if self.reported:
            data["input_tokens"] = self.input_tokens
            data["output_tokens"] = self.output_tokens
            if self.cached_input_tokens is not None:
                data["cached_input_tokens"] = self.cached_input_tokens
            if self.reasoning_tokens is not None:
                data["reasoning_tokens"] = self.reasoning_tokens
        else:
            data["unreported"] = True
        if not self.priced:
            data["unpriced"] = True
        elif self.cost is not None:
            data["cost"] = format(self.cost, "f")
            data["currency"] = self.currency
        return data

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> CallUsage:
        """The usage ``to_dict`` wrote."""
        cost = data.get("cost")
        return CallUsage(
            not data.get("unreported", False),
            data.get("input_tokens"),
            data.get("output_tokens"),
            data.get("cached_input_tokens"),
            data.get("reasoning_tokens"),
            not data.get("unpriced", False),
            None if cost is None else Decimal(cost),
            data.get("currency"),
        )


@dataclass(frozen=True, slots=True)
class TransitionRecord:
    """One transition the turn took: the event (a step name), from and to.

    ``usage``: an ``llm_client`` transition's model call's usage and cost (one call a
    round); ``None`` on every other transition.
    """

    event: str
    source: str
    target: str
    usage: CallUsage | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One guard (PRE) or exit hook (POST) run: the rules it checked and those that failed.

    ``deferred`` marks §4.9's POST skipped for a round that goes on (DESIGN.md R5).
    """

    step: str
    phase: str
    rule_ids: tuple[str, ...]
    failed: tuple[str, ...] = ()
    deferred: bool = False

    @property
    def outcome(self) -> str:
        """``passed``, ``failed`` or ``deferred``."""
        if self.deferred:
            return "deferred"
        return "failed" if self.failed else "passed"


@quick_init
@dataclass(frozen=True, slots=True)
class LLMCallRecord:
    """One call of the LLM port (AGN-036 §4.9), with all its attempts.

    ``round`` counts the model calls of this request from 1 (DESIGN.md R5);
    ``tools`` are the names advertised to the model; ``error`` is the exception
    class of a call that failed after its attempts (the turn then faults).
    ``text`` is the model's text only when content capture is on; ``has_text``
    always says whether there was any.
    """

    round: int
    mode: str
    request_model: str | None
    tools: tuple[str, ...]
    messages: int
    attempts: int = 1
    retries: tuple[str, ...] = ()
    response_model: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()
    has_text: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    text: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class RetrievalRecord:
    """One call of the ``Retriever`` port (AGN-034 §4.4, ``steps/retrieval.py``).

    ``collection`` names what the retriever searches; ``limit`` is the most passages
    asked for; ``conditions`` counts the RAG scope conditions (their keys and values
    are user content); ``hits`` counts the passages the prompt got; ``error`` is the
    exception class of a retrieval that failed (the turn then faults).
    ``document_ids`` are the passages' sources, only when content capture is on.
    """

    collection: str
    limit: int
    conditions: int
    hits: int = 0
    error: str | None = None
    document_ids: tuple[str, ...] | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class FaultRecord:
    """What ended a failed turn: the step (or transition) and the errors' codes and rules."""

    step: str
    error_codes: tuple[str, ...]
    rule_ids: tuple[str, ...]


TraceEntry = (
    TransitionRecord
    | CheckRecord
    | LLMCallRecord
    | RetrievalRecord
    | ToolCallRecord
    | ModeChange
    | InvokeWarning
    | FaultRecord
)


_ENTRY_JSON: dict[CheckRecord | TransitionRecord, str] = {}
"""The JSON text of checks and plain transitions seen, which repeat turn after turn."""
_ENTRY_JSON_BY_ID: dict[int, tuple[TraceEntry, str]] = {}
"""The same by the entry's identity (most are the machine's own records, one object
turn after turn): found without hashing the entry's rules. Holding the entry keeps
its id from being reused while remembered."""
_ENTRY_JSON_MAX = 4096
"""The most remembered; past it the memory starts again."""
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)``, without making an encoder each call."""


def _entry_json(entry: TraceEntry) -> str:
    """``entry_to_dict(entry)`` as compact JSON text; remembered for a check or a
    transition without usage (small, hashable, repeating)."""
    held = _ENTRY_JSON_BY_ID.get(id(entry))
    if held is not None and held[0] is entry:
        return held[1]
    if type(entry) is CheckRecord or (type(entry) is TransitionRecord and entry.usage is None):
        text = _ENTRY_JSON.get(entry)
        if text is None:
            if len(_ENTRY_JSON) >= _ENTRY_JSON_MAX:
                _ENTRY_JSON.clear()
            text = _ENTRY_JSON[entry] = _ENCODE(entry_to_dict(entry))
        if len(_ENTRY_JSON_BY_ID) >= _ENTRY_JSON_MAX:
            _ENTRY_JSON_BY_ID.clear()
        _ENTRY_JSON_BY_ID[id(entry)] = (entry, text)
        return text
    if type(entry) is LLMCallRecord:
        return _llm_call_json(entry)
    if type(entry) is TransitionRecord and entry.usage is not None:
        return (
            f'{{"kind": "transition", "step": {_STR(entry.event)}, "from": '
            f'{_STR(entry.source)}, "to": {_STR(entry.target)}, "usage": '
            f"{_ENCODE(entry.usage.to_dict())}}}"
        )
    return _ENCODE(entry_to_dict(entry))


# The two entries that differ turn after turn, written straight to text: the same text as
# ``_ENCODE(entry_to_dict(entry))`` (tests/engine/test_state_traces.py holds them to it),
# in about a third of its time. Strings go through ``encode_basestring``, as ``_ENCODE``'s.
_STR = json.encoder.encode_basestring
"""A string as a JSON string, as ``json.dumps(..., ensure_ascii=False)`` writes it."""


def _or_null(value: str | None) -> str:
    return "null" if value is None else _STR(value)


def _int_or_null(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def _strings(values: Sequence[str]) -> str:
    return f"[{', '.join([_STR(value) for value in values])}]"


def _llm_call_json(entry: LLMCallRecord) -> str:
    calls = ", ".join([f'{{"id": {_STR(i)}, "name": {_STR(n)}}}' for i, n in entry.tool_calls])
    text = "" if entry.text is None else f', "text": {_STR(entry.text)}'
    return (
        f'{{"kind": "llm_call", "round": {int(entry.round)}, "mode": {_or_null(entry.mode)}, '
        f'"request_model": {_or_null(entry.request_model)}, "tools": {_strings(entry.tools)}, '
        f'"messages": {int(entry.messages)}, "attempts": {int(entry.attempts)}, '
        f'"retries": {_strings(entry.retries)}, '
        f'"response_model": {_or_null(entry.response_model)}, '
        f'"response_id": {_or_null(entry.response_id)}, '
        f'"finish_reason": {_or_null(entry.finish_reason)}, "tool_calls": [{calls}], '
        f'"has_text": {"true" if entry.has_text else "false"}, '
        f'"input_tokens": {_int_or_null(entry.input_tokens)}, '
        f'"output_tokens": {_int_or_null(entry.output_tokens)}, '
        f'"error": {_or_null(entry.error)}{text}}}'
    )


def entry_to_dict(entry: TraceEntry) -> dict[str, Any]:
    """One entry as JSON: a ``kind`` and its fields."""
    if isinstance(entry, TransitionRecord):
        transition: dict[str, Any] = {
            "kind": "transition",
            "step": entry.event,
            "from": entry.source,
            "to": entry.target,
        }
        if entry.usage is not None:
            transition["usage"] = entry.usage.to_dict()
        return transition
    if isinstance(entry, CheckRecord):
        return {
            "kind": "guard" if entry.phase == "PRE" else "exit_hook",
            "step": entry.step,
            "outcome": entry.outcome,
            "rule_ids": list(entry.rule_ids),
            "failed": list(entry.failed),
        }
    if isinstance(entry, LLMCallRecord):
        data: dict[str, Any] = {
            "kind": "llm_call",
            "round": entry.round,
            "mode": entry.mode,
            "request_model": entry.request_model,
            "tools": list(entry.tools),
            "messages": entry.messages,
            "attempts": entry.attempts,
            "retries": list(entry.retries),
            "response_model": entry.response_model,
            "response_id": entry.response_id,
            "finish_reason": entry.finish_reason,
            "tool_calls": [{"id": i, "name": n} for i, n in entry.tool_calls],
            "has_text": entry.has_text,
            "input_tokens": entry.input_tokens,
            "output_tokens": entry.output_tokens,
            "error": entry.error,
        }
        if entry.text is not None:
            data["text"] = entry.text
        return data
    if isinstance(entry, RetrievalRecord):
        retrieval: dict[str, Any] = {
            "kind": "retrieval",
            "collection": entry.collection,
            "limit": entry.limit,
            "conditions": entry.conditions,
            "hits": entry.hits,
            "error": entry.error,
        }
        if entry.document_ids is not None:
            retrieval["document_ids"] = list(entry.document_ids)
        return retrieval
    if isinstance(entry, ToolCallRecord):
        return {
            "kind": "tool_call",
            "id": entry.tool_call_id,
            "name": entry.name,
            "side": entry.side,
            "outcome": entry.outcome,
            "rule_id": entry.rule_id,
        }
    if isinstance(entry, ModeChange):
        change: dict[str, Any] = {
            "kind": "mode_change",
            "tool_call_id": entry.tool_call_id,
            "previous": entry.previous_mode,
            "new": entry.new_mode,
            "branch": entry.branch,
        }
        if entry.reason is not None:
            change["reason"] = entry.reason
        return change
    if isinstance(entry, InvokeWarning):
        return {"kind": "warning", "code": entry.code, "rule_id": entry.rule_id}
    return {
        "kind": "fault",
        "step": entry.step,
        "error_codes": list(entry.error_codes),
        "rule_ids": list(entry.rule_ids),
    }


def entry_from_dict(data: Mapping[str, Any]) -> TraceEntry:
    """The entry ``entry_to_dict`` wrote; ``ValueError`` for an unknown kind."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a trace entry is an object, not {type(data).__name__}")
    kind = data.get("kind")
    if kind == "transition":
        usage = data.get("usage")
        return TransitionRecord(
            data["step"],
            data["from"],
            data["to"],
            None if usage is None else CallUsage.from_dict(usage),
        )
    if kind in ("guard", "exit_hook"):
        return CheckRecord(
            data["step"],
            "PRE" if kind == "guard" else "POST",
            tuple(data["rule_ids"]),
            tuple(data["failed"]),
            deferred=data["outcome"] == "deferred",
        )
    if kind == "llm_call":
        return LLMCallRecord(
            round=data["round"],
            mode=data["mode"],
            request_model=data["request_model"],
            tools=tuple(data["tools"]),
            messages=data["messages"],
            attempts=data["attempts"],
            retries=tuple(data["retries"]),
            response_model=data["response_model"],
            response_id=data["response_id"],
            finish_reason=data["finish_reason"],
            tool_calls=tuple((c["id"], c["name"]) for c in data["tool_calls"]),
            has_text=data["has_text"],
            input_tokens=data["input_tokens"],
            output_tokens=data["output_tokens"],
            error=data["error"],
            text=data.get("text"),
        )
    if kind == "retrieval":
        ids = data.get("document_ids")
        return RetrievalRecord(
            data["collection"],
            data["limit"],
            data["conditions"],
            data["hits"],
            data["error"],
            None if ids is None else tuple(ids),
        )
    if kind == "tool_call":
        return ToolCallRecord(
            data["id"],
            data["name"],
            ToolCallSide(data["side"]),
            ToolCallFate(data["outcome"]),
            data["rule_id"],
        )
    if kind == "mode_change":
        return ModeChange(
            data["tool_call_id"], data["previous"], data["new"], data.get("reason"), data["branch"]
        )
    if kind == "warning":
        # The message is not kept in the trace: it is in the result's warnings.
        return InvokeWarning(code=data["code"], message="", rule_id=data["rule_id"])
    if kind == "fault":
        return FaultRecord(data["step"], tuple(data["error_codes"]), tuple(data["rule_ids"]))
    raise ValueError(f"unknown trace entry kind {kind!r}")


@quick_init
@dataclass(frozen=True, slots=True)
class StateTrace:
    """What one turn did, in order; see the module docstring.

    ``outcome`` is ``done`` or ``faulted`` (``replayed`` or ``refused`` for a call
    answered without a turn: a stored answer, or a key conflict; ``TurnReport.replayed``);
    ``states`` are the machine states in
    the order the turn entered them; ``session_id``/``turn_id`` name what the
    store holds afterwards (``None`` where a failed turn left nothing).
    """

    context_type: str | None
    outcome: str
    states: tuple[str, ...]
    entries: tuple[TraceEntry, ...]
    session_id: str | None = None
    turn_id: str | None = None
    mode: str | None = None
    response_type: str | None = None
    error_codes: tuple[str, ...] = ()
    faulted_step: str | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def transitions(self) -> tuple[TransitionRecord, ...]:
        """The transitions taken, in order."""
        return tuple(e for e in self.entries if isinstance(e, TransitionRecord))

    @property
    def checks(self) -> tuple[CheckRecord, ...]:
        """The guards and exit hooks run, in order."""
        return tuple(e for e in self.entries if isinstance(e, CheckRecord))

    @property
    def llm_calls(self) -> tuple[LLMCallRecord, ...]:
        """The model calls, in order."""
        return tuple(e for e in self.entries if isinstance(e, LLMCallRecord))

    @property
    def retrievals(self) -> tuple[RetrievalRecord, ...]:
        """The retrievals, in order."""
        return tuple(e for e in self.entries if isinstance(e, RetrievalRecord))

    @property
    def tool_calls(self) -> tuple[ToolCallRecord, ...]:
        """The model's tool calls and what became of them, in order."""
        return tuple(e for e in self.entries if isinstance(e, ToolCallRecord))

    @property
    def mode_changes(self) -> tuple[ModeChange, ...]:
        """The mode changes, in order."""
        return tuple(e for e in self.entries if isinstance(e, ModeChange))

    @property
    def failed_rules(self) -> tuple[str, ...]:
        """The rules that failed the turn: its fault's, else those of the checks that failed."""
        for entry in self.entries:
            if isinstance(entry, FaultRecord) and entry.rule_ids:
                return entry.rule_ids
        return tuple(rule for check in self.checks for rule in check.failed)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``TRACE_FORMAT``)."""
        return self._head() | {"entries": [entry_to_dict(entry) for entry in self.entries]}

    def _head(self) -> dict[str, Any]:
        """The JSON form but its entries."""
        return {
            "format": TRACE_FORMAT,
            "context_type": self.context_type,
            "outcome": self.outcome,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "mode": self.mode,
            "response_type": self.response_type,
            "error_codes": list(self.error_codes),
            "faulted_step": self.faulted_step,
            "warnings": list(self.warnings),
            "states": list(self.states),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """The JSON form as text, keys in a fixed order. Compact (``indent=None``, as a
        kept trace is stored) it is built from each entry's own JSON, the same text
        ``json.dumps`` of ``to_dict`` gives, with the checks' and plain transitions'
        JSON remembered (``_entry_json``): they repeat turn after turn."""
        if indent is not None:
            return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)
        head = self._head()
        entries = ", ".join([_entry_json(entry) for entry in self.entries])
        return f'{_ENCODE(head)[:-1]}, "entries": [{entries}]}}'

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StateTrace:
        """Read the JSON form back; ``ValueError`` when it is not a trace of this format."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a state trace is an object, not {type(data).__name__}")
        if data.get("format") != TRACE_FORMAT:
            raise ValueError(f"not a {TRACE_FORMAT} trace (format {data.get('format')!r})")
        try:
            return cls(
                context_type=data["context_type"],
                outcome=data["outcome"],
                states=tuple(data["states"]),
                entries=tuple(entry_from_dict(entry) for entry in data["entries"]),
                session_id=data["session_id"],
                turn_id=data["turn_id"],
                mode=data["mode"],
                response_type=data["response_type"],
                error_codes=tuple(data["error_codes"]),
                faulted_step=data["faulted_step"],
                warnings=tuple(data["warnings"]),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"malformed state trace: {error!r}") from error

    def describe(self) -> Sequence[str]:
        """One line per entry, for people (the CLI's ``--trace`` and the demo)."""
        lines = []
        for entry in self.entries:
            data = entry_to_dict(entry)
            kind = data.pop("kind")
            if isinstance(entry, CheckRecord):  # a count reads better than thirty rule ids
                data["rule_ids"] = len(entry.rule_ids)
            detail = " ".join(f"{k}={v}" for k, v in data.items() if v not in (None, [], (), 0))
            lines.append(f"{kind:<11} {detail}")
        lines.append(f"{'outcome':<11} {self.outcome} {' '.join(self.error_codes)}".rstrip())
        return lines
