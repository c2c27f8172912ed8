"""Replay: re-run a recorded turn against today's code and name the first divergence.

``await replay(recording)`` runs the recorded request through a ``Pipeline`` whose
ports answer from the recording (``port_tap.py``): each call the code
makes now must be the next recorded call — the same port and call, made during
the same step, with the same arguments — and gets the recorded answer (or the
recorded exception) back. Nothing real is called, but the ports the host runs
``live`` (``live.py``): its model, server tools or catalogs answer themselves, and
what they answer must be what was recorded (``answer``). No span is emitted unless
``telemetry`` asks for spans. Like Temporal's replayer, the first place where
the code behaves differently stops the replay and is named — the step, the port
call, the expected and the actual value (``Divergence``). A replay whose calls
all match then compares the ``StateTrace`` and the result with the recorded ones.
The divergence stops the turn as a step fault, so it ends without a traceback:
its rollback is answered quietly, and the replay logs the divergence once.

A recorded streamed turn (``LLM.stream`` calls, AGN-034 §4.7) replays streamed:
a subscriber that names ``ModelTextDelta`` makes the engine ask the model to
stream, the tapped model answers with the recorded reply in chunks
(``streams.py``), and the engine puts them together again. What it put together —
the text it passed on and, on its model call record, the tool calls, model,
response id, finish reason and tokens (with content capture, the tool calls'
arguments too) — must be the recorded reply, or the call is named (``reply``). A
turn whose stream's consumer left is stopped at the same point again: after the
recorded number of port calls, inside the call the stop cut short.

``assert_replays`` and ``recordings_in`` make a folder of recordings a pytest
regression suite::

    @pytest.mark.parametrize("path", recordings_in("recordings"), ids=lambda p: p.name)
    def test_recorded_turn_replays(path):
        assert_replays(path)  # live=LivePorts(...): the host's own ports checked too
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar, cast

from pydantic import TypeAdapter
from pydantic_core import to_json

from aptix_pipeline.contracts import (
    AptixPipelineError,
    ErrorCode,
    InvokeError,
    LLMReply,
    PermanentPortError,
    PipelineStep,
    close_stream,
    scrubbed_logger,
)
from aptix_pipeline.engine.deep_json import dump_json, encode_value
from aptix_pipeline.engine.events import (
    ModelCallFinished,
    ModelTextDelta,
    TurnEvent,
    TurnFaulted,
)
from aptix_pipeline.engine.idempotency import RequestKeys, request_keys
from aptix_pipeline.engine.machine import UNINTERRUPTED
from aptix_pipeline.engine.pipeline import Pipeline
from aptix_pipeline.engine.report import TurnReport
from aptix_pipeline.engine.runner import TurnStop
from aptix_pipeline.engine.telemetry import Telemetry
from aptix_pipeline.engine.trace import StateTrace, TransitionRecord
from aptix_pipeline.steps import StepFaultError, StepFunction
from aptix_pipeline.validators import HostRule, HostRules, utf8_text

from .live import LivePorts
from .port_tap import (
    FILES,
    LLM_PORT,
    RETRIEVER,
    STORE,
    STREAM,
    TRANSACTION,
    USAGE,
    decode_answer,
    tap_ports,
)
from .recorder import StepFollower
from .recording import TurnRecording, host_rules_ran
from .records import PortCall, RecordedError
from .redaction import Redactor
from .streams import StreamLog, chunk_json, chunk_of, replayed_chunks

__all__ = [
    "Divergence",
    "ReplayDivergenceError",
    "ReplayOutcome",
    "ReplayTap",
    "StreamFollower",
    "assert_replays",
    "first_difference",
    "recordings_in",
    "replay",
    "replay_sync",
]

T = TypeVar("T")

_SHOWN = 240  # characters of a value a divergence message shows
_ROLLBACK = "rollback"
_CALL_KEYS = ("n", "step", "port", "call", "args")
_UNDONE_QUIETLY = frozenset({(TRANSACTION, _ROLLBACK), (USAGE, "settle_usage")})
"""What a stopping, diverged turn still calls: the rollback and the settlement of its
last model call (``steps/budget.py``), answered with nothing."""

logger = scrubbed_logger(__name__)


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where today's code first did something other than the recorded turn.

    ``kind``:

    - ``call`` — the code made a different port call than the next recorded one;
    - ``step`` — the same call, made during another step;
    - ``arguments`` — the same call with other arguments (``where`` is the JSON
      path of the first difference inside them);
    - ``extra_call`` — a call after the recording's last one;
    - ``missing_calls`` — the turn ended with recorded calls not made;
    - ``trace`` / ``result`` — every call matched, but the ``StateTrace`` or the
      result differs (``where`` is the path inside it);
    - ``reply`` — a streamed model call: the engine put another reply together
      from the recorded one's chunks (``where``: ``answer.Text``, …);
    - ``stream`` — a streamed model call: the code stopped reading the recorded
      stream before where it ended, or read on past where it was closed;
    - ``unreplayable`` — the recorded call was cut short by the turn's deadline,
      which a replay, off the clock, cannot cut at the same point;
    - ``answer`` — a port running live (``live.py``) answered, or raised, other
      than the recorded one (``where``: ``answer.Text``, ``error.message``, …);
    - ``rules`` — the replay ran other host rules than the recorded turn
      (``expected``: the recorded ids, ``actual``: the replay's); said in one line,
      before any trace difference it causes.

    ``call_number`` is the recorded call's ``n``; ``step`` the transition that was
    running (``None``: after the machine stopped).
    """

    kind: str
    step: str | None
    call_number: int | None
    port_call: str | None
    where: str
    expected: Any
    actual: Any

    def to_dict(self) -> dict[str, Any]:
        """The divergence as JSON: its fields, the values shown as ``describe`` shows them
        (JSON text, clipped; ``<absent>`` for a missing one), and ``describe``'s text."""
        return {
            "kind": self.kind,
            "step": self.step,
            "call_number": self.call_number,
            "port_call": self.port_call,
            "where": self.where,
            "expected": _shown(self.expected),
            "actual": _shown(self.actual),
            "description": self.describe(),
        }

    def describe(self) -> str:
        """The divergence for people: what, where, expected and actual."""
        if self.kind == "rules":
            return f"divergence: {_rules_line(self.expected, self.actual)}"
        during = f"during step {self.step}" if self.step else "after the machine stopped"
        head = {
            "call": f"port call #{self.call_number} {during}: the code made another call",
            "step": f"port call #{self.call_number} {self.port_call}: made in another step",
            "arguments": f"port call #{self.call_number} {self.port_call} {during}: "
            "other arguments",
            "extra_call": f"{during}: the code made a port call the recording does not have",
            "missing_calls": f"the turn ended before port call #{self.call_number} "
            f"{self.port_call} (recorded {during})",
            "trace": f"the state trace differs {during}",
            "result": "the result differs",
            "reply": f"port call #{self.call_number} {self.port_call} {during}: "
            "the engine put another reply together",
            "stream": f"port call #{self.call_number} {self.port_call} {during}: "
            "the code read the stream to another point",
            "unreplayable": f"port call #{self.call_number} {self.port_call} {during}: "
            "cut short by the turn's deadline, which a replay (off the clock) cannot repeat",
            "answer": f"port call #{self.call_number} {self.port_call} {during}: "
            "the live port answered otherwise",
        }.get(self.kind, self.kind)
        lines = [f"divergence: {head}"]
        if self.where:
            lines.append(f"  at:       {self.where}")
        lines.append(f"  expected: {_shown(self.expected)}")
        lines.append(f"  actual:   {_shown(self.actual)}")
        return "\n".join(lines)


