"""The LLM port's streamed form (``contracts/llm_stream.py``) and ``ScriptedLLM``'s stream.

A streamed reply put together is the reply that came whole: ``split_reply`` and
``ReplyAssembler`` are inverses, for any reply and chunk size. Chunks that
contradict each other are refused with a message naming the call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aptix_pipeline import (
    LLMReply,
    LLMRequest,
    MalformedStreamError,
    ReplyAssembler,
    ReplyChunk,
    ReplyFinished,
    ReplyTextDelta,
    ReplyToolCallDelta,
    ScriptedLLM,
    StreamingLLM,
    ToolCall,
    Usage,
    split_reply,
)
from aptix_pipeline.adapters.models.scripted import ScriptError

texts = st.text(min_size=0, max_size=80)
names = st.text(min_size=1, max_size=12)
tool_calls = st.builds(
    lambda call_id, name, arguments: ToolCall(
        tool_call_id=call_id, name=name, arguments_json=arguments
    ),
    names,
    names,
    texts,
)
counts = st.integers(0, 10**6)
usages = st.none() | st.builds(
    lambda i, o, t: Usage(input_tokens=i, output_tokens=o, total_tokens=t), counts, counts, counts
)
replies = st.builds(
    lambda text, calls, usage, model, response_id, finish: LLMReply(
        text=text,
        tool_calls=calls,
        usage=usage,
        model=model,
        response_id=response_id,
        finish_reason=finish,
    ),
    st.none() | texts,
    st.lists(tool_calls, max_size=4),
    usages,
    st.none() | st.text(max_size=10),
    st.none() | st.text(max_size=10),
    st.none() | st.sampled_from(["stop", "tool_calls", "length"]),
)


def assemble(chunks: list[ReplyChunk]) -> LLMReply:
    assembler = ReplyAssembler()
    for chunk in chunks:
        assembler.add(chunk)
    return assembler.reply()


@given(replies, st.integers(1, 20))
def test_a_reply_split_into_chunks_assembles_to_itself(reply: LLMReply, size: int) -> None:
    chunks = split_reply(reply, size)

    assert assemble(chunks) == reply
    assert isinstance(chunks[-1], ReplyFinished)
    pieces = [c.text for c in chunks if isinstance(c, ReplyTextDelta)]
    assert all(len(piece) <= size for piece in pieces)


@given(replies, st.integers(1, 20))
def test_the_assembler_counts_what_the_reply_size_limit_counts(reply: LLMReply, size: int) -> None:
    from aptix_pipeline.steps.llm_client import reply_size

    assembler = ReplyAssembler()
    added = sum(assembler.add(chunk) for chunk in split_reply(reply, size))

    assert added == assembler.size == reply_size(reply)


def test_interleaved_tool_call_pieces_assemble_by_index() -> None:
    chunks: list[ReplyChunk] = [
        ReplyTextDelta("Reading "),
        ReplyToolCallDelta(1, "c2", "run_tests", '{"pa'),
        ReplyToolCallDelta(0, "c1", "read_file", '{"path":'),
        ReplyTextDelta("both."),
        ReplyToolCallDelta(1, arguments='ttern": "x"}'),
        ReplyToolCallDelta(0, "c1", arguments=' "a.py"}'),  # a repeated id is allowed
        ReplyFinished(
            Usage(input_tokens=1, output_tokens=2, total_tokens=3), "m", "r1", "tool_calls"
        ),
    ]

    reply = assemble(chunks)

    assert reply.text == "Reading both."
    assert [(c.tool_call_id, c.name) for c in reply.tool_calls] == [
        ("c1", "read_file"),
        ("c2", "run_tests"),
    ]
    assert json.loads(reply.tool_calls[0].arguments_json) == {"path": "a.py"}
    assert json.loads(reply.tool_calls[1].arguments_json) == {"pattern": "x"}
    assert reply.usage is not None
    assert reply.usage.total_tokens == 3
    assert (reply.model, reply.response_id, reply.finish_reason) == ("m", "r1", "tool_calls")


def test_a_stream_without_text_or_an_end_has_no_text_and_no_usage() -> None:
    reply = assemble([ReplyToolCallDelta(0, "c1", "read_file", "{}")])

    assert reply.text is None
    assert reply.usage is None
    assert reply.finish_reason is None


def test_an_empty_text_delta_makes_empty_text_not_none() -> None:
    assert assemble([ReplyTextDelta("")]).text == ""


BROKEN: dict[str, tuple[list[Any], str]] = {
    "second-id": (
        [ReplyToolCallDelta(0, "c1", "read_file"), ReplyToolCallDelta(0, "c9")],
        "tool call #0 was given a second id: 'c1' then 'c9'",
    ),
    "second-name": (
        [ReplyToolCallDelta(0, "c1", "read_file"), ReplyToolCallDelta(0, name="run_tests")],
        "tool call #0 was given a second name",
    ),
    "chunk-after-end": (
        [ReplyTextDelta("a"), ReplyFinished(), ReplyTextDelta("b")],
        "the stream went on after its end: ReplyTextDelta",
    ),
    "negative-index": ([ReplyToolCallDelta(-1, "c1", "x")], "a tool call delta has index -1"),
    "boolean-index": ([ReplyToolCallDelta(True, "c1", "x")], "a tool call delta has index True"),
    "not-a-chunk": ([{"text": "a"}], "a stream chunk is a dict, not a ReplyChunk"),
    "text-not-text": ([ReplyTextDelta(5)], "a text delta holds int, not text"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize(("chunks", "message"), BROKEN.values(), ids=BROKEN.keys())
def test_chunks_that_contradict_each_other_are_refused(chunks: list[Any], message: str) -> None:
    with pytest.raises(MalformedStreamError, match=message.replace("(", r"\(")):
        assemble(chunks)


@pytest.mark.parametrize(
    ("chunk", "missing"),
    [(ReplyToolCallDelta(0, name="read_file"), "an id"), (ReplyToolCallDelta(0, "c1"), "a name")],
    ids=["no-id", "no-name"],
)
def test_a_tool_call_left_without_an_id_or_a_name_is_refused(
    chunk: ReplyToolCallDelta, missing: str
) -> None:
    with pytest.raises(MalformedStreamError, match=f"tool call #0 of the stream has no {missing}"):
        assemble([chunk])


def test_a_chunk_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_size must be 1 or more, not 0"):
        split_reply(LLMReply(text="a"), 0)


# --- ScriptedLLM streams ------------------------------------------------------------------

REQUEST = LLMRequest(mode="general", messages=[])


async def test_scripted_llm_streams_its_replies_in_chunks_of_the_chosen_size() -> None:
    llm = ScriptedLLM.from_json(json.dumps({"replies": [{"text": "abcdefghij"}], "chunk_size": 4}))

    chunks = [chunk async for chunk in llm.stream(REQUEST)]

    assert isinstance(llm, StreamingLLM)
    assert [c.text for c in chunks if isinstance(c, ReplyTextDelta)] == ["abcd", "efgh", "ij"]
    assert assemble(chunks).text == "abcdefghij"
    assert llm.requests == [REQUEST]
    assert llm.remaining == 0


async def test_scripted_llm_streams_and_completes_from_one_script() -> None:
    llm = ScriptedLLM([{"text": "one"}, {"text": "two"}])

    first = [chunk async for chunk in llm.stream(REQUEST)]
    second = await llm.complete(REQUEST)

    assert assemble(first).text == "one"
    assert second.text == "two"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ({"replies": [{"text": "a"}], "chunk_size": 0}, "chunk_size must be a whole number"),
        ({"replies": [{"text": "a"}], "chunk_size": "4"}, "chunk_size must be a whole number"),
        ({"replies": [{"text": "a"}], "chunk_size": True}, "chunk_size must be a whole number"),
        (
            {"replies": [{"text": "a"}], "chunk_delay_seconds": -1},
            "chunk_delay_seconds must be a number, 0 or more",
        ),
        (
            {"replies": [{"text": "a"}], "chunk_delay_seconds": "fast"},
            "chunk_delay_seconds must be a number, 0 or more",
        ),
        ({"replies": [{"text": "a"}], "chunks": 4}, 'may have "chunk_size"'),
        ({"chunk_size": 4}, 'has the key "replies"'),
    ],
    ids=["zero", "text", "bool", "negative-delay", "text-delay", "unknown-key", "no-replies"],
)
def test_a_bad_streaming_option_is_refused_naming_it(script: Any, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        ScriptedLLM.from_json(json.dumps(script))


# --- the text path (add_text) -------------------------------------------------------------


@pytest.mark.decision("D458")
def test_add_text_counts_like_add_and_assembles_the_same_reply() -> None:
    by_text, by_chunk = ReplyAssembler(), ReplyAssembler()
    sizes = [by_text.add_text(piece) for piece in ("Hello", ", ", "world")]
    for piece in ("Hello", ", ", "world"):
        by_chunk.add(ReplyTextDelta(piece))

    assert sizes == [5, 7, 12]
    assert by_text.size == by_chunk.size == 12
    assert by_text.reply() == by_chunk.reply()


@pytest.mark.decision("D458")
@pytest.mark.parametrize(
    ("before", "text", "message"),
    [
        ([ReplyFinished()], "late", "the stream went on after its end: ReplyTextDelta"),
        ([], 42, "a text delta holds int, not text"),
    ],
)
def test_add_text_refuses_what_add_refuses(
    before: list[ReplyChunk], text: object, message: str
) -> None:
    assembler = ReplyAssembler()
    for chunk in before:
        assembler.add(chunk)

    with pytest.raises(MalformedStreamError, match=message):
        assembler.add_text(text)
