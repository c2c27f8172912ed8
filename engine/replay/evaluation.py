"""Evaluation: a recorded request run again on a candidate's live model, prompt and tools.

``await evaluate(recording, live=..., scratch=...)`` is ``replay`` for a candidate
that may answer otherwise and must still finish its turn (docs/EVALS.md,
docs/CONFORMANCE.md D620-D623). The candidate's model, catalogs (its prompts and
tool lists), server tools and retriever run live (``LivePorts``); the store, the
clock and the id source answer from the recording, as in a replay. Each call is
checked against the recording as a replay checks it (``EvalTap``), but the first
difference is only *noted* (``Divergence``, named as ``replay`` names it) and the
turn goes on:

- the live ports keep answering themselves;
- the store answers from ``scratch``: a ``SessionStore`` the caller seeds with the
  recording's store reads (``adapters/evals``), to which every store call of the
  turn went from its start, so the session it created or the turn it opened is
  there when the candidate's turn takes another way;
- the clock goes on with the recorded readings, in order, then a millisecond
  after the last one each time; an id of a kind is the next recorded id of that
  kind, then ``eval-<kind>-<n>``;
- the usage ledger grants every later reservation; a port that is not live and has
  no store behind it answers with the recorded answer of an equal call, else fails.

What counts as a divergence is what the candidate *did*, not what every model
call carries anyway (D621): a model's answer is compared on its text and tool
calls (its response id, model name, finish reason and token counts are reported
apart, as tokens and cost); arguments are compared without their ``Usage`` (a
turn's tokens), the usage ledger's arguments not at all; the result without its
``Usage``; the state trace (which holds each call's ids and tokens) not at all.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter

from aptix_pipeline.contracts import (
    LLM,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    PriceTable,
    ReplyChunk,
    ReserveOutcome,
    SessionStore,
    StreamingLLM,
    close_stream,
)
from aptix_pipeline.engine.deep_json import encode_value
from aptix_pipeline.engine.report import TurnReport
from aptix_pipeline.engine.telemetry import Telemetry
from aptix_pipeline.validators import HostRules

from .live import LivePorts
from .port_tap import CLOCK, IDS, LLM_PORT, TRANSACTION, USAGE, decode_answer
from .recording import TurnRecording
from .records import PortCall
from .replayer import (
    Divergence,
    ReplayTap,
    _DivergedError,
    first_difference,
    run_recorded,
)
from .streams import StreamLog

__all__ = ["EvalTap", "Evaluation", "ModelCallSeen", "evaluate", "usage_of"]

T = TypeVar("T")

_TIME: TypeAdapter[datetime] = TypeAdapter(datetime)
_SAID = ("Text", "ToolCalls")
"""What a model's answer is compared on in an evaluation (D621)."""
_USAGE_KEY = "Usage"
_GRANTED = ReserveOutcome(reserved=True)
_NO_TIME = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ModelCallSeen:
    """One call of the candidate's model: its reply as a recording holds it (``Text``,
    ``ToolCalls``, ``Usage``, ``Model``, …; ``None`` when it failed), the first line of
    its failure, and how long it took."""

    answer: Mapping[str, Any] | None
    error: str | None
    elapsed_ms: float


class _Meter:
    """The candidate's model calls, as its turn made them (``_MeteredLLM``)."""

    def __init__(self) -> None:
        self.calls: list[ModelCallSeen] = []

    def seen(self, answer: Any, error: BaseException | None, started: float) -> None:
        elapsed = (time.perf_counter() - started) * 1000
        failure = None
        if error is not None:
            first = (str(error).splitlines() or [""])[0][:200]
            failure = f"{type(error).__name__}: {first}".rstrip(": ")
        self.calls.append(ModelCallSeen(answer, failure, elapsed))


class _MeteredLLM:
    """The candidate's model, each call's reply and time noted (a model that cannot stream)."""

    def __init__(self, llm: LLM, meter: _Meter) -> None:
        self._llm, self._meter = llm, meter
        self.provider_name = getattr(llm, "provider_name", None)

    async def complete(self, request: LLMRequest) -> LLMReply:
        started = time.perf_counter()
        try:
            reply = await self._llm.complete(request)
        except BaseException as error:
            self._meter.seen(None, error, started)
            raise
        self._meter.seen(encode_value(reply), None, started)
        return reply


