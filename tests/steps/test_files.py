"""Files server tools make (AGN-033 §6, docs/FILES.md): kept, referenced, named to the model.

A server tool returns a ``ToolOutput``; its files are kept by the pipeline's
``FileStore`` (here a ``LocalFileStore`` on a real directory) and come back as
``FileRef``s on the turn's final response, never on a continuation. The model is
told each file's name, MIME type, size and hash, never its bytes. Every scenario
runs on the memory store and on a SQLite file.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engine_kit import (
    ALL_STORE_KINDS,
    CALLER,
    call,
    calls,
    continuation,
    ok,
    open_store_of_kind,
    start,
    text,
    tool_messages,
)

from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.files.local import LocalFileStore
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.adapters.tools.builtin import MAKE_REPORT_TOOL
from aptix_pipeline.contracts import (
    FileStore,
    ResponseKind,
    SessionStore,
    StoredFile,
    ToolExecutor,
    ToolFile,
    ToolInvocation,
    ToolOutput,
)
from aptix_pipeline.engine import Pipeline, Telemetry, TurnReport
from aptix_pipeline.engine.replay import Recorder, RecordingOptions, TurnRecording, replay
from aptix_pipeline.steps import Hooks, PipelineOptions, Ports, ToolExecution

Store = MemoryStore | SQLiteStore

START = datetime(2026, 1, 1, tzinfo=UTC)
KEY = b"a signing key of the tests, 32 b"
REPORT = {"title": "Weekly", "points": ["tests pass", "docs written"]}
REPORT_BYTES = b"# Weekly\n\n- tests pass\n- docs written\n"

CATALOG: dict[str, Any] = {
    "modes": [
        {"name": "general", "display_name": "General", "server_tools": ["make_report", "attach"]}
    ],
    "server_tools": [
        dict(MAKE_REPORT_TOOL),
        {"name": "attach", "description": "Returns what the test gives.", "executes_on": "server"},
    ],
    "agents": [
        {
            "id": "assistant",
            "name": "Assistant",
            "default": True,
            "client_tools": [
                {
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                        "additionalProperties": False,
                    },
                }
            ],
        }
    ],
    "conversations": [{"id": "chat", "name": "Chat", "default": True}],
}


def file_store(directory: Path, clock: SteppingClock, ttl_seconds: int = 600) -> LocalFileStore:
    """A ``LocalFileStore`` on ``directory``, its URLs on a fixed base."""
    return LocalFileStore(
        directory,
        url_base="http://files.test",
        signing_key=KEY,
        clock=clock,
        ttl_seconds=ttl_seconds,
    )


def file_pipeline(
    store: SessionStore,
    replies: list[dict[str, Any]],
    files: FileStore | None,
    clock: SteppingClock,
    *,
    attach: ToolExecutor | None = None,
    hooks: Hooks | None = None,
    more_tools: dict[str, ToolExecutor] | None = None,
) -> tuple[Pipeline, ScriptedLLM]:
    """A pipeline offering ``make_report`` and ``attach`` (run by ``attach``), with ``files``."""
    llm = ScriptedLLM(replies)
    catalog = ConfigCatalog(CATALOG, source="test", demo_tools=True)
    tools = {**catalog.tools, "attach": attach or attaching(), **(more_tools or {})}
    ports = Ports(
        store=store,
        llm=llm,
        modes=catalog,
        agents=catalog,
        clock=clock,
        ids=SequentialIds(),
        tools=tools,
        files=files,
    )
    options = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)
    return Pipeline(ports, options, hooks=hooks), llm


def report_turn() -> list[dict[str, Any]]:
    """The model calls ``make_report``, then answers."""
    return [calls(call("r1", "make_report", REPORT)), text("Here is the report.")]


@pytest.mark.decision("D316", "D322", "D328")
async def test_a_server_tools_file_comes_back_as_a_file_ref_on_the_final_response(
    store: Store, tmp_path: Path
) -> None:
    clock = SteppingClock(START)
    files = file_store(tmp_path / "files", clock, ttl_seconds=600)
    pipeline, _ = file_pipeline(store, report_turn(), files, clock)

    _, response = await start(pipeline, "write the report")

    [ref] = response.files or []
    digest = hashlib.sha256(REPORT_BYTES).hexdigest()
    assert (ref.name, ref.mime_type, ref.size_bytes) == ("report.md", "text/markdown", 38)
    assert ref.content_hash == digest
    assert ref.description == "Report: Weekly"
    assert ref.url.startswith(f"http://files.test/v1/files/{digest}?expires=")
    assert ref.content_expires is not None
    assert START + timedelta(seconds=600) <= ref.content_expires < START + timedelta(seconds=601)
    assert files.path(digest).read_bytes() == REPORT_BYTES
    assert json.loads(response.tool_results[0].result_json or "") == {  # type: ignore[index]
        "file": "report.md",
        "points": 2,
    }


@pytest.mark.decision("D319")
async def test_the_model_is_told_each_files_name_type_size_and_hash_never_its_bytes(
    store: Store, tmp_path: Path
) -> None:
    clock = SteppingClock(START)
    pipeline, llm = file_pipeline(store, report_turn(), file_store(tmp_path, clock), clock)

    await start(pipeline, "write the report")

    [message] = tool_messages(llm.requests[1], "r1")
    told = json.loads(message.content)
    assert told["result"] == {"file": "report.md", "points": 2}
    assert told["files"] == [
        {
            "name": "report.md",
            "mime_type": "text/markdown",
            "size_bytes": 38,
            "content_hash": hashlib.sha256(REPORT_BYTES).hexdigest(),
            "description": "Report: Weekly",
        }
    ]
    assert "tests pass" not in message.content
    assert "http" not in message.content


@pytest.mark.decision("D320")
async def test_files_made_before_a_client_continuation_reach_only_the_final_response(
    store: Store, tmp_path: Path
) -> None:
    clock = SteppingClock(START)
    replies = [
        calls(call("r1", "make_report", REPORT)),
        calls(call("c1", "read_file", {"path": "a.py"})),
        text("Read it; the report is attached."),
    ]
    pipeline, _ = file_pipeline(store, replies, file_store(tmp_path, clock), clock)

    _, first = await start(pipeline, "report, then read a.py")
    second = ok((await pipeline.run(continuation(first), CALLER)).result)

    assert first.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert "Files" not in first.to_wire()
    assert second.kind is ResponseKind.FINAL
    assert [ref.name for ref in second.files or []] == ["report.md"]


@pytest.mark.decision("D320")
async def test_a_follow_on_turn_starts_with_no_files(store: Store, tmp_path: Path) -> None:
    clock = SteppingClock(START)
    replies = [*report_turn(), text("Nothing to attach.")]
    pipeline, _ = file_pipeline(store, replies, file_store(tmp_path, clock), clock)
    _, first = await start(pipeline, "write the report")

    follow = {"SessionId": first.session_id, "TurnId": first.turn_id, "Instruction": "thanks"}
    second = ok((await pipeline.run(follow, CALLER)).result)

    assert second.files is None


@pytest.mark.decision("D317")
async def test_a_tool_returning_files_without_a_file_store_fails_and_the_turn_goes_on(
    store: Store,
) -> None:
    clock = SteppingClock(START)
    pipeline, llm = file_pipeline(store, report_turn(), None, clock)

    _, response = await start(pipeline, "write the report")

    [result] = response.tool_results or []
    assert result.result_json is None
    assert "no FileStore" in (result.error_message or "")
    assert "make_report" in (result.error_message or "")
    assert response.files is None
    assert "no FileStore" in tool_messages(llm.requests[1], "r1")[0].content


def attaching(*files: ToolFile) -> ToolExecutor:
    """An ``attach`` executor returning ``files``."""

    async def attach(arguments: dict[str, Any], invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput(result_json='{"attached": true}', files=files)

    return attach


@pytest.mark.decision("D316")
@pytest.mark.parametrize(
    ("file", "named"),
    [
        (ToolFile(name="../etc/passwd", mime_type="text/plain", content=b"x"), "is a path"),
        (ToolFile(name="", mime_type="text/plain", content=b"x"), "Name is empty"),
        (ToolFile(name="a\nb.txt", mime_type="text/plain", content=b"x"), "control characters"),
        (ToolFile(name="a.txt", mime_type="markdown", content=b"x"), "MimeType 'markdown'"),
        (ToolFile(name="a.txt", mime_type="text/plain\r\nX: y", content=b"x"), "MimeType"),
        (ToolFile(name="a.txt", mime_type="text/plain", content=b""), "holds no bytes"),
    ],
    ids=["path", "empty-name", "newline-name", "no-subtype", "header-injection", "empty"],
)
async def test_a_file_unfit_to_serve_fails_the_call_naming_the_file_and_field(
    store: Store, tmp_path: Path, file: ToolFile, named: str
) -> None:
    clock = SteppingClock(START)
    replies = [calls(call("a1", "attach")), text("done")]
    files = file_store(tmp_path / "files", clock)
    pipeline, _ = file_pipeline(store, replies, files, clock, attach=attaching(file))

    _, response = await start(pipeline, "attach")

    [result] = response.tool_results or []
    assert "server tool 'attach' returned file #1" in (result.error_message or "")
    assert named in (result.error_message or "")
    assert response.files is None
    assert not (tmp_path / "files").exists()


HOSTILE_FILES = {
    "mime-crlf-in-parameters": ("a.txt", "text/plain;\r\n charset=utf-8", "MimeType"),
    "mime-lf-before-parameter": ("a.txt", "text/plain\n; a=b", "MimeType"),
    "mime-nul-in-quoted-parameter": ("a.txt", 'text/plain; a="x\x00y"', "MimeType"),
    "mime-vertical-tab": ("a.txt", "text/plain;\x0ba=b", "MimeType"),
    "mime-not-latin-1": ("a.txt", 'text/plain; a="\u2603"', "MimeType"),
    "mime-latin-1": ("a.txt", 'text/plain; a="\u00e9"', "MimeType"),
    "mime-wildcard": ("a.txt", "*/*", "MimeType"),
    "mime-too-long": ("a.txt", "text/plain; a=" + "b" * 300, "MimeType holds 314 characters"),
    "name-nul": ("a\x00.txt", "text/plain", "Name"),
    "name-cr": ("a\r.txt", "text/plain", "Name"),
    "name-line-separator": ("a\u2028b.txt", "text/plain", "Name"),
    "name-lone-surrogate": ("a\ud800.txt", "text/plain", "Name"),
}
"""A file's name and MIME type a header cannot carry, the field the error names."""


