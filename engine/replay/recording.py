"""Turn recordings: one file per turn holding everything needed to re-run it offline.

A pipeline composed with a ``Recorder`` (``recorder.py``; ``embedded_pipeline(...,
recording=RecordingOptions(...))``) taps every port of each turn (``port_tap.py``)
and, when the turn ends, makes a ``TurnRecording``: the engine version, the request
exactly as given, the caller, the initial mode, the engine options, a digest of the
configuration, every port call in order with its arguments and its answer or the
exception it raised (store reads and writes, both catalogs, the model's requests and
replies, server tool results, clock readings, generated ids), the ``StateTrace`` and
the result. ``replayer.py`` re-runs it against today's code (DESIGN.md "Replay").

The JSON form is versioned (``RECORDING_FORMAT``; ``READ_FORMATS`` are read) and
documented in ``docs/RECORDING.md``. ``TurnRecording.redact`` drops user content (``redaction.py``).
Data of any depth is recorded, written and read back (``engine/deep_json.py``).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from pydantic_core import from_json

from aptix_pipeline.contracts import AgentExecuteRequest
from aptix_pipeline.engine.deep_json import dump_json, encode_value, int_of, load_json
from aptix_pipeline.engine.trace import CheckRecord, StateTrace
from aptix_pipeline.steps import PipelineOptions
from aptix_pipeline.validators import HOST_RULE_PREFIX

from .records import PortCall
from .redaction import REDACTED_IDEMPOTENCY_KEY, Redactor

__all__ = [
    "READ_FORMATS",
    "RECORDING_FORMAT",
    "TurnRecording",
    "host_rules_ran",
    "request_record",
    "write_recording",
]

RECORDING_FORMAT = "aptix.turn-recording/2"
"""The version of the JSON form this engine writes."""
_REQUEST_KINDS: Mapping[str, tuple[str, ...]] = {
    "aptix.turn-recording/1": ("json", "text", "base64"),
    RECORDING_FORMAT: ("json", "text", "bytes_json", "bytes_text", "base64"),
}
READ_FORMATS = tuple(_REQUEST_KINDS)
"""The versions of the JSON form a reader reads; it refuses any other. Version 1 differs
from 2 only in its requests given as bytes, which it holds as base64 alone."""


def host_rules_ran(trace: StateTrace) -> tuple[str, ...]:
    """The ids of the host rules (``host/…``) the trace's guards ran, each once, in order."""
    ran: dict[str, None] = {}
    for entry in trace.entries:
        if isinstance(entry, CheckRecord):
            ran.update((i, None) for i in entry.rule_ids if i.startswith(HOST_RULE_PREFIX))
    return tuple(ran)


def request_record(request: object) -> dict[str, Any]:
    """The request as the host gave it: a JSON value, JSON text, or bytes (``_bytes_record``)."""
    if isinstance(request, AgentExecuteRequest):
        return {"json": request.to_wire()}
    if isinstance(request, str):
        return {"text": request}
    if isinstance(request, bytes | bytearray):
        return _bytes_record(bytes(request))
    return {"json": encode_value(request)}


_READABLE_BYTES = 65_536
"""The largest request body kept as JSON (``bytes_json``); a larger one is kept as its text."""


