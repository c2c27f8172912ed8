"""Recording: what a ``TurnRecording`` holds, how it is written, redacted and read back.

1. Content: engine version, the request exactly as given (mapping, JSON text,
   bytes — non-UTF-8 too — and a model), caller, initial mode, options, config
   digest, the ordered port calls with their steps and answers (server tool
   results, clock readings, generated ids), the trace and the result; a port
   that raised is recorded with its exception, and a replay raises one the engine
   treats the same way.
2. Files: one per turn, sortable and unique names, atomic writes, the sink, and
   a failing sink or directory that never fails the turn.
3. Redaction: no user content, ids/modes/tool names/rule ids kept, idempotent,
   base64 stays base64, and a redacted recording still replays.
4. The JSON format: versioned, refusals name what is wrong.
5. Real components: a SQLite file and a PostgreSQL server recorded and replayed
   with no store at all; a service configuration's ``[recording]``.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from engine_kit import (
    CALLER,
    THREE_MODES_CONFIG,
    CommitFailingStore,
    FailingModes,
    FlakyLLM,
    call,
    calls,
    change_mode,
    content_request,
    continuation,
    ok,
    text,
)
from replay_kit import DEMO_SCRIPT, Ticks, demo_session, recording_pipeline, run_recorded
from repo import ROOT
from trace_scenarios import SCENARIOS

from aptix_pipeline import (
    RECORDING_FORMAT,
    PipelineOptions,
    RecordedError,
    Recorder,
    RecordingOptions,
    TurnRecording,
    __version__,
    replay,
    write_recording,
)
from aptix_pipeline.adapters.config.service import (
    ConfigError,
    load_service_config,
)
from aptix_pipeline.adapters.embedded import build_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.postgres import PostgresStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    ErrorCode,
    LLMReply,
    LLMRequest,
    PermanentPortError,
    StoreConflictError,
)
from aptix_pipeline.engine import Pipeline, Telemetry
from aptix_pipeline.engine.replay.redaction import REDACTED, REDACTED_BASE64
from aptix_pipeline.steps import described

NO_WAIT = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)


async def record(request: Any = None, replies: Any = None, **kwargs: Any) -> TurnRecording:
    """Record one turn on a fresh memory store; its recording."""
    pipeline = recording_pipeline(
        MemoryStore(), [text("Hi.")] if replies is None else replies, **kwargs
    )
    report = await pipeline.run({"Instruction": "hello"} if request is None else request, CALLER)
    assert report.recording is not None
    return report.recording


async def assert_replays(recording: TurnRecording) -> None:
    """The recording replays with no divergence."""
    outcome = await replay(recording)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


# === 1. content =================================================================================


@pytest.mark.decision("D110", "D385")
@pytest.mark.parametrize(
    ("request_input", "kind"),
    [
        ({"Instruction": "as a mapping"}, "json"),
        ('{"Instruction": "as JSON text"}', "text"),
        (b'{"Instruction": "as bytes \xc3\xa9"}', "bytes_json"),
        (b'{"Instruction": "twice", "Instruction": "x"}', "bytes_text"),
        (b"{not json \xc3\xa9", "bytes_text"),
        (b'{"Instruction": "not UTF-8 \xff"}', "base64"),
        ("{not json", "text"),
    ],
    ids=[
        "mapping",
        "text",
        "bytes",
        "bytes-duplicate-key",
        "bytes-not-json",
        "non-utf8-bytes",
        "not-json",
    ],
)
async def test_the_request_is_recorded_exactly_as_given_and_replays(
    request_input: Any, kind: str
) -> None:
    recording = await record(request_input)

    assert list(recording.request) == [kind]
    assert recording.request_input() == request_input
    assert type(recording.request_input()) is type(request_input)
    back = TurnRecording.from_dict(json.loads(recording.to_json()))
    assert back.request_input() == request_input
    await assert_replays(back)
    redacted = await record(request_input, recording=RecordingOptions(redact=True))
    assert list(redacted.request) == [kind]
    assert type(redacted.request_input()) is type(request_input)
    assert "not UTF-8" not in str(redacted.request_input())
    await assert_replays(TurnRecording.from_dict(json.loads(redacted.to_json())))


@pytest.mark.decision("D385")
async def test_a_json_request_given_as_bytes_is_recorded_as_readable_json() -> None:
    sent = b'{\n  "Instruction": "Review app.py \xc3\xa9",\n  "Stream": false\n}\n'

    recording = await record(sent)
    written = recording.to_json()

    assert recording.request == {"bytes_json": {"Instruction": "Review app.py é", "Stream": False}}
    assert '"Instruction": "Review app.py é"' in written
    assert "base64" not in written
    replayed = recording.request_input()
    assert isinstance(replayed, bytes)
    assert json.loads(replayed) == json.loads(sent)
    await assert_replays(TurnRecording.from_dict(json.loads(written)))


@pytest.mark.decision("D385")
@pytest.mark.parametrize(
    "sent",
    [
        b'{"Instruction": "hi", "Instruction": "again"}',
        b'{"Instruction": "hi", "Extra": 1e400}',
        b'{"Instruction": "hi", "Extra": NaN}',
        b'{"Instruction": "\\ud800"}',
        b"\xef\xbb\xbf" + b'{"Instruction": "after a byte order mark"}',
    ],
    ids=["duplicate-key", "past-float-range", "nan", "lone-surrogate", "bom"],
)
async def test_bytes_whose_json_would_read_otherwise_are_kept_as_text_byte_for_byte(
    sent: bytes,
) -> None:
    recording = await record(sent)

    assert list(recording.request) == ["bytes_text"]
    assert recording.request_input() == sent
    await assert_replays(TurnRecording.from_dict(json.loads(recording.to_json())))


@pytest.mark.decision("D385")
async def test_a_version_1_recording_with_a_base64_request_still_reads_and_replays() -> None:
    sent = b'{"Instruction": "recorded by an older engine"}'
    data = (await record(sent)).to_dict()
    old = {
        **data,
        "format": "aptix.turn-recording/1",
        "request": {"base64": base64.b64encode(sent).decode("ascii")},
    }

    recording = TurnRecording.from_dict(old)

    assert recording.request_input() == sent
    await assert_replays(recording)
    assert TurnRecording.from_dict(recording.to_dict()).request_input() == sent


async def test_a_request_model_is_recorded_as_its_wire_form() -> None:
    model = AgentExecuteRequest.model_validate({"Instruction": "as a model"})

    recording = await record(model)

    assert recording.request == {"json": model.to_wire()}
    assert recording.request_input() == model.to_wire()
    await assert_replays(recording)


@pytest.mark.decision("D124")
async def test_the_recording_names_engine_caller_mode_options_and_what_the_ports_were() -> None:
    options = PipelineOptions(
        max_server_tool_rounds=3, retry_wait_seconds=0, retry_max_wait_seconds=0
    )
    pipeline = recording_pipeline(MemoryStore(), [text("ok")], options=options)

    report = await pipeline.run({"Instruction": "hi"}, CALLER, initial_mode="review")

    recording = report.recording
    assert recording is not None
    assert recording.engine_version == __version__
    assert recording.caller == {"org": "acme", "user": "ana"}
    assert recording.initial_mode == "review"
    assert recording.options == options.to_dict()
    assert recording.pipeline_options() == options
    assert recording.server_tools == ("Add", "Multiply", "review_checklist")
    assert recording.config_digest.startswith("sha256:")
    assert (recording.redacted, recording.trace_content) == (False, False)
    assert recording.trace == report.trace
    assert recording.result == report.result.to_wire()
    assert recording.successful


@pytest.mark.decision("D124")
async def test_the_config_digest_is_stable_and_changes_with_the_catalog_or_the_options() -> None:
    same = [(await record()).config_digest for _ in range(2)]
    other_catalog = (await record(config=THREE_MODES_CONFIG)).config_digest
    other_options = (await record(options=replace(NO_WAIT, llm_attempts=5))).config_digest
    given = (await record(recording=RecordingOptions(config_digest="host:v42"))).config_digest

    assert same[0] == same[1]
    assert len({same[0], other_catalog, other_options}) == 3
    assert given == "host:v42"


@pytest.mark.decision("D107")
async def test_calls_are_numbered_in_order_and_named_by_the_step_that_made_them() -> None:
    replies = [calls(call("x1", "Math")), calls(call("a1", "Add", {"a": 1, "b": 2})), text("3")]
    recording = await record(replies=replies)

    assert [c.n for c in recording.calls] == list(range(1, len(recording.calls) + 1))
    assert [(c.step, c.name) for c in recording.calls[:3]] == [
        ("request_handler", "Clock.now"),
        ("request_handler", "IdSource.new_id"),
        ("request_handler", "SessionStore.begin"),
    ]
    assert recording.calls[1].args == {"kind": "correlation"}
    assert recording.calls[2].args == {"org": "acme", "user": "ana"}
    assert [(c.step, c.name) for c in recording.calls[-4:]] == [
        ("complete", "SessionTransaction.complete_turn"),
        ("complete", "SessionTransaction.append_transcript"),
        ("complete", "SessionTransaction.commit"),
        # the last model call's usage, settled once the machine has stopped (D594)
        (None, "UsageLedger.settle_usage"),
    ]
    steps = [c.step for c in recording.calls]
    machine_order = [
        "request_handler",
        "agent_context_resolver",
        "agent_session_creator",
        "reasoner",
        "llm_client",
        "response_builder",
        "complete",
        None,  # after the machine stopped: the settlement of the last model call
    ]
    assert list(dict.fromkeys(steps)) == machine_order
    # The server tool's run: its arguments and its result, timed by the clock.
    [add] = [c for c in recording.calls if c.port == "ToolExecutor"]
    assert (add.step, add.call, add.args["arguments"], add.answer) == (
        "llm_client",
        "Add",
        {"a": 1, "b": 2},
        '{"result": 3}',
    )
    assert add.args["invocation"]["ToolCallId"] == "a1"
    models = [c for c in recording.calls if c.name == "LLM.complete"]
    assert [
        m.answer["ToolCalls"][0]["Name"] if m.answer["ToolCalls"] else m.answer["Text"]
        for m in models
    ] == ["Math", "Add", "3"]


@pytest.mark.decision("D107")
async def test_clock_readings_and_generated_ids_are_the_ports_answers_in_order() -> None:
    recording = await record()

    assert recording.generated_ids == ("correlation-1", "session-1", "turn-1")
    assert recording.clock_readings[0] == "2026-01-01T00:00:00Z"
    assert recording.clock_readings == tuple(
        c.answer for c in recording.calls if c.name == "Clock.now"
    )
    assert recording.trace.session_id == "session-1"


@pytest.mark.decision("D107")
async def test_a_failed_turn_ends_with_the_rollback_after_the_machine_stopped() -> None:
    recording = await record(replies=[text("")])  # an empty reply faults llm_client's POST

    assert not recording.successful
    assert recording.trace.faulted_step == "llm_client"
    last = recording.calls[-1]
    assert (last.name, last.step) == ("SessionTransaction.rollback", None)
    assert "SessionTransaction.commit" not in [c.name for c in recording.calls]
    await assert_replays(recording)


@pytest.mark.decision("D107")
async def test_a_raising_port_is_recorded_with_its_exception_and_replays_it() -> None:
    base = recording_pipeline(MemoryStore(), [text("never")])
    pipeline = Pipeline(
        replace(base.ports, modes=FailingModes()),
        base.options,
        telemetry=Telemetry.off(),
        interceptors=[Recorder()],
    )

    report = await pipeline.run({"Instruction": "hi"}, CALLER)

    recording = report.recording
    assert recording is not None
    [raised] = [c for c in recording.calls if c.error is not None]
    assert raised.name == "ModeCatalog.get_mode"
    assert raised.answer is None
    assert raised.error == RecordedError(
        "ConnectionError",
        "catalog service unreachable",
        ("ConnectionError", "OSError", "Exception", "BaseException"),
    )
    assert "answer" not in raised.to_dict()
    assert raised.to_dict()["error"]["type"] == "ConnectionError"
    outcome = await replay(recording)
    assert outcome.ok
    assert outcome.report.result.errors[0].code is ErrorCode.PORT_FAILED
    assert outcome.report.result.to_wire() == recording.result


class PermanentlyBrokenLLM:
    """An LLM whose key is wrong: a failure trying again cannot fix."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        raise PermanentPortError("invalid API key")


