"""Planted secrets: with redaction on and content capture off, no user content leaks anywhere.

A distinct secret is planted in every field of the three kinds of request (and a
refused one), in every part of the client's and the server tools' results and
errors, in the model's replies (text, tool call argument values, numbers and
keys, a mode change's reason) and in the idempotency keys the client chose. The
turns run with ``RecordingOptions(redact=True)`` and content capture off; no
secret may appear in the recordings, the spans, the state traces, the reports
(``TurnReport.to_dict()`` without its ``result``, which is the answer the client
asked for) or the log records (DEBUG and up). The same
holds for ``aptix run --report --record --redact``. Redacted recordings still
replay, and redact to themselves.

What stays is what a replay needs for its structure (docs/RECORDING.md
"Redaction", docs/CONFORMANCE.md D162): ids, tool names, modes, the argument keys a
tool's schema defines, counts and the shape.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, change_mode, continuation, follow_on, ok, text
from replay_kit import recording_pipeline
from span_kit import Recorded, values_of

from aptix_pipeline import RecordingOptions, TurnRecording, replay
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import ToolInvocation
from aptix_pipeline.engine import TurnReport
from aptix_pipeline.engine.replay.redaction import (
    REDACTED,
    REDACTED_BASE64,
    REDACTED_IDEMPOTENCY_KEY,
)


def b64(text_: str) -> str:
    """``text_`` as base64."""
    return base64.b64encode(text_.encode()).decode()


SECRETS: dict[str, str] = {
    # the Initial request, field by field (AGN-034 §4)
    "instruction": "SEC-INSTRUCTION-a1",
    "artifact path": "SEC-PATHDIR-a2",
    "artifact path file": "SEC-PATHFILE-a3",
    "artifact file name": "SEC-FILENAME-a4",
    "artifact contents": "SEC-CONTENTS-a5",
    "artifact mime type": "SEC-MIME-a6",
    "artifact language": "SEC-LANGUAGE-a7",
    "base64 artifact": "SEC-B64ARTIFACT-a8",
    "image mime type": "SEC-IMGMIME-a9",
    "image data": "SEC-IMAGEDATA-b1",
    "rag key": "SEC-RAGKEY-b2",
    "rag value": "SEC-RAGVALUE-b3",
    "rag value 2": "SEC-RAGVALUE2-b4",
    "solution context": "SEC-SOLUTION-b5",
    "workspace id": "SEC-WORKSPACE-b6",
    "repository name": "SEC-REPOSITORY-b7",
    "language hint": "SEC-LANGHINT-b8",
    # the FollowOn request
    "follow-on instruction": "SEC-FOLLOWON-b9",
    "follow-on solution context": "SEC-SOLUTION2-c1",
    # the client's tool results (AGN-034 §5)
    "client result key": "SEC-CRKEY-c2",
    "client result value": "SEC-CRVALUE-c3",
    "client result card number": "4111111111111111",
    "client result float": "98765.4321",
    "client tool error": "SEC-CLIENTERROR-c4",
    # the server tools' results and errors
    "server result key": "SEC-SRKEY-c5",
    "server result value": "SEC-SRVALUE-c6",
    "server result number": "5500005555555559",
    "server tool error": "SEC-SERVERERROR-c7",
    # the model's replies
    "model text": "SEC-MODELTEXT-c8",
    "model text 2": "SEC-MODELTEXT2-c9",
    "final answer": "SEC-FINAL-d1",
    "follow-on answer": "SEC-FINAL2-d2",
    "mode change reason": "SEC-REASON-d3",
    "server argument value": "SEC-SRVARG-d4",
    "server argument number": "4000056655665556",
    "server argument key": "SEC-SRVARGKEY-d5",
    "client argument path": "SEC-CLIENTARG-d6",
    "client argument pattern": "SEC-CLIENTARG2-d7",
    # a request the engine refuses: its values are quoted in its errors
    "refused instruction": "SEC-REFUSED-d8",
    "refused absolute path": "SEC-ABSPATH-d9",
    "refused mime type": "SEC-BADMIME-e1",
    # the idempotency keys the client chose (Idempotency-Key)
    "idempotency key": "SEC-IDEMKEY-e2",
    "continuation idempotency key": "SEC-IDEMKEY2-e3",
}
"""Distinct user content, by where it was planted."""

FORMS = {name: {secret, b64(secret)} for name, secret in SECRETS.items()}
"""Each secret as planted and as base64 (data the engine may carry in that form)."""


def leaked(text_: str) -> set[str]:
    """The secrets ``text_`` holds, in either form."""
    return {name for name, forms in FORMS.items() if any(form in text_ for form in forms)}


CONFIG = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["lookup", "explode"]

[[modes]]
name = "review"
display_name = "Code Review"
server_tools = ["lookup", "explode"]

[[server_tools]]
name = "lookup"
description = "Look something up."
executes_on = "server"
[server_tools.parameters]
type = "object"
[server_tools.parameters.properties.query]
type = "string"
[server_tools.parameters.properties.amount]
type = "integer"

[[server_tools]]
name = "explode"
description = "Always fails."
executes_on = "server"

[[agents]]
id = "assistant"
name = "Aptix assistant"
default = true
model = "scripted"
system_prompt = "You are a test assistant."

[[agents.client_tools]]
name = "read_file"
description = "Read a file."
[agents.client_tools.parameters]
type = "object"
required = ["path"]
additionalProperties = false
[agents.client_tools.parameters.properties.path]
type = "string"
minLength = 1

[[agents.client_tools]]
name = "run_tests"
description = "Run the tests."
[agents.client_tools.parameters]
type = "object"
additionalProperties = false
[agents.client_tools.parameters.properties.pattern]
type = "string"

[[conversations]]
id = "workspace"
name = "Workspace conversation"
default = true
instructions = "The user works in a code repository."
"""