def _bytes_record(raw: bytes) -> dict[str, Any]:
    """A request given as bytes, in the most readable form that replays it alike.

    ``{"bytes_json": value}`` for UTF-8 JSON text of at most ``_READABLE_BYTES`` that
    the engine reads exactly as the value's own JSON (``_json_alike``): a replay sends
    that JSON as UTF-8 bytes; ``{"bytes_text": "..."}`` for other UTF-8 text, replayed
    byte for byte; and ``{"base64": "..."}`` only for bytes that are not UTF-8.

    A larger body stays text: reading it as JSON and writing it back, which only
    makes it readable, would cost what parsing it costs twice over, in one call that
    holds the interpreter (a megabyte of nested brackets: about half a second), for a
    body the engine may have refused unread (``DESIGN/limits/json-depth``).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}
    value = _json_alike(text) if len(raw) <= _READABLE_BYTES else _NOT_ALIKE
    return {"bytes_text": text} if value is _NOT_ALIKE else {"bytes_json": value}


_NOT_ALIKE: Any = object()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    made = dict(pairs)
    if len(made) != len(pairs):
        raise ValueError("a duplicate key: the engine refuses it, so the text is kept")
    return made


def _finite(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError("a number past a float's range is kept as written")
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_alike(text: str) -> Any:
    """``text``'s JSON value when that value's own JSON reads the same to the engine —
    no duplicate keys, no number past a float's range, no ``NaN``/``Infinity``, no lone
    surrogate, not too deep for ``json`` — else ``_NOT_ALIKE``."""
    try:
        value = json.loads(
            text, object_pairs_hook=_unique_keys, parse_float=_finite, parse_constant=_no_constant
        )
        _bytes_of_json(value)
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return _NOT_ALIKE
    return value


def _bytes_of_json(value: Any) -> bytes:
    """The request bytes a ``bytes_json`` record replays: its value's JSON, UTF-8."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True, slots=True)