@pytest.mark.decision("D109")
async def test_a_replayed_permanent_error_is_not_retried_and_a_transient_one_is() -> None:
    llm = PermanentlyBrokenLLM()
    permanent = await record(replies=llm)
    transient = await record(replies=FlakyLLM(failures=2))

    assert llm.calls == 1
    [failed] = [c for c in permanent.calls if c.name == "LLM.complete"]
    assert failed.error is not None
    assert "PermanentPortError" in failed.error.classes
    assert [c.error is not None for c in transient.calls if c.name == "LLM.complete"] == [
        True,
        True,
        False,
    ]
    for recording, attempts in ((permanent, 1), (transient, 3)):
        outcome = await replay(recording)
        assert outcome.ok, outcome.divergence
        assert outcome.report.trace is not None
        assert outcome.report.trace.llm_calls[0].attempts == attempts


@pytest.mark.decision("D109")
async def test_a_replayed_commit_conflict_is_a_conflict() -> None:
    base = recording_pipeline(MemoryStore(), [text("lost")])
    conflicted = Pipeline(
        replace(base.ports, store=CommitFailingStore(MemoryStore(), StoreConflictError("won"))),
        base.options,
        telemetry=Telemetry.off(),
        interceptors=[Recorder()],
    )
    report = await conflicted.run({"Instruction": "hi"}, CALLER)
    assert report.recording is not None
    assert report.result.errors[0].code is ErrorCode.CONFLICT

    outcome = await replay(report.recording)

    assert outcome.ok
    assert outcome.report.result.errors[0].code is ErrorCode.CONFLICT


