"""What a recording is made of: the port calls of a turn and the exceptions they raised.

``PortCall`` is one call a port of the turn answered (or raised from), in order;
``RecordedError`` is such an exception, kept so that a replay raises one the engine
treats the same way. Both are plain values with a JSON form (docs/RECORDING.md);
the recording (``recording.py``) and its redaction (``redaction.py``) read them.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aptix_pipeline.contracts import PermanentPortError, StoreConflictError, scrub_urls
from aptix_pipeline.steps import HookFailedError

__all__ = ["PortCall", "RecordedError"]

# Exceptions a replay raises as themselves (beyond the builtins): the engine
# treats these differently from any other failure (no retry, ``conflict``, a
# hook's failure faulting with ``internal``).
_ENGINE_ERRORS: dict[str, type[Exception]] = {
    "PermanentPortError": PermanentPortError,
    "StoreConflictError": StoreConflictError,
    "HookFailedError": HookFailedError,
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

    A streamed model call (``LLM.stream``, ``streams.py``) may hold both: the reply
    so far and the ``error`` its stream raised part-way; ``last_chunk`` is the
    chunk after which the engine stopped reading it; ``ended`` says a stream cut
    short had sent its end (``ReplyFinished``) before. ``cancelled`` says the turn
    was stopped while the call ran (its stream's consumer left, or its deadline
    passed): the call has no answer but a stream's reply so far.

    ``elapsed_ms`` is how long the real port took (a stream: from its opening to its
    end), by the recorder's timer (``RecordingOptions.timer``); ``None`` when not
    timed. It is an observation, like a span's duration: a replay neither checks nor
    reproduces it.
    """

    n: int
    step: str | None
    port: str
    call: str
    args: dict[str, Any]
    answer: Any = None
    error: RecordedError | None = None
    last_chunk: Any = None
    ended: bool = False
    cancelled: bool = False
    elapsed_ms: float | None = None

    @property
    def name(self) -> str:
        """``Port.call``, e.g. ``SessionTransaction.load_session``."""
        return f"{self.port}.{self.call}"

    @property
    def cut_short(self) -> bool:
        """Whether the call did not end with an answer of its own (it raised, was closed
        or was cancelled)."""
        return self.error is not None or self.last_chunk is not None or self.cancelled

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``answer`` or ``error`` (a stream cut short may hold both), then
        ``last_chunk``, ``ended`` and ``cancelled`` when they apply."""
        data: dict[str, Any] = {
            "n": self.n,
            "step": self.step,
            "port": self.port,
            "call": self.call,
            "args": self.args,
        }
        if not self.cut_short or self.answer is not None:
            data["answer"] = self.answer
        if self.error is not None:
            data["error"] = self.error.to_dict()
        if self.last_chunk is not None:
            data["last_chunk"] = self.last_chunk
        if self.ended and self.cut_short:
            data["ended"] = True
        if self.cancelled:
            data["cancelled"] = True
        if self.elapsed_ms is not None:
            data["elapsed_ms"] = self.elapsed_ms
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
            last_chunk=data.get("last_chunk"),
            ended=data.get("ended") is True,
            cancelled=data.get("cancelled") is True,
            elapsed_ms=_milliseconds(data.get("elapsed_ms")),
        )


def _milliseconds(value: object) -> float | None:
    """A recorded ``elapsed_ms``: a number of milliseconds, else ``None``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None
