"""AGN-036 §4.8 Reasoner: select the turn's tools before the loop starts (AGN-011 §4).

The tool set is the agent's client tools, then the server tools of the turn's
mode from the Mode Catalog, then ``agent_change_mode``, which is always present
(§4.2, §4.3). Server tools never remove a client tool: a server tool whose name a
client tool already uses is left out, with a warning. The set is frozen for the
turn (§4.4, DESIGN.md R9) — it is chosen by the mode the turn *started* in, so a
continuation sees the same tools even after a mode change; the new mode's tools
come next turn (§5.7).
"""

from __future__ import annotations

from aptix_pipeline.contracts import InvokeWarning, ToolDefinition

from .mode_change import AGENT_CHANGE_MODE, change_mode_tool
from .scope import TurnScope

__all__ = ["reasoner"]


async def reasoner(scope: TurnScope) -> None:
    """Merge and freeze the turn's tools into ``ctx.tools``."""
    ctx = scope.ctx
    turn_mode = (ctx.turn.mode if ctx.turn is not None else None) or ctx.mode or ""
    spec = await scope.ports.modes.get_mode(turn_mode)
    if spec is None:
        scope.warn(
            InvokeWarning(
                code="mode_not_in_catalog",
                message=f"mode {turn_mode!r} is not in the Mode Catalog; no server tools this turn",
            )
        )
    merged: dict[str, ToolDefinition] = {}
    for tool in ctx.agent_context.client_tools if ctx.agent_context else []:
        merged.setdefault(tool.name, tool)
    for tool in spec.server_tools if spec else ():
        if tool.name in merged:
            scope.warn(
                InvokeWarning(
                    code="server_tool_shadowed",
                    message=f"server tool {tool.name!r} is left out: a client tool has that name",
                )
            )
            continue
        merged[tool.name] = tool
    merged[AGENT_CHANGE_MODE] = await change_mode_tool(scope.ports.modes)
    scope.tool_index = merged
    ctx.tools = list(merged.values())
