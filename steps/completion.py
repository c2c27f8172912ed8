"""Completing a turn: save where it stands and commit its one store transaction.

Not a DDR step: it is the ``complete`` transition into the machine's ``done``
state, so a turn is done only once it is persisted. The turn awaits client tool
results (AGN-033 §3.3) or is completed; the request's messages join the session's
transcript; the turn's answer is kept under its answer keys, so a retried request
is answered again (docs/CONFORMANCE.md D181); then everything the turn wrote is
committed at once, so a failed turn writes nothing (DESIGN.md "What every part
promises").
"""

from __future__ import annotations

from datetime import timedelta

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    ErrorCode,
    InvokeError,
    InvokeResult,
    ResponseType,
    StoreConflictError,
    StoredOutcome,
    TurnStatus,
)

from .faults import StepFaultError
from .scope import TurnScope

# Parametrized once and kept: pydantic rebuilds a generic whose class was collected.
_ResponseResult = InvokeResult[AgentExecuteResponse]

__all__ = ["complete_turn"]


async def complete_turn(scope: TurnScope) -> None:
    """Persist the turn's status, pending calls and messages, then commit."""
    ctx, tx = scope.ctx, scope.transaction
    turn = ctx.turn
    if turn is None or ctx.session is None:
        raise RuntimeError("a turn completes only inside a session")
    awaiting = ctx.response_type is ResponseType.TOOL_CONTINUATION
    settled = turn.model_copy(
        update={
            "status": TurnStatus.AWAITING_CLIENT_TOOLS if awaiting else TurnStatus.COMPLETED,
            "pending_tool_calls": list(ctx.client_tool_calls or []) if awaiting else [],
            "expanded_containers": list(scope.expanded),
            "usage": scope.usage,
            "server_tool_results": list(scope.server_results),
            "files": list(scope.files) or None,
        }
    )
    await tx.complete_turn(settled)
    await tx.append_transcript(ctx.session.id, turn.id, scope.new_messages)
    keys = scope.answer_keys
    if keys is not None and ctx.response is not None:
        result_json = _ResponseResult.success(ctx.response, scope.warnings).to_json()
        stamp = ctx.time_stamp or scope.ports.clock.now()
        expires = None if keys.ttl_seconds is None else timedelta(seconds=keys.ttl_seconds)
        for key in keys.keys:
            await tx.save_outcome(
                StoredOutcome.model_construct(  # the engine's own values: nothing to validate
                    key=key,
                    request_digest=keys.request_digest,
                    session_id=ctx.session.id,
                    turn_id=turn.id,
                    result_json=result_json,
                    created_at=stamp,
                    expires_at=None if expires is None else stamp + expires,
                )
            )
    try:
        await tx.commit()
    except StoreConflictError as conflict:
        raise StepFaultError(
            [
                InvokeError(
                    code=ErrorCode.CONFLICT,
                    field="SessionId",
                    message=f"a concurrent turn of this session won; nothing saved: {conflict}",
                )
            ]
        ) from conflict
