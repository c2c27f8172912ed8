"""AGN-036 §4.1 RequestHandler: the pipeline context from the request and the caller.

Parses and checks the request (AGN-034), decides its context type by field
presence (DESIGN.md R1), stamps the time and a correlation id from the ports, and
begins the turn's store transaction. Its POST is ``ValidateCore`` (§4.1).
"""

from __future__ import annotations

from aptix_pipeline.contracts import Envelope, PipelineContext
from aptix_pipeline.validators import classify_request, parse_request

from .faults import StepFaultError
from .scope import TurnScope

__all__ = ["request_handler"]


async def request_handler(scope: TurnScope) -> None:
    """Create ``scope.ctx`` from the request; a request that breaks AGN-034 faults the turn."""
    parsed = parse_request(scope.raw_request)
    if parsed.result is None:
        raise StepFaultError(parsed.errors)
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
