"""Turn recordings: one file per turn holding everything needed to re-run it offline.

A ``Pipeline`` made with ``recording=RecordingOptions(...)`` taps every port of
each turn (``engine/port_tap.py``) and, when the turn ends, writes a
``TurnRecording``: the engine version, the request exactly as given, the caller,
the initial mode, the engine options, a digest of the configuration, every port
call in order with its arguments and its answer or the exception it raised
(store reads and writes, both catalogs, the model's requests and replies, server
tool results, clock readings, generated ids), the ``StateTrace`` and the result.
``engine/replay.py`` re-runs it against today's code (DESIGN.md "Replay").

The JSON form is versioned (``RECORDING_FORMAT``) and documented in
``docs/RECORDING.md``. ``RecordingOptions(redact=True)`` drops user content
before anything is written (``engine/redaction.py``).

Recording never changes a turn: the tap passes every call through unchanged, and
a recording that cannot be made or written is logged and traced, never raised
(DESIGN.md "What every part promises"; docs/RECORDING.md "When recording fails").
Data of any depth is recorded, written and read back (``engine/deep_json.py``).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import hashlib
import json
import logging
import os
import re
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter
from pydantic_core import from_json

from aptix_pipeline import __version__
from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    Caller,
    PermanentPortError,
    StoreConflictError,
)
from aptix_pipeline.contracts.url_secrets import scrub_urls
from aptix_pipeline.steps import PipelineOptions, Ports

from .deep_json import dump_json, int_of, load_json
from .port_tap import STORE, encode_value, provider_name_of
from .redaction import Redactor
from .trace import StateTrace

__all__ = [
    "RECORDING_FORMAT",
    "PortCall",
    "RecordedError",
    "RecordingOptions",
    "RecordingTap",
    "TurnRecording",
    "config_digest",
    "failure_summary",
    "write_recording",
]

logger = logging.getLogger("aptix_pipeline")

T = TypeVar("T")

RECORDING_FORMAT = "aptix.turn-recording/1"
"""The version of the JSON form; a reader refuses any other."""

# Exceptions a replay raises as themselves (beyond the builtins): the engine
# treats these differently from any other failure (no retry, ``conflict``).
_ENGINE_ERRORS: dict[str, type[Exception]] = {
    "PermanentPortError": PermanentPortError,
    "StoreConflictError": StoreConflictError,
}


def _known_class(name: str) -> type[Exception] | None:
    if name in _ENGINE_ERRORS:
        return _ENGINE_ERRORS[name]
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    return None


@dataclass(frozen=True, slots=True)
class RecordedError:
    """The exception a port raised: its class name, its message and its ancestry.

    ``classes`` are the names of its class and its bases, most derived first
    (its MRO without ``object``), so a replay raises an exception the engine
    treats the same way: of the same name and message (``described()`` shows
    both), and an instance of the builtin and engine classes it derived from
    (``PermanentPortError`` is not retried, ``StoreConflictError`` is a
    ``conflict``).
    """

    type: str
    message: str
    classes: tuple[str, ...] = ()

    @classmethod
    def of(cls, error: BaseException) -> RecordedError:
        """The record of ``error``."""
        mro = tuple(c.__name__ for c in type(error).__mro__ if c is not object)
        return cls(type=type(error).__name__, message=scrub_urls(str(error)), classes=mro)

    def to_exception(self) -> Exception:
        """An exception that reads and behaves like the recorded one (see the class doc)."""
        known = [c for name in self.classes if (c := _known_class(name)) is not None]
        bases = tuple(c for c in known if not any(o is not c and issubclass(o, c) for o in known))
        message = self.message

        def text(_: BaseException) -> str:
            return message

        namespace = {"__str__": text, "__module__": "aptix_pipeline.recorded"}
        try:
            kind: type[Exception] = type(self.type, bases or (Exception,), namespace)
        except TypeError:  # bases whose layouts clash: keep the most specific
            kind = type(self.type, bases[:1] or (Exception,), namespace)
        error = kind.__new__(kind)  # no __init__: some take other arguments than a message
        error.args = (message,)
        return error

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"type": self.type, "message": self.message, "classes": list(self.classes)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecordedError:
        """Read the JSON form back."""
        return cls(str(data["type"]), str(data["message"]), tuple(data.get("classes", ())))


@dataclass(frozen=True, slots=True)
class PortCall:
    """One port call: which, during which step, with what, and what came back.

    ``n`` counts the turn's port calls from 1; ``step`` is the machine transition
    that made it (``None``: after the machine stopped — the rollback of a failed
    turn). ``answer`` is the JSON form of what the port returned, unless it
    raised ``error``.
    """

    n: int
    step: str | None
    port: str
    call: str
    args: dict[str, Any]
    answer: Any = None
    error: RecordedError | None = None

    @property
    def name(self) -> str:
        """``Port.call``, e.g. ``SessionTransaction.load_session``."""
        return f"{self.port}.{self.call}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``answer`` or ``error``, never both."""
        data: dict[str, Any] = {
            "n": self.n,
            "step": self.step,
            "port": self.port,
            "call": self.call,
            "args": self.args,
        }
        if self.error is not None:
            data["error"] = self.error.to_dict()
        else:
            data["answer"] = self.answer
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PortCall:
        """Read the JSON form back."""
        error = data.get("error")
        return cls(
            n=int(data["n"]),
            step=data["step"],
            port=str(data["port"]),
            call=str(data["call"]),
            args=dict(data["args"]),
            answer=data.get("answer"),
            error=RecordedError.from_dict(error) if error is not None else None,
        )