@pytest.mark.decision("D316", "D400")
@pytest.mark.parametrize(("name", "mime_type", "named"), HOSTILE_FILES.values(), ids=HOSTILE_FILES)
async def test_a_file_whose_name_or_type_no_header_can_carry_fails_the_call(
    store: Store, tmp_path: Path, name: str, mime_type: str, named: str
) -> None:
    clock = SteppingClock(START)
    made = ToolFile(name=name, mime_type=mime_type, content=b"x")
    replies = [calls(call("a1", "attach")), text("done")]
    files = file_store(tmp_path / "files", clock)
    pipeline, llm = file_pipeline(store, replies, files, clock, attach=attaching(made))

    report, response = await start(pipeline, "attach")

    [result] = response.tool_results or []
    error = result.error_message or ""
    assert "server tool 'attach' returned file #1: its " + named.split()[0] in error
    assert named in error
    assert not any(c in error for c in "\r\n\x00")  # the value is quoted as its repr
    assert response.files is None
    assert not (tmp_path / "files").exists()
    assert report.successful
    assert "returned file #1" in tool_messages(llm.requests[1], "a1")[0].content


@pytest.mark.decision("D400")
@pytest.mark.parametrize(
    "mime_type",
    [
        "text/plain",
        "text/csv; charset=utf-8",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "image/svg+xml",
        'multipart/mixed; boundary="a b;c"',
        'text/plain;\tformat="x\\"y"',
    ],
)
async def test_a_well_formed_mime_type_with_parameters_is_kept(
    store: Store, tmp_path: Path, mime_type: str
) -> None:
    clock = SteppingClock(START)
    made = ToolFile(name="a.txt", mime_type=mime_type, content=b"x")
    replies = [calls(call("a1", "attach")), text("done")]
    pipeline, _ = file_pipeline(
        store, replies, file_store(tmp_path, clock), clock, attach=attaching(made)
    )

    _, response = await start(pipeline, "attach")

    [ref] = response.files or []
    assert ref.mime_type == mime_type


