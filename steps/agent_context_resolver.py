"""AGN-036 §4.3 AgentContextResolver: a new session's agent and conversation contexts.

Runs on the Initial path only, before any session exists; the contexts come from
the ids the request names, or the catalog's defaults when it names none.
"""

from __future__ import annotations

from aptix_pipeline.validators import REQUESTED_CONTEXTS_KNOWN

from .agent_contexts import load_contexts
from .scope import TurnScope

__all__ = ["agent_context_resolver"]


async def agent_context_resolver(scope: TurnScope) -> None:
    """Resolve the contexts the request names (or the defaults)."""
    envelope = scope.ctx.envelope
    await load_contexts(
        scope, envelope.agent_context_id, envelope.conversation_context_id, REQUESTED_CONTEXTS_KNOWN
    )