class TurnRecording:
    """One recorded turn; see the module docstring and ``docs/RECORDING.md``.

    ``request`` holds the request as given (``{"json": ...}``, ``{"text": ...}``, or
    for bytes ``{"bytes_json": ...}``, ``{"bytes_text": ...}`` or ``{"base64": ...}``:
    ``_bytes_record``); ``caller`` the org and user; ``options`` the
    ``PipelineOptions``; ``provider_name`` and ``server_tools`` what the ports
    were (the LLM's provider, the names of the host's server tools);
    ``trace_content`` whether the trace holds user content (content capture);
    ``redacted`` whether user content was dropped; ``idempotency_key`` the key
    the turn was run with (``Pipeline.run``), so a replay keeps its answer under
    the same keys; ``stopped_after_call`` how many port calls the turn had made
    when it was stopped from outside (its stream's consumer left,
    ``DESIGN/streaming/consumer-gone``), so a replay stops it at the same point;
    ``host_rules`` the ids of the host rules (``HostRule``) the turn's guards ran, in
    the order they ran, so a replay given other rules says so (``replayer.py``);
    ``usage_ledger`` whether the turn kept its model calls' usage in a ledger
    (``Ports.usage``, issue 31): its replay has one, answered from the recording,
    exactly then. A recording without the key was made without one (D594).
    """

    engine_version: str
    request: dict[str, Any]
    caller: dict[str, str]
    initial_mode: str | None
    options: dict[str, Any]
    config_digest: str
    calls: tuple[PortCall, ...]
    trace: StateTrace
    result: dict[str, Any]
    provider_name: str | None = None
    server_tools: tuple[str, ...] = ()
    trace_content: bool = False
    redacted: bool = False
    idempotency_key: str | None = None
    stopped_after_call: int | None = None
    host_rules: tuple[str, ...] = ()
    usage_ledger: bool = False
    durable: Mapping[str, Any] | None = None
    """How a durable turn ran (docs/DURABLE.md): its Temporal ``workflow_id``, ``run_id``,
    ``task_queue``, the ``workers`` whose activities ran it, and its ``activities``: each
    model call, server tool call and commit with its worker and attempt (D678); ``None``
    in process."""

    @property
    def successful(self) -> bool:
        """Whether the recorded turn produced a response."""
        return bool(self.result.get("Successful"))

    @property
    def clock_readings(self) -> tuple[str, ...]:
        """Every time the clock gave the turn, in order."""
        return tuple(str(c.answer) for c in self.calls if c.port == "Clock")

    @property
    def generated_ids(self) -> tuple[str, ...]:
        """Every id the id source gave the turn, in order."""
        return tuple(str(c.answer) for c in self.calls if c.port == "IdSource")

    def request_input(self) -> AgentExecuteRequest | Mapping[str, Any] | str | bytes:
        """The request in the form the host gave it, to run again."""
        if "text" in self.request:
            return str(self.request["text"])
        if "bytes_json" in self.request:
            return _bytes_of_json(self.request["bytes_json"])
        if "bytes_text" in self.request:
            return str(self.request["bytes_text"]).encode("utf-8")
        if "base64" in self.request:
            return base64.b64decode(self.request["base64"])
        value = self.request["json"]
        return cast(Mapping[str, Any], value) if isinstance(value, Mapping) else value

    def pipeline_options(self) -> PipelineOptions:
        """The recorded ``PipelineOptions``."""
        return PipelineOptions(**self.options)

    def redact(self) -> TurnRecording:
        """This recording without user content (``engine/replay/redaction.py``); idempotent.

        A request nested past the turn's ``max_json_depth`` keeps only what the engine
        read of it before refusing it (``engine/replay/depth_cut.py``).
        """
        redactor = Redactor.of(self.calls)
        limit = self.options.get("max_json_depth")
        max_depth = limit if type(limit) is int and limit >= 1 else None
        calls = tuple(
            replace(
                call,
                **redactor.port_call(call.port, call.call, call.args, call.answer, call.error),
                last_chunk=redactor.value(call.last_chunk),
            )
            for call in self.calls
        )
        return replace(
            self,
            request=redactor.request(self.request, max_depth=max_depth),
            calls=calls,
            trace=StateTrace.from_dict(redactor.value(self.trace.to_dict())),
            result=redactor.value(self.result),
            redacted=True,
            # The client chose the key: content. A replay saves the answer under the
            # placeholder's keys, which the redacted port calls hold (D401).
            idempotency_key=self.idempotency_key and REDACTED_IDEMPOTENCY_KEY,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``RECORDING_FORMAT``), keys in a fixed order."""
        return {
            "format": RECORDING_FORMAT,
            "engine_version": self.engine_version,
            "redacted": self.redacted,
            "config_digest": self.config_digest,
            "caller": dict(self.caller),
            "initial_mode": self.initial_mode,
            **({"idempotency_key": self.idempotency_key} if self.idempotency_key else {}),
            "options": dict(self.options),
            "provider_name": self.provider_name,
            "server_tools": list(self.server_tools),
            "trace_content": self.trace_content,
            **({"host_rules": list(self.host_rules)} if self.host_rules else {}),
            **(
                {"stopped_after_call": self.stopped_after_call}
                if self.stopped_after_call is not None
                else {}
            ),
            **({"durable": dict(self.durable)} if self.durable is not None else {}),
            **({"usage_ledger": True} if self.usage_ledger else {}),
            "request": self.request,
            "calls": [call.to_dict() for call in self.calls],
            "trace": self.trace.to_dict(),
            "result": self.result,
        }

    def to_json(self) -> str:
        """The JSON form as text (UTF-8, indented, one port call per block).

        Data nested too deep for ``json`` (a tool result a few hundred levels deep)
        is written compact, without recursion (``engine/deep_json.py``): indenting
        it would cost space quadratic in its depth. So is a recording whose
        indented form would be more than ``_INDENT_GROWTH`` times its compact one
        (and ``_INDENT_SLACK`` more): a megabyte of brackets sixty deep indents to
        about seventy.
        """
        data = self.to_dict()
        try:
            text = _indented(data)
        except (RecursionError, ValueError):  # too deep, or an int past str()'s 4,300 digits
            text = None
        if text is None:
            text = dump_json(data) + "\n"
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (only ever inside a JSON string):
            return text.encode("utf-8", "backslashreplace").decode("utf-8")  # as its \\u escape
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnRecording:
        """Read the JSON form; ``ValueError`` naming what is wrong when it is not one."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a turn recording is a JSON object, not {type(data).__name__}")
        kinds = _REQUEST_KINDS.get(data.get("format"))  # type: ignore[arg-type]
        if kinds is None:
            raise ValueError(
                f"not a turn recording this engine reads (format {data.get('format')!r}); "
                f"it reads {', '.join(READ_FORMATS)}"
            )
        try:
            calls = tuple(PortCall.from_dict(call) for call in data["calls"])
            caller = {"org": str(data["caller"]["org"]), "user": str(data["caller"]["user"])}
            request = dict(data["request"])
            if len(request) != 1 or next(iter(request)) not in kinds:
                raise ValueError(f"request must hold exactly one of {', '.join(kinds)}")
            trace = StateTrace.from_dict(data["trace"])
            return cls(
                engine_version=str(data["engine_version"]),
                request=request,
                caller=caller,
                initial_mode=data["initial_mode"],
                options=dict(data["options"]),
                config_digest=str(data["config_digest"]),
                calls=calls,
                trace=trace,
                result=dict(data["result"]),
                provider_name=data.get("provider_name"),
                server_tools=tuple(data.get("server_tools", ())),
                trace_content=bool(data.get("trace_content", False)),
                redacted=bool(data.get("redacted", False)),
                idempotency_key=data.get("idempotency_key"),
                stopped_after_call=_count(data.get("stopped_after_call")),
                usage_ledger=_flag(data.get("usage_ledger", False)),
                durable=_durable(data.get("durable")),
                # Recorded before the key was written: the trace's guards name them too.
                host_rules=tuple(data["host_rules"])
                if "host_rules" in data
                else host_rules_ran(trace),
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"malformed turn recording: missing or bad {error}") from None

    @classmethod
    def load(cls, path: str | Path) -> TurnRecording:
        """Read a recording file; ``ValueError`` naming the file when it is not one."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
            try:  # pydantic-core's parser is the faster; json's also reads lone surrogates
                data = from_json(text)
            except ValueError:
                try:
                    data = json.loads(text, parse_int=int_of)
                except RecursionError:  # deeper than json goes: read without recursion
                    data = load_json(text)
            return cls.from_dict(data)
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: {error}") from None

    def file_name(self) -> str:
        """A name for this turn's file: when it started, and a digest of its content.

        Two different turns never share a name; recording the same turn twice
        gives the same name (and the same bytes).
        """
        return self._file_name(self.to_json())

    def _file_name(self, text: str) -> str:
        """``file_name``, given this recording's ``to_json``."""
        stamp = "unknown"
        if self.clock_readings:
            try:
                started = datetime.fromisoformat(self.clock_readings[0]).astimezone(UTC)
                stamp = started.strftime("%Y%m%dT%H%M%S%fZ")
            except ValueError:  # a host clock's odd answer: its characters, made safe
                stamp = re.sub(r"[^0-9A-Za-z]", "", self.clock_readings[0])[:24] or stamp
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        return f"turn-{stamp}-{digest}.json"