def _rules_line(recorded: Sequence[str], ran: Sequence[str]) -> str:
    """The one line of a ``rules`` divergence: which host rules are missing or extra."""
    missing = [rule for rule in recorded if rule not in ran]
    extra = [rule for rule in ran if rule not in recorded]
    parts = []
    if missing:
        parts.append(
            f"the recorded turn ran host rule(s) {', '.join(missing)}, which this replay "
            "was not given (replay(..., rules=...), LivePorts.of_pipeline(pipeline), or "
            "aptix replay --live with the configuration's [host] extension)"
        )
    if extra:
        parts.append(
            f"this replay ran host rule(s) {', '.join(extra)}, which the recorded turn did not"
        )
    return "; ".join(parts)


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "<absent>"
    encoded = encode_value(value)
    try:
        shown = json.dumps(encoded, ensure_ascii=False)
    except RecursionError:  # deeper than json goes
        shown = dump_json(encoded)
    return shown if len(shown) <= _SHOWN else shown[: _SHOWN - 1] + "…"


def first_difference(expected: Any, actual: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The JSON path of the first place two JSON values differ, with both values there.

    Objects are walked in the expected one's key order; a missing key or item
    shows as ``<absent>``. ``True`` and ``1`` differ (JSON tells them apart).

    At the top, equal JSON texts answer at once (JSON keeps ``True`` and ``1``,
    ``1`` and ``1.0`` apart): a replay compares every port call and the whole trace,
    and nearly all of them are equal. Texts that differ, if only in key order, are
    walked — with a stack of its own, so values of any depth compare.
    """
    if not where:
        try:
            if to_json(expected) == to_json(actual):
                return None
        except ValueError:  # not JSON data (a host's odd object), or too deep: walk it
            pass
    pending: list[tuple[Any, Any, str]] = [(expected, actual, where)]
    while pending:
        left, right, path = pending.pop()
        if left is _ABSENT or right is _ABSENT:
            return path, left, right
        if isinstance(left, Mapping) and isinstance(right, Mapping):
            keys = [*left, *(k for k in right if k not in left)]
            pending.extend(
                (left.get(k, _ABSENT), right.get(k, _ABSENT), f"{path}.{k}" if path else str(k))
                for k in reversed(keys)
            )
        elif isinstance(left, list) and isinstance(right, list):
            pending.extend(
                (
                    left[index] if index < len(left) else _ABSENT,
                    right[index] if index < len(right) else _ABSENT,
                    f"{path}[{index}]",
                )
                for index in reversed(range(max(len(left), len(right))))
            )
        elif type(left) is not type(right) or left != right:
            return path, left, right
    return None


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


class _DivergedError(StepFaultError, PermanentPortError):
    """Raised into the engine at a divergence: the turn stops there, and quietly.

    A step fault (``port_failed``, naming the port) passes through the port guards,
    the model's retries and a server tool's error handling unchanged, and the runner
    logs no traceback for it: a diverging replay ends with its divergence, which
    ``replay`` reports (and logs once).
    """

    def __init__(self, divergence: Divergence) -> None:
        port = (divergence.port_call or "").partition(".")[0] or "replay"
        message = f"the replay diverged: {divergence.describe()}"
        super().__init__([InvokeError(code=ErrorCode.PORT_FAILED, field=port, message=message)])


_REPLY: TypeAdapter[LLMReply] = TypeAdapter(LLMReply)


class ReplayTap:
    """The ``PortTap`` of a replay: checks each call against the recording and answers it.

    ``stop`` is the turn's ``TurnStop`` when the recorded turn was stopped from
    outside (``TurnRecording.stopped_after_call``): once the code has made that
    many calls the stop is asked for, and the next awaited call the code makes in
    a step (or the call recorded as cut short) waits for it to land, as the
    recorded turn's did.
    """

    def __init__(self, recording: TurnRecording, stop: TurnStop | None = None) -> None:
        self.step: str | None = None
        self.divergence: Divergence | None = None
        self._calls = recording.calls
        self._redactor = Redactor.of(recording.calls) if recording.redacted else None
        self.position = 0
        self._stop = stop
        self._stop_after = recording.stopped_after_call if stop is not None else None
        self.stopping = False
        """The stop was asked for and has not landed yet."""
        self._stop_due = False
        """The stop is to be asked for once the live call running now has answered."""
        self._replied: PortCall | None = None
        """A streamed call whose whole reply was yielded: checked when its model call ends."""
        if stop is not None and self._stop_after == 0:
            self._request_stop()

    def _diverge(self, divergence: Divergence) -> _DivergedError:
        self.divergence = divergence
        return _DivergedError(divergence)

    def _request_stop(self) -> None:
        assert self._stop is not None
        self._stop.request()
        self.stopping = True

    def _expect(
        self, port: str, call: str, args: Mapping[str, Any], *, live: bool = False
    ) -> PortCall:
        """The next recorded call, which the call the code makes now must be; else diverge.

        ``live``: a live port will make the call; a stop due after it is asked for
        once it has answered (``_live_done``), as the recorded one came after the
        real port had answered.
        """
        if self.divergence is not None:  # the turn is stopping: nothing more matches
            raise _DivergedError(self.divergence)
        actual = {name: encode_value(value) for name, value in args.items()}
        if self._redactor is not None:
            actual = self._redactor.port_call(port, call, actual, None, None)["args"]
        name = f"{port}.{call}"
        if self.position >= len(self._calls):
            raise self._diverge(
                Divergence(
                    "extra_call", self.step, None, None, "", _ABSENT, {"call": name, "args": actual}
                )
            )
        expected = self._calls[self.position]
        if (expected.port, expected.call) != (port, call):
            raise self._diverge(
                Divergence(
                    "call",
                    self.step,
                    expected.n,
                    expected.name,
                    "",
                    {"call": expected.name, "step": expected.step, "args": expected.args},
                    {"call": name, "step": self.step, "args": actual},
                )
            )
        if expected.step != self.step:
            raise self._diverge(
                Divergence("step", self.step, expected.n, name, "step", expected.step, self.step)
            )
        difference = first_difference(expected.args, actual)
        if difference is not None:
            where, left, right = difference
            raise self._diverge(
                Divergence("arguments", self.step, expected.n, name, where, left, right)
            )
        self.position += 1
        if self.position == self._stop_after:
            if live and not expected.cancelled:
                self._stop_due = True
            else:
                self._request_stop()
        return expected

    def _live_done(self) -> None:
        """A live port answered: the stop due after its call is asked for now."""
        if self._stop_due:
            self._stop_due = False
            self._request_stop()

    async def _halt(self) -> NoReturn:
        """Wait for the turn's stop (asked for) to cancel it here."""
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            self.stopping = False
        raise AssertionError("a turn's stop cancels what it waits for")  # pragma: no cover

    def _stoppable(self) -> bool:
        """Whether a stop can land now: in a step the turn's stop may cancel (not the
        commit, ``UNINTERRUPTED``, nor after the machine stopped)."""
        return self.step is not None and self.step not in UNINTERRUPTED

    async def _halt_if_stopping(self) -> None:
        """An awaited call in a step, after the stop was asked for: the stop lands here."""
        if self.stopping and self._stoppable():
            await self._halt()

    def _check_cut(self, expected: PortCall) -> None:
        """A call the recorded turn's stop cut short: only a consumer's stop is repeated.

        A call the deadline cut short (no recorded stop) is named ``unreplayable``: a
        replay runs off the clock.
        """
        if self._stop is None or not self._stoppable():
            raise self._diverge(
                Divergence(
                    "unreplayable",
                    self.step,
                    expected.n,
                    expected.name,
                    "",
                    {"cancelled": True},
                    _ABSENT,
                )
            )

    async def _cut_short(self) -> NoReturn:
        """The replay's stop lands in the call the recorded one landed in."""
        if not self.stopping:
            self._request_stop()
        await self._halt()

    @staticmethod
    def _answer(expected: PortCall, answer: TypeAdapter[T]) -> T:
        if expected.error is not None:
            raise expected.error.to_exception()
        return decode_answer(answer, expected.answer)

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
        """Check the call against the next recorded one; answer as the real port did.

        A live port (``target``, ``live.py``) answers itself, and its answer or
        exception must be the recorded one (``answer`` divergence). Once the replay
        has diverged, the rollback of the stopping turn is answered quietly: a replay
        has no transaction to undo, and the divergence is what it reports; so is the
        settlement of its last model call, for no ledger.
        """
        if self.divergence is not None and (port, call) in _UNDONE_QUIETLY:
            return cast(T, None)
        await self._halt_if_stopping()
        live = target is not None
        try:
            expected = self._expect(port, call, args, live=live)
        except _DivergedError:
            if (port, call) in _UNDONE_QUIETLY:  # named: the turn is over, nothing raises
                return cast(T, None)
            raise
        if expected.cancelled:
            self._check_cut(expected)
            await self._cut_short()
        if not live:
            return self._answer(expected, answer)
        try:
            value = await getattr(target, method or call)(*args.values())
        except Exception as error:
            self._check_live(expected, None, RecordedError.of(error))
            self._live_done()
            raise
        self._check_live(expected, encode_value(value), None)
        self._live_done()
        return cast(T, value)

    def _check_live(
        self,
        expected: PortCall,
        answer: Any,
        error: RecordedError | None,
        *,
        last_chunk: Any = None,
        ended: bool = False,
    ) -> None:
        """What a live port did must be what the recorded one did; else diverge (raises)."""
        divergence = self._live_divergence(expected, answer, error, last_chunk, ended)
        if divergence is not None:
            raise self._diverge(divergence)

    def _live_divergence(
        self,
        expected: PortCall,
        answer: Any,
        error: RecordedError | None,
        last_chunk: Any,
        ended: bool,
    ) -> Divergence | None:
        """The ``answer`` divergence of a live call, or ``None`` when it did as recorded.

        Both sides are compared in their recorded form (``PortCall.to_dict``: the
        answer, the error's type, message and classes, a stream's last chunk and
        end), redacted like the recording; ``where`` is a path such as
        ``answer.Text`` or ``error.message``.
        """
        made = PortCall(
            expected.n,
            expected.step,
            expected.port,
            expected.call,
            expected.args,
            answer,
            error,
            last_chunk,
            ended,
        )
        if self._redactor is not None:
            redacted = self._redactor.port_call(made.port, made.call, {}, answer, error)
            made = replace(
                made,
                answer=redacted["answer"],
                error=redacted["error"],
                last_chunk=self._redactor.value(last_chunk),
            )
        want, got = _outcome_of(expected), _outcome_of(made)
        difference = first_difference(want, got)
        if difference is None:
            return None
        where, left, right = difference
        return Divergence("answer", self.step, expected.n, expected.name, where, left, right)

    async def stream(
        self, target: Any, port: str, call: str, args: Mapping[str, Any]
    ) -> AsyncIterator[Any]:
        """Check the streamed call against the next recorded one; stream its reply again.

        The recorded reply comes in chunks (``replayed_chunks``); then, as the stream
        ended: nothing more (the reply is checked when the model call ends,
        ``replied``), the recorded error, the recorded last chunk (the engine stops
        reading there), or the turn's stop.
        """
        await self._halt_if_stopping()
        live = target is not None
        expected = self._expect(port, call, args, live=live)
        if live and not expected.cancelled:
            passed = self._live_stream(target, expected, call, args)
            try:
                async for chunk in passed:
                    yield chunk
            finally:
                await passed.aclose()
            return
        if expected.cancelled:
            self._check_cut(expected)
        closed = expected.last_chunk is not None
        chunks = replayed_chunks(expected.answer, ended=expected.ended or not expected.cut_short)
        if closed:
            chunks.append(chunk_of(expected.last_chunk))
        given = 0
        try:
            for chunk in chunks:
                yield chunk
                given += 1
        except GeneratorExit:
            if not closed or given != len(chunks) - 1:
                self._read_to(expected, f"closed after chunk {given + 1}", len(chunks))
            raise
        if expected.cancelled:
            await self._cut_short()
        if expected.error is not None:
            raise expected.error.to_exception()
        if closed:
            raise self._diverge(
                self._stream_divergence(expected, f"read on after chunk {len(chunks)}", len(chunks))
            )
        self._replied = expected

    async def _live_stream(
        self, target: Any, expected: PortCall, call: str, args: Mapping[str, Any]
    ) -> AsyncGenerator[Any]:
        """The live model's stream, passed on chunk by chunk and, once it ends, checked.

        It is logged as a recording logs it (``StreamLog``): however it ends — with
        its reply, raising, or closed by the engine — the call it makes must be the
        recorded one (``_check_live``). A stream that ended as recorded has its
        reply checked again once the engine has put it together (``replied``).
        """
        log = StreamLog()
        chunks: Any = None
        try:
            chunks = getattr(target, call)(*args.values())
            async for chunk in chunks:
                log.hold(chunk)
                yield chunk
                log.taken()
        except GeneratorExit:  # the engine stopped reading, holding log.held
            if self.divergence is None:  # it is unwinding: name the difference, raise nothing
                self.divergence = self._live_divergence(
                    expected, log.so_far(), None, chunk_json(log.held), log.ended
                )
            self._live_done()
            raise
        except Exception as error:
            partial = log.so_far() if log.read else None
            self._check_live(expected, partial, RecordedError.of(error), ended=log.ended)
            self._live_done()
            raise
        else:
            answer, broken = log.answer()
            self._check_live(expected, answer, broken)
            self._live_done()
            self._replied = expected
        finally:
            await close_stream(chunks)

    def _stream_divergence(self, expected: PortCall, actual: str, chunks: int) -> Divergence:
        """Where the engine stopped reading (``actual``) is not where the recorded one did."""
        if expected.last_chunk is not None:
            recorded = f"closed after chunk {chunks}"
        else:
            recorded = f"read to its end ({chunks} chunks)"
        return Divergence("stream", self.step, expected.n, expected.name, "", recorded, actual)

    def _read_to(self, expected: PortCall, actual: str, chunks: int) -> None:
        """The engine closed the stream at another point than the recorded one."""
        if self.divergence is None:  # the engine is unwinding: name it, do not raise into it
            self.divergence = self._stream_divergence(expected, actual, chunks)

    def replied(self, event: ModelCallFinished, text: str) -> None:
        """A model call ended: a streamed reply yielded whole must be what the engine made.

        ``text`` is what the engine passed on as it streamed (its text deltas, joined).
        """
        expected, self._replied = self._replied, None
        if expected is None or not event.replied or self.divergence is not None:
            return
        recorded = decode_answer(_REPLY, expected.answer)
        if not isinstance(recorded, LLMReply):
            return
        shown = event.reply  # the whole reply only with content capture
        want = _reply_view(recorded, recorded.text, arguments=shown is not None)
        made = _made_view(event, text, shown)
        if self._redactor is not None:
            want, made = self._redactor.value(want), self._redactor.value(made)
        difference = first_difference(want, made)
        if difference is not None:
            where, left, right = difference
            self.divergence = Divergence(
                "reply", expected.step, expected.n, expected.name, f"answer.{where}", left, right
            )

    def faulted(self, event: TurnFaulted) -> None:
        """A fault ended the turn's steps: a stop asked for has landed (or never will)."""
        self.stopping = False

    def call(
        self, target: Any, port: str, call: str, answer: TypeAdapter[T], args: Mapping[str, Any]
    ) -> T:
        """Check the clock or id call against the next recorded one; answer it."""
        return self._answer(self._expect(port, call, args), answer)

    def begin(self, target: Any, org: str, user: str) -> Any:
        """Check ``SessionStore.begin``; the transaction is answered call by call."""
        expected = self._expect(STORE, "begin", {"org": org, "user": user})
        if expected.error is not None:
            raise expected.error.to_exception()
        return None

    def leftover(self) -> Divergence | None:
        """The recorded calls the code did not make, as a divergence."""
        if self.divergence is not None or self.position >= len(self._calls):
            return None
        missing = self._calls[self.position]
        return Divergence(
            "missing_calls",
            missing.step,
            missing.n,
            missing.name,
            "",
            {"calls": [call.name for call in self._calls[self.position :]]},
            _ABSENT,
        )


def _outcome_of(call: PortCall) -> dict[str, Any]:
    """What a port call did, in its recorded JSON form: its answer or error, and for a
    stream its last chunk and end; not how long it took (``elapsed_ms``, an observation)."""
    data = call.to_dict()
    for key in _CALL_KEYS:
        del data[key]
    data.pop("elapsed_ms", None)
    return data


def _reply_view(reply: LLMReply, text: str | None, *, arguments: bool) -> dict[str, Any]:
    """What a replay compares of a streamed reply (PascalCase, as its JSON): the text,
    the tool calls' ids and names (and arguments, with content capture), the model,
    response id, finish reason and token counts. Text as the engine passes it on."""
    usage = reply.usage
    return {
        "Text": utf8_text(text or ""),
        "ToolCalls": [
            {
                "ToolCallId": utf8_text(call.tool_call_id),
                "Name": utf8_text(call.name),
                **({"ArgumentsJson": utf8_text(call.arguments_json)} if arguments else {}),
            }
            for call in reply.tool_calls
        ],
        "Model": reply.model,
        "ResponseId": reply.response_id,
        "FinishReason": reply.finish_reason,
        "Usage": None
        if usage is None
        else {"InputTokens": usage.input_tokens, "OutputTokens": usage.output_tokens},
    }


def _made_view(event: ModelCallFinished, text: str, reply: LLMReply | None) -> dict[str, Any]:
    """``_reply_view`` of what the engine made: its whole reply when the event holds it,
    else its model call record; the text always as the engine streamed it."""
    if reply is not None:
        return _reply_view(reply, text, arguments=True)
    call = event.call
    tokens = (call.input_tokens, call.output_tokens)
    return {
        "Text": text,
        "ToolCalls": [{"ToolCallId": id_, "Name": name} for id_, name in call.tool_calls],
        "Model": call.response_model,
        "ResponseId": call.response_id,
        "FinishReason": call.finish_reason,
        "Usage": None
        if tokens == (None, None)
        else {"InputTokens": tokens[0], "OutputTokens": tokens[1]},
    }


class StreamFollower(StepFollower):
    """A replay's ``StepFollower`` for a streamed turn: it names ``ModelTextDelta``.

    Naming it makes the engine stream the turn (``TurnEvents.streamed``). It joins
    each model call's text deltas and hands them, with the call's end, to the tap
    (``ReplayTap.replied``).
    """

    __slots__ = ("_text",)

    event_types: ClassVar[frozenset[type[TurnEvent]]] = StepFollower.event_types | {
        ModelTextDelta,
        ModelCallFinished,
    }

    def __init__(self, tap: ReplayTap) -> None:
        super().__init__(tap)
        self._text: list[str] = []

    def __call__(self, event: TurnEvent) -> None:
        kind = type(event)
        if kind is ModelTextDelta:
            self._text.append(cast(ModelTextDelta, event).text)
        elif kind is ModelCallFinished:
            text, self._text = "".join(self._text), []
            cast(ReplayTap, self.tap).replied(cast(ModelCallFinished, event), text)
        else:
            super().__call__(event)


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """A replayed turn: the recording, what the code did now, and the first divergence."""

    recording: TurnRecording
    report: TurnReport
    divergence: Divergence | None
    source: Path | None = None

    @property
    def ok(self) -> bool:
        """Whether the code did exactly what the recording says."""
        return self.divergence is None

    def describe(self) -> Sequence[str]:
        """The replay for people: what was replayed, its trace, and the verdict."""
        recording = self.recording
        name = str(self.source) if self.source is not None else "recording"
        lines = [
            f"replay {name}: {recording.trace.context_type or 'unparsed request'} turn, "
            f"{len(recording.calls)} port calls, recorded by aptix-pipeline "
            f"{recording.engine_version}{' (redacted)' if recording.redacted else ''}"
        ]
        if self.report.trace is not None:
            lines.extend(f"  {line}" for line in self.report.trace.describe())
        if self.divergence is None:
            lines.append(f"ok: the same {len(recording.calls)} port calls, state trace and result")
        else:
            lines.append(self.divergence.describe())
        return lines


class ReplayDivergenceError(AptixPipelineError, AssertionError):
    """A recorded turn does not replay (``assert_replays``); the message names the divergence."""

    def __init__(self, outcome: ReplayOutcome) -> None:
        super().__init__("\n".join(outcome.describe()))
        self.outcome = outcome


def _step_of(entries: Sequence[Mapping[str, Any]], index: int) -> str | None:
    for entry in reversed(entries[: index + 1]):
        if "step" in entry:
            return str(entry["step"])
    return None


def _compared(recording: TurnRecording, report: TurnReport) -> Divergence | None:
    """Every call matched: the trace and the result must too.

    Unredacted, equal ``StateTrace`` values need no JSON at all (their fields are
    typed, so equal records have equal JSON forms); anything else is compared in
    the JSON form, which names the path of the first difference.
    """
    if not recording.redacted and report.trace == recording.trace:
        difference = first_difference(recording.result, report.result.to_wire())
        if difference is None:
            return None
    actual_trace = report.trace.to_dict() if report.trace is not None else {}
    actual_result = report.result.to_wire()
    if recording.redacted:
        redactor = Redactor.of(recording.calls)
        actual_trace, actual_result = redactor.value(actual_trace), redactor.value(actual_result)
    expected_trace = recording.trace.to_dict()
    if not _traces_usage(recording.trace):
        # Recorded before transitions carried usage (issue 31): that is not a divergence.
        actual_trace = {**actual_trace, "entries": [_no_usage(e) for e in actual_trace["entries"]]}
    difference = first_difference(expected_trace, actual_trace)
    if difference is not None:
        where, left, right = difference
        step = recording.trace.faulted_step
        if where.startswith("entries["):
            index = int(where[len("entries[") : where.index("]")])
            step = _step_of(expected_trace["entries"], index)
        return Divergence("trace", step, None, None, where, left, right)
    difference = first_difference(recording.result, actual_result)
    if difference is not None:
        where, left, right = difference
        return Divergence("result", None, None, None, where, left, right)
    return None


def _traces_usage(trace: StateTrace) -> bool:
    """Whether a recorded trace keeps its calls' usage on their ``llm_client`` transitions."""
    return any(isinstance(e, TransitionRecord) and e.usage is not None for e in trace.entries)


def _no_usage(entry: Any) -> Any:
    """A trace entry's JSON form without the usage a transition carries."""
    if isinstance(entry, dict) and "usage" in entry and entry.get("kind") == "transition":
        return {key: value for key, value in entry.items() if key != "usage"}
    return entry


def _refuse_redacted(recording: TurnRecording, live: LivePorts) -> None:
    """A redacted recording holds placeholders where the model's and the tools' input was:
    a live model or tool would be asked about ``[redacted]``, so it is refused."""
    if not recording.redacted:
        return
    refused = [name for name in live.names if name not in ("modes", "agents")]
    if refused:
        raise ValueError(
            f"live {', '.join(refused)}: the recording is redacted, so the model requests "
            "and tool arguments it holds are placeholders; replay it with the model and "
            "tools answering from the recording (live catalogs are fine), or run them "
            "live against an unredacted recording"
        )


def _rules_divergence(recorded: Sequence[str], ran: Sequence[str]) -> Divergence | None:
    """A ``rules`` divergence when the replay's host rules are not the recorded ones."""
    if list(recorded) == list(ran):
        return None
    return Divergence("rules", None, None, None, "host_rules", list(recorded), list(ran))


async def run_recorded(
    recording: TurnRecording,
    tap: ReplayTap,
    ports: LivePorts,
    host_rules: HostRules,
    *,
    steps: Mapping[PipelineStep, StepFunction] | None = None,
    telemetry: Telemetry | None = None,
    stop: TurnStop | None = None,
) -> TurnReport:
    """Run the recorded request once more, its ports answered through ``tap``.

    What ``replay`` and ``evaluate`` (evaluation.py) share: the recorded options
    without waits or a turn deadline, the trace's content as recorded, ``ports``
    (the live ones) with their hooks, the recorded turn's server tools, file store,
    retriever and usage ledger, and the answer keys it was recorded with.
    """
    streamed = any(call.port == LLM_PORT and call.call == STREAM for call in recording.calls)
    # A turn that asked a retriever names its collection in the call (``TappedRetriever``).
    retriever = next(
        (str(call.args["collection"]) for call in recording.calls if call.port == RETRIEVER),
        None,
    )
    # No waits and no turn deadline: a replay answers from the recording, off the clock.
    options = replace(
        recording.pipeline_options(),
        retry_wait_seconds=0.0,
        retry_max_wait_seconds=0.0,
        turn_deadline_seconds=None,
    )
    # The trace holds content exactly when the recorded one did, or the two differ.
    telemetry = replace(telemetry or Telemetry.off(), capture_content=recording.trace_content)
    ports = ports.hooked(options.error_detail)  # the host's hooks around its live ports
    tapped = tap_ports(
        tap,
        None,
        server_tools=recording.server_tools,
        # The turn had a FileStore when it called one; one it never called changed nothing.
        file_store=any(call.port == FILES for call in recording.calls),
        provider_name=recording.provider_name,
        streaming=streamed,
        live=ports,
        retriever=retriever,
        # A usage ledger exactly when the recorded turn had one (D594): a recording made
        # before ledgers existed replays without one, as it ran.
        usage=recording.usage_ledger,
    )
    pipeline = Pipeline(tapped, options, steps=steps, telemetry=telemetry, rules=host_rules)
    request = recording.request_input()
    # The turn keeps its answer under the keys it was recorded with (D181); a stored
    # answer is never read in a replay: the recorded turn ran, so the replay runs it.
    keys = request_keys(
        request,
        recording.caller["org"],
        recording.caller["user"],
        idempotency_key=recording.idempotency_key,
        initial_mode=recording.initial_mode,
        max_depth=options.max_json_depth,
    )
    return await pipeline._turn(
        request,
        recording.caller,
        initial_mode=recording.initial_mode,
        listeners=[StreamFollower(tap) if streamed else StepFollower(tap)],
        answer_keys=keys.answer_keys(options.idempotency_ttl_seconds)
        if isinstance(keys, RequestKeys)
        else None,
        stop=stop,
    )


async def replay(
    recording: TurnRecording | str | Path,
    *,
    steps: Mapping[PipelineStep, StepFunction] | None = None,
    telemetry: Telemetry | None = None,
    live: LivePorts | Mapping[str, Any] | None = None,
    rules: Iterable[HostRule] | None = None,
) -> ReplayOutcome:
    """Re-run a recorded turn (a ``TurnRecording`` or a file) against today's code.

    ``steps`` replaces step functions, as for ``Pipeline``; ``telemetry`` turns
    spans on (default: none). ``live`` runs the host's own model, server tools or
    catalogs of today instead of answering them from the recording
    (``LivePorts``, or ``{"llm": ..., "tools": {...}, "catalog": ...}``): their
    calls are checked as any, and what they answer must be what was recorded
    (an ``answer`` divergence). The recorded options apply, without the waits
    between LLM retries (they change nothing a replay compares). Raises
    ``ValueError`` for a file that is not a recording, and for a live model or
    tool with a redacted recording; ``TypeError`` or ``ValueError`` for a ``live``
    that is not one (naming the key). A divergence is in the outcome, and logged
    (INFO, the call and the path, no values).

    ``rules`` are the host rules the turn runs in its guards (default: ``live``'s,
    which ``LivePorts.of_pipeline`` takes from the pipeline). The recording names
    the host rules its turn ran (``TurnRecording.host_rules``): a replay not given
    one of them, or running one the turn did not, is a ``rules`` divergence, told
    in one line. A rule runs on the replayed context: on a redacted recording it
    sees placeholders where the user's content was.
    """
    ports = LivePorts.of(live)
    host_rules = HostRules(ports.rules if rules is None else rules)
    source = None if isinstance(recording, TurnRecording) else Path(recording)
    if not isinstance(recording, TurnRecording):
        recording = TurnRecording.load(recording)
    _refuse_redacted(recording, ports)
    # A turn its consumer stopped is stopped again, at the same point (ReplayTap).
    stop = TurnStop() if recording.stopped_after_call is not None else None
    tap = ReplayTap(recording, stop)
    report = await run_recorded(
        recording, tap, ports, host_rules, steps=steps, telemetry=telemetry, stop=stop
    )
    given = [rule.id for rule in host_rules]
    missing = [rule for rule in recording.host_rules if rule not in given]
    ran = host_rules_ran(report.trace) if report.trace is not None else ()
    divergence = (
        (_rules_divergence(recording.host_rules, given) if missing else None)
        or tap.divergence
        or tap.leftover()
        or _rules_divergence(recording.host_rules, ran)
        or _compared(recording, report)
    )
    if divergence is not None:
        logger.info(
            "replay of %s diverged: %s%s",
            source or "a recording",
            divergence.kind,
            _placed(divergence),
        )
    return ReplayOutcome(recording, report, divergence, source)


def _placed(divergence: Divergence) -> str:
    """Where a divergence is, for a log line: its call and path, never its values (they
    may be user content)."""
    at = f" at port call #{divergence.call_number} {divergence.port_call}"
    place = at if divergence.call_number is not None else ""
    if divergence.step:
        place += f" during step {divergence.step}"
    return place + (f", {divergence.where}" if divergence.where else "")


def replay_sync(
    recording: TurnRecording | str | Path,
    *,
    steps: Mapping[PipelineStep, StepFunction] | None = None,
    telemetry: Telemetry | None = None,
    live: LivePorts | Mapping[str, Any] | None = None,
    rules: Iterable[HostRule] | None = None,
) -> ReplayOutcome:
    """``replay`` for scripts and tests without an event loop of their own."""
    return asyncio.run(replay(recording, steps=steps, telemetry=telemetry, live=live, rules=rules))


def assert_replays(
    recording: TurnRecording | str | Path,
    *,
    steps: Mapping[PipelineStep, StepFunction] | None = None,
    live: LivePorts | Mapping[str, Any] | None = None,
    rules: Iterable[HostRule] | None = None,
) -> ReplayOutcome:
    """Replay and raise ``ReplayDivergenceError`` (an ``AssertionError``) on a divergence.

    ``live`` and ``rules`` as for ``replay``: a folder of recordings
    (``recordings_in``) then checks the host's own model, tools, catalogs, hooks and
    rules too.
    """
    outcome = replay_sync(recording, steps=steps, live=live, rules=rules)
    if not outcome.ok:
        raise ReplayDivergenceError(outcome)
    return outcome


def recordings_in(*paths: str | Path) -> list[Path]:
    """The recording files under these files and folders (``*.json``, recursively), sorted."""
    found: list[Path] = []
    for path in map(Path, paths):
        found.extend(sorted(path.rglob("*.json")) if path.is_dir() else [path])
    return found