def test_a_tool_file_reads_its_size_and_hash_from_its_bytes_and_never_serializes_them() -> None:
    file = ToolFile(name="a.csv", mime_type="text/csv", content=b"a,b\n1,2\n")

    data = json.loads(file.to_json())

    assert data == {
        "Name": "a.csv",
        "MimeType": "text/csv",
        "SizeBytes": 8,
        "ContentHash": hashlib.sha256(b"a,b\n1,2\n").hexdigest(),
    }
    with pytest.raises(ValueError, match="SizeBytes is read from the content"):
        ToolFile.model_validate(
            {"Name": "a.csv", "MimeType": "text/csv", "Content": b"x", "SizeBytes": 5}
        )


class RelativeFileStore:
    """A ``FileStore`` answering a path where a URL belongs."""

    async def put(self, file: ToolFile) -> StoredFile:
        return StoredFile(url=f"/files/{file.content_hash}")


@pytest.mark.decision("D318")
async def test_a_file_store_answering_a_relative_url_fails_the_tool_call(store: Store) -> None:
    clock = SteppingClock(START)
    pipeline, _ = file_pipeline(store, report_turn(), RelativeFileStore(), clock)

    _, response = await start(pipeline, "write the report")

    [result] = response.tool_results or []
    assert "not an absolute URL" in (result.error_message or "")
    assert response.files is None


