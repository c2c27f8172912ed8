"""Looking up a turn's agent and conversation contexts (AGN-036 §4.3, §4.6).

The AgentContextResolver looks them up by the ids the request names; the
AgentContextLoader by the ids the session stored. Either way an id the catalog
does not know faults the turn, naming the id.
"""

from __future__ import annotations

from aptix_pipeline.contracts import AgentContext, ConversationContext
from aptix_pipeline.validators import ContextRules, has_text

from .faults import StepFaultError, shown
from .scope import TurnScope

__all__ = ["load_contexts"]


async def load_contexts(
    scope: TurnScope,
    agent_context_id: str | None,
    conversation_context_id: str | None,
    rules: ContextRules,
) -> None:
    """Set ``ctx.agent_context`` and ``ctx.conversation_context`` or fault naming the id."""
    agents = scope.ports.agents
    # An empty or blank id counts as absent (docs/CONFORMANCE.md D1): the default.
    agent_context_id = agent_context_id if has_text(agent_context_id) else None
    if not has_text(conversation_context_id):
        conversation_context_id = None
    agent: AgentContext | None = await agents.get_agent_context(agent_context_id)
    conversation: ConversationContext | None = await agents.get_conversation_context(
        conversation_context_id
    )
    errors = []
    if agent is None:
        errors.append(rules.agent.error(shown(agent_context_id), field="AgentContextId"))
    if conversation is None:
        errors.append(
            rules.conversation.error(shown(conversation_context_id), field="ConversationContextId")
        )
    if errors:
        raise StepFaultError(errors)
    scope.ctx.agent_context = agent
    scope.ctx.conversation_context = conversation