class DiskOnFireError(ConnectionError):
    """A host's own exception class, which a replay cannot import."""

    def __init__(self, disk: int) -> None:
        super().__init__(f"disk {disk} is on fire")


@pytest.mark.decision("D109")
@pytest.mark.parametrize(
    ("error", "instance_of", "not_instance_of"),
    [
        (PermanentPortError("bad key"), PermanentPortError, StoreConflictError),
        (StoreConflictError("won"), StoreConflictError, PermanentPortError),
        (DiskOnFireError(3), ConnectionError, PermanentPortError),
        (KeyError("x"), LookupError, OSError),
    ],
)
def test_a_recorded_exception_reads_and_behaves_like_the_original(
    error: Exception, instance_of: type[Exception], not_instance_of: type[Exception]
) -> None:
    recorded = RecordedError.of(error)
    again = RecordedError.from_dict(json.loads(json.dumps(recorded.to_dict())))

    raised = again.to_exception()

    assert isinstance(raised, instance_of)
    assert not isinstance(raised, not_instance_of)
    assert type(raised).__name__ == type(error).__name__
    assert described(raised) == described(error)


# === 2. files ===================================================================================


@pytest.mark.decision("D122")
async def test_one_file_per_turn_in_a_folder_created_when_missing_named_in_start_order(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "not" / "yet" / "there"
    pipeline = recording_pipeline(
        MemoryStore(), DEMO_SCRIPT, recording=RecordingOptions(directory=folder)
    )

    reports = await demo_session(pipeline)

    names = sorted(path.name for path in folder.iterdir())
    assert len(names) == len(set(names)) == 3
    assert all(name.startswith("turn-2026") and name.endswith(".json") for name in names)
    for report, name in zip(reports, names, strict=True):  # sorted by name = in start order
        assert report.recording is not None
        assert report.recording.file_name() == name
        assert (folder / name).read_text(encoding="utf-8") == report.recording.to_json()
    assert TurnRecording.load(folder / names[0]).trace.context_type == "Initial"


@pytest.mark.decision("D122")
async def test_recording_the_same_turn_twice_gives_the_same_name_and_bytes(
    tmp_path: Path,
) -> None:
    first, second = await record(), await record()

    assert first.to_json() == second.to_json()
    assert write_recording(first, tmp_path) == write_recording(second, tmp_path)
    assert len(list(tmp_path.iterdir())) == 1


@pytest.mark.decision("D122")
async def test_two_turns_starting_at_the_same_time_get_different_names(tmp_path: Path) -> None:
    one = await record({"Instruction": "one"})
    two = await record({"Instruction": "two"})

    assert one.clock_readings[0] == two.clock_readings[0]
    prefix = "turn-20260101T000000000000Z-"
    assert one.file_name().startswith(prefix)
    assert two.file_name().startswith(prefix)
    assert write_recording(one, tmp_path) != write_recording(two, tmp_path)
    assert len(list(tmp_path.iterdir())) == 2


@pytest.mark.decision("D122")
async def test_a_failed_write_leaves_no_partial_or_temporary_file(tmp_path: Path) -> None:
    recording = await record()
    (tmp_path / recording.file_name()).mkdir()  # the name is taken by a folder

    with pytest.raises(IsADirectoryError):
        write_recording(recording, tmp_path)

    assert [p.name for p in tmp_path.iterdir()] == [recording.file_name()]
    assert list((tmp_path / recording.file_name()).iterdir()) == []


@pytest.mark.decision("D122")
async def test_the_sink_receives_each_recording(tmp_path: Path) -> None:
    received: list[TurnRecording] = []
    options = RecordingOptions(directory=tmp_path, sink=received.append)

    reports = await demo_session(recording_pipeline(MemoryStore(), DEMO_SCRIPT, recording=options))

    assert received == [report.recording for report in reports]


def broken_sink(recording: TurnRecording) -> None:
    raise RuntimeError("the sink is down")


@pytest.mark.decision("D122")
@pytest.mark.parametrize("where", ["sink", "directory"])
async def test_a_failing_sink_or_unwritable_folder_never_fails_the_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    options = (
        RecordingOptions(sink=broken_sink)
        if where == "sink"
        else RecordingOptions(directory=blocker / "recordings")
    )
    plain = await recording_pipeline(MemoryStore(), [text("Hi.")]).run(
        {"Instruction": "hello"}, CALLER
    )

    with caplog.at_level(logging.ERROR, logger="aptix_pipeline"):
        report = await recording_pipeline(MemoryStore(), [text("Hi.")], recording=options).run(
            {"Instruction": "hello"}, CALLER
        )

    assert report.result.to_wire() == plain.result.to_wire()
    assert ok(report.result).primary_output_text == "Hi."
    assert report.recording is not None
    assert "the turn's recording could not be delivered" in caplog.text
    assert list(tmp_path.iterdir()) == [blocker]


# === 3. redaction ===============================================================================

SECRETS = {
    "instruction": "INSTR-5c1a",
    "artifact": "ARTIFACT-BODY-77e2",
    "image": base64.b64encode(b"IMAGE-DATA-3f3f").decode(),
    "solution context": "SOLUTION-CTX-9a0b",
    "server tool argument": "SRV-ARG-4d4d",
    "server tool result": "SRV-RESULT-8e8e",
    "client arguments": "CLIENT-ARG-1b1b",
    "model text": "MODEL-TEXT-2c2c",
    "mode change reason": "REASON-6f6f",
    "client tool result": "CLIENT-RESULT-0a0a",
    "client tool error": "CLIENT-ERROR-5e5e",
    "final answer": "FINAL-ANSWER-7d7d",
}
"""Distinctive user content of ``content_session``, by what it is."""


async def echo(arguments: dict[str, Any], invocation: Any) -> str:
    """A server tool that answers with content of its own."""
    return json.dumps({"echo": SECRETS["server tool result"], "n": len(arguments)})


async def content_session(options: RecordingOptions) -> list[TurnRecording]:
    """An Initial turn and its continuation, full of user content; their recordings."""
    script = [
        calls(
            change_mode("m1", "general", SECRETS["mode change reason"]),
            call("s1", "review_checklist", {"note": SECRETS["server tool argument"]}),
            text=SECRETS["model text"],
        ),
        calls(
            call("r1", "read_file", {"path": SECRETS["client arguments"]}),
            call("r2", "run_tests", {"pattern": SECRETS["client arguments"]}),
        ),
        text(SECRETS["final answer"]),
    ]
    pipeline = recording_pipeline(
        MemoryStore(), script, recording=options, tools={"review_checklist": echo}
    )
    request = content_request(SECRETS)
    first = await pipeline.run(request, CALLER, initial_mode="review")
    results = (
        {
            "ToolCallId": "r1",
            "ExecutionMs": 1,
            "ResultJson": json.dumps({"out": SECRETS["client tool result"]}),
        },
        {"ToolCallId": "r2", "ExecutionMs": 1, "ErrorMessage": SECRETS["client tool error"]},
    )
    second = await pipeline.run(continuation(ok(first.result), *results), CALLER)
    ok(second.result)
    recordings = [first.recording, second.recording]
    assert all(r is not None for r in recordings)
    return [r for r in recordings if r is not None]


def secrets_in(recordings: list[TurnRecording]) -> set[str]:
    """What of ``SECRETS`` the recordings' JSON holds."""
    dumped = "".join(r.to_json() for r in recordings)
    return {what for what, secret in SECRETS.items() if secret in dumped}


@pytest.mark.decision("D120")
async def test_a_redacted_recording_holds_no_user_content_but_every_id_mode_and_name() -> None:
    plain = await content_session(RecordingOptions())
    redacted = await content_session(RecordingOptions(redact=True))

    assert secrets_in(plain) == set(SECRETS)  # the session really carries all of it
    assert secrets_in(redacted) == set()
    assert all(r.redacted for r in redacted)
    dumped = "".join(r.to_json() for r in redacted)
    for kept in (
        "session-1",
        "turn-1",
        "correlation-2",
        "review",
        "agent_change_mode",
        "read_file",
        "run_tests",
        "review_checklist",
        "img-1",
        "acme",
        "ana",
        "AGN-036/4.9/POST/exactly-one-outcome",
        "2026-01-01T00:00:00Z",
    ):
        assert kept in dumped, kept
    assert "notes.txt" not in dumped  # a file's path and name are the user's too
    assert REDACTED in dumped


@pytest.mark.decision("D120")
async def test_redaction_keeps_base64_valid_and_the_mode_of_a_mode_change() -> None:
    [first, _] = await content_session(RecordingOptions(redact=True))

    image = first.request["json"]["ClipboardImages"][0]["DataBase64"]
    assert image == REDACTED_BASE64
    assert base64.b64decode(image, validate=True)
    [mode_change] = [c for c in first.calls if c.name == "SessionTransaction.set_session_mode"]
    entry = mode_change.args["entry"]
    assert (entry["PreviousMode"], entry["NewMode"], entry["Reason"]) == (
        "review",
        "general",
        REDACTED,
    )
    models = [c for c in first.calls if c.name == "LLM.complete"]
    [wire_call] = [t for t in models[0].answer["ToolCalls"] if t["Name"] == "agent_change_mode"]
    assert json.loads(wire_call["ArgumentsJson"]) == {"mode": "general", "reason": REDACTED}
    assert models[0].answer["Text"] == REDACTED


@pytest.mark.decision("D120")
async def test_redaction_is_idempotent_and_survives_a_file() -> None:
    recordings = await content_session(RecordingOptions())

    for recording in recordings:
        once = recording.redact()
        assert once.redact() == once
        assert once.redact().to_json() == once.to_json()
        assert TurnRecording.from_dict(json.loads(once.to_json())).to_json() == once.to_json()


async def test_a_redacted_demo_session_round_trips_through_files_and_replays(
    tmp_path: Path,
) -> None:
    options = RecordingOptions(directory=tmp_path, redact=True)

    reports = await demo_session(recording_pipeline(MemoryStore(), DEMO_SCRIPT, recording=options))

    paths = sorted(tmp_path.iterdir())
    assert len(paths) == 3
    for report, path in zip(reports, paths, strict=True):
        loaded = TurnRecording.load(path)
        assert loaded.redacted
        assert loaded.to_json() == (report.recording.to_json() if report.recording else "")
        outcome = await replay(path)
        assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
    assert [r.recording.trace.mode for r in reports if r.recording] == ["review"] * 3


@pytest.mark.decision("D120")
async def test_a_redacted_recording_still_diverges_when_the_code_changes() -> None:
    [first, _] = await content_session(RecordingOptions(redact=True))
    calls_ = list(first.calls)
    at = next(i for i, c in enumerate(calls_) if c.name == "SessionTransaction.set_session_mode")
    entry = {**calls_[at].args["entry"], "NewMode": "docs"}
    calls_[at] = replace(calls_[at], args={**calls_[at].args, "entry": entry})

    outcome = await replay(replace(first, calls=tuple(calls_)))

    assert outcome.divergence is not None
    assert (outcome.divergence.kind, outcome.divergence.where) == ("arguments", "entry.NewMode")
    assert (outcome.divergence.expected, outcome.divergence.actual) == ("docs", "general")


@pytest.mark.decision("D121")
async def test_a_trace_with_content_capture_replays_plain_and_redacted() -> None:
    for redact in (False, True):
        pipeline = recording_pipeline(
            MemoryStore(),
            [
                calls(change_mode("m1", "review", SECRETS["mode change reason"])),
                text(SECRETS["final answer"]),
            ],
            telemetry=Telemetry(spans=False, capture_content=True),
            recording=RecordingOptions(redact=redact),
        )
        report = await pipeline.run({"Instruction": SECRETS["instruction"]}, CALLER)
        recording = report.recording
        assert recording is not None
        assert recording.trace_content
        trace_text = json.dumps(recording.trace.to_dict())
        assert (SECRETS["final answer"] in trace_text) is not redact
        assert (SECRETS["mode change reason"] in trace_text) is not redact
        assert secrets_in([recording]) == (
            set() if redact else {"instruction", "final answer", "mode change reason"}
        )
        await assert_replays(recording)


@pytest.mark.decision("D110", "D120")
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_scenario_redacted_replays(name: str) -> None:
    kit = await run_recorded(name, MemoryStore(), RecordingOptions(redact=True))

    for turn in kit.turns:
        assert turn.recording.redacted
        outcome = await replay(turn.recording, steps=turn.steps)
        assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


# === 4. the format ==============================================================================


async def test_the_json_form_is_versioned_with_keys_in_a_fixed_order() -> None:
    data = json.loads((await record()).to_json())

    assert data["format"] == RECORDING_FORMAT == "aptix.turn-recording/2"
    assert list(data) == [
        "format",
        "engine_version",
        "redacted",
        "config_digest",
        "caller",
        "initial_mode",
        "options",
        "provider_name",
        "server_tools",
        "trace_content",
        "usage_ledger",
        "request",
        "calls",
        "trace",
        "result",
    ]
    assert list(data["calls"][0]) == ["n", "step", "port", "call", "args", "answer"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: {**d, "format": "aptix.turn-recording/3"},
            "not a turn recording this engine reads (format 'aptix.turn-recording/3'); it reads "
            "aptix.turn-recording/1, aptix.turn-recording/2",
        ),
        (
            lambda d: {**d, "format": "aptix.turn-recording/1", "request": {"bytes_text": "{}"}},
            "request must hold exactly one of json, text, base64",
        ),
        (lambda d: {k: v for k, v in d.items() if k != "format"}, "(format None)"),
        (lambda d: {k: v for k, v in d.items() if k != "calls"}, "missing or bad 'calls'"),
        (lambda d: {k: v for k, v in d.items() if k != "caller"}, "missing or bad 'caller'"),
        (
            lambda d: {**d, "request": {"json": {}, "text": ""}},
            "request must hold exactly one of json, text, bytes_json, bytes_text, base64",
        ),
        (lambda d: [d], "a turn recording is a JSON object, not list"),
    ],
    ids=[
        "other-format",
        "v1-with-a-v2-request",
        "no-format",
        "no-calls",
        "no-caller",
        "two-requests",
        "not-object",
    ],
)
async def test_from_dict_refuses_what_is_not_a_recording_naming_it(edit: Any, message: str) -> None:
    data = (await record()).to_dict()

    with pytest.raises(ValueError, match=re.escape(message)):
        TurnRecording.from_dict(edit(data))


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe", b'{"format": "something else"}'],
    ids=["not-json", "not-utf8", "other-format"],
)
def test_load_names_the_file_that_is_not_a_recording(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)

    with pytest.raises(ValueError, match=re.escape(f"{path}: ")):
        TurnRecording.load(path)