class FailingFileStore:
    """A ``FileStore`` whose disk is full."""

    async def put(self, file: ToolFile) -> StoredFile:
        raise OSError("No space left on device")


@pytest.mark.decision("D318")
async def test_a_failing_file_store_fails_the_tool_call_and_the_turn_goes_on(
    store: Store,
) -> None:
    clock = SteppingClock(START)
    pipeline, _ = file_pipeline(store, report_turn(), FailingFileStore(), clock)

    _, response = await start(pipeline, "write the report")

    [result] = response.tool_results or []
    assert "the FileStore could not keep file #1 ('report.md')" in (result.error_message or "")
    assert "No space left on device" in (result.error_message or "")
    assert response.primary_output_text == "Here is the report."
    assert response.files is None


async def test_after_tool_sees_the_tool_output_with_its_files(store: Store, tmp_path: Path) -> None:
    seen: list[ToolExecution] = []
    clock = SteppingClock(START)
    hooks = Hooks(after_tool=seen.append)
    pipeline, _ = file_pipeline(
        store, report_turn(), file_store(tmp_path, clock), clock, hooks=hooks
    )

    _, response = await start(pipeline, "write the report")

    [execution] = seen
    assert isinstance(execution.result, ToolOutput)
    assert [file.content for file in execution.result.files] == [REPORT_BYTES]
    assert [ref.name for ref in response.files or []] == ["report.md"]


@pytest.mark.decision("D321")
async def test_a_turn_that_faults_after_its_tool_ran_keeps_the_blob_and_no_file_ref(
    tmp_path: Path,
) -> None:
    clock = SteppingClock(START)
    replies = [calls(call("r1", "make_report", REPORT))]  # then the script runs out
    files = file_store(tmp_path / "files", clock)
    with SQLiteStore(tmp_path / "aptix.db") as store:
        pipeline, _ = file_pipeline(store, replies, files, clock)

        report = await pipeline.run({"Instruction": "write the report"}, CALLER)

        assert not report.successful
        assert files.path(hashlib.sha256(REPORT_BYTES).hexdigest()).read_bytes() == REPORT_BYTES
        assert report.result.result is None


async def test_a_reply_pasting_a_files_bytes_as_base64_is_still_refused(
    store: Store, tmp_path: Path
) -> None:
    clock = SteppingClock(START)
    pasted = "data:text/markdown;base64," + "IyBXZWVrbHkKCi0gdGVzdHMgcGFzcwo=" * 4
    replies = [calls(call("r1", "make_report", REPORT)), text(f"Here it is: {pasted}")]
    pipeline, _ = file_pipeline(store, replies, file_store(tmp_path, clock), clock)

    report = await pipeline.run({"Instruction": "write the report"}, CALLER)

    assert "AGN-033/6.1/no-embedded-file-contents" in report.result.rule_ids


PASTED = base64.b64encode(REPORT_BYTES * 8).decode()
"""The report's bytes as base64: 400+ characters of upper case, lower case and digits."""


@pytest.mark.decision("D403")
@pytest.mark.parametrize(
    "answer",
    [
        f"```json\n{json.dumps({'report.md': PASTED})}\n```",
        f"```python\nREPORT = '{PASTED}'\n```",
        f"```aptix-json\n{PASTED}\n```",
    ],
    ids=["json-fence", "python-fence", "aptix-json-fence-not-json"],
)
async def test_a_reply_pasting_a_files_bytes_into_a_fence_is_refused(
    store: Store, tmp_path: Path, answer: str
) -> None:
    clock = SteppingClock(START)
    replies = [calls(call("r1", "make_report", REPORT)), text(f"Here it is:\n\n{answer}\n")]
    pipeline, _ = file_pipeline(store, replies, file_store(tmp_path, clock), clock)

    report = await pipeline.run({"Instruction": "write the report"}, CALLER)

    assert not report.successful
    assert "AGN-033/6.1/no-embedded-file-contents" in report.result.rule_ids