def _request_record(request: object) -> dict[str, Any]:
    """The request exactly as the host gave it: a JSON value, JSON text, or raw bytes."""
    if isinstance(request, AgentExecuteRequest):
        return {"json": request.to_wire()}
    if isinstance(request, str):
        return {"text": request}
    if isinstance(request, bytes | bytearray):
        return {"base64": base64.b64encode(bytes(request)).decode("ascii")}
    return {"json": encode_value(request)}


@dataclass(frozen=True, slots=True)
class TurnRecording:
    """One recorded turn; see the module docstring and ``docs/RECORDING.md``.

    ``request`` holds the request as given (``{"json": ...}``, ``{"text": ...}`` or
    ``{"base64": ...}`` for bytes); ``caller`` the org and user; ``options`` the
    ``PipelineOptions``; ``provider_name`` and ``server_tools`` what the ports
    were (the LLM's provider, the names of the host's server tools);
    ``trace_content`` whether the trace holds user content (content capture);
    ``redacted`` whether user content was dropped; ``idempotency_key`` the key
    the turn was run with (``Pipeline.run``), so a replay keeps its answer under
    the same keys.
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
        if "base64" in self.request:
            return base64.b64decode(self.request["base64"])
        value = self.request["json"]
        return cast(Mapping[str, Any], value) if isinstance(value, Mapping) else value

    def pipeline_options(self) -> PipelineOptions:
        """The recorded ``PipelineOptions``."""
        return PipelineOptions(**self.options)

    def redact(self) -> TurnRecording:
        """This recording without user content (``engine/redaction.py``); idempotent."""
        redactor = Redactor.of(self.calls)
        calls = tuple(
            replace(
                call, **redactor.port_call(call.port, call.call, call.args, call.answer, call.error)
            )
            for call in self.calls
        )
        return replace(
            self,
            request=redactor.request(self.request),
            calls=calls,
            trace=StateTrace.from_dict(redactor.value(self.trace.to_dict())),
            result=redactor.value(self.result),
            redacted=True,
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
            "request": self.request,
            "calls": [call.to_dict() for call in self.calls],
            "trace": self.trace.to_dict(),
            "result": self.result,
        }

    def to_json(self) -> str:
        """The JSON form as text (UTF-8, indented, one port call per block).

        Data nested too deep for ``json`` (a tool result a few hundred levels deep)
        is written compact, without recursion (``engine/deep_json.py``): indenting
        it would cost space quadratic in its depth.
        """
        data = self.to_dict()
        try:
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        except (RecursionError, ValueError):  # too deep, or an int past str()'s 4,300 digits
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
        if data.get("format") != RECORDING_FORMAT:
            raise ValueError(
                f"not a {RECORDING_FORMAT} recording (format {data.get('format')!r}); "
                "this engine reads only that format"
            )
        try:
            calls = tuple(PortCall.from_dict(call) for call in data["calls"])
            caller = {"org": str(data["caller"]["org"]), "user": str(data["caller"]["user"])}
            request = dict(data["request"])
            if len(request) != 1 or next(iter(request)) not in ("json", "text", "base64"):
                raise ValueError("request must hold exactly one of json, text, base64")
            return cls(
                engine_version=str(data["engine_version"]),
                request=request,
                caller=caller,
                initial_mode=data["initial_mode"],
                options=dict(data["options"]),
                config_digest=str(data["config_digest"]),
                calls=calls,
                trace=StateTrace.from_dict(data["trace"]),
                result=dict(data["result"]),
                provider_name=data.get("provider_name"),
                server_tools=tuple(data.get("server_tools", ())),
                trace_content=bool(data.get("trace_content", False)),
                redacted=bool(data.get("redacted", False)),
                idempotency_key=data.get("idempotency_key"),
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
        stamp = "unknown"
        if self.clock_readings:
            try:
                started = datetime.fromisoformat(self.clock_readings[0]).astimezone(UTC)
                stamp = started.strftime("%Y%m%dT%H%M%S%fZ")
            except ValueError:  # a host clock's odd answer: its characters, made safe
                stamp = re.sub(r"[^0-9A-Za-z]", "", self.clock_readings[0])[:24] or stamp
        digest = hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()[:12]
        return f"turn-{stamp}-{digest}.json"


def write_recording(recording: TurnRecording, directory: str | Path) -> Path:
    """Write ``recording`` into ``directory`` (created when missing), atomically; its path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / recording.file_name()
    temporary = folder / f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        temporary.write_text(recording.to_json(), encoding="utf-8")
        os.replace(temporary, path)  # readers never see half a file
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def config_digest(ports: Ports, options: PipelineOptions) -> str:
    """A digest of what configures a turn besides its request: options, ports, catalogs.

    Catalogs that expose a ``config_digest`` (``ConfigCatalog`` does) contribute it,
    so two hosts with different mode or agent configuration differ here.
    """
    data = {
        "options": asdict(options),
        "server_tools": sorted(ports.tools),
        "provider_name": provider_name_of(ports.llm),
        "ports": {
            name: f"{type(port).__module__}.{type(port).__qualname__}"
            for name, port in (
                ("store", ports.store),
                ("llm", ports.llm),
                ("modes", ports.modes),
                ("agents", ports.agents),
                ("clock", ports.clock),
                ("ids", ports.ids),
            )
        },
        "catalogs": [
            getattr(ports.modes, "config_digest", None),
            getattr(ports.agents, "config_digest", None),
        ],
    }
    text = json.dumps(data, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class RecordingOptions:
    """How a ``Pipeline`` records its turns.

    - ``directory``: write each turn's recording there (one file per turn).
    - ``sink``: also hand each recording to this callable (ship it elsewhere);
      with neither, the recording is only returned on ``TurnReport.recording``.
    - ``redact``: drop user content before anything is written or returned
      (``engine/redaction.py``).
    - ``config_digest``: the host's own digest of its configuration; by default
      one is computed from the options, ports and catalogs (``config_digest``).
    """

    directory: str | Path | None = None
    redact: bool = False
    sink: Callable[[TurnRecording], None] | None = field(default=None, compare=False)
    config_digest: str | None = None

    async def send(self, recording: TurnRecording) -> None:
        """Write and hand on ``recording``; raises what the directory or the sink raised.

        A ``Pipeline`` calls this after the turn ended, and logs and traces a
        failure without changing the turn's answer (docs/RECORDING.md).
        """
        if self.directory is not None:
            await asyncio.to_thread(write_recording, recording, self.directory)
        if self.sink is not None:
            self.sink(recording)

    async def deliver(self, recording: TurnRecording) -> None:
        """``send``, a failure logged (its class and traceback, not its message), never raised."""
        try:
            await self.send(recording)
        except Exception as error:
            logger.error(
                "the turn's recording could not be delivered: %s\n%s",
                failure_summary(error),
                "".join(traceback.format_tb(error.__traceback__)).rstrip(),
            )


def failure_summary(error: BaseException) -> str:
    """An exception for a log line: its class, and its message only for an ``OSError``.

    A file system error names the recording's directory, which is the host's; any
    other message (a sink's, a serializer's) may quote user content.
    """
    if isinstance(error, OSError):
        return f"{type(error).__name__}: {error}"
    return type(error).__name__


class RecordingTap:
    """The ``PortTap`` of a recorded turn: every call goes on to the real port, logged."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.calls: list[PortCall] = []

    def _log(
        self,
        port: str,
        call: str,
        args: dict[str, Any],
        answer: Any = None,
        error: RecordedError | None = None,
    ) -> None:
        self.calls.append(PortCall(len(self.calls) + 1, self.step, port, call, args, answer, error))

    async def acall(
        self,
        target: Any,
        port: str,
        call: str,
        answer: TypeAdapter[T],
        args: Mapping[str, Any],
        *,
        method: str | None = None,
    ) -> T:
        """Call the real port and log the call with its answer or exception."""
        encoded = {name: encode_value(value) for name, value in args.items()}
        try:
            value = await getattr(target, method or call)(*args.values())
        except Exception as error:
            self._log(port, call, encoded, error=RecordedError.of(error))
            raise
        self._log(port, call, encoded, encode_value(value))
        return cast(T, value)

    def call(
        self, target: Any, port: str, call: str, answer: TypeAdapter[T], args: Mapping[str, Any]
    ) -> T:
        """Call the real clock or id source and log the call with its answer or exception."""
        encoded = {name: encode_value(value) for name, value in args.items()}
        try:
            value = getattr(target, call)(*args.values())
        except Exception as error:
            self._log(port, call, encoded, error=RecordedError.of(error))
            raise
        self._log(port, call, encoded, encode_value(value))
        return cast(T, value)

    def begin(self, target: Any, org: str, user: str) -> Any:
        """Begin the real transaction and log the call."""
        try:
            transaction = target.begin(org, user)
        except Exception as error:
            self._log(STORE, "begin", {"org": org, "user": user}, error=RecordedError.of(error))
            raise
        self._log(STORE, "begin", {"org": org, "user": user})
        return transaction

    def recording(
        self,
        *,
        request: object,
        caller: Caller,
        initial_mode: str | None,
        options: PipelineOptions,
        digest: str,
        trace: StateTrace,
        result: dict[str, Any],
        provider_name: str | None,
        server_tools: Sequence[str],
        trace_content: bool,
        idempotency_key: str | None = None,
    ) -> TurnRecording:
        """The turn's recording, from what was logged and how the turn ended."""
        return TurnRecording(
            engine_version=__version__,
            request=_request_record(request),
            caller={"org": caller.org, "user": caller.user},
            initial_mode=initial_mode,
            options=asdict(options),
            config_digest=digest,
            calls=tuple(self.calls),
            trace=trace,
            result=result,
            provider_name=provider_name,
            server_tools=tuple(sorted(server_tools)),
            trace_content=trace_content,
            idempotency_key=idempotency_key,
        )