# === 5. real components =========================================================================


async def test_a_session_on_a_sqlite_file_replays_with_no_store_at_all(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "aptix.db")
    try:
        pipeline = recording_pipeline(store, DEMO_SCRIPT)
        reports = await demo_session(pipeline)
    finally:
        await store.aclose()
    (tmp_path / "aptix.db").unlink()

    for report in reports:
        assert report.recording is not None
        assert "SQLiteStore" not in report.recording.to_json()  # the store is not in the recording
        outcome = await replay(report.recording)
        assert outcome.ok, outcome.divergence
    appended = [
        message
        for report in reports[:2]
        if report.recording is not None
        for c in report.recording.calls
        if c.name == "SessionTransaction.append_transcript"
        for message in c.args["messages"]
    ]
    follow_on = reports[2].recording
    assert follow_on is not None
    [loaded] = [c for c in follow_on.calls if c.name == "SessionTransaction.load_transcript"]
    assert loaded.answer == appended  # what the file held, read back as the store answered


async def test_a_session_on_postgresql_replays_with_no_store_at_all(postgres_db_url: str) -> None:
    store = PostgresStore(postgres_db_url, max_size=4)
    try:
        reports = await demo_session(recording_pipeline(store, DEMO_SCRIPT))
    finally:
        await store.aclose()

    for report in reports:
        assert report.recording is not None
        outcome = await replay(TurnRecording.from_dict(json.loads(report.recording.to_json())))
        assert outcome.ok, outcome.divergence
    restored = reports[1].recording
    assert restored is not None
    [session] = [c for c in restored.calls if c.name == "SessionTransaction.load_session"]
    assert session.answer["Mode"] == "review"