def _durable(value: object) -> Mapping[str, Any] | None:
    """A recording's ``durable`` object, checked; ``None`` for a turn run in process."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"durable must be a JSON object, not {type(value).__name__}")
    return dict(value)


def _flag(value: Any) -> bool:
    """``usage_ledger``: ``true`` or ``false`` (absent: ``false``)."""
    if not isinstance(value, bool):
        raise TypeError("'usage_ledger' (true or false)")
    return value


def _count(value: Any) -> int | None:
    """``stopped_after_call``: a whole number 0 or more, or absent."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError("'stopped_after_call' (a whole number of port calls, 0 or more)")
    return value


_INDENT_GROWTH = 4
_INDENT_SLACK = 65_536


def _indented(data: dict[str, Any]) -> str | None:
    """``data`` as indented JSON text; ``None`` when that would be more than
    ``_INDENT_GROWTH`` times its compact text and ``_INDENT_SLACK`` more, which
    only data nested deep and wide does. The indenting stops at that size."""
    limit = _INDENT_GROWTH * len(json.dumps(data, ensure_ascii=False)) + _INDENT_SLACK
    chunks = json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(data)
    written: list[str] = []
    size = 0
    while batch := list(itertools.islice(chunks, 4096)):
        size += sum(map(len, batch))
        if size > limit:
            return None
        written.extend(batch)
    written.append("\n")
    return "".join(written)


def write_recording(recording: TurnRecording, directory: str | Path) -> Path:
    """Write ``recording`` into ``directory`` (created when missing), atomically; its path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    text = recording.to_json()
    path = folder / recording._file_name(text)
    temporary = folder / f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)  # readers never see half a file
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path
