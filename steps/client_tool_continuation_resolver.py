"""AGN-036 §4.4 ClientToolContinuationResolver: pair the returned results with the calls.

Builds the ToolCallManifest from the pending turn's calls and the request's
ToolResults (AGN-036 §5, DESIGN.md R3: a failed tool's ErrorMessage becomes an
error payload in ResultJson). The POST validates it: any count, order, id or name
mismatch is a hard fault (AGN-033 §3.3).
"""

from __future__ import annotations

from aptix_pipeline.validators import manifest_for

from .scope import TurnScope

__all__ = ["client_tool_continuation_resolver"]


async def client_tool_continuation_resolver(scope: TurnScope) -> None:
    """Set ``ctx.tool_call_manifest`` for the pending turn."""
    ctx = scope.ctx
    pending = ctx.turn.pending_tool_calls if ctx.turn is not None else []
    ctx.tool_call_manifest = manifest_for(pending, ctx.envelope.tool_results or [])
