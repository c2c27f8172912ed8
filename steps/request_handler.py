"""AGN-036 §4.1 RequestHandler: the pipeline context from the request and the caller.

Parses and checks the request (AGN-034), decides its context type by field
presence (DESIGN.md R1), stamps the time and a correlation id from the ports, and
begins the turn's store transaction. Its POST is ``ValidateCore`` (§4.1). A
continuation refused for its ToolResults gets each error's tool name from the
pending turn (read only), so the fault names tool id, name and reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress

from aptix_pipeline.contracts import AgentExecuteRequest, Envelope, InvokeError, PipelineContext
from aptix_pipeline.validators import ImageCaps, classify_request, parse_request, strict_json_loads

from .faults import StepFaultError
from .scope import TurnScope

__all__ = ["request_handler"]


def _named_ids(raw: object) -> tuple[str, str] | None:
    """SessionId and TurnId of a request that did not parse, when they can be read."""
    if isinstance(raw, AgentExecuteRequest):
        data: object = {"SessionId": raw.session_id, "TurnId": raw.turn_id}
    elif isinstance(raw, str | bytes):
        try:
            data = strict_json_loads(raw)
        except (ValueError, RecursionError):
            return None
    else:
        data = raw
    if not isinstance(data, Mapping):
        return None
    session_id, turn_id = data.get("SessionId"), data.get("TurnId")
    if isinstance(session_id, str) and isinstance(turn_id, str):
        return session_id, turn_id
    return None


async def _with_tool_names(
    scope: TurnScope, errors: tuple[InvokeError, ...]
) -> tuple[InvokeError, ...]:
    """Name the tool of each error about a returned result (AGN-036 §5, DESIGN.md R3).

    A continuation whose ToolResults break AGN-034 is refused before the pending
    turn is loaded; here it is read (never written) to add each result's tool name.
    """
    unnamed = {e.tool_call_id for e in errors if e.tool_call_id and e.tool_name is None}
    ids = _named_ids(scope.raw_request) if unnamed else None
    if ids is None:
        return errors
    tx = scope.ports.store.begin(scope.caller.org, scope.caller.user)
    try:
        turn = await tx.load_turn(*ids)
    except Exception:  # only a nicety: the request is refused either way
        turn = None
    finally:
        with suppress(Exception):
            await tx.rollback()
    names = {call.tool_call_id: call.name for call in (turn.pending_tool_calls if turn else [])}
    return tuple(
        error.model_copy(update={"tool_name": names[error.tool_call_id]})
        if error.tool_call_id in names and error.tool_name is None
        else error
        for error in errors
    )


async def request_handler(scope: TurnScope) -> None:
    """Create ``scope.ctx`` from the request; a request that breaks AGN-034 faults the turn."""
    parsed = parse_request(
        scope.raw_request,
        max_json_depth=scope.options.max_json_depth,
        max_errors=scope.options.max_errors,
        count_caps={
            "InputArtifacts": scope.options.max_input_artifacts,
            "ClipboardImages": scope.options.max_clipboard_images,
            "ToolResults": scope.options.max_tool_results,
        },
        image_caps=ImageCaps(
            scope.options.max_images,
            scope.options.max_image_bytes,
            scope.options.max_total_image_bytes,
        ),
    )
    if parsed.result is None:
        raise StepFaultError(await _with_tool_names(scope, parsed.errors))
    request = parsed.result
    kind = classify_request(request)
    if kind is None:  # parse_request already refuses this (AGN-034/3/session-turn-pair)
        raise StepFaultError(parsed.errors)
    scope.request = request
    scope.context = PipelineContext(
        type=kind,
        time_stamp=scope.ports.clock.now(),
        correlation_id=scope.ports.ids.new_id("correlation"),
        envelope=Envelope(
            org=scope.caller.org,
            user=scope.caller.user,
            session_id=request.session_id,
            turn_id=request.turn_id,
            instructions=request.instruction,
            input_artifacts=request.input_artifacts,
            clip_board_images=request.clipboard_images,
            tool_results=request.tool_results,
            rag_scope=request.rag_scope,
            solution_context_text=request.solution_context_text,
            workspace_hints=request.workspace_hints,
            stream=request.stream,
            agent_context_id=request.agent_context_id,
            conversation_context_id=request.conversation_context_id,
        ),
    )
    scope.tx = scope.ports.store.begin(scope.caller.org, scope.caller.user)