class _MeteredStreamingLLM(_MeteredLLM):
    """``_MeteredLLM`` for a model that streams: a stream's time runs from its opening
    to its end, its reply is what its chunks make."""

    async def stream(self, request: LLMRequest) -> AsyncIterator[ReplyChunk]:
        started, log = time.perf_counter(), StreamLog()
        chunks = cast(StreamingLLM, self._llm).stream(request)
        try:
            async for chunk in chunks:
                log.hold(chunk)
                log.taken()
                yield chunk
        except GeneratorExit:
            self._meter.seen(log.so_far(), None, started)
            raise
        except BaseException as error:
            self._meter.seen(None, error, started)
            raise
        else:
            self._meter.seen(log.so_far(), None, started)
        finally:
            await close_stream(chunks)


def _metered(llm: LLM, meter: _Meter) -> LLM:
    if isinstance(llm, StreamingLLM):
        return cast(LLM, _MeteredStreamingLLM(llm, meter))
    return cast(LLM, _MeteredLLM(llm, meter))


def _without_usage(value: Any) -> Any:
    """A JSON value without its ``Usage`` keys, at any depth (a turn's token counts)."""
    pending: list[tuple[Any, Any, Any]] = []
    root: dict[str, Any] = {}
    pending.append((value, root, "v"))
    while pending:
        item, parent, key = pending.pop()
        if isinstance(item, Mapping):
            copy: dict[str, Any] = {}
            parent[key] = copy
            for name, inner in item.items():
                if name != _USAGE_KEY:
                    pending.append((inner, copy, name))
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[key] = items
            pending.extend((inner, items, index) for index, inner in enumerate(item))
        else:
            parent[key] = item
    return root["v"]