CONFIG = """
[engine]
retry_wait_seconds = 0
retry_max_wait_seconds = 0

[recording]
directory = "recordings"
redact = {redact}
"""


@pytest.mark.decision("D123")
@pytest.mark.parametrize("redact", [True, False])
async def test_a_service_configuration_with_recording_makes_build_pipeline_record(
    tmp_path: Path, redact: bool
) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text(CONFIG.format(redact=str(redact).lower()))
    config = load_service_config(path)
    assert config.recording == RecordingOptions(directory=tmp_path / "recordings", redact=redact)
    pipeline = build_pipeline(config, llm=ScriptedLLM([text("SECRET-ANSWER")]), store="memory")

    report = await pipeline.run({"Instruction": "SECRET-QUESTION"}, CALLER)

    ok(report.result)
    [path] = (tmp_path / "recordings").iterdir()
    assert ("SECRET-QUESTION" in path.read_text()) is not redact
    outcome = await replay(path)
    assert outcome.ok, outcome.divergence


@pytest.mark.decision("D123")
@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('directory = "recordings"', "[recording].redact: Field required"),
        ("redact = true", "[recording].directory: Field required"),
        ('directory = "r"\nredact = "yes"', "[recording].redact"),
        ('directory = "r"\nredact = true\nsink = "x"', "[recording]"),
    ],
    ids=["no-redact", "no-directory", "redact-not-bool", "unknown-key"],
)
def test_a_recording_table_without_its_keys_is_a_config_error_naming_it(
    tmp_path: Path, table: str, message: str
) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text(f"[recording]\n{table}\n")

    with pytest.raises(ConfigError) as raised:
        load_service_config(path)

    assert str(path) in str(raised.value)
    assert message in str(raised.value)
    assert not (tmp_path / "r").exists()


