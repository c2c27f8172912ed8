"""A request refused for its depth is recorded as far as the engine read it.

The engine refuses a request nested past ``max_json_depth`` before any other work
(``DESIGN/limits/json-depth``), having read its text only up to the first bracket
past the limit. Its redacted recording keeps that part, closed, and nothing after
(``engine/replay/depth_cut.py``): a megabyte of brackets redacts to a few hundred
bytes, the redacted request is refused by the same rule, the recording replays, and
redaction stays idempotent — in every form a request comes in, and for a
continuation's ``ResultJson`` (docs/CONFORMANCE.md D421).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, continuation, ok, text
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_kit import recording_pipeline

from aptix_pipeline import RecordingOptions, TurnRecording, replay
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.engine.deep_json import dump_json, load_json
from aptix_pipeline.engine.replay.depth_cut import read_part_of_text, read_part_of_value
from aptix_pipeline.engine.replay.redaction import redact_request
from aptix_pipeline.validators import text_depth_exceeds

SECRET = "SECRET-PAST-THE-CUT-7f7f"
LIMIT = 64  # PipelineOptions().max_json_depth
DEEP = 100_000


def deep_text(depth: int = DEEP) -> str:
    """A request whose ``Artifacts`` nest ``depth`` deep, a secret before and after them."""
    inner = "[" * depth + f'"{SECRET}"' + "]" * depth
    return (
        f'{{"SessionId":"s-1","TurnId":"t-1","Instruction":"{SECRET}","Artifacts":{inner},'
        f'"After":"{SECRET}"}}'
    )


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def depth_refused(report: Any) -> bool:
    return [error.rule_id for error in report.result.errors] == ["DESIGN/limits/json-depth"]


REQUESTS: dict[str, Any] = {
    "text": deep_text(),
    "bytes, UTF-8": deep_text().encode(),
    "bytes, not UTF-8": deep_text().encode() + b"\xff",
    "mapping": {"Instruction": SECRET, "Artifacts": [nested(100, SECRET)] * 50, "After": SECRET},
    "small bytes, read as JSON": json.dumps(
        {"Instruction": SECRET, "A": [nested(99, 1)] * 99}
    ).encode(),
}


@pytest.mark.decision("D421")
@pytest.mark.parametrize("form", list(REQUESTS))
async def test_a_request_refused_for_its_depth_records_what_was_read_and_replays(
    form: str,
) -> None:
    pipeline = recording_pipeline(MemoryStore(), [], recording=RecordingOptions(redact=True))

    report = await pipeline.run(REQUESTS[form], CALLER)

    assert depth_refused(report)
    recording = report.recording
    assert recording is not None
    written = recording.to_json()
    assert SECRET not in written
    assert len(json.dumps(recording.request)) < 1_000  # the part read, not the body
    assert recording.redact() == recording
    loaded = TurnRecording.from_dict(json.loads(written))
    outcome = await replay(loaded)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    assert depth_refused(outcome.report)


@pytest.mark.decision("D421")
def test_the_cut_keeps_the_fields_read_before_the_limit_and_nothing_after() -> None:
    redacted = redact_request({"text": deep_text()}, max_depth=3)

    assert json.loads(redacted["text"]) == {
        "SessionId": "s-1",
        "TurnId": "t-1",
        "Instruction": "[redacted]",
        "Artifacts": [[[]]],
    }


@pytest.mark.decision("D421")
def test_a_value_is_cut_in_document_order_at_its_first_container_past_the_limit() -> None:
    value = {"a": [1, [[2]]], "b": nested(50, 3), "c": 4}

    assert read_part_of_value(value, 2) == {"a": [1, []]}
    assert read_part_of_value(value, 51) is None  # nested 51 deep: not past 51


@pytest.mark.decision("D421")
def test_without_a_limit_a_deep_request_is_redacted_whole() -> None:
    redacted = redact_request({"text": deep_text(1_000)})

    assert load_json(redacted["text"])["After"] == "[redacted]"


@pytest.mark.decision("D421")
async def test_a_continuation_whose_result_json_is_too_deep_records_what_was_read() -> None:
    pipeline = recording_pipeline(
        MemoryStore(),
        [calls(call("r1", "read_file", {"path": "a.txt"})), text("done")],
        recording=RecordingOptions(redact=True),
    )
    first = ok((await pipeline.run({"Instruction": "read it"}, CALLER)).result)
    deep_result = "[" * DEEP + f'"{SECRET}"' + "]" * DEEP
    request = continuation(first, {"ToolCallId": "r1", "ExecutionMs": 1, "ResultJson": deep_result})

    report = await pipeline.run(json.dumps(request), CALLER)

    assert depth_refused(report)
    assert report.recording is not None
    [result] = json.loads(report.recording.request["text"])["ToolResults"]
    assert json.loads(result["ResultJson"]) == nested(LIMIT, [])  # 65 levels, the last empty
    assert SECRET not in report.recording.to_json()
    outcome = await replay(report.recording)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


@pytest.mark.decision("D421")
def test_a_cut_that_is_not_json_keeps_its_brackets_so_it_stays_too_deep() -> None:
    broken = '{"Instruction" "' + SECRET + '", "A": ' + "[" * 200 + "]" * 200 + "}"

    redacted = redact_request({"text": broken}, max_depth=LIMIT)["text"]

    assert SECRET not in redacted
    assert text_depth_exceeds(redacted, LIMIT)
    assert redact_request({"text": redacted}, max_depth=LIMIT)["text"] == redacted


_PIECES = st.sampled_from(['"k":', '"v"', "1", ",", "[", "]", "{", "}", " ", '"a\\"b"', "null"])


@pytest.mark.decision("D421")
@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=40), st.integers(min_value=1, max_value=4))
def test_any_text_past_the_limit_redacts_to_text_still_past_it_and_to_itself(
    pieces: list[str], limit: int
) -> None:
    source = "".join(pieces) + "[" * (limit + 1) + "]" * (limit + 1)
    for form, request in (
        ("text", {"text": source}),
        ("base64", {"base64": base64.b64encode(source.encode() + b"\xfe").decode()}),
    ):
        redacted = redact_request(request, max_depth=limit)
        read = redacted[form] if form == "text" else base64.b64decode(redacted[form])

        assert text_depth_exceeds(read, limit)
        assert redact_request(redacted, max_depth=limit) == redacted
        part = read_part_of_text(source, limit)
        assert part is not None
        assert text_depth_exceeds(part, limit)


@pytest.mark.decision("D421")
def test_a_value_past_the_limit_redacts_to_a_value_still_past_it() -> None:
    request = {"json": {"Instruction": SECRET, "A": [[{"x": nested(10, SECRET)}]], "B": 1}}

    redacted = redact_request(request, max_depth=4)

    assert SECRET not in dump_json(redacted)
    assert redacted == {"json": {"Instruction": "[redacted]", "A": [[{"k1": []}]]}}
    assert redact_request(redacted, max_depth=4) == redacted
