"""Retrieval in a turn (AGN-034 §4.4): the passages a retriever finds reach the model as
labelled context, the retrieval is traced, spanned and recorded, and without a
retriever the RAG scope reaches the model as text, as it always did.

The retriever is the SQLite FTS5 one on a real folder and a real index file
(``tests/kits/knowledge_kit.py``); the model is a ``ScriptedLLM``, whose ``requests``
are what the model was sent.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, READ_A, calls, continuation, follow_on, ok, text
from knowledge_kit import indexed_corpus
from span_kit import Recorded, attributes_of, values_of

from aptix_pipeline import PipelineOptions, Ports
from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.retrieval.fts import FtsRetriever, build_index
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ErrorCode,
    Passage,
    PassageSource,
    RetrievalQuery,
    Retriever,
)
from aptix_pipeline.engine import (
    Pipeline,
    RetrievalFinished,
    RetrievalRecord,
    RetrievalStarted,
    StateTrace,
    StreamProgress,
    Telemetry,
    TurnEvent,
)
from aptix_pipeline.engine.replay import (
    LivePorts,
    Recorder,
    RecordingOptions,
    TurnRecording,
    replay,
)

QUESTION = "How do I deploy the web service?"
PLATFORM = [{"Key": "team", "Operator": "==", "Values": ["platform"]}]


@pytest.fixture
def handbook(tmp_path: Path) -> Iterator[FtsRetriever]:
    retriever = indexed_corpus(tmp_path)
    yield retriever
    retriever.close()


class CountingRetriever:
    """A host's retriever around another: it counts the queries it is asked."""

    def __init__(self, inner: Retriever) -> None:
        self.inner, self.collection = inner, inner.collection
        self.queries: list[RetrievalQuery] = []

    async def retrieve(self, query: RetrievalQuery) -> Sequence[Passage]:
        self.queries.append(query)
        return await self.inner.retrieve(query)


class BrokenRetriever:
    """A retriever whose index is down."""

    collection = "broken"

    async def retrieve(self, query: RetrievalQuery) -> Sequence[Passage]:
        raise ConnectionError("the search cluster is unreachable")


class WrongRetriever:
    """A retriever that answers with something that is not a list of passages."""

    collection = "wrong"

    async def retrieve(self, query: RetrievalQuery) -> Any:
        return [{"Text": "no source"}]


class ManyRetriever:
    """A retriever that answers with more passages than it was asked for."""

    collection = "many"

    async def retrieve(self, query: RetrievalQuery) -> Sequence[Passage]:
        return [
            Passage(text=f"passage {n}", score=1.0, source=PassageSource(document_id=f"d{n}"))
            for n in range(query.limit + 3)
        ]


def _pipeline(
    replies: Sequence[dict[str, Any]],
    retriever: Retriever | None,
    *,
    limit: int = 5,
    telemetry: Telemetry | None = None,
    listeners: Sequence[Any] = (),
    recording: RecordingOptions | None = None,
) -> tuple[Pipeline, ScriptedLLM]:
    llm = ScriptedLLM(list(replies))
    catalog = ConfigCatalog.default()
    ports = Ports(
        store=MemoryStore(),
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=SteppingClock(),
        ids=SequentialIds(),
        tools=dict(catalog.tools),
        retriever=retriever,
    )
    options = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0, retrieval_limit=limit)
    interceptors = (Recorder(recording),) if recording is not None else ()
    pipeline = Pipeline(
        ports, options, telemetry=telemetry, listeners=listeners, interceptors=interceptors
    )
    return pipeline, llm


def _sent(llm: ScriptedLLM, call: int = 0) -> list[ChatMessage]:
    """The conversation of the model's ``call``-th request, system message left out."""
    return [m for m in llm.requests[call].messages if m.role is not ChatRole.SYSTEM]


def _context(messages: Sequence[ChatMessage]) -> list[str]:
    return [
        m.content or ""
        for m in messages
        if m.role is ChatRole.USER and (m.content or "").startswith("[retrieved context]")
    ]


