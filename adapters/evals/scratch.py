"""The scratch store of an eval case: the session as the recording read it, in memory.

An evaluated turn may take another way than its recording from some call on
(``engine/replay/evaluation.py``); from there its store calls are answered by a
``RecordedStore``: a ``StoreBackend`` whose reads are the answers the recorded
turn's store reads got (the session, its turns, the pending turn, the transcript,
a stored answer), under a ``BufferedTransaction``, so a turn's writes are seen by
its later reads as on any store. Its commit keeps nothing: an eval changes no
store (docs/CONFORMANCE.md D620).
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from aptix_pipeline.adapters.stores import BufferedTransaction, TurnWrites
from aptix_pipeline.contracts import ChatMessage, Session, StoredOutcome, Turn
from aptix_pipeline.engine.replay import TurnRecording

__all__ = ["RecordedStore"]

_SESSION: TypeAdapter[Session | None] = TypeAdapter(Session | None)
_TURN: TypeAdapter[Turn | None] = TypeAdapter(Turn | None)
_MESSAGES: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])
_OUTCOME: TypeAdapter[StoredOutcome | None] = TypeAdapter(StoredOutcome | None)


def _read(adapter: TypeAdapter[Any], answer: Any) -> Any:
    try:
        return adapter.validate_python(answer)
    except ValueError:
        return None


class RecordedStore:
    """A ``SessionStore`` answering reads from a recording and keeping no writes."""

    def __init__(self, recording: TurnRecording) -> None:
        self._sessions: dict[str, Session] = {}
        self._turns: dict[tuple[str, str], Turn] = {}
        self._pending: dict[str, Turn] = {}
        self._transcripts: dict[str, list[ChatMessage]] = {}
        self._outcomes: dict[str, StoredOutcome] = {}
        for call in recording.calls:
            if call.port != "SessionTransaction" or call.error is not None:
                continue
            args = call.args
            if call.call == "load_session" and (session := _read(_SESSION, call.answer)):
                self._sessions[str(args["session_id"])] = session
            elif call.call == "load_turn" and (turn := _read(_TURN, call.answer)):
                self._turns[(str(args["session_id"]), str(args["turn_id"]))] = turn
            elif call.call == "find_pending_turn" and (turn := _read(_TURN, call.answer)):
                self._pending[str(args["session_id"])] = turn
            elif call.call == "load_transcript":
                messages = _read(_MESSAGES, call.answer)
                if messages is not None:
                    self._transcripts[str(args["session_id"])] = messages
            elif call.call == "load_outcome" and (outcome := _read(_OUTCOME, call.answer)):
                self._outcomes[str(args["key"])] = outcome

    def begin(self, org: str, user: str) -> BufferedTransaction:
        """A transaction over the recorded reads."""
        return BufferedTransaction(self, org, user)

    async def read_session(self, org: str, user: str, session_id: str) -> Session | None:
        """See ``StoreBackend``."""
        return self._sessions.get(session_id)

    async def read_turn(self, org: str, user: str, session_id: str, turn_id: str) -> Turn | None:
        """See ``StoreBackend``."""
        return self._turns.get((session_id, turn_id))

    async def read_transcript(self, org: str, user: str, session_id: str) -> list[ChatMessage]:
        """See ``StoreBackend``."""
        return list(self._transcripts.get(session_id, ()))

    async def read_pending_turn(self, org: str, user: str, session_id: str) -> Turn | None:
        """See ``StoreBackend``."""
        return self._pending.get(session_id)

    async def read_outcome(self, org: str, user: str, key: str) -> StoredOutcome | None:
        """See ``StoreBackend``."""
        return self._outcomes.get(key)

    async def apply(self, writes: TurnWrites) -> None:
        """Keep nothing: an eval changes no store."""
