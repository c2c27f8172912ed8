"""The RAG scope's operators (AGN-034 §4.4) and their AND, as every retriever reads them
(``RetrievalQuery.admits``) and as the SQLite FTS5 retriever applies them to a real
folder of documents indexed into a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from knowledge_kit import CORPUS_IDS, indexed_corpus

from aptix_pipeline.adapters.retrieval.fts import FtsRetriever
from aptix_pipeline.contracts import (
    MetadataValue,
    RagOperator,
    RagScopeCondition,
    RetrievalQuery,
    condition_admits,
)


def _condition(key: str, operator: str, *values: str) -> RagScopeCondition:
    return RagScopeCondition(key=key, operator=RagOperator(operator), values=list(values))


ADMITS: list[Any] = [
    # (metadata, key, operator, values, admitted)
    ({"team": "ops"}, "team", "==", ["ops"], True),
    ({"team": "ops"}, "team", "==", ["Ops"], False),  # exact, case and all
    ({"team": "ops"}, "team", "==", ["dev", "ops"], True),  # any of the values
    ({"tags": ["a", "b"]}, "tags", "==", ["b"], True),  # any item of a list
    ({"tags": ["a", "b"]}, "tags", "==", ["ab"], False),
    ({}, "team", "==", ["ops"], False),  # a missing key equals nothing
    ({"team": "ops"}, "team", "!=", ["ops"], False),
    ({"team": "ops"}, "team", "!=", ["dev", "qa"], True),  # none of the values
    ({"tags": ["a", "b"]}, "tags", "!=", ["b"], False),  # no item may equal one
    ({}, "team", "!=", ["ops"], True),  # a missing key differs from everything
    ({"team": "Platform-Tools"}, "team", "contains", ["platform"], True),  # any case
    ({"team": "ops"}, "team", "contains", ["x", "p"], True),  # any of the values
    ({"tags": ["docker", "web"]}, "tags", "contains", ["dock"], True),  # any item
    ({"team": "ops"}, "team", "contains", ["dev"], False),
    ({}, "team", "contains", ["o"], False),
    ({"team": "ops"}, "team", "does_not_contain", ["OP"], False),
    ({"tags": ["docker", "web"]}, "tags", "does_not_contain", ["we"], False),
    ({"tags": ["docker", "web"]}, "tags", "does_not_contain", ["python"], True),
    ({}, "team", "does_not_contain", ["o"], True),
]


@pytest.mark.decision("D332")
@pytest.mark.parametrize(("metadata", "key", "operator", "values", "admitted"), ADMITS)
def test_a_condition_admits_a_document_by_its_operator(
    metadata: dict[str, MetadataValue], key: str, operator: str, values: list[str], admitted: bool
) -> None:
    condition = _condition(key, operator, *values)

    assert condition_admits(condition, metadata) is admitted


@pytest.mark.decision("D332")
@pytest.mark.parametrize("operator", ["==", "contains"])
def test_each_negative_operator_is_its_positive_negated(operator: str) -> None:
    negated = {"==": "!=", "contains": "does_not_contain"}[operator]
    for metadata, key, _, values, _ in ADMITS:
        positive = condition_admits(_condition(key, operator, *values), metadata)
        negative = condition_admits(_condition(key, negated, *values), metadata)

        assert positive is not negative


@pytest.mark.decision("D332")
def test_conditions_are_anded() -> None:
    metadata: dict[str, MetadataValue] = {"team": "ops", "tags": ["docker"]}
    query = RetrievalQuery(
        instruction="deploy",
        limit=5,
        conditions=[_condition("team", "==", "ops"), _condition("tags", "contains", "dock")],
    )
    failing = query.model_copy(
        update={"conditions": [*query.conditions, _condition("team", "!=", "ops")]}
    )

    assert query.admits(metadata)
    assert not failing.admits(metadata)


@pytest.fixture
def retriever(tmp_path: Path) -> Iterator[FtsRetriever]:
    found = indexed_corpus(tmp_path)
    yield found
    found.close()


async def _found(retriever: FtsRetriever, *conditions: RagScopeCondition) -> set[str]:
    query = RetrievalQuery(instruction="deploy", limit=10, conditions=list(conditions))
    return {passage.source.document_id for passage in await retriever.retrieve(query)}


async def test_without_conditions_every_matching_document_is_found(
    retriever: FtsRetriever,
) -> None:
    assert await _found(retriever) == CORPUS_IDS


@pytest.mark.decision("D332", "D336")
@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (("team", "==", "platform"), {"web.md"}),
        (("tags", "==", "python"), {"web.md", "cli.md"}),
        (("team", "==", "platform", "ops"), {"web.md", "docker.md"}),
        (("team", "!=", "platform"), {"docker.md", "cli.md", "notes.txt"}),
        (("tags", "!=", "python", "docker"), {"notes.txt"}),
        (("team", "contains", "PLATFORM"), {"web.md", "cli.md"}),
        (("tags", "contains", "dock"), {"docker.md"}),
        (("team", "does_not_contain", "plat"), {"docker.md", "notes.txt"}),
        (("tags", "does_not_contain", "web", "cli"), {"docker.md", "notes.txt"}),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, tuple) else None,
)
async def test_fts_retrieval_honours_each_operator(
    retriever: FtsRetriever, condition: tuple[str, ...], expected: set[str]
) -> None:
    key, operator, *values = condition

    found = await _found(retriever, _condition(key, operator, *values))

    assert found == expected


@pytest.mark.decision("D332")
async def test_fts_retrieval_ands_the_conditions(retriever: FtsRetriever) -> None:
    python = _condition("tags", "==", "python")
    not_tools = _condition("team", "does_not_contain", "tools")

    assert await _found(retriever, python) == {"web.md", "cli.md"}
    assert await _found(retriever, python, not_tools) == {"web.md"}
    assert await _found(retriever, python, not_tools, _condition("team", "==", "ops")) == set()


@pytest.mark.decision("D335")
async def test_fts_retrieval_keeps_the_best_passages_up_to_the_limit(
    retriever: FtsRetriever,
) -> None:
    query = RetrievalQuery(instruction="docker image deploy", limit=2)

    passages = await retriever.retrieve(query)

    assert len(passages) == 2
    assert passages[0].source.document_id == "docker.md"
    assert passages[0].score >= passages[1].score
