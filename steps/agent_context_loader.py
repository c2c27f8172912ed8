"""AGN-036 §4.6 AgentContextLoader: the contexts a restored session runs in.

Runs on the FollowOn and continuation paths; the ids come from the session, so a
client cannot switch agents mid-session.
"""

from __future__ import annotations

from aptix_pipeline.validators import STORED_CONTEXTS_KNOWN

from .agent_contexts import load_contexts
from .scope import TurnScope

__all__ = ["agent_context_loader"]


async def agent_context_loader(scope: TurnScope) -> None:
    """Load the contexts the restored session names."""
    session = scope.ctx.session
    if session is None:  # the §4.6 PRE guarantees a session; keep mypy and readers honest
        raise RuntimeError("AgentContextLoader needs a restored session")
    await load_contexts(
        scope, session.agent_context_id, session.conversation_context_id, STORED_CONTEXTS_KNOWN
    )