@pytest.mark.decision("D403")
async def test_an_aptix_bundle_in_a_guarded_block_passes_beside_the_file_refs(
    store: Store, tmp_path: Path
) -> None:
    clock = SteppingClock(START)
    bundle = json.dumps({"files": [{"path": "report.md", "base64": PASTED}]})
    answer = f"The bundle:\n\n```aptix-json\n{bundle}\n```\n"
    replies = [calls(call("r1", "make_report", REPORT)), text(answer)]
    pipeline, _ = file_pipeline(store, replies, file_store(tmp_path, clock), clock)

    _, response = await start(pipeline, "write the report")

    assert response.primary_output_text == answer
    assert [ref.name for ref in response.files or []] == ["report.md"]


# --- recording and replay --------------------------------------------------------------------


async def recorded_file_turn(
    store: SessionStore, directory: Path, *, files: bool = True, redact: bool = False
) -> TurnReport:
    """A recorded ``make_report`` turn, content capture on (the most a recording holds)."""
    clock = SteppingClock(START)
    catalog = ConfigCatalog(CATALOG, source="test", demo_tools=True)
    ports = Ports(
        store=store,
        llm=ScriptedLLM(report_turn()),
        modes=catalog,
        agents=catalog,
        clock=clock,
        ids=SequentialIds(),
        tools={**catalog.tools, "attach": attaching()},
        files=file_store(directory, clock) if files else None,
    )
    pipeline = Pipeline(
        ports,
        telemetry=replace(Telemetry.off(), capture_content=True),
        interceptors=[Recorder(RecordingOptions(redact=redact))],
    )
    return await pipeline.run({"Instruction": "write the report"}, CALLER)


@pytest.mark.decision("D326")
async def test_a_recording_holds_each_files_hash_size_and_type_never_its_bytes(
    store: Store, tmp_path: Path
) -> None:
    report = await recorded_file_turn(store, tmp_path / "files")

    assert report.recording is not None
    written = report.recording.to_json()
    digest = hashlib.sha256(REPORT_BYTES).hexdigest()
    [tool] = [c for c in report.recording.calls if c.port == "ToolExecutor"]
    [put] = [c for c in report.recording.calls if c.port == "FileStore"]
    assert tool.answer["Files"] == [
        {
            "Name": "report.md",
            "MimeType": "text/markdown",
            "Description": "Report: Weekly",
            "SizeBytes": 38,
            "ContentHash": digest,
        }
    ]
    assert put.args["file"]["ContentHash"] == digest
    assert "- tests pass" not in written  # the file's text (its arguments hold the points)
    assert base64.b64encode(REPORT_BYTES).decode() not in written


@pytest.mark.decision("D326")
@pytest.mark.parametrize("files", [True, False], ids=["file-store", "no-file-store"])
async def test_a_recorded_file_turn_replays_without_the_bytes(
    store: Store, tmp_path: Path, files: bool
) -> None:
    report = await recorded_file_turn(store, tmp_path / "files", files=files)
    assert report.recording is not None
    written = TurnRecording.from_dict(json.loads(report.recording.to_json()))

    outcome = await replay(written)

    assert outcome.ok, outcome.describe()


@pytest.mark.decision("D327", "D401")
async def test_a_redacted_recording_holds_no_file_url_name_type_or_description_and_replays(
    store: Store, tmp_path: Path
) -> None:
    report = await recorded_file_turn(store, tmp_path / "files", redact=True)

    assert report.recording is not None
    written = report.recording.to_json()
    assert "sig=" not in written
    assert "/v1/files/" not in written
    for told in ("report.md", "markdown", "Weekly"):  # the tool's name, subtype, description
        assert told not in written
    [ref] = report.recording.result["Result"]["Files"]
    assert (ref["Name"], ref["MimeType"], ref["Description"]) == (
        "redacted.bin",  # not base64-like, as "report.md" was not
        "text/redacted.x",  # nor "text/markdown"
        "[redacted]",
    )
    assert (ref["SizeBytes"], ref["ContentHash"]) == (38, hashlib.sha256(REPORT_BYTES).hexdigest())
    assert ref["Url"] == "https://redacted.invalid/redacted"
    assert report.recording.redact().to_json() == written
    outcome = await replay(TurnRecording.from_dict(json.loads(written)))
    assert outcome.ok, outcome.describe()


