"""The ``Recorder``: an interceptor that records each turn of a pipeline for replay.

Composed where the pipeline is assembled — ``Pipeline(ports, interceptors=[
Recorder(RecordingOptions(...))])``, or ``embedded_pipeline(...,
recording=RecordingOptions(...))`` — it runs each turn on ports tapped by a
``RecordingTap`` (``port_tap.py``), follows the turn's steps through its event
stream so each port call is named by the step that made it, and, when the turn
has ended, makes its ``TurnRecording`` (``recording.py``), redacts it when the
options say so, writes and hands it on, and returns it on ``TurnReport.recording``.

Recording never changes a turn: the tap passes every call through unchanged, and
a recording that cannot be made or delivered is logged and traced, never raised
(DESIGN.md "What every part promises"; docs/RECORDING.md "When recording fails",
docs/CONFORMANCE.md D160).

A streamed turn (AGN-034 §4.7) is recorded too: its model's chunks go on to the
engine as they come, and the call is logged once its stream ends, however it
ends (``streams.py``). A turn stopped from outside — its stream's consumer left
(``DESIGN/streaming/consumer-gone``) — ran, so it is recorded: the call it was
stopped in is logged as ``cancelled``, and the recording says after how many
port calls the stop came (``TurnRecording.stopped_after_call``), which is where
its replay stops it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import traceback
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from pydantic import TypeAdapter

from aptix_pipeline import __version__
from aptix_pipeline.contracts import Caller, close_stream, scrubbed_logger
from aptix_pipeline.engine.deep_json import encode_value
from aptix_pipeline.engine.events import StepEnded, StepStarted, TurnEvent, TurnFaulted
from aptix_pipeline.engine.interceptors import Proceed, TurnCall
from aptix_pipeline.engine.report import TurnReport
from aptix_pipeline.engine.telemetry import provider_name_of, recording_failed
from aptix_pipeline.engine.trace import StateTrace
from aptix_pipeline.steps import PipelineOptions, Ports
from aptix_pipeline.validators import TURN_CANCELLED

from .port_tap import STORE, PortTap, tap_ports
from .recording import TurnRecording, host_rules_ran, request_record, write_recording
from .records import PortCall, RecordedError
from .streams import StreamLog, chunk_json

__all__ = [
    "Recorder",
    "RecordingOptions",
    "RecordingTap",
    "StepFollower",
    "config_digest",
    "failure_summary",
]

logger = scrubbed_logger(__name__)

T = TypeVar("T")


def _port_class(port: object) -> str:
    """The class a port is, as the digest names it: a host's class by its module and
    name; the package's own by its name under ``aptix_pipeline`` (class names are unique
    in the package), so moving a module within the package leaves digests alone."""
    kind = type(port)
    if kind.__module__.partition(".")[0] == "aptix_pipeline":
        return f"aptix_pipeline.{kind.__qualname__}"
    return f"{kind.__module__}.{kind.__qualname__}"


def config_digest(ports: Ports, options: PipelineOptions) -> str:
    """A digest of what configures a turn besides its request: options, ports, catalogs.

    Catalogs that expose a ``config_digest`` (``ConfigCatalog`` does) contribute it,
    so two hosts with different mode or agent configuration differ here.
    """
    data = {
        "options": options.to_dict(),
        "server_tools": sorted(ports.tools),
        "provider_name": provider_name_of(ports.llm),
        "ports": {
            name: _port_class(port)
            for name, port in (
                ("store", ports.store),
                ("llm", ports.llm),
                ("modes", ports.modes),
                ("agents", ports.agents),
                ("clock", ports.clock),
                ("ids", ports.ids),
                *((("files", ports.files),) if ports.files is not None else ()),
                *((("usage", ports.usage),) if ports.usage is not None else ()),
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
      (``engine/replay/redaction.py``).
    - ``config_digest``: the host's own digest of its configuration; by default
      one is computed from the options, ports and catalogs (``config_digest``).
    - ``timer``: a monotonic clock, in seconds (default ``time.perf_counter``), that
      times each awaited port call — the model, the server tools, the catalogs, the
      store, the retriever — into ``PortCall.elapsed_ms``; ``None`` records no
      durations, so the same turn records the same file.
    """

    directory: str | Path | None = None
    redact: bool = False
    sink: Callable[[TurnRecording], None] | None = field(default=None, compare=False)
    config_digest: str | None = None
    timer: Callable[[], float] | None = field(default=time.perf_counter, compare=False)

    async def send(self, recording: TurnRecording) -> None:
        """Write and hand on ``recording``; raises what the directory or the sink raised.

        The file is written in a worker thread; the sink is called on the event loop.
        A ``Recorder`` writes its turns' files in the thread that made them, then
        calls the sink, and logs and traces a failure of either without changing the
        turn's answer (docs/RECORDING.md).
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
    """The ``PortTap`` of a recorded turn: every call goes on to the real port, logged.

    A call the turn's stop cut short (``asyncio.CancelledError`` through it) is
    logged as ``cancelled``; ``stopped_after`` is how many calls were logged when
    the turn faulted for its consumer leaving (``faulted``).
    """

    def __init__(self, timer: Callable[[], float] | None = None) -> None:
        self.step: str | None = None
        self.calls: list[PortCall] = []
        self.stopped_after: int | None = None
        self._timer = timer

    def _started(self) -> float | None:
        return self._timer() if self._timer is not None else None

    def _log(
        self,
        port: str,
        call: str,
        args: dict[str, Any],
        answer: Any = None,
        error: RecordedError | None = None,
        *,
        last_chunk: Any = None,
        ended: bool = False,
        cancelled: bool = False,
        started: float | None = None,
    ) -> None:
        elapsed = None
        if started is not None and self._timer is not None:
            elapsed = round((self._timer() - started) * 1000, 3)
        self.calls.append(
            PortCall(
                len(self.calls) + 1,
                self.step,
                port,
                call,
                args,
                answer,
                error,
                last_chunk,
                ended,
                cancelled,
                elapsed,
            )
        )

    def faulted(self, event: TurnFaulted) -> None:
        """Note where a consumer that left stopped the turn (``DESIGN/streaming/consumer-gone``)."""
        if self.stopped_after is None and TURN_CANCELLED.id in event.fault.rule_ids:
            self.stopped_after = len(self.calls)

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
        started = self._started()
        try:
            value = await getattr(target, method or call)(*args.values())
        except asyncio.CancelledError:
            self._log(port, call, encoded, cancelled=True, started=started)
            raise
        except Exception as error:
            self._log(port, call, encoded, error=RecordedError.of(error), started=started)
            raise
        self._log(port, call, encoded, encode_value(value), started=started)
        return cast(T, value)

    async def stream(
        self, target: Any, port: str, call: str, args: Mapping[str, Any]
    ) -> AsyncIterator[Any]:
        """Pass the real stream's chunks on as they come; log the call once it ends.

        However it ends (``streams.py``): with its reply; with the error it raised and
        the reply so far; closed by the engine, with the reply before the last chunk
        the engine read and that chunk; cut short by the turn's stop, with the reply
        so far — and, cut short, whether its end had come. The real stream is closed
        when this one is.
        """
        encoded = {name: encode_value(value) for name, value in args.items()}
        log = StreamLog()
        chunks: Any = None
        started = self._started()
        try:
            chunks = getattr(target, call)(*args.values())
            async for chunk in chunks:
                log.hold(chunk)
                yield chunk
                log.taken()
        except GeneratorExit:  # the engine stopped reading, holding log.held
            last = chunk_json(log.held)
            self._log(
                port,
                call,
                encoded,
                log.so_far(),
                last_chunk=last,
                ended=log.ended,
                started=started,
            )
            raise
        except asyncio.CancelledError:
            partial = log.so_far() if log.read else None
            self._log(
                port, call, encoded, partial, ended=log.ended, cancelled=True, started=started
            )
            raise
        except Exception as error:
            partial = log.so_far() if log.read else None
            error_record = RecordedError.of(error)
            self._log(port, call, encoded, partial, error_record, ended=log.ended, started=started)
            raise
        else:
            answer, broken = log.answer()
            self._log(port, call, encoded, answer, broken, started=started)
        finally:
            await close_stream(chunks)

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
        usage_ledger: bool = False,
    ) -> TurnRecording:
        """The turn's recording, from what was logged and how the turn ended;
        ``usage_ledger`` whether the turn had one (``Ports.usage``)."""
        return TurnRecording(
            engine_version=__version__,
            request=request_record(request),
            caller={"org": caller.org, "user": caller.user},
            initial_mode=initial_mode,
            options=options.to_dict(),
            config_digest=digest,
            calls=tuple(self.calls),
            trace=trace,
            result=result,
            provider_name=provider_name,
            server_tools=tuple(sorted(server_tools)),
            trace_content=trace_content,
            idempotency_key=idempotency_key,
            stopped_after_call=self.stopped_after,
            host_rules=host_rules_ran(trace),
            usage_ledger=usage_ledger,
        )


class StepFollower:
    """Tells a port tap which step is running, so each port call it sees is named by it.

    A listener of the turn's event stream (``engine/events.py``) that hears only
    ``StepStarted``, ``StepEnded`` and ``TurnFaulted``: between a step's end and
    the next one's start no step runs, so a call made there (the rollback of a
    failed turn, after the machine stopped) is named by none; a fault is passed on
    (``PortTap.faulted``). It never names ``ModelTextDelta``: following a turn does
    not make it streamed.
    """

    __slots__ = ("tap",)

    event_types: ClassVar[frozenset[type[TurnEvent]]] = frozenset(
        {StepStarted, StepEnded, TurnFaulted}
    )

    def __init__(self, tap: PortTap) -> None:
        self.tap = tap

    def __call__(self, event: TurnEvent) -> None:
        kind = type(event)
        if kind is StepStarted:
            self.tap.step = cast(StepStarted, event).step
        elif kind is StepEnded:
            self.tap.step = None
        elif kind is TurnFaulted:
            self.tap.faulted(cast(TurnFaulted, event))


class Recorder:
    """Records every turn of the pipeline it is composed into; see the module docstring.

    A ``TurnInterceptor`` (``engine/interceptors.py``). One recorder may serve
    many concurrent turns: each gets its own tap.
    """

    def __init__(self, options: RecordingOptions | None = None, *, inline: bool = False) -> None:
        self.options = options or RecordingOptions()
        self.inline = inline
        """Make each recording on the event loop, not in a worker thread: for a runtime
        whose loop has no threads (a durable turn's Temporal workflow, D536)."""
        self._digest: tuple[Ports, PipelineOptions, str] | None = None

    def _config_digest(self, ports: Ports, options: PipelineOptions) -> str:
        """The options' digest, else one computed once per pipeline configuration."""
        if self.options.config_digest:
            return self.options.config_digest
        known = self._digest
        if known is None or known[0] is not ports or known[1] is not options:
            known = self._digest = (ports, options, config_digest(ports, options))
        return known[2]

    async def intercept(self, call: TurnCall, proceed: Proceed) -> TurnReport:
        """Run the turn on tapped ports, then make, deliver and attach its recording.

        The recording is made, redacted and written in a worker thread
        (``_recorded``): however large the request or the turn's data, the event
        loop goes on serving other turns meanwhile (docs/CONFORMANCE.md D420).
        """
        tap = RecordingTap(self.options.timer)
        report = await proceed(ports=tap_ports(tap, call.ports), listeners=[StepFollower(tap)])
        # The turn has ended (committed or rolled back): nothing from here on may change
        # its answer. A recording that cannot be made or redacted is logged and traced,
        # and the report goes without it; one that cannot be delivered is logged and
        # traced, and the report keeps it (docs/RECORDING.md "When recording fails", D160).
        try:
            digest = self._config_digest(call.ports, call.options)
            if self.inline:
                recording, unwritten = self._recorded(tap, call, report, digest)
            else:
                recording, unwritten = await asyncio.to_thread(
                    self._recorded, tap, call, report, digest
                )
        except Exception as error:
            made = error.error if isinstance(error, _NotMadeError) else error
            _recording_failed(call, report, made, "could not be made")
            return report
        try:
            if unwritten is not None:
                raise unwritten
            if self.options.sink is not None:
                self.options.sink(recording)
        except Exception as error:
            _recording_failed(call, report, error, "could not be delivered")
        return replace(report, recording=recording)

    def _recorded(
        self, tap: RecordingTap, call: TurnCall, report: TurnReport, digest: str
    ) -> tuple[TurnRecording, Exception | None]:
        """The turn's recording, made, redacted when the options say so, and written to
        the options' directory; with what writing it raised. Runs in a worker thread:
        the turn has ended, and nothing here touches the loop's objects but to read them.
        """
        try:
            assert report.trace is not None  # a turn's report always carries its trace
            recording = tap.recording(
                request=call.request,
                caller=call.caller,
                initial_mode=call.initial_mode,
                options=call.options,
                digest=digest,
                trace=report.trace,
                result=report.result.to_wire(),
                provider_name=provider_name_of(call.ports.llm),
                server_tools=list(call.ports.tools),
                trace_content=bool(call.telemetry.capture_content),
                idempotency_key=call.idempotency_key,
                usage_ledger=call.ports.usage is not None,
            )
            if self.options.redact:
                recording = recording.redact()
        except Exception as error:
            raise _NotMadeError(error) from error
        if self.options.directory is None:
            return recording, None
        try:
            write_recording(recording, self.options.directory)
        except Exception as error:
            return recording, error
        return recording, None


class _NotMadeError(Exception):
    """A recording could not be made: ``error`` says why."""

    def __init__(self, error: Exception) -> None:
        super().__init__(type(error).__name__)
        self.error = error


def _recording_failed(call: TurnCall, report: TurnReport, error: Exception, what: str) -> None:
    """Log and trace a recording that failed after the turn ended; the answer stands.

    The log record (ERROR) names the turn, the exception's class and its
    traceback's frames; the exception's message is left out (but for a file system
    error's), as it may quote user content. The trace is an ``aptix.recording``
    span with status ERROR (``engine/telemetry.py``): the turn's own span has
    ended by then.
    """
    logger.error(
        "the turn's recording %s (session %s, turn %s): %s; the turn's answer stands\n%s",
        what,
        report.session_id,
        report.turn_id,
        failure_summary(error),
        "".join(traceback.format_tb(error.__traceback__)).rstrip(),
    )
    telemetry = call.telemetry
    tracer = telemetry.tracer() if telemetry.recording_spans() else None
    if tracer is not None:
        try:
            recording_failed(tracer, report.session_id, report.turn_id, error)
        except Exception:  # a failing tracer must not fail the turn either
            logger.exception("the failed recording could not be traced")