@pytest.mark.decision("D333")
async def test_retrieved_passages_reach_the_model_labelled_before_the_users_message(
    handbook: FtsRetriever,
) -> None:
    pipeline, llm = _pipeline([text("Run make deploy.")], handbook)

    ok(await pipeline.execute({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER))
    sent = _sent(llm)

    assert [m.role for m in sent] == [ChatRole.USER, ChatRole.USER]
    assert sent[0].content == (
        "[retrieved context]\n\n"
        "[1] Web service (web.md)\n"
        "# Deploying the web service\n\nDeploy the web service with make deploy."
    )
    assert (sent[1].content or "").startswith(QUESTION)


@pytest.mark.decision("D342")
async def test_the_scope_text_stays_in_the_users_message_beside_the_retrieved_context(
    handbook: FtsRetriever,
) -> None:
    pipeline, llm = _pipeline([text("ok")], handbook)

    ok(await pipeline.execute({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER))

    assert _sent(llm)[-1].content == (
        f'{QUESTION}\n\n[rag scope] [{{"Key": "team", "Operator": "==", "Values": ["platform"]}}]'
    )


@pytest.mark.decision("D342")
async def test_without_a_retriever_the_scope_reaches_the_model_as_text() -> None:
    pipeline, llm = _pipeline([text("ok")], None)

    report = await pipeline.run({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER)
    ok(report.result)

    assert [m.content for m in _sent(llm)] == [
        f'{QUESTION}\n\n[rag scope] [{{"Key": "team", "Operator": "==", "Values": ["platform"]}}]'
    ]
    assert report.trace is not None
    assert report.trace.retrievals == ()


@pytest.mark.decision("D333")
async def test_a_follow_on_retrieves_for_its_own_instruction_and_keeps_the_earlier_context(
    handbook: FtsRetriever,
) -> None:
    pipeline, llm = _pipeline([text("Run make deploy."), text("Docker first.")], handbook)
    first = ok(await pipeline.execute({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER))

    ok(await pipeline.execute(follow_on(first, "And the docker image?"), CALLER))
    contexts = _context(_sent(llm, 1))

    assert len(contexts) == 2  # the first turn's, stored with it, and this turn's
    assert "(web.md)" in contexts[0]
    assert "[1] Docker images (docker.md)" in contexts[1]


@pytest.mark.decision("D333")
async def test_a_scope_without_an_instruction_and_a_continuation_retrieve_nothing(
    handbook: FtsRetriever,
) -> None:
    counting = CountingRetriever(handbook)
    pipeline, llm = _pipeline([text("nothing asked"), calls(READ_A), text("done")], counting)
    artifact = {"RelativePath": "a.py", "FileName": "a.py", "Contents": "x = 1", "Origin": "ide"}

    ok(await pipeline.execute({"RagScope": PLATFORM, "InputArtifacts": [artifact]}, CALLER))
    pending = ok(await pipeline.execute({"Instruction": QUESTION}, CALLER))
    ok(await pipeline.execute(continuation(pending), CALLER))

    assert [query.instruction for query in counting.queries] == [QUESTION]
    assert _context(_sent(llm, 0)) == []
    # The continuation carries on with the context its turn stored.
    assert len(_context(_sent(llm, 2))) == 1


@pytest.mark.decision("D341")
async def test_no_passage_found_adds_no_context(handbook: FtsRetriever) -> None:
    pipeline, llm = _pipeline([text("ok")], handbook)

    report = await pipeline.run({"Instruction": "quantum chromodynamics"}, CALLER)
    ok(report.result)

    assert _context(_sent(llm)) == []
    assert report.trace is not None
    assert report.trace.retrievals == (RetrievalRecord("handbook", 5, 0, hits=0),)


@pytest.mark.decision("D341")
async def test_the_turn_keeps_at_most_its_limit_of_passages() -> None:
    pipeline, llm = _pipeline([text("ok")], ManyRetriever(), limit=2)

    report = await pipeline.run({"Instruction": "anything"}, CALLER)
    ok(report.result)

    assert _context(_sent(llm)) == ["[retrieved context]\n\n[1] d0\npassage 0\n\n[2] d1\npassage 1"]
    assert report.trace is not None
    assert report.trace.retrievals[0].hits == 2


@pytest.mark.decision("D334")
@pytest.mark.parametrize(
    ("retriever", "detail"),
    [(BrokenRetriever(), "ConnectionError"), (WrongRetriever(), "ValidationError")],
    ids=["raises", "answers-wrong"],
)
async def test_a_failing_retriever_fails_the_turn_naming_the_port(
    retriever: Retriever, detail: str
) -> None:
    pipeline, llm = _pipeline([text("never")], retriever)

    report = await pipeline.run({"Instruction": QUESTION}, CALLER)

    assert not report.successful
    (error,) = report.result.errors
    assert error.code is ErrorCode.PORT_FAILED
    assert error.field == "Retriever"
    assert error.message.startswith(f"Retriever.retrieve failed: {detail}")
    assert llm.requests == []
    assert report.session_id is None  # nothing stored
    assert report.trace is not None
    assert report.trace.retrievals[0].error == detail


@pytest.mark.decision("D338")
async def test_the_trace_and_events_hold_counts_and_no_content_without_capture(
    handbook: FtsRetriever,
) -> None:
    heard: list[TurnEvent] = []
    pipeline, _ = _pipeline([text("ok")], handbook, listeners=[heard.append])

    report = await pipeline.run({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER)
    started = [e for e in heard if isinstance(e, RetrievalStarted)]
    finished = [e for e in heard if isinstance(e, RetrievalFinished)]

    assert report.trace is not None
    assert report.trace.retrievals == (RetrievalRecord("handbook", 5, 1, hits=1),)
    assert "retrieval   collection=handbook limit=5 conditions=1 hits=1" in (
        report.trace.describe()
    )
    assert [(e.collection, e.limit, e.conditions, e.query) for e in started] == [
        ("handbook", 5, 1, None)
    ]
    assert [(e.retrieval.hits, e.passages) for e in finished] == [(1, None)]


@pytest.mark.decision("D338")
async def test_with_capture_the_trace_names_the_documents_found(handbook: FtsRetriever) -> None:
    pipeline, _ = _pipeline([text("ok")], handbook, telemetry=Telemetry(capture_content=True))

    report = await pipeline.run({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER)

    assert report.trace is not None
    assert report.trace.retrievals[0].document_ids == ("web.md",)
    assert StateTrace.from_dict(report.trace.to_dict()) == report.trace


@pytest.mark.decision("D338")
async def test_a_retrieval_span_has_its_collection_hits_and_limit_and_no_text(
    handbook: FtsRetriever,
) -> None:
    recorded = Recorded()
    pipeline, _ = _pipeline([text("ok")], handbook, telemetry=recorded.telemetry())

    ok(await pipeline.execute({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER))
    (span,) = [s for s in recorded.spans if s.name.startswith("retrieval")]
    said = " ".join(value for _, value in values_of(span))

    assert span.name == "retrieval handbook"
    assert attributes_of(span) == {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": "handbook",
        "gen_ai.retrieval.top_k": 5,
        "aptix.retrieval.conditions": 1,
        "aptix.retrieval.hits": 1,
    }
    assert span.end_time is not None
    assert span.start_time is not None
    assert span.end_time >= span.start_time
    assert span.parent is not None  # under the prompt initializer's step span
    for secret in ("deploy", "platform", "web.md"):
        assert secret not in said.casefold()


@pytest.mark.decision("D338")
async def test_with_capture_the_span_holds_the_query_and_the_documents(
    handbook: FtsRetriever,
) -> None:
    recorded = Recorded()
    telemetry = recorded.telemetry(capture_content=True)
    pipeline, _ = _pipeline([text("ok")], handbook, telemetry=telemetry)

    ok(await pipeline.execute({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER))
    (span,) = [s for s in recorded.spans if s.name.startswith("retrieval")]
    attributes = attributes_of(span)

    assert attributes["gen_ai.retrieval.query.text"] == QUESTION
    assert '"id": "web.md"' in attributes["gen_ai.retrieval.documents"]
    assert "make deploy" in attributes["gen_ai.retrieval.documents"]


@pytest.mark.decision("D339")
@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redacted"])
async def test_a_recorded_turn_with_a_retrieval_replays_without_the_retriever(
    handbook: FtsRetriever, tmp_path: Path, redact: bool
) -> None:
    options = RecordingOptions(directory=tmp_path / "recordings", redact=redact)
    pipeline, _ = _pipeline([text("Run make deploy.")], handbook, recording=options)
    ok(await pipeline.execute({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER))
    (path,) = (tmp_path / "recordings").iterdir()

    recording = TurnRecording.load(path)
    outcome = await replay(path)

    assert [c.port for c in recording.calls].count("Retriever") == 1
    assert outcome.ok, outcome.describe()
    written = path.read_text(encoding="utf-8")
    for content in ("platform", "make deploy", "web.md", "Web service"):
        assert (content in written) is not redact
    assert outcome.report.trace is not None
    assert outcome.report.trace.retrievals[0].collection == "handbook"


@pytest.mark.decision("D338")
async def test_a_streamed_turn_shows_its_retrieval_as_progress_without_content(
    handbook: FtsRetriever,
) -> None:
    pipeline, _ = _pipeline([text("Run make deploy.")], handbook)

    items = [
        item.to_json()
        async for item in pipeline.stream({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER)
        if isinstance(item, StreamProgress) and "retrieval" in item.to_json()["kind"]
    ]

    assert items == [
        {"kind": "retrieval_started", "collection": "handbook", "limit": 5, "conditions": 1},
        {
            "kind": "retrieval",
            "collection": "handbook",
            "limit": 5,
            "conditions": 1,
            "hits": 1,
            "error": None,
        },
    ]


# --- replay with the host's own retriever (LivePorts.retriever) ----------------------------------


async def _recorded_retrieval(
    handbook: FtsRetriever, folder: Path, *, redact: bool = False
) -> Path:
    options = RecordingOptions(directory=folder, redact=redact)
    pipeline, _ = _pipeline([text("Run make deploy.")], handbook, recording=options)
    ok(await pipeline.execute({"Instruction": QUESTION, "RagScope": PLATFORM}, CALLER))
    (path,) = folder.iterdir()
    return path


@pytest.mark.decision("D339")
async def test_a_recorded_retrieval_replays_with_the_hosts_retriever_live(
    handbook: FtsRetriever, tmp_path: Path
) -> None:
    path = await _recorded_retrieval(handbook, tmp_path / "recordings")

    outcome = await replay(path, live={"retriever": handbook})

    assert outcome.ok, outcome.describe()


@pytest.mark.decision("D339")
async def test_a_retriever_that_answers_otherwise_today_is_an_answer_divergence(
    handbook: FtsRetriever, tmp_path: Path
) -> None:
    path = await _recorded_retrieval(handbook, tmp_path / "recordings")
    today = indexed_corpus(tmp_path / "today", collection="handbook")
    (tmp_path / "today" / "docs" / "web.md").write_text(
        "---\nteam: platform\n---\n# Web service\n\nDeploy the web service with a new tool.\n",
        encoding="utf-8",
    )
    build_index(tmp_path / "today" / "docs", tmp_path / "today" / "index.db")

    outcome = await replay(path, live=LivePorts(retriever=today))

    assert not outcome.ok
    assert outcome.divergence is not None
    assert outcome.divergence.kind == "answer"
    assert outcome.divergence.port_call == "Retriever.retrieve"
    today.close()


async def test_a_live_retriever_is_checked_and_refused_for_a_redacted_recording(
    handbook: FtsRetriever, tmp_path: Path
) -> None:
    path = await _recorded_retrieval(handbook, tmp_path / "recordings", redact=True)

    with pytest.raises(TypeError, match="live retriever: a object is not a Retriever"):
        LivePorts(retriever=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="live retriever: the recording is redacted"):
        await replay(path, live={"retriever": handbook})