def test_a_recording_file_with_a_lone_surrogate_escape_loads(tmp_path: Path) -> None:
    """The fast JSON parser refuses a lone surrogate escape; json's reads it, so the file
    still loads (a request may carry one, and a recording keeps the request as given)."""
    source = sorted((ROOT / "examples" / "recordings").glob("*.json"))[0]
    data = json.loads(source.read_text(encoding="utf-8"))
    data["config_digest"] = "lone \ud800 surrogate"
    path = tmp_path / "turn.json"
    path.write_text(json.dumps(data), encoding="utf-8")  # ensure_ascii: written as \\ud800
    assert "\\ud800" in path.read_text(encoding="utf-8")
    loaded = TurnRecording.load(path)
    assert loaded.config_digest == "lone \ud800 surrogate"
    assert loaded.calls == TurnRecording.load(source).calls


# --- durations: the recorder's timer, not the turn's clock ---------------------------------------


@pytest.mark.decision("D361")
async def test_each_awaited_port_call_is_timed_by_the_recorders_timer() -> None:
    pipeline = recording_pipeline(
        MemoryStore(), [text("hello")], recording=RecordingOptions(timer=Ticks())
    )

    report = await pipeline.run({"Instruction": "hi"}, CALLER)

    assert report.recording is not None
    timed = {c.port: c.elapsed_ms for c in report.recording.calls if c.elapsed_ms is not None}
    assert timed["LLM"] == 2.5  # one tick between the call's start and its end
    untimed = {c.port for c in report.recording.calls if c.elapsed_ms is None}
    assert untimed == {"Clock", "IdSource", "SessionStore"}  # instant, not awaited
    again = TurnRecording.from_dict(json.loads(report.recording.to_json()))
    assert again.calls == report.recording.calls
    assert (await replay(again)).ok


