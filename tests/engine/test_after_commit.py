"""After a turn ends, nothing turns it into an error: recordings at any depth, failures logged.

1. Every walk under ``engine/`` over user JSON takes data 100,000 levels deep:
   reading and writing JSON (``engine/deep_json.py``), redaction, the recording
   tap's encoder, a replay's comparison, a recording's file.
2. ``Pipeline.execute`` with recording and redaction on answers as it does
   without: a request nested 400 and 100,000 deep (``Instruction``, a
   continuation's ``ResultJson``, as text and as a mapping), a server tool whose
   result is nested 100,000 deep, a model whose arguments are; each recording
   replays. Over HTTP, such a continuation gets its answer, not a 500.
3. A recording that cannot be made or delivered leaves the answer as it was; the
   failure is logged without the exception's message and traced as an
   ``aptix.recording`` span (docs/CONFORMANCE.md D160, D161).
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, continuation, ok, text
from http_kit import ANA, ENV, READ_THEN_ANSWER, app_client, write_config
from opentelemetry.trace import StatusCode
from replay_kit import recording_pipeline
from span_kit import Recorded, attributes_of

from aptix_pipeline import PipelineOptions, RecordingOptions, TurnRecording, replay
from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import EXECUTE_PATH, create_app
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.engine import Telemetry
from aptix_pipeline.engine.deep_json import dump_json, encode_value, load_json, parse_json, plain
from aptix_pipeline.engine.events import ToolExecutionStarted, TurnStarted
from aptix_pipeline.engine.replay.redaction import (
    REDACTED,
    Redactor,
    redact_json_text,
    redact_request,
    redact_value,
)
from aptix_pipeline.engine.replay.replayer import first_difference
from aptix_pipeline.engine.telemetry import SpanBuilder

DEEP = 100_000
DEEP_ALLOWED = PipelineOptions(max_json_depth=DEEP + 10)  # past the wire limit (D140) on purpose


def nested_text(depth: int, leaf: str = "1") -> str:
    """JSON text: ``leaf`` inside ``depth`` arrays."""
    return "[" * depth + leaf + "]" * depth


def nested(depth: int, leaf: Any = 1) -> Any:
    """Python data: ``leaf`` inside ``depth`` lists (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def depth_of(value: Any) -> int:
    """How many lists deep the first item goes."""
    depth = 0
    while isinstance(value, list) and value:
        value, depth = value[0], depth + 1
    return depth


# === 1. every walk takes any depth ==============================================================


@pytest.mark.decision("D161")
def test_deep_json_reads_and_writes_any_depth_back_to_the_same_text() -> None:
    source = '{"a":' + nested_text(DEEP, '{"b":[true,null,-1500.0,"xé"]}') + "}"

    assert dump_json(parse_json(source)) == source
    assert depth_of(load_json(source)["a"]) == DEEP


@pytest.mark.decision("D161")
@pytest.mark.parametrize(
    "source",
    ['{"a": 1, "a": 2}', " [1, 2.5, -0, 1e3, true, false, null] ", '"\\ud800"', '{"k": {}}', "[]"],
)
def test_deep_json_reads_what_json_reads(source: str) -> None:
    assert load_json(source) == json.loads(source)


@pytest.mark.decision("D161")
@pytest.mark.parametrize(
    "source",
    ["", "[", "[1,]", '{"a":1,}', "01", '"\x01"', "1 2", '{"a" 1}', "NaN", "[Infinity]", "{1:2}"],
)
def test_deep_json_refuses_what_is_not_rfc_8259_json(source: str) -> None:
    with pytest.raises(ValueError, match=r"expected|extra data|Invalid control|Unterminated"):
        parse_json(source)


@pytest.mark.decision("D161")
def test_json_text_is_redacted_at_any_depth_keeping_its_shape() -> None:
    redacted = redact_json_text('{"card": ' + nested_text(DEEP, '"4111 1111"') + "}")

    value = load_json(redacted)
    assert list(value) == ["k1"]
    assert depth_of(value["k1"]) == DEEP
    assert "4111" not in redacted
    assert redact_json_text(redacted) == redacted


@pytest.mark.decision("D161")
def test_recorded_values_are_redacted_at_any_depth() -> None:
    data = {"calls": nested(DEEP, {"Content": "secret", "ResultJson": nested_text(DEEP, "7")})}

    redacted = redact_value(data)

    assert depth_of(redacted["calls"]) == DEEP
    bottom = redacted["calls"]
    while isinstance(bottom, list):
        bottom = bottom[0]
    assert bottom["Content"] == REDACTED
    assert bottom["ResultJson"] == nested_text(DEEP, "0")


@pytest.mark.decision("D161")
@pytest.mark.parametrize("form", ["json", "text", "base64"])
def test_a_request_of_any_depth_is_redacted_in_each_form(form: str) -> None:
    deep_request = '{"Instruction": "secret", "Extra": ' + nested_text(DEEP, '"secret"') + "}"
    request: dict[str, Any] = {
        "json": {"json": load_json(deep_request)},
        "text": {"text": deep_request},
        "base64": {"base64": base64.b64encode(deep_request.encode()).decode()},
    }[form]

    redacted = redact_request(request)

    dumped = dump_json(redacted)
    assert "secret" not in (
        base64.b64decode(redacted["base64"]).decode() if form == "base64" else dumped
    )
    assert dump_json(redact_request(redacted)) == dumped


@pytest.mark.decision("D161")
def test_the_recording_tap_encodes_data_deeper_than_pydantic_core_goes() -> None:
    value = {"a": nested(DEEP, {"b": (1, "x")})}

    encoded = encode_value(value)

    assert depth_of(encoded["a"]) == DEEP
    assert dump_json(encoded) == '{"a":' + nested_text(DEEP, '{"b":[1,"x"]}') + "}"


@pytest.mark.decision("D161")
def test_a_replay_compares_values_of_any_depth() -> None:
    left, right = nested(DEEP, 1), nested(DEEP, 2)

    assert first_difference(left, nested(DEEP, 1)) is None
    found = first_difference({"x": left}, {"x": right})
    assert found is not None
    where, expected, actual = found
    assert where == "x" + "[0]" * DEEP
    assert (expected, actual) == (1, 2)


# === 2. Pipeline.execute answers the same with recording and redaction on =====================


async def client_tool_turn(pipeline: Any) -> Any:
    """An Initial turn that leaves the client tool call ``r1`` pending."""
    first = await pipeline.run({"Instruction": "read it"}, CALLER)
    return ok(first.result)


SCRIPT = [calls(call("r1", "read_file", {"path": "a.txt"})), text("done")]


@pytest.mark.parametrize("depth", [400, DEEP])
@pytest.mark.parametrize("form", ["text", "mapping"])
async def test_a_continuation_with_a_deep_result_answers_as_without_recording(
    depth: int, form: str
) -> None:
    answers = []
    for recording in (None, RecordingOptions(redact=True)):
        pipeline = recording_pipeline(
            MemoryStore(), SCRIPT, recording=recording, options=DEEP_ALLOWED
        )
        response = await client_tool_turn(pipeline)
        request = continuation(
            response, {"ToolCallId": "r1", "ExecutionMs": 1, "ResultJson": nested_text(depth)}
        )
        report = await pipeline.run(json.dumps(request) if form == "text" else request, CALLER)
        answers.append(report.result.to_json())
        if recording is not None:
            assert report.recording is not None
            outcome = await replay(TurnRecording.from_dict(json.loads(report.recording.to_json())))
            assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""

    assert answers[0] == answers[1]


@pytest.mark.decision("D160")
async def test_over_http_a_deep_continuation_recorded_redacted_gets_its_answer(
    tmp_path: Path,
) -> None:
    recording = '[recording]\ndirectory = "recordings"\nredact = true\n'
    recording += "[engine]\nmax_json_depth = 1000\n"  # past the wire limit (D140) on purpose
    app = create_app(
        load_service_config(write_config(tmp_path, READ_THEN_ANSWER, more=recording), env=ENV)
    )
    async with app_client(app) as client:
        first = (await client.post(EXECUTE_PATH, json={"Instruction": "x"}, headers=ANA)).json()
        one = first["Result"]
        results = [{"ToolCallId": "c1", "ExecutionMs": 3, "ResultJson": nested_text(400)}]
        body = {"SessionId": one["SessionId"], "TurnId": one["TurnId"], "ToolResults": results}
        second = await client.post(EXECUTE_PATH, json=body, headers=ANA)
        again = await client.post(EXECUTE_PATH, json=body, headers=ANA)

    assert second.status_code == 200, second.text
    assert second.json()["Result"]["PrimaryOutputText"] == "app.py is fine."
    assert again.status_code == 200  # the stored answer, again (D181): no turn, no recording
    assert again.json() == second.json()
    recordings = sorted((tmp_path / "recordings").iterdir())
    assert len(recordings) == 2
    for path in recordings:
        outcome = await replay(path)
        assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


@pytest.mark.parametrize("depth", [400, DEEP])
@pytest.mark.parametrize("form", ["text", "mapping"])
async def test_a_deep_request_answers_as_without_recording(depth: int, form: str) -> None:
    answers = []
    for recording in (None, RecordingOptions(redact=True)):
        pipeline = recording_pipeline(MemoryStore(), [text("hi")], recording=recording)
        request: Any = (
            '{"Instruction": ' + nested_text(depth, '"deep"') + "}"
            if form == "text"
            else {"Instruction": nested(depth, "deep")}
        )
        report = await pipeline.run(request, CALLER)
        answers.append(report.result.to_json())
        if recording is not None:
            assert report.recording is not None
            assert "deep" not in report.recording.to_json()
            outcome = await replay(report.recording)
            assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""

    assert answers[0] == answers[1]


async def deep_tool(arguments: dict[str, Any], invocation: Any) -> str:
    """A server tool whose result is nested ``DEEP`` levels deep."""
    return '{"card": ' + nested_text(DEEP, "4111111111111111") + "}"


@pytest.mark.decision("D161")
async def test_a_server_tool_result_nested_100k_deep_is_recorded_redacted_and_replays(
    tmp_path: Path,
) -> None:
    pipeline = recording_pipeline(
        MemoryStore(),
        [calls(call("s1", "review_checklist")), text("done")],
        recording=RecordingOptions(directory=tmp_path, redact=True),
        tools={"review_checklist": deep_tool},
    )

    report = await pipeline.run({"Instruction": "check"}, CALLER, initial_mode="review")

    assert ok(report.result).primary_output_text == "done"
    assert report.recording is not None
    [tool_call] = [c for c in report.recording.calls if c.port == "ToolExecutor"]
    assert depth_of(load_json(tool_call.answer)["k1"]) == DEEP
    [path] = tmp_path.iterdir()
    assert "4111111111111111" not in path.read_text()
    outcome = await replay(path)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


@pytest.mark.decision("D161")
@pytest.mark.parametrize("depth", [300, DEEP])
async def test_a_model_reply_with_deep_arguments_is_recorded_and_replays(depth: int) -> None:
    arguments = '{"card": ' + nested_text(depth, "4111111111111111") + "}"
    pipeline = recording_pipeline(
        MemoryStore(),
        [calls(call("s1", "review_checklist", arguments)), text("done")],
        recording=RecordingOptions(redact=True),
    )

    report = await pipeline.run({"Instruction": "check"}, CALLER, initial_mode="review")

    assert ok(report.result).primary_output_text == "done"
    assert report.recording is not None
    assert "4111111111111111" not in report.recording.to_json()
    outcome = await replay(report.recording)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


@pytest.mark.decision("D161")
async def test_a_python_request_too_deep_for_json_is_written_compact_and_loads_back(
    tmp_path: Path,
) -> None:
    pipeline = recording_pipeline(
        MemoryStore(), [text("hi")], recording=RecordingOptions(directory=tmp_path)
    )

    report = await pipeline.run({"Instruction": "hi", "Extra": nested(DEEP)}, CALLER)

    assert report.recording is not None
    [path] = tmp_path.iterdir()
    loaded = TurnRecording.load(path)
    assert depth_of(plain(loaded.request["json"])["Extra"]) == DEEP
    outcome = await replay(loaded)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


# === 3. a recording that fails leaves the answer as it was ======================================

SECRET = "SECRET-IN-AN-EXCEPTION-3a3a"


def failing_redaction(self: TurnRecording) -> TurnRecording:
    raise RuntimeError(SECRET)


def failing_sink(recording: TurnRecording) -> None:
    raise ValueError(SECRET)


@pytest.mark.decision("D160")
@pytest.mark.parametrize("where", ["made", "delivered"])
async def test_a_recording_that_fails_is_logged_and_traced_and_changes_no_answer(
    where: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if where == "made":
        monkeypatch.setattr(TurnRecording, "redact", failing_redaction)
    spans = Recorded()
    pipeline = recording_pipeline(
        MemoryStore(),
        SCRIPT,
        recording=RecordingOptions(redact=True, sink=failing_sink),
        telemetry=spans.telemetry(),
    )
    plain_pipeline = recording_pipeline(MemoryStore(), SCRIPT, telemetry=Telemetry.off())
    expected = await client_tool_turn(plain_pipeline)

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        report = await pipeline.run({"Instruction": "read it"}, CALLER)

    assert ok(report.result) == expected
    assert (report.recording is None) is (where == "made")
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert f"the turn's recording could not be {where}" in record.getMessage()
    assert "session-1" in record.getMessage()
    assert SECRET not in caplog.text
    [span] = [s for s in spans.spans if s.name == "aptix.recording"]
    assert span.status.status_code is StatusCode.ERROR
    error_type = "RuntimeError" if where == "made" else "ValueError"
    assert attributes_of(span)["error.type"] == error_type
    assert attributes_of(span)["gen_ai.conversation.id"] == "session-1"
    assert SECRET not in json.dumps(attributes_of(span)) + str(span.status.description)


@pytest.mark.decision("D160")
async def test_a_failing_delivery_is_logged_once_by_the_options_alone_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = RecordingOptions(sink=failing_sink)
    recording = (
        await recording_pipeline(MemoryStore(), [text("hi")]).run({"Instruction": "hi"}, CALLER)
    ).recording
    assert recording is not None

    with caplog.at_level(logging.ERROR, logger="aptix_pipeline"):
        await options.deliver(recording)

    assert "the turn's recording could not be delivered: ValueError" in caplog.text
    assert SECRET not in caplog.text
    with pytest.raises(ValueError, match=SECRET):
        await options.send(recording)


@pytest.mark.decision("D165")
def test_the_redactor_of_a_recording_knows_its_tools_schemas() -> None:
    properties = {"amount": {"minimum": 5}, "kind": {"enum": ["card"]}}
    schema = {"type": "object", "properties": properties}
    redactor = Redactor({"pay": schema})
    value = {"Name": "pay", "ArgumentsJson": '{"amount": 1234, "kind": "card", "note": "x"}'}

    redacted = redactor.value(value)

    assert json.loads(redacted["ArgumentsJson"]) == {"amount": 5, "kind": "card", "k1": REDACTED}


@pytest.mark.decision("D161")
def test_content_captured_tool_arguments_of_any_depth_go_on_the_tool_span() -> None:
    spans = Recorded()
    builder = SpanBuilder(spans.provider.get_tracer("test"), True, "aptix")
    arguments = {"a": nested(DEEP, "x")}

    builder(TurnStarted(1, "aptix", "acme", "ana"))
    builder(ToolExecutionStarted(1, "s1", "lookup", None, arguments))
    builder.end_unfinished()

    [tool] = [s for s in spans.spans if s.name == "execute_tool lookup"]
    assert attributes_of(tool)["gen_ai.tool.call.arguments"] == dump_json(arguments)


class _Unendable:
    """A span whose ``end`` fails, as a broken host tracer's might."""

    def end(self) -> None:
        raise RuntimeError("the tracer is down")


def test_a_span_that_cannot_end_after_the_turn_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    builder = SpanBuilder(Recorded().provider.get_tracer("test"), False, "aptix")
    builder(TurnStarted(1, "aptix", "acme", "ana"))
    opened = builder._turn  # the turn's span, as a broken host tracer would have made it
    assert opened is not None
    opened.span.end()
    opened.span = _Unendable()  # type: ignore[assignment]

    with caplog.at_level(logging.ERROR, logger="aptix_pipeline"):
        builder.end_unfinished()

    assert "a span of the turn could not be ended" in caplog.text


async def test_a_request_holding_an_int_past_str_limits_records_and_the_file_reads_back(
    tmp_path: Path,
) -> None:
    """A Python-value request may hold an int of thousands of digits (Python's ``str``
    refuses past 4,300): the recording is still written, and reads back equal."""
    from aptix_pipeline import TurnRecording

    huge = 7**20_000
    pipeline = recording_pipeline(MemoryStore(), [text("hi")], recording=RecordingOptions())
    report = await pipeline.run({"SessionId": "s", "TurnId": huge, "Instruction": "x"}, CALLER)

    assert not report.successful
    assert report.recording is not None
    path = tmp_path / "turn.json"
    path.write_text(report.recording.to_json(), encoding="utf-8")
    loaded = TurnRecording.load(path)
    assert loaded.request["json"]["TurnId"] == huge
    assert loaded.to_json() == report.recording.to_json()


@pytest.mark.decision("D164")
@pytest.mark.parametrize("form", ["text", "bytes"])
async def test_a_request_text_escaping_a_lone_surrogate_records_redacted_and_replays(
    form: str,
) -> None:
    """A key or value spelled ``"\\ud800"`` in request text is valid JSON; its redacted
    recording writes it back as that escape (it was lost to a UnicodeEncodeError)."""
    from aptix_pipeline import replay

    body = '{"Instruction": "hi \\ud800", "\\ud800": "x", "WorkspaceHints": {"\\udfff": "y"}}'
    request: Any = body if form == "text" else body.encode("utf-8")
    pipeline = recording_pipeline(
        MemoryStore(), [text("hi")], recording=RecordingOptions(redact=True)
    )

    report = await pipeline.run(request, CALLER)

    assert report.recording is not None
    assert report.recording.to_json().encode("utf-8")
    outcome = await replay(report.recording)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