@pytest.mark.decision("D401")
@pytest.mark.parametrize(
    "file",
    [
        ToolFile(name="a\r\nb.txt", mime_type="text/plain", content=b"x"),
        ToolFile(name="a.txt", mime_type="text/plain;\r\n a=b", content=b"x"),
        ToolFile(name="secret.txt", mime_type="text/plain", content=b"x", description="secret"),
    ],
    ids=["bad-name", "bad-type", "fit"],
)
async def test_a_redacted_file_keeps_its_verdict_and_replays(
    store: Store, tmp_path: Path, file: ToolFile
) -> None:
    clock = SteppingClock(START)
    replies = [calls(call("a1", "attach")), text("done")]
    pipeline, _ = file_pipeline(
        store, replies, file_store(tmp_path, clock), clock, attach=attaching(file)
    )
    recorded = Pipeline(
        pipeline.ports, pipeline.options, interceptors=[Recorder(RecordingOptions(redact=True))]
    )

    report = await recorded.run({"Instruction": "attach"}, CALLER)

    assert report.recording is not None
    written = report.recording.to_json()
    assert not [told for told in ("b.txt", "a=b", "secret") if told in written]
    kept = ok(report.result).files is not None
    assert kept is (file.name == "secret.txt")
    outcome = await replay(TurnRecording.from_dict(json.loads(written)))
    assert outcome.ok, outcome.describe()


@pytest.mark.decision("D329")
async def test_a_mode_change_answered_with_files_is_refused_and_keeps_no_file(
    store: Store, tmp_path: Path
) -> None:
    async def change_with_a_file(
        arguments: dict[str, Any], invocation: ToolInvocation
    ) -> ToolOutput:
        made = ToolFile(name="a.txt", mime_type="text/plain", content=b"x")
        return ToolOutput(result_json=json.dumps({"mode": "general"}), files=[made])

    clock = SteppingClock(START)
    replies = [
        calls(call("m1", "agent_change_mode", {"mode": "general", "reason": "why"})),
        text("done"),
    ]
    files = file_store(tmp_path / "files", clock)
    pipeline, _ = file_pipeline(
        store, replies, files, clock, more_tools={"agent_change_mode": change_with_a_file}
    )

    report, response = await start(pipeline, "switch")

    [result] = response.tool_results or []
    assert "AGN-011/5.2/mode-result-valid" in (result.error_message or "")
    assert report.mode_changes == ()
    assert response.files is None
    assert not (tmp_path / "files").exists()


@pytest.mark.decision("D330")
def test_make_report_comes_with_a_catalog_that_offers_it_and_not_with_the_built_in_one() -> None:
    offering = ConfigCatalog(CATALOG, source="test", demo_tools=True)

    built_in = ConfigCatalog.default()

    assert "make_report" in offering.tools
    assert "make_report" not in built_in.tools
    assert all(
        tool.name != "make_report" for mode in built_in.all_modes() for tool in mode.server_tools
    )


@pytest.fixture(params=ALL_STORE_KINDS)
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """Each store kind: memory, a SQLite file and a fresh PostgreSQL database."""
    async with open_store_of_kind(request.param, request, tmp_path) as opened:
        yield opened


@pytest.mark.decision("D320")
async def test_every_store_keeps_a_pending_turns_files_for_its_final_response(
    any_store: SessionStore, tmp_path: Path
) -> None:
    clock = SteppingClock(START)
    replies = [
        calls(call("r1", "make_report", REPORT)),
        calls(call("c1", "read_file", {"path": "a.py"})),
        text("done"),
    ]
    pipeline, _ = file_pipeline(any_store, replies, file_store(tmp_path / "files", clock), clock)
    _, first = await start(pipeline, "report, then read a.py")

    tx = any_store.begin(CALLER.org, CALLER.user)
    pending = await tx.load_turn(first.session_id, first.turn_id)
    await tx.rollback()
    final = ok((await pipeline.run(continuation(first), CALLER)).result)

    assert pending is not None
    assert pending.files == final.files
    assert [ref.name for ref in final.files or []] == ["report.md"]
