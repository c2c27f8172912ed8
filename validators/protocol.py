"""DESIGN.md R10: the pending-turn protocol of client tool continuations.

A FollowOn that names a turn still awaiting client tool results, and a
continuation that names a turn awaiting nothing, are client protocol faults
(AGN-033 §3.3): a clear error, nothing changes. The SessionRestorer checks the
turn the request names with ``validate_turn_protocol`` before it opens or resumes
anything.

A retried request is answered from the answer its first copy stored
(docs/CONFORMANCE.md D181-D185); the rules here name what a retry may not do:
reuse an idempotency key for another request, or continue a turn's tool calls
again with other results. ``validate_idempotency_key`` checks a key's form.
"""

from __future__ import annotations

from aptix_pipeline.contracts import (
    ContextType,
    ErrorCode,
    InvokeError,
    InvokeResult,
    StoredOutcome,
    Turn,
    TurnStatus,
)

from .core import TYPE_VALID
from .rules import OK, outcome, rule

__all__ = [
    "CONTINUATION_CONFLICT",
    "CONTINUATION_PREFIX",
    "FOLLOW_ON_TURN_SETTLED",
    "IDEMPOTENCY_KEY_FORMAT",
    "IDEMPOTENCY_KEY_REUSED",
    "KEY_PREFIX",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "stored_answer_conflict",
    "validate_idempotency_key",
    "validate_turn_protocol",
]

KEY_PREFIX = "key:"
"""How a ``StoredOutcome`` key made from a client's idempotency key begins."""
CONTINUATION_PREFIX = "continuation:"
"""How a ``StoredOutcome`` key made from a continuation's tool calls begins."""
MAX_IDEMPOTENCY_KEY_LENGTH = 255
"""The longest idempotency key, in characters (as Stripe's)."""

FOLLOW_ON_TURN_SETTLED = rule(
    "DESIGN/R10/follow-on-turn-settled",
    "DESIGN.md R10, AGN-033 §3.3",
    "a follow-on request must not name a turn that still awaits client tool results; "
    "submit the tool results first",
    ErrorCode.INVALID_REQUEST,
    module=__name__,
)
CONTINUATION_TURN_PENDING = rule(
    "DESIGN/R10/continuation-turn-pending",
    "DESIGN.md R10, AGN-033 §3.3",
    "a tool continuation must name a turn that awaits client tool results",
    ErrorCode.INVALID_REQUEST,
    module=__name__,
)


IDEMPOTENCY_KEY_FORMAT = rule(
    "DESIGN/idempotency/key-format",
    "docs/CONFORMANCE.md D182",
    f"an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters "
    "(no spaces or control characters)",
    ErrorCode.INVALID_REQUEST,
    module=__name__,
)
IDEMPOTENCY_KEY_REUSED = rule(
    "DESIGN/idempotency/key-reused",
    "docs/CONFORMANCE.md D182",
    "this idempotency key was already used for a different request; "
    "send the same request again, or use a new key",
    ErrorCode.CONFLICT,
    module=__name__,
)
CONTINUATION_CONFLICT = rule(
    "DESIGN/idempotency/continuation-conflict",
    "DESIGN.md R10, docs/CONFORMANCE.md D181",
    "these tool calls of the turn were already answered with other ToolResults; "
    "the turn kept the first answer",
    ErrorCode.CONFLICT,
    module=__name__,
)


def validate_idempotency_key(key: object) -> InvokeResult[None]:
    """Check an idempotency key's form: ``str``, 1-255 characters, each ``!`` to ``~``.

    The key is quoted back (escaped, at most 80 characters) so a client sees what
    arrived.
    """
    if (
        isinstance(key, str)
        and 0 < len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH
        and all("!" <= char <= "~" for char in key)
    ):
        return OK
    shown = ascii(key) if not isinstance(key, str) or len(key) <= 80 else ascii(key[:80]) + "…"
    return outcome([IDEMPOTENCY_KEY_FORMAT.error(shown, field="Idempotency-Key")])


def stored_answer_conflict(stored: StoredOutcome) -> InvokeError:
    """The error for a retry whose request differs from the one ``stored`` answered.

    Names the key's kind, the turn and the session the stored answer belongs to.
    """
    where = f"turn {stored.turn_id!r} of session {stored.session_id!r}"
    if stored.key.startswith(KEY_PREFIX):
        key = stored.key[len(KEY_PREFIX) :]
        return IDEMPOTENCY_KEY_REUSED.error(
            f"key {key!r} answered {where}", field="Idempotency-Key"
        )
    return CONTINUATION_CONFLICT.error(where, field="ToolResults")


def _awaits_tools(turn: Turn) -> bool:
    return turn.status is TurnStatus.AWAITING_CLIENT_TOOLS and bool(turn.pending_tool_calls)


def validate_turn_protocol(kind: ContextType | str, turn: Turn) -> InvokeResult[None]:
    """Check that the turn a FollowOn or continuation names is in the right state (R10).

    ``kind`` may be the enum or its value (``"FollowOn"``); an unknown kind fails
    ``AGN-036/3/type-valid``.
    """
    try:
        kind = ContextType(kind)
    except ValueError:
        return outcome([TYPE_VALID.error(repr(kind), field="Type")])
    errors: list[InvokeError] = []
    if kind is ContextType.FOLLOW_ON and _awaits_tools(turn):
        pending = [call.tool_call_id for call in turn.pending_tool_calls]
        errors.append(
            FOLLOW_ON_TURN_SETTLED.error(f"turn {turn.id!r} awaits {pending}", field="TurnId")
        )
    if kind is ContextType.CLIENT_TOOL_CALL_CONTINUATION and not _awaits_tools(turn):
        errors.append(
            CONTINUATION_TURN_PENDING.error(f"turn {turn.id!r} is {turn.status}", field="TurnId")
        )
    return outcome(errors)
