"""The ``Retriever`` port: RAG scope to passages (AGN-034 §4.4).

A turn with an instruction asks the retriever for passages (``RetrievalQuery``:
the instruction, the request's ``RagScope`` conditions and a limit); the passages
(``Passage``, each with its ``PassageSource``) go into the prompt as labelled
context (``steps/retrieval.py``, docs/RETRIEVAL.md).

The conditions are ANDed (§4.4). What each operator means, for a condition's
several ``Values`` and for a document whose metadata value is a list, is fixed
here once (``RetrievalQuery.admits``, docs/CONFORMANCE.md D332) so that every
retriever filters alike; a host's retriever may push the same test down into its
own index instead of calling it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from pydantic import ConfigDict, Field

from .request import RagOperator, RagScopeCondition
from .wire import WireModel

__all__ = [
    "MetadataValue",
    "Passage",
    "PassageSource",
    "RetrievalQuery",
    "Retriever",
    "condition_admits",
    "metadata_values",
]

MetadataValue = str | list[str]
"""A document's metadata value: one string, or a list of strings (front matter's
``tags: [a, b]``, a sidecar's JSON array)."""


def metadata_values(metadata: Mapping[str, MetadataValue], key: str) -> tuple[str, ...]:
    """The document's values under ``key``: one for a string, each item of a list, none
    when the key is missing."""
    value = metadata.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def condition_admits(condition: RagScopeCondition, metadata: Mapping[str, MetadataValue]) -> bool:
    """Whether a document with ``metadata`` meets one scope condition (D332).

    With D the document's values under the condition's ``Key`` (a string is one value,
    a list each of its items, a missing key none) and V the condition's ``Values``:

    - ``==``: some value in D equals some value in V (exactly, case and all);
    - ``!=``: no value in D equals any value in V — ``==`` negated, so a document
      without the key meets it;
    - ``contains``: some value in D holds some value in V as a substring, ignoring
      case (``str.casefold``);
    - ``does_not_contain``: ``contains`` negated — no value in D holds any value in V;
      a document without the key meets it.
    """
    found = metadata_values(metadata, condition.key)
    wanted = condition.values
    operator = condition.operator
    if operator in (RagOperator.EQUALS, RagOperator.NOT_EQUALS):
        hit = any(value in wanted for value in found)
        return hit if operator is RagOperator.EQUALS else not hit
    needles = [value.casefold() for value in wanted]
    hit = any(needle in value.casefold() for value in found for needle in needles)
    return hit if operator is RagOperator.CONTAINS else not hit


class RetrievalQuery(WireModel):
    """What a turn asks its retriever: the instruction, the scope conditions (ANDed,
    AGN-034 §4.4) and the most passages it wants."""

    model_config = ConfigDict(frozen=True)

    instruction: str
    conditions: list[RagScopeCondition] = Field(default_factory=list)
    limit: int = Field(ge=1)

    def admits(self, metadata: Mapping[str, MetadataValue]) -> bool:
        """Whether a document with ``metadata`` meets every condition (``condition_admits``)."""
        return all(condition_admits(condition, metadata) for condition in self.conditions)


class PassageSource(WireModel):
    """Where a passage comes from: its document's id (for a folder of files, the path
    relative to the folder), title, path and metadata."""

    model_config = ConfigDict(frozen=True)

    document_id: str
    title: str | None = None
    path: str | None = None
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)


class Passage(WireModel):
    """One retrieved passage: its text, its relevance (higher is better; each
    retriever's own scale) and its source."""

    model_config = ConfigDict(frozen=True)

    text: str
    score: float
    source: PassageSource


@runtime_checkable
class Retriever(Protocol):
    """Finds passages for a turn (AGN-034 §4.4); ``collection`` names what it searches
    (spans and the state trace name it).

    ``retrieve`` returns at most ``query.limit`` passages that meet every condition
    (``query.admits``), best first; the engine keeps the first ``limit`` of a longer
    answer. Raising fails the turn with ``port_failed`` naming the port (D334).
    """

    collection: str

    async def retrieve(self, query: RetrievalQuery) -> Sequence[Passage]:
        """The passages for ``query``, best first."""
        ...