@pytest.mark.decision("D361")
async def test_a_recording_without_a_timer_holds_no_durations_and_repeats_byte_for_byte() -> None:
    async def recorded() -> str:
        options = RecordingOptions(timer=None)
        pipeline = recording_pipeline(MemoryStore(), [text("hello")], recording=options)
        report = await pipeline.run({"Instruction": "hi"}, CALLER)
        assert report.recording is not None
        return report.recording.to_json()

    first, second = await recorded(), await recorded()

    assert '"elapsed_ms"' not in first
    assert first == second


@pytest.mark.decision("D361")
async def test_a_redacted_recording_keeps_its_durations() -> None:
    options = RecordingOptions(timer=Ticks(), redact=True)
    pipeline = recording_pipeline(MemoryStore(), [text("secret answer")], recording=options)

    report = await pipeline.run({"Instruction": "a secret question"}, CALLER)

    assert report.recording is not None
    [model_call] = [c for c in report.recording.calls if c.port == "LLM"]
    assert model_call.elapsed_ms == 2.5
    assert "secret" not in report.recording.to_json()


@pytest.mark.decision("D124")
async def test_the_config_digest_names_the_packages_own_ports_wherever_their_module_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = (await record()).config_digest
    monkeypatch.setattr(MemoryStore, "__module__", "aptix_pipeline.adapters.elsewhere")
    moved = (await record()).config_digest
    monkeypatch.setattr(MemoryStore, "__module__", "host_app.stores")
    a_hosts = (await record()).config_digest

    assert moved == before
    assert a_hosts != before