def _said(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """A model call's outcome as an evaluation compares it: its answer's text and tool
    calls, its error."""
    said = dict(outcome)
    answer = said.get("answer")
    if isinstance(answer, Mapping):
        said["answer"] = {key: answer[key] for key in _SAID if key in answer}
    return said


class EvalTap(ReplayTap):
    """The ``PortTap`` of an evaluation: checks each call as a replay does, notes the first
    divergence, and keeps the turn going after it (the module docstring)."""

    def __init__(self, recording: TurnRecording, scratch: SessionStore) -> None:
        super().__init__(recording, None)
        self._recording = recording
        self._scratch = scratch
        self._clock_calls = 0
        self._id_calls: dict[str, int] = {}
        self._borrowed: set[int] = set()
        self._readings = [
            decode_answer(_TIME, call.answer) for call in recording.calls if call.port == CLOCK
        ]
        self._ids: dict[str, list[str]] = {}
        for call in recording.calls:
            if call.port == IDS:
                self._ids.setdefault(str(call.args.get("kind")), []).append(str(call.answer))

    # -- checking, as a replay checks, with what any model call carries left out (D621)

    def _expect(
        self, port: str, call: str, args: Mapping[str, Any], *, live: bool = False
    ) -> PortCall:
        if self.divergence is not None:
            raise _DivergedError(self.divergence)
        calls = self._recording.calls
        if self.position < len(calls):
            expected = calls[self.position]
            if (expected.port, expected.call, expected.step) == (port, call, self.step):
                actual = {name: encode_value(value) for name, value in args.items()}
                if port == USAGE:
                    difference = None  # a reservation's estimate and tokens: reported apart
                else:
                    difference = first_difference(
                        _without_usage(expected.args), _without_usage(actual)
                    )
                if difference is not None:
                    where, left, right = difference
                    name = f"{port}.{call}"
                    raise self._diverge(
                        Divergence("arguments", self.step, expected.n, name, where, left, right)
                    )
                self.position += 1
                return expected
        return super()._expect(port, call, args, live=live)

    def _check_live(
        self,
        expected: PortCall,
        answer: Any,
        error: Any,
        *,
        last_chunk: Any = None,
        ended: bool = False,
    ) -> None:
        """Note the first live answer that differs; never stop the turn for it."""
        if self.divergence is None:
            self.divergence = self._live_divergence(expected, answer, error, last_chunk, ended)

    def _live_divergence(
        self,
        expected: PortCall,
        answer: Any,
        error: Any,
        last_chunk: Any,
        ended: bool,
    ) -> Divergence | None:
        if expected.port != LLM_PORT:
            return super()._live_divergence(expected, answer, error, last_chunk, ended)
        made = replace(expected, answer=answer, error=error, last_chunk=last_chunk, ended=ended)
        want, got = _said(_outcome(expected)), _said(_outcome(made))
        difference = first_difference(want, got)
        if difference is None:
            return None
        where, left, right = difference
        return Divergence("answer", self.step, expected.n, expected.name, where, left, right)

    def replied(self, event: Any, text: str) -> None:
        """A streamed reply is compared on its text and tool calls only (D621)."""
        before = self.divergence
        super().replied(event, text)
        found = self.divergence
        if before is None and found is not None:
            field_name = found.where.removeprefix("answer.").split(".")[0].split("[")[0]
            if field_name not in _SAID:
                self.divergence = None

    # -- answering, before and after the divergence

    def begin(self, target: Any, org: str, user: str) -> Any:
        """The scratch store's transaction, which every store call of the turn reaches."""
        if self.divergence is None:
            with suppress(_DivergedError):  # noted: the scratch store answers from here on
                super().begin(target, org, user)
        return self._scratch.begin(org, user)

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
        """Answered as a replay answers it until the divergence, and on after it."""
        if port == TRANSACTION:
            return await self._store_call(target, call, answer, args)
        if self.divergence is None:
            try:
                return await super().acall(
                    None if port == USAGE else target, port, call, answer, args, method=method
                )
            except _DivergedError:
                pass  # found before any live port ran: answered below
        return await self._after(target, port, call, answer, args, method)

    async def _store_call(
        self, target: Any, call: str, answer: TypeAdapter[T], args: Mapping[str, Any]
    ) -> T:
        if self.divergence is None:
            try:
                value = await super().acall(None, TRANSACTION, call, answer, args)
            except _DivergedError:
                pass
            else:
                # The scratch store follows the recorded turn; what it says is the
                # recording's to say.
                with suppress(Exception):
                    await getattr(target, call)(*args.values())
                return value
        return cast(T, await getattr(target, call)(*args.values()))

    async def _after(
        self,
        target: Any,
        port: str,
        call: str,
        answer: TypeAdapter[T],
        args: Mapping[str, Any],
        method: str | None,
    ) -> T:
        if target is not None and port != USAGE:
            return cast(T, await getattr(target, method or call)(*args.values()))
        if port == USAGE:
            return cast(T, _GRANTED if call == "reserve_usage" else None)
        return self._borrow(port, call, answer, args)

    def _borrow(self, port: str, call: str, answer: TypeAdapter[T], args: Mapping[str, Any]) -> T:
        """The recorded answer of an equal call, each recorded call lent once; else a
        failure naming the port (nothing live stands behind it)."""
        actual = {name: encode_value(value) for name, value in args.items()}
        for recorded in self._recording.calls:
            if (
                (recorded.port, recorded.call) == (port, call)
                and recorded.n not in self._borrowed
                and first_difference(recorded.args, actual) is None
            ):
                self._borrowed.add(recorded.n)
                return self._answer(recorded, answer)
        raise PermanentPortError(
            f"{port}.{call}: the candidate has no such port running live, and the recording "
            "has no equal call to answer it"
        )

    def call(
        self, target: Any, port: str, call: str, answer: TypeAdapter[T], args: Mapping[str, Any]
    ) -> T:
        """The clock and the ids: the recorded ones in order, then deterministic ones."""
        if port == CLOCK:
            self._clock_calls += 1
            index = self._clock_calls - 1
        else:
            kind = str(args.get("kind"))
            self._id_calls[kind] = self._id_calls.get(kind, 0) + 1
            index = self._id_calls[kind] - 1
        if self.divergence is None:
            try:
                return super().call(target, port, call, answer, args)
            except _DivergedError:
                pass
        if port == CLOCK:
            if index < len(self._readings):
                return cast(T, self._readings[index])
            last = self._readings[-1] if self._readings else _NO_TIME
            return cast(T, last + timedelta(milliseconds=index - len(self._readings) + 1))
        recorded = self._ids.get(kind, [])
        return cast(T, recorded[index] if index < len(recorded) else f"eval-{kind}-{index + 1}")

    async def stream(
        self, target: Any, port: str, call: str, args: Mapping[str, Any]
    ) -> AsyncIterator[Any]:
        """A streamed model call: as a replay streams it, or the live stream after the
        divergence."""
        if self.divergence is None:
            checked = cast(AsyncGenerator[Any], super().stream(target, port, call, args))
            started = False
            try:
                async for chunk in checked:
                    started = True
                    yield chunk
                return
            except _DivergedError:
                if started or target is None:
                    raise
            finally:
                await checked.aclose()
        if target is None:
            raise PermanentPortError(f"{port}.{call}: no live model")
        chunks = getattr(target, call)(*args.values())
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await close_stream(chunks)

    def ended(self) -> Divergence | None:
        """The recorded calls the candidate's turn did not make, as a divergence."""
        return self.leftover()


def _outcome(call: PortCall) -> dict[str, Any]:
    data = call.to_dict()
    for key in ("n", "step", "port", "call", "args", "elapsed_ms"):
        data.pop(key, None)
    return data


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A recorded request run on a candidate: what the candidate's turn did, and where it
    first did otherwise than the recording (``None``: nowhere)."""

    recording: TurnRecording
    report: TurnReport
    divergence: Divergence | None
    model_calls: Sequence[ModelCallSeen] = field(default_factory=tuple)
    source: Path | None = None

    @property
    def result(self) -> dict[str, Any]:
        """The candidate's ``InvokeResult`` in wire form."""
        return self.report.result.to_wire()


async def evaluate(
    recording: TurnRecording | str | Path,
    *,
    live: LivePorts | Mapping[str, Any],
    scratch: SessionStore,
    telemetry: Telemetry | None = None,
) -> Evaluation:
    """Run a recorded request on the candidate's ``live`` ports; see the module docstring.

    ``live`` must hold a model (``llm``): an evaluation asks the candidate. ``scratch``
    answers the store once the candidate's turn diverged; it sees every store call
    of the turn from its start. A redacted recording is refused (``ValueError``):
    its requests are placeholders. The recorded options apply, without waits or a
    turn deadline (bound a case from outside: ``asyncio.timeout``).
    """
    ports = LivePorts.of(live)
    if ports.llm is None:
        raise ValueError("an evaluation runs the candidate's model: live needs an llm")
    source = None if isinstance(recording, TurnRecording) else Path(recording)
    if not isinstance(recording, TurnRecording):
        recording = TurnRecording.load(recording)
    if recording.redacted:
        raise ValueError(
            "the recording is redacted: its model requests are placeholders, so a "
            "candidate would be asked about [redacted]; capture cases from recordings "
            "made without redact"
        )
    meter = _Meter()
    tap = EvalTap(recording, scratch)
    metered = replace(ports, llm=_metered(ports.llm, meter))
    report = await run_recorded(
        recording, tap, metered, HostRules(ports.rules), telemetry=telemetry
    )
    divergence = tap.divergence or tap.ended() or _result_divergence(recording, report)
    return Evaluation(recording, report, divergence, tuple(meter.calls), source)


def _result_divergence(recording: TurnRecording, report: TurnReport) -> Divergence | None:
    """The result against the recorded one, without its token counts (D621)."""
    difference = first_difference(
        _without_usage(recording.result), _without_usage(report.result.to_wire())
    )
    if difference is None:
        return None
    where, left, right = difference
    return Divergence("result", None, None, None, where, left, right)


def usage_of(
    answers: Sequence[Mapping[str, Any] | None], prices: PriceTable | None
) -> tuple[int | None, Decimal | None, str | None]:
    """The tokens (input and output) of model answers as a recording holds them, and their
    cost and currency by ``prices``: ``None`` for tokens when a call reported none, for
    the cost when a call is unpriced (or the calls' currencies differ)."""
    tokens: int | None = 0
    cost: Decimal | None = None if prices is None else Decimal(0)
    currencies: set[str] = set()
    for answer in answers:
        usage = answer.get(_USAGE_KEY) if answer is not None else None
        if not isinstance(usage, Mapping):
            tokens, cost = None, None
            continue
        inputs, outputs = int(usage.get("InputTokens", 0)), int(usage.get("OutputTokens", 0))
        cached = int(usage.get("CachedInputTokens") or 0)
        if tokens is not None:
            tokens += inputs + outputs
        model = answer.get("Model") if answer is not None else None
        price = prices.price(model if isinstance(model, str) else None) if prices else None
        if price is None:
            cost = None
        elif cost is not None:
            cost += price.tokens_cost(inputs, outputs, cached)
            currencies.add(price.currency)
    if len(currencies) > 1:
        cost = None
    currency = next(iter(currencies)) if cost is not None and currencies else None
    return tokens, cost, currency
