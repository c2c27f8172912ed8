"""What the catalogs answer: a mode's display name and server tools (AGN-011 §4.2)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .tools import ToolDefinition
from .wire import WireModel

__all__ = ["ModeSpec"]


class ModeSpec(WireModel):
    """One entry of the Mode Catalog: the mode, its display name and its server tools.

    The display name is what a response's ``ModeDisplayName`` shows (AGN-033 §3.1,
    DESIGN.md R6); ``server_tools`` are merged with the client's tools before the
    reasoner loop (AGN-011 §4.2, §4.3). ``vision``: whether the model is shown
    images while the turn is in this mode (the agent must have vision too,
    ``AgentContext.vision``); without it each image reaches the model as its
    described reference, and the final response says so in ``UserWarnings``.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    display_name: str = Field(min_length=1)
    server_tools: tuple[ToolDefinition, ...] = ()
    vision: bool = True
