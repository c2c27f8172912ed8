"""AGN-036 §4.10 ResponseBuilder: the AGN-033 response from the context.

Reads the context and writes only ``ctx.response``: its POST checks that nothing
else changed and that the response conforms to AGN-033 and agrees with the
context. ``ModeDisplayName`` is the display name of the mode the turn ends in,
after any change (AGN-011 §5.4, DESIGN.md R6); a mode the catalog no longer knows
shows its own name.
"""

from __future__ import annotations

from aptix_pipeline.contracts import AgentExecuteResponse, ResponseType

from .scope import TurnScope

__all__ = ["response_builder"]


async def response_builder(scope: TurnScope) -> None:
    """Build ``ctx.response`` for the outcome the LLMClient reached."""
    ctx = scope.ctx
    mode = ctx.mode or ""
    spec = await scope.ports.modes.get_mode(mode)
    display = spec.display_name if spec is not None else mode
    scope.mode_display_name = display
    session_id = ctx.session.id if ctx.session is not None else ""
    turn_id = ctx.turn.id if ctx.turn is not None else ""
    payload = ctx.response_payload
    if ctx.response_type is ResponseType.FINAL and payload is not None:
        ctx.response = AgentExecuteResponse.final(
            session_id=session_id,
            turn_id=turn_id,
            mode_display_name=display,
            primary_output_text=payload.primary_output_text,
            files=payload.files,
            tool_results=payload.tool_results,
            user_warnings=payload.user_warnings,
            usage=payload.usage,
        )
    elif ctx.response_type is ResponseType.TOOL_CONTINUATION:
        ctx.response = AgentExecuteResponse.client_tool_continuation(
            session_id=session_id,
            turn_id=turn_id,
            mode_display_name=display,
            tool_calls=ctx.client_tool_calls or [],
            tool_continuation_message=ctx.tool_continuation_message,
        )