async def lookup(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """A server tool answering with secrets in its keys, values and numbers."""
    return (
        f'{{"{SECRETS["server result key"]}": "{SECRETS["server result value"]}", '
        f'"n": {SECRETS["server result number"]}, "echo": {len(arguments)}}}'
    )


async def explode(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """A server tool that fails, its message holding a secret."""
    raise ValueError(SECRETS["server tool error"])


def initial_request() -> dict[str, Any]:
    """An Initial request with a secret in every field that can hold one (AGN-034 §4)."""
    s = SECRETS
    path = f"{s['artifact path']}/../{s['artifact path']}/{s['artifact path file']}"
    return {
        "Instruction": s["instruction"],
        "InputArtifacts": [
            {
                "RelativePath": path,
                "FileName": s["artifact file name"],
                "Contents": s["artifact contents"],
                "Origin": "user",
                "MimeType": f"text/{s['artifact mime type']}",
                "Language": s["artifact language"],
            },
            {
                "RelativePath": "b.bin",
                "FileName": "b.bin",
                "Contents": b64(s["base64 artifact"]),
                "Origin": "ide",
                "Encoding": "base64",
            },
        ],
        "ClipboardImages": [
            {
                "Id": "img-1",
                "MimeType": f"image/{s['image mime type']}",
                "DataBase64": b64(s["image data"]),
            }
        ],
        "RagScope": [
            {
                "Key": s["rag key"],
                "Operator": "contains",
                "Values": [s["rag value"], s["rag value 2"]],
            }
        ],
        "SolutionContextText": s["solution context"],
        "WorkspaceHints": {
            "WorkspaceId": s["workspace id"],
            "RepositoryName": s["repository name"],
            "LanguageHint": s["language hint"],
        },
    }


def refused_request() -> dict[str, Any]:
    """A request refused for an absolute path and a MIME type that is no image's."""
    return {
        "Instruction": SECRETS["refused instruction"],
        "InputArtifacts": [
            {
                "RelativePath": f"/{SECRETS['refused absolute path']}",
                "FileName": "x",
                "Contents": "x",
                "Origin": "user",
            }
        ],
        "ClipboardImages": [
            {"Id": "i", "MimeType": SECRETS["refused mime type"], "DataBase64": REDACTED_BASE64}
        ],
    }


SCRIPT = [
    calls(change_mode("m1", "review", SECRETS["mode change reason"]),
          call("s1", "lookup", {"query": SECRETS["server argument value"],
                                "amount": int(SECRETS["server argument number"]),
                                SECRETS["server argument key"]: True}),
          call("s2", "explode"),
          text=SECRETS["model text"]),
    calls(call("r1", "read_file", {"path": SECRETS["client argument path"]}),
          call("r2", "run_tests", {"pattern": SECRETS["client argument pattern"]}),
          text=SECRETS["model text 2"]),
    text(SECRETS["final answer"]),
    text(SECRETS["follow-on answer"]),
]  # fmt: skip


async def planted_session(spans: Recorded, *, redact: bool = True) -> list[TurnReport]:
    """Initial, continuation, FollowOn and a refused request, full of secrets; their reports."""
    pipeline = recording_pipeline(
        MemoryStore(),
        SCRIPT,
        recording=RecordingOptions(redact=redact),
        config=CONFIG,
        tools={"lookup": lookup, "explode": explode},
        telemetry=spans.telemetry(capture_content=False),
    )
    first = await pipeline.run(
        initial_request(),
        CALLER,
        initial_mode="general",
        idempotency_key=SECRETS["idempotency key"],
    )
    results = (
        {
            "ToolCallId": "r1",
            "ExecutionMs": 3,
            "ResultJson": json.dumps(
                {
                    SECRETS["client result key"]: SECRETS["client result value"],
                    "card": int(SECRETS["client result card number"]),
                    "amount": float(SECRETS["client result float"]),
                }
            ),
        },
        {"ToolCallId": "r2", "ExecutionMs": 1, "ErrorMessage": SECRETS["client tool error"]},
    )
    second = await pipeline.run(
        continuation(ok(first.result), *results),
        CALLER,
        idempotency_key=SECRETS["continuation idempotency key"],
    )
    later = follow_on(ok(second.result), SECRETS["follow-on instruction"])
    later["SolutionContextText"] = SECRETS["follow-on solution context"]
    third = await pipeline.run(later, CALLER)
    assert ok(third.result).primary_output_text == SECRETS["follow-on answer"]
    refused = await pipeline.run(json.dumps(refused_request()), CALLER)
    assert not refused.successful
    return [first, second, third, refused]


def recordings_of(reports: list[TurnReport]) -> list[TurnRecording]:
    """The reports' recordings (each turn was recorded)."""
    found = [report.recording for report in reports]
    assert all(recording is not None for recording in found)
    return [recording for recording in found if recording is not None]


async def test_unredacted_recordings_carry_every_planted_secret() -> None:
    """The session really carries each secret, so the tests below test something."""
    reports = await planted_session(Recorded(), redact=False)

    assert leaked("".join(r.to_json() for r in recordings_of(reports))) == set(SECRETS)


@pytest.mark.decision("D162", "D401")
async def test_no_planted_secret_survives_in_recordings_spans_traces_reports_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = Recorded()

    with caplog.at_level(logging.DEBUG):
        reports = await planted_session(spans)

    recordings = recordings_of(reports)
    assert leaked("".join(r.to_json() for r in recordings)) == set()
    assert leaked("\n".join(text_ for span in spans.spans for _, text_ in values_of(span))) == set()
    assert leaked("".join(json.dumps(r.trace.to_dict()) for r in reports if r.trace)) == set()
    summaries = [{k: v for k, v in r.to_dict().items() if k != "result"} for r in reports]
    assert leaked(json.dumps(summaries)) == set()
    assert leaked(caplog.text) == set()
    assert leaked("\n".join(record.getMessage() for record in caplog.records)) == set()


@pytest.mark.decision("D164", "D401")
async def test_redacted_recordings_replay_and_redact_to_themselves() -> None:
    recordings = recordings_of(await planted_session(Recorded()))

    for recording in recordings:
        assert recording.redact().to_json() == recording.to_json()
        outcome = await replay(TurnRecording.from_dict(json.loads(recording.to_json())))
        assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


@pytest.mark.decision("D164", "D165")
async def test_placeholders_keep_what_replay_and_the_request_rules_need() -> None:
    [first, second, _, refused] = recordings_of(await planted_session(Recorded()))

    request = first.request["json"]
    artifact, binary = request["InputArtifacts"]
    assert artifact["RelativePath"] == "redacted/../redacted/redacted"
    assert (artifact["FileName"], artifact["MimeType"]) == (REDACTED, "redacted")
    assert binary["Contents"] == REDACTED_BASE64
    assert request["ClipboardImages"] == [
        {"Id": "img-1", "MimeType": "image/redacted", "DataBase64": REDACTED_BASE64}
    ]
    assert request["RagScope"] == [
        {"Key": REDACTED, "Operator": "contains", "Values": [REDACTED, REDACTED]}
    ]
    [result, error] = second.request["json"]["ToolResults"]
    assert json.loads(result["ResultJson"]) == {"k1": REDACTED, "k2": 0, "k3": 0.0}
    assert (result["ExecutionMs"], error["ErrorMessage"]) == (3, REDACTED)
    [lookup_call] = [c for c in first.calls if c.name == "ToolExecutor.lookup"]
    assert lookup_call.args["arguments"] == {"query": REDACTED, "amount": 0, "k1": True}
    assert json.loads(lookup_call.answer) == {"k1": REDACTED, "k2": 0, "k3": 0}
    refused_text = json.loads(refused.request["text"])
    assert refused_text["InputArtifacts"][0]["RelativePath"] == "/redacted"
    assert refused_text["ClipboardImages"][0]["MimeType"] == "redacted"
    assert [e["RuleId"] for e in refused.result["Errors"]] == [
        "AGN-034/4.2/relative-path-not-absolute",
        "AGN-034/4.3/clipboard-mime-image",
    ]


@pytest.mark.decision("D401")
async def test_an_idempotency_key_is_replaced_by_one_placeholder_a_replay_keeps() -> None:
    [first, second, third, _] = recordings_of(await planted_session(Recorded()))

    saved = [
        [c.args["outcome"]["Key"] for c in recording.calls if c.call == "save_outcome"]
        for recording in (first, second, third)
    ]
    assert (first.idempotency_key, second.idempotency_key, third.idempotency_key) == (
        REDACTED_IDEMPOTENCY_KEY,
        REDACTED_IDEMPOTENCY_KEY,
        None,
    )
    assert saved[0] == ["key:redacted"]
    [keyed, continued] = saved[1]
    assert keyed == "key:redacted"
    assert continued.startswith("continuation:")
    assert len(continued) == len("continuation:") + 64
    assert saved[2] == []


APTIX = Path(sys.executable).parent / "aptix"


@pytest.mark.decision("D163")
def test_aptix_run_report_and_redacted_recording_show_no_secret(tmp_path: Path) -> None:
    script = [
        calls(
            change_mode("m1", "review", SECRETS["mode change reason"]),
            call("r1", "read_file", {"path": SECRETS["client argument path"]}),
            text=SECRETS["model text"],
        ),
    ]
    (tmp_path / "request.json").write_text(json.dumps(initial_request()))
    (tmp_path / "script.json").write_text(json.dumps(script))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}

    run = subprocess.run(
        [
            str(APTIX),
            "run",
            "request.json",
            "--llm-script",
            "script.json",
            "--report",
            "--store",
            f"sqlite:{tmp_path / 's.db'}",
            "--record",
            "rec",
            "--redact",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
    )

    assert run.returncode == 0, run.stderr
    report = json.loads(run.stderr)
    assert report["mode_changes"][0]["new_mode"] == "review"
    assert report["mode_changes"][0]["reason"] is None
    assert leaked(run.stderr) == set()
    [recorded] = (tmp_path / "rec").iterdir()
    assert leaked(recorded.read_text()) == set()


async def host_mode_change(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """A host's own ``agent_change_mode`` executor (D29), its answer holding a secret."""
    return json.dumps({"mode": arguments["mode"], "reason": SECRETS["mode change reason"]})


@pytest.mark.decision("D29", "D162")
async def test_a_hosts_own_mode_change_keeps_its_mode_redacted_and_replays() -> None:
    pipeline = recording_pipeline(
        MemoryStore(),
        [calls(change_mode("m1", "review", SECRETS["mode change reason"])), text("ok")],
        recording=RecordingOptions(redact=True),
        tools={"agent_change_mode": host_mode_change},
    )

    report = await pipeline.run({"Instruction": SECRETS["instruction"]}, CALLER)

    assert (ok(report.result).mode_display_name, report.mode) == ("Code Review", "review")
    [recording] = recordings_of([report])
    [executed] = [c for c in recording.calls if c.name == "ToolExecutor.agent_change_mode"]
    assert json.loads(executed.answer) == {"mode": "review", "reason": REDACTED}
    assert leaked(recording.to_json()) == set()
    outcome = await replay(recording)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""
