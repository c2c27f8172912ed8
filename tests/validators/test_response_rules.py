"""AGN-033: every response rule holding and broken (``validate_response``), and the wire contract.

The rule tables have one row per rule and variant, marked with the rule they show
(§3.1 session metadata, §3.2 closed kinds, §3.4 bucket presence for both kinds,
§4.1 guarded payloads, §5.1/§5.2 tool calls and results, §6.1/§6.3 files). The
contract tests after them carry no rule marker: §3.5 serialization, parsing of
the wire JSON, and ``InvokeResult`` (§2.1).
"""

from __future__ import annotations

import base64
import hashlib
import json
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from rulecases import rule_params

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    ErrorCode,
    FileRef,
    InvokeError,
    InvokeResult,
    ToolCall,
    ToolResult,
    Usage,
)
from aptix_pipeline.validators import all_rules, validate_response

SESSION_ID = "session-1"
TURN_ID = "turn-1"
MODE = "General"
ANSWER = "Here is the answer."

CALL = ToolCall(tool_call_id="call-1", name="read_file", arguments_json='{"path": "a.py"}')
CALL_2 = ToolCall(tool_call_id="call-2", name="list_dir", arguments_json='{"path": "src"}')
RESULT = ToolResult(tool_call_id="call-1", execution_ms=12, result_json='{"lines": 3}')
FAILED = ToolResult(tool_call_id="call-2", execution_ms=3, error_message="src: no such directory")
FILE = FileRef(
    name="report.pdf",
    mime_type="application/pdf",
    url="https://files.example.com/report.pdf",
    size_bytes=1024,
    content_hash="sha256:9f86d081884c7d65",
)
EXPIRES = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
USAGE = Usage(input_tokens=10, output_tokens=5, total_tokens=15)

BLOB = base64.b64encode(bytes(range(256)) * 2).decode()
BASE64_RUN = BLOB[:300]
WRAPPED_BASE64 = "\n".join(textwrap.wrap(BLOB, 76))  # RFC 2045 line length
PNG_DATA_URI = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVQ="
BUNDLE = '{"AptixBundle": {"Files": [{"Path": "a.txt", "Content": "hello"}]}}'
SOURCE = (
    "import base64\n\n\ndef decode(text: str) -> bytes:\n"
    '    """Decode base64 text; raise on padding errors."""\n'
    "    return base64.b64decode(text, validate=True)\n\n\n"
    "ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'\n"
    "TABLE = {c: i for i, c in enumerate(ALPHABET)}\n" * 3
)
HASHES = "\n".join(
    f"sha256sum -c <<< '{hashlib.sha256(str(n).encode()).hexdigest()}  file{n}.bin'"
    for n in range(8)
)
MARKDOWN = (
    "# Result\n\nCall `read_file` with a **path**:\n\n"
    "```python\nresult = read_file(path='a.py')\nprint(result)\n```\n\n"
    "- one\n- two\n\nSee [the docs](https://docs.example.com/tools)."
)


def fenced(language: str, body: str, fence: str = "```") -> str:
    """Markdown with ``body`` in a fenced code block tagged ``language`` ("" = untagged)."""
    return f"Here you go:\n\n{fence}{language}\n{body}\n{fence}\n\nDone."


Build = Callable[[], AgentExecuteResponse]


def final(
    text: str = ANSWER,
    *,
    files: Sequence[FileRef] | None = None,
    tool_results: Sequence[ToolResult] | None = None,
    user_warnings: Sequence[str] | None = None,
    usage: Usage | None = None,
) -> Build:
    """A valid final response, built only through the kind's constructor."""

    def build() -> AgentExecuteResponse:
        return AgentExecuteResponse.final(
            session_id=SESSION_ID,
            turn_id=TURN_ID,
            mode_display_name=MODE,
            primary_output_text=text,
            files=files,
            tool_results=tool_results,
            user_warnings=user_warnings,
            usage=usage,
        )

    return build


def continuation(*calls: ToolCall, message: str | None = None) -> Build:
    """A valid client_tool_continuation response (one call unless ``calls`` are given)."""

    def build() -> AgentExecuteResponse:
        return AgentExecuteResponse.client_tool_continuation(
            session_id=SESSION_ID,
            turn_id=TURN_ID,
            mode_display_name=MODE,
            tool_calls=calls or (CALL,),
            tool_continuation_message=message,
        )

    return build


def final_with(**update: Any) -> Build:
    """A valid final response with ``update`` forced onto it, past the constructor."""
    return lambda: final()().model_copy(update=update)


def continuation_with(**update: Any) -> Build:
    """A valid continuation response with ``update`` forced onto it, past the constructor."""
    return lambda: continuation()().model_copy(update=update)


def partial_kind() -> AgentExecuteResponse:
    """A response of a kind AGN-033 does not have, as only ``model_construct`` can make it."""
    values: dict[str, Any] = {
        "session_id": SESSION_ID,
        "turn_id": TURN_ID,
        "mode_display_name": MODE,
        "kind": "partial",  # not a ResponseKind: no typed caller could pass it
        "primary_output_text": ANSWER,
    }
    return AgentExecuteResponse.model_construct(**values)


def file_ref(**update: Any) -> FileRef:
    """``FILE`` with ``update`` applied."""
    return FILE.model_copy(update=update)


def call(tool_call_id: str = "call-1", name: str = "read_file", arguments: str = "{}") -> ToolCall:
    """A tool call; defaults are valid."""
    return ToolCall(tool_call_id=tool_call_id, name=name, arguments_json=arguments)


def result(
    tool_call_id: str = "call-1",
    execution_ms: int = 5,
    result_json: str | None = None,
    error_message: str | None = None,
) -> ToolResult:
    """A tool result exactly as given (the model does not enforce the outcome rule)."""
    return ToolResult(
        tool_call_id=tool_call_id,
        execution_ms=execution_ms,
        result_json=result_json,
        error_message=error_message,
    )


@dataclass(frozen=True)
class ResponseCase:
    """A response for ``rule_id``; ``field`` is where a broken rule must be reported."""

    rule_id: str
    variant: str
    build: Build
    field: str | None = None
    decisions: tuple[str, ...] = ()


BROKEN = [
    # §4.1 text is UTF-8: a lone surrogate could not be serialized
    ResponseCase("AGN-033/4.1/text-utf8", "primary-output-surrogate",
                 final("broken \ud800 text"), "PrimaryOutputText", decisions=("D22",)),
    ResponseCase("AGN-033/4.1/text-utf8", "tool-call-arguments",
                 continuation(ToolCall(tool_call_id="c1", name="n",
                                       arguments_json='{"a": "\udfff"}')),
                 "ToolCalls[0].ArgumentsJson"),
    # §3.1 session metadata
    ResponseCase("AGN-033/3.1/session-id-present", "final-empty",
                 final_with(session_id=""), "SessionId"),
    ResponseCase("AGN-033/3.1/session-id-present", "continuation-blank",
                 continuation_with(session_id="   "), "SessionId"),
    ResponseCase("AGN-033/3.1/turn-id-present", "final-empty",
                 final_with(turn_id=""), "TurnId"),
    ResponseCase("AGN-033/3.1/turn-id-present", "continuation-blank",
                 continuation_with(turn_id=" "), "TurnId"),
    ResponseCase("AGN-033/3.1/mode-display-name-present", "final-empty",
                 final_with(mode_display_name=""), "ModeDisplayName"),
    ResponseCase("AGN-033/3.1/mode-display-name-present", "continuation-blank",
                 continuation_with(mode_display_name="\t"), "ModeDisplayName"),
    # §3.2 closed kinds
    ResponseCase("AGN-033/3.2/kind-closed", "partial-copied",
                 final_with(kind="partial"), "Kind"),
    ResponseCase("AGN-033/3.2/kind-closed", "partial-constructed", partial_kind, "Kind"),
    # §3.4 final: REQUIRED and FORBIDDEN buckets
    ResponseCase("AGN-033/3.4/final-primary-output-required", "absent",
                 final_with(primary_output_text=None), "PrimaryOutputText", decisions=("D17",)),
    ResponseCase("AGN-033/3.4/final-tool-calls-forbidden", "one-call",
                 final_with(tool_calls=[CALL]), "ToolCalls"),
    ResponseCase("AGN-033/3.4/final-tool-calls-forbidden", "empty-list",
                 final_with(tool_calls=[]), "ToolCalls"),
    ResponseCase("AGN-033/3.4/final-tool-continuation-message-forbidden", "text",
                 final_with(tool_continuation_message="Running tools."),
                 "ToolContinuationMessage"),
    ResponseCase("AGN-033/3.4/final-tool-continuation-message-forbidden", "empty-string",
                 final_with(tool_continuation_message=""), "ToolContinuationMessage"),
    # §3.4 client_tool_continuation: REQUIRED and FORBIDDEN buckets
    ResponseCase("AGN-033/3.4/continuation-tool-calls-required", "absent",
                 continuation_with(tool_calls=None), "ToolCalls"),
    ResponseCase("AGN-033/3.4/continuation-tool-calls-required", "empty-list",
                 continuation_with(tool_calls=[]), "ToolCalls"),
    ResponseCase("AGN-033/3.4/continuation-primary-output-forbidden", "text",
                 continuation_with(primary_output_text=ANSWER), "PrimaryOutputText"),
    ResponseCase("AGN-033/3.4/continuation-primary-output-forbidden", "empty-string",
                 continuation_with(primary_output_text=""), "PrimaryOutputText"),
    ResponseCase("AGN-033/3.4/continuation-tool-results-forbidden", "one-result",
                 continuation_with(tool_results=[RESULT]), "ToolResults"),
    ResponseCase("AGN-033/3.4/continuation-tool-results-forbidden", "empty-list",
                 continuation_with(tool_results=[]), "ToolResults"),
    ResponseCase("AGN-033/3.4/continuation-files-forbidden", "one-file",
                 continuation_with(files=[FILE]), "Files"),
    ResponseCase("AGN-033/3.4/continuation-files-forbidden", "empty-list",
                 continuation_with(files=[]), "Files"),
    ResponseCase("AGN-033/3.4/continuation-user-warnings-forbidden", "one-warning",
                 continuation_with(user_warnings=["Heads up."]), "UserWarnings"),
    ResponseCase("AGN-033/3.4/continuation-user-warnings-forbidden", "empty-list",
                 continuation_with(user_warnings=[]), "UserWarnings"),
    ResponseCase("AGN-033/3.4/continuation-usage-forbidden", "counted",
                 continuation_with(usage=USAGE), "Usage"),
    ResponseCase("AGN-033/3.4/continuation-usage-forbidden", "empty-usage",
                 continuation_with(usage=Usage()), "Usage"),
    # §5.1 / §3.3 tool calls
    ResponseCase("AGN-033/5.1/tool-call-fields-present", "empty-id",
                 continuation_with(tool_calls=[call(tool_call_id="")]), "ToolCalls[0]"),
    ResponseCase("AGN-033/5.1/tool-call-fields-present", "blank-id",
                 continuation_with(tool_calls=[call(tool_call_id="  ")]), "ToolCalls[0]"),
    ResponseCase("AGN-033/5.1/tool-call-fields-present", "empty-name-second-call",
                 continuation_with(tool_calls=[CALL, call("call-2", name="")]), "ToolCalls[1]"),
    ResponseCase("AGN-033/5.1/tool-call-fields-present", "blank-name",
                 continuation_with(tool_calls=[call(name=" ")]), "ToolCalls[0]"),
    ResponseCase("AGN-033/5.1/arguments-json-object", "array",
                 continuation_with(tool_calls=[call(arguments="[]")]),
                 "ToolCalls[0].ArgumentsJson", decisions=("D16",)),
    ResponseCase("AGN-033/5.1/arguments-json-object", "not-json",
                 continuation_with(tool_calls=[call(arguments="nope")]),
                 "ToolCalls[0].ArgumentsJson"),
    ResponseCase("AGN-033/5.1/arguments-json-object", "empty-text",
                 continuation_with(tool_calls=[call(arguments="")]),
                 "ToolCalls[0].ArgumentsJson"),
    ResponseCase("AGN-033/5.1/arguments-json-object", "null",
                 continuation_with(tool_calls=[call(arguments="null")]),
                 "ToolCalls[0].ArgumentsJson", decisions=("D16",)),
    ResponseCase("AGN-033/5.1/arguments-json-object", "string-holding-object",
                 continuation_with(tool_calls=[call(arguments='"{}"')]),
                 "ToolCalls[0].ArgumentsJson", decisions=("D16",)),
    ResponseCase("AGN-033/3.3/tool-call-ids-unique", "duplicate",
                 continuation_with(tool_calls=[CALL, call("call-1", name="list_dir")]),
                 "ToolCalls[1].ToolCallId"),
    # §5.2 tool results (final responses, server-executed visibility)
    ResponseCase("AGN-033/5.2/exactly-one-outcome", "both",
                 final_with(tool_results=[result(result_json="{}", error_message="boom")]),
                 "ToolResults[0]"),
    ResponseCase("AGN-033/5.2/exactly-one-outcome", "neither",
                 final_with(tool_results=[RESULT, result("call-2")]), "ToolResults[1]"),
    ResponseCase("AGN-033/5.2/tool-call-id-present", "empty",
                 final_with(tool_results=[result("", result_json="{}")]),
                 "ToolResults[0].ToolCallId"),
    ResponseCase("AGN-033/5.2/tool-call-id-present", "blank",
                 final_with(tool_results=[result("  ", result_json="{}")]),
                 "ToolResults[0].ToolCallId"),
    ResponseCase("AGN-033/5.2/tool-call-ids-unique", "duplicate",
                 final_with(tool_results=[RESULT, result("call-1", error_message="again")]),
                 "ToolResults[1].ToolCallId"),
    ResponseCase("AGN-033/5.2/execution-ms-non-negative", "minus-one",
                 final_with(tool_results=[result(execution_ms=-1, result_json="{}")]),
                 "ToolResults[0].ExecutionMs"),
    ResponseCase("AGN-033/5.2/result-json-valid", "malformed",
                 final_with(tool_results=[result(result_json="{oops")]),
                 "ToolResults[0].ResultJson"),
    ResponseCase("AGN-033/5.2/result-json-valid", "empty-text",
                 final_with(tool_results=[result(result_json="")]),
                 "ToolResults[0].ResultJson"),
    ResponseCase("AGN-033/5.2/error-message-not-blank", "empty",
                 final_with(tool_results=[result(error_message="")]),
                 "ToolResults[0].ErrorMessage"),
    ResponseCase("AGN-033/5.2/error-message-not-blank", "blank",
                 final_with(tool_results=[result(error_message="   ")]),
                 "ToolResults[0].ErrorMessage"),
    # §4.1 guarded payloads
    ResponseCase("AGN-033/4.1/guarded-payload", "untagged-fence-object",
                 final_with(primary_output_text=fenced("", BUNDLE)), "PrimaryOutputText",
                 decisions=("D14",)),
    ResponseCase("AGN-033/4.1/guarded-payload", "untagged-fence-array",
                 final_with(primary_output_text=fenced("", "[1, 2, 3]")), "PrimaryOutputText"),
    ResponseCase("AGN-033/4.1/guarded-payload", "untagged-tilde-fence-object",
                 final_with(primary_output_text=fenced("", BUNDLE, "~~~")), "PrimaryOutputText"),
    ResponseCase("AGN-033/4.1/guarded-payload", "continuation-message-untagged-fence",
                 continuation_with(tool_continuation_message=fenced("", BUNDLE)),
                 "ToolContinuationMessage"),
    ResponseCase("AGN-033/4.1/guarded-payload", "object-paragraph-in-prose",
                 final_with(primary_output_text='Result:\n\n{"files": [1]}\n\nDone.'),
                 "PrimaryOutputText", decisions=("D14",)),
    ResponseCase("AGN-033/4.1/guarded-payload", "bare-object-outside-fence",
                 final_with(primary_output_text=BUNDLE), "PrimaryOutputText"),
    # §6.1 no embedded file contents
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "data-uri-image",
                 final_with(primary_output_text=f"The chart: ![chart]({PNG_DATA_URI})"),
                 "PrimaryOutputText"),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "data-uri-in-prose",
                 final_with(primary_output_text=f"Open {PNG_DATA_URI} in a browser."),
                 "PrimaryOutputText", decisions=("D14",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "base64-run-300",
                 final_with(primary_output_text=f"The file:\n\n{BASE64_RUN}\n"),
                 "PrimaryOutputText", decisions=("D14",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "base64-run-in-untagged-fence",
                 final_with(primary_output_text=fenced("", BASE64_RUN)), "PrimaryOutputText"),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "base64-run-in-unclosed-fence",
                 final_with(primary_output_text=f"```json\n{BASE64_RUN}\n"),
                 "PrimaryOutputText"),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "base64-wrapped-at-76-columns",
                 final_with(primary_output_text=f"The file:\n\n{WRAPPED_BASE64}\n"),
                 "PrimaryOutputText", decisions=("D14",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "continuation-message-data-uri",
                 continuation_with(tool_continuation_message=f"Preview: {PNG_DATA_URI}"),
                 "ToolContinuationMessage"),
    # §6.1 inside fences: only an Aptix bundle may carry file contents (D403)
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "data-uri-in-json-fence",
                 final_with(primary_output_text=fenced("json", json.dumps({"Logo": PNG_DATA_URI}))),
                 "PrimaryOutputText", decisions=("D14", "D403")),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "base64-run-in-json-fence",
                 final_with(primary_output_text=fenced("json", json.dumps({"C": BASE64_RUN}))),
                 "PrimaryOutputText", decisions=("D14", "D403")),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "base64-run-in-python-fence",
                 final_with(primary_output_text=fenced("python", f'ICON = "{BASE64_RUN}"')),
                 "PrimaryOutputText", decisions=("D14", "D403")),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "wrapped-base64-in-text-fence",
                 final_with(primary_output_text=fenced("text", WRAPPED_BASE64)),
                 "PrimaryOutputText", decisions=("D14", "D403")),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "data-uri-in-html-fence",
                 final_with(primary_output_text=fenced("html", f'<img src="{PNG_DATA_URI}">')),
                 "PrimaryOutputText", decisions=("D14", "D403")),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "raw-base64-in-aptix-json-fence",
                 final_with(primary_output_text=fenced("aptix-json", BASE64_RUN)),
                 "PrimaryOutputText", decisions=("D403",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "continuation-message-tagged-fence",
                 continuation_with(tool_continuation_message=fenced("yaml", f"data: {BASE64_RUN}")),
                 "ToolContinuationMessage", decisions=("D403",)),
    # §6.3 FileRef
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "empty-name",
                 final_with(files=[file_ref(name="")]), "Files[0].Name"),
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "blank-mime-type",
                 final_with(files=[file_ref(mime_type="  ")]), "Files[0].MimeType"),
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "empty-url",
                 final_with(files=[file_ref(url="")]), "Files[0].Url"),
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "empty-content-hash",
                 final_with(files=[file_ref(content_hash="")]), "Files[0].ContentHash"),
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "negative-size-second-file",
                 final_with(files=[FILE, file_ref(size_bytes=-1)]), "Files[1].SizeBytes",
                 decisions=("D15",)),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "windows-drive-path",
                 final_with(files=[file_ref(url="C:\\tmp\\a.png")]), "Files[0].Url",
                 decisions=("D15",)),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "javascript",
                 final_with(files=[file_ref(url="javascript:alert(1)")]), "Files[0].Url",
                 decisions=("D15",)),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "space-in-host",
                 final_with(files=[file_ref(url="https://ex ample.com/a")]), "Files[0].Url"),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "relative",
                 final_with(files=[file_ref(url="files/a.txt")]), "Files[0].Url"),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "root-relative",
                 final_with(files=[file_ref(url="/files/a.txt")]), "Files[0].Url"),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "scheme-relative",
                 final_with(files=[file_ref(url="//files.example.com/a.txt")]), "Files[0].Url"),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "https-without-host",
                 final_with(files=[file_ref(url="https:files/a.txt")]), "Files[0].Url",
                 decisions=("D15",)),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "data-uri",
                 final_with(files=[file_ref(url="data:text/plain;base64,SGVsbG8=")]),
                 "Files[0].Url", decisions=("D15",)),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "data-uri-upper-case",
                 final_with(files=[file_ref(url=" DATA:text/plain,hello")]), "Files[0].Url"),
]  # fmt: skip

HOLDS = [
    # §3.1 session metadata
    ResponseCase("AGN-033/4.1/text-utf8", "non-ascii", final("Grüße 日本 🚀")),
    ResponseCase("AGN-033/3.1/session-id-present", "final", final()),
    ResponseCase("AGN-033/3.1/session-id-present", "continuation", continuation()),
    ResponseCase("AGN-033/3.1/turn-id-present", "final", final()),
    ResponseCase("AGN-033/3.1/turn-id-present", "continuation", continuation()),
    ResponseCase("AGN-033/3.1/mode-display-name-present", "final", final()),
    ResponseCase("AGN-033/3.1/mode-display-name-present", "continuation", continuation()),
    # §3.2 closed kinds
    ResponseCase("AGN-033/3.2/kind-closed", "final", final()),
    ResponseCase("AGN-033/3.2/kind-closed", "client-tool-continuation", continuation()),
    # §3.4 final: REQUIRED present, ALLOWED allowed, FORBIDDEN absent
    ResponseCase("AGN-033/3.4/final-primary-output-required", "markdown", final(MARKDOWN)),
    ResponseCase("AGN-033/3.4/final-tool-calls-forbidden", "absent", final()),
    ResponseCase("AGN-033/3.4/final-tool-calls-forbidden", "continuation-carries-them",
                 continuation(CALL, CALL_2)),
    ResponseCase("AGN-033/3.4/final-tool-continuation-message-forbidden", "absent", final()),
    ResponseCase("AGN-033/3.4/final-tool-continuation-message-forbidden",
                 "continuation-may-carry-it", continuation(message="Reading a.py first.")),
    # §3.4 client_tool_continuation: REQUIRED present, ALLOWED allowed, FORBIDDEN absent
    ResponseCase("AGN-033/3.4/continuation-tool-calls-required", "one-call", continuation()),
    ResponseCase("AGN-033/3.4/continuation-tool-calls-required", "two-calls",
                 continuation(CALL, CALL_2)),
    ResponseCase("AGN-033/3.4/continuation-primary-output-forbidden", "absent",
                 continuation(message="Informational only.")),
    ResponseCase("AGN-033/3.4/continuation-primary-output-forbidden", "final-carries-it",
                 final()),
    ResponseCase("AGN-033/3.4/continuation-tool-results-forbidden", "absent", continuation()),
    ResponseCase("AGN-033/3.4/continuation-tool-results-forbidden", "final-may-carry-them",
                 final(tool_results=[RESULT, FAILED])),
    ResponseCase("AGN-033/3.4/continuation-files-forbidden", "absent", continuation()),
    ResponseCase("AGN-033/3.4/continuation-files-forbidden", "final-may-carry-them",
                 final(files=[FILE])),
    ResponseCase("AGN-033/3.4/continuation-files-forbidden", "final-may-carry-empty-list",
                 final(files=[])),
    ResponseCase("AGN-033/3.4/continuation-user-warnings-forbidden", "absent", continuation()),
    ResponseCase("AGN-033/3.4/continuation-user-warnings-forbidden", "final-may-carry-them",
                 final(user_warnings=["Two files were skipped."])),
    ResponseCase("AGN-033/3.4/continuation-usage-forbidden", "absent", continuation()),
    ResponseCase("AGN-033/3.4/continuation-usage-forbidden", "final-may-carry-it",
                 final(usage=USAGE)),
    # §5.1 / §3.3 tool calls
    ResponseCase("AGN-033/5.1/tool-call-fields-present", "set", continuation(CALL, CALL_2)),
    ResponseCase("AGN-033/5.1/arguments-json-object", "object", continuation()),
    ResponseCase("AGN-033/5.1/arguments-json-object", "empty-object",
                 continuation(call(arguments="{}"))),
    ResponseCase("AGN-033/5.1/arguments-json-object", "nested-object",
                 continuation(call(arguments='{"options": {"depth": 2, "paths": ["a"]}}'))),
    ResponseCase("AGN-033/3.3/tool-call-ids-unique", "distinct", continuation(CALL, CALL_2)),
    # §5.2 tool results
    ResponseCase("AGN-033/5.2/exactly-one-outcome", "result-json",
                 final(tool_results=[RESULT])),
    ResponseCase("AGN-033/5.2/exactly-one-outcome", "tool-failure",
                 final(tool_results=[FAILED])),
    ResponseCase("AGN-033/5.2/tool-call-id-present", "set", final(tool_results=[RESULT])),
    ResponseCase("AGN-033/5.2/tool-call-ids-unique", "distinct",
                 final(tool_results=[RESULT, FAILED])),
    ResponseCase("AGN-033/5.2/execution-ms-non-negative", "zero",
                 final(tool_results=[result(execution_ms=0, result_json="{}")])),
    ResponseCase("AGN-033/5.2/result-json-valid", "object", final(tool_results=[RESULT])),
    ResponseCase("AGN-033/5.2/result-json-valid", "scalar",
                 final(tool_results=[result(result_json="42")])),
    ResponseCase("AGN-033/5.2/error-message-not-blank", "message",
                 final(tool_results=[FAILED])),
    # §4.1 guarded payloads
    ResponseCase("AGN-033/4.1/guarded-payload", "aptix-json-fence",
                 final(fenced("aptix-json", BUNDLE))),
    ResponseCase("AGN-033/4.1/guarded-payload", "json-fence", final(fenced("json", BUNDLE))),
    ResponseCase("AGN-033/4.1/guarded-payload", "tilde-aptix-json-fence",
                 final(fenced("aptix-json", BUNDLE, "~~~"))),
    ResponseCase("AGN-033/4.1/guarded-payload", "untagged-fence-with-shell",
                 final(fenced("", "ls -la src/"))),
    ResponseCase("AGN-033/4.1/guarded-payload", "markdown-with-code", final(MARKDOWN)),
    ResponseCase("AGN-033/4.1/guarded-payload", "prose-paragraph-of-scalars",
                 final("The indices are:\n\n[1, 2, 3]\n\nas expected."), decisions=("D14",)),
    ResponseCase("AGN-033/4.1/guarded-payload", "continuation-message-tagged-fence",
                 continuation(message=fenced("json", '{"step": 1}'))),
    # §6.1 no embedded file contents
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "data-uri-in-aptix-json-fence",
                 final(fenced("aptix-json", json.dumps({"Image": PNG_DATA_URI})))),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "base64-run-in-aptix-json-bundle",
                 final(fenced("aptix-json", json.dumps({"Content": BASE64_RUN}))),
                 decisions=("D403",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "wrapped-base64-in-bundle-array",
                 final(fenced("APTIX-JSON", json.dumps([{"Content": WRAPPED_BASE64}], indent=1))),
                 decisions=("D403",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "source-code-in-python-fence",
                 final(fenced("python", SOURCE)), decisions=("D403",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "hashes-in-shell-fence",
                 final(fenced("sh", HASHES)), decisions=("D403",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "long-url-path",
                 final("See https://example.com/" + "docs/" * 60 + "index.html")),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "long-lowercase-word",
                 final("a" * 300), decisions=("D14",)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "markdown-with-code",
                 final(MARKDOWN)),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "content-hash-in-prose",
                 final("The file's SHA-256 is " + "9f86d081884c7d65" * 4 + ".")),
    ResponseCase("AGN-033/6.1/no-embedded-file-contents", "file-by-reference",
                 final("The report is attached below.", files=[FILE])),
    # §6.3 FileRef
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "complete", final(files=[FILE])),
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "empty-file",
                 final(files=[file_ref(size_bytes=0)])),
    ResponseCase("AGN-033/6.3/file-ref-fields-present", "with-optional-fields",
                 final(files=[file_ref(description="Q4", content_expires=EXPIRES)])),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "https", final(files=[FILE])),
    ResponseCase("AGN-033/6.3/file-ref-url-absolute", "https-signed",
                 final(files=[file_ref(url="https://files.example.com/a.txt?sig=abc&exp=1")])),
]  # fmt: skip


@pytest.mark.parametrize("case", rule_params(BROKEN, "broken"))
def test_broken_response_rule_is_reported_on_its_field(case: ResponseCase) -> None:
    response = case.build()

    result = validate_response(response)

    assert not result.successful
    assert result.result is None
    assert case.rule_id in result.rule_ids
    reported_at = [error.field for error in result.errors if error.rule_id == case.rule_id]
    assert case.field in reported_at
    assert {error.code for error in result.errors} == {ErrorCode.INVALID_RESPONSE}


@pytest.mark.parametrize("case", rule_params(HOLDS, "holds"))
def test_holding_response_rule_is_not_reported(case: ResponseCase) -> None:
    response = case.build()

    result = validate_response(response)

    assert case.rule_id not in result.rule_ids
    assert result.successful, result.errors


def test_every_agn033_rule_has_a_holding_and_a_breaking_case() -> None:
    # The wire-only rules of parse_response have their cases in test_response_parsing.py.
    # Only validate_response's rules; the engine's steps declare their own AGN-033 rules.
    agn033_ids = {
        rule_id
        for rule_id, declared in all_rules().items()
        if rule_id.startswith("AGN-033/")
        and declared.module == "aptix_pipeline.validators.response"
        and rule_id not in ("AGN-033/3/response-shape", "AGN-033/3.5/absent-not-null")
    }

    assert agn033_ids == {case.rule_id for case in BROKEN}
    assert agn033_ids == {case.rule_id for case in HOLDS}


@pytest.mark.rule("AGN-033/3.4/continuation-primary-output-forbidden", "broken")
@pytest.mark.rule("AGN-033/3.4/continuation-tool-results-forbidden", "broken")
@pytest.mark.rule("AGN-033/3.4/continuation-files-forbidden", "broken")
@pytest.mark.rule("AGN-033/3.4/continuation-user-warnings-forbidden", "broken")
@pytest.mark.rule("AGN-033/3.4/continuation-usage-forbidden", "broken")
def test_every_forbidden_continuation_bucket_is_reported_at_once() -> None:
    response = continuation_with(
        primary_output_text="", tool_results=[], files=[], user_warnings=[], usage=Usage()
    )()

    result = validate_response(response)

    assert result.rule_ids == (
        "AGN-033/3.4/continuation-primary-output-forbidden",
        "AGN-033/3.4/continuation-tool-results-forbidden",
        "AGN-033/3.4/continuation-files-forbidden",
        "AGN-033/3.4/continuation-user-warnings-forbidden",
        "AGN-033/3.4/continuation-usage-forbidden",
    )


def test_validating_a_response_does_not_change_it() -> None:
    response = final_with(tool_calls=[], files=[file_ref(url="files/a.txt")])()
    before = response.model_dump()

    validate_response(response)

    assert response.model_dump() == before


@pytest.mark.decision("D17")
@given(text=st.text())
def test_validating_any_primary_output_text_returns_a_result(text: str) -> None:
    response = final(text)()

    result = validate_response(response)

    assert set(result.rule_ids) <= {
        "AGN-033/4.1/guarded-payload",
        "AGN-033/6.1/no-embedded-file-contents",
    }


# --- §3.5 serialization: absence is meaningful, wire names are the DDR's -------------------


def _wire(response: AgentExecuteResponse) -> dict[str, Any]:
    wire: dict[str, Any] = json.loads(response.to_json())
    return wire


def test_final_json_has_no_continuation_keys_at_all() -> None:
    response = final(files=[FILE], tool_results=[RESULT], user_warnings=["w"], usage=USAGE)()

    wire = _wire(response)

    assert set(wire) == {
        "SessionId",
        "TurnId",
        "ModeDisplayName",
        "Kind",
        "PrimaryOutputText",
        "Files",
        "ToolResults",
        "UserWarnings",
        "Usage",
    }
    assert None not in wire.values()


def test_bare_final_json_has_only_metadata_kind_and_text() -> None:
    wire = _wire(final()())

    assert wire == {
        "SessionId": SESSION_ID,
        "TurnId": TURN_ID,
        "ModeDisplayName": MODE,
        "Kind": "final",
        "PrimaryOutputText": ANSWER,
    }


def test_continuation_json_has_no_final_keys_at_all() -> None:
    response = continuation(CALL, message="Reading a.py.")()

    wire = _wire(response)

    assert set(wire) == {
        "SessionId",
        "TurnId",
        "ModeDisplayName",
        "Kind",
        "ToolCalls",
        "ToolContinuationMessage",
    }
    assert wire["Kind"] == "client_tool_continuation"


def test_continuation_without_message_omits_the_message_key() -> None:
    wire = _wire(continuation()())

    assert "ToolContinuationMessage" not in wire


def test_explicitly_empty_allowed_bucket_stays_an_empty_list() -> None:
    response = final(files=[], user_warnings=[])()

    wire = _wire(response)

    assert wire["Files"] == []
    assert wire["UserWarnings"] == []


@pytest.mark.decision("D21", "D23")
def test_wire_keys_are_the_ddr_pascal_case_names() -> None:
    file = file_ref(description="Quarterly report", content_expires=EXPIRES)
    final_wire = _wire(final(files=[file], tool_results=[RESULT], usage=USAGE)())
    continuation_wire = _wire(continuation()())

    assert set(final_wire["Files"][0]) == {
        "Name",
        "MimeType",
        "Url",
        "SizeBytes",
        "ContentHash",
        "Description",
        "ContentExpires",
    }
    assert set(final_wire["ToolResults"][0]) == {"ToolCallId", "ExecutionMs", "ResultJson"}
    assert set(final_wire["Usage"]) == {"InputTokens", "OutputTokens", "TotalTokens"}
    assert set(continuation_wire["ToolCalls"][0]) == {"ToolCallId", "Name", "ArgumentsJson"}
    assert {"SessionId", "TurnId", "ModeDisplayName", "PrimaryOutputText"} <= set(final_wire)


ROUND_TRIP = [
    pytest.param(final(), id="final-bare"),
    pytest.param(final(MARKDOWN, files=[], user_warnings=[]), id="final-empty-buckets"),
    pytest.param(
        final(
            fenced("aptix-json", BUNDLE),
            files=[FILE, file_ref(name="b.csv", description="d", content_expires=EXPIRES)],
            tool_results=[RESULT, FAILED],
            user_warnings=["Two files were skipped."],
            usage=USAGE,
        ),
        id="final-every-bucket",
    ),
    pytest.param(continuation(), id="continuation-bare"),
    pytest.param(continuation(CALL, CALL_2, message="Reading."), id="continuation-with-message"),
]


@pytest.mark.parametrize("build", ROUND_TRIP)
def test_response_survives_a_json_round_trip(build: Build) -> None:
    response = build()

    parsed = AgentExecuteResponse.model_validate_json(response.to_json())

    assert parsed == response
    assert parsed.to_json() == response.to_json()


@given(
    text=st.text(),
    warnings=st.none() | st.lists(st.text(), max_size=3),
    size=st.integers(min_value=0, max_value=2**53),
)
def test_any_final_response_survives_a_json_round_trip(
    text: str, warnings: list[str] | None, size: int
) -> None:
    response = final(text, files=[file_ref(size_bytes=size)], user_warnings=warnings)()

    parsed = AgentExecuteResponse.model_validate_json(response.to_json())

    assert parsed == response


# --- parsing the wire JSON -----------------------------------------------------------------


def _final_json(**changes: Any) -> str:
    wire = _wire(final(files=[FILE])())
    wire.update(changes)
    return json.dumps(wire)


def _file_json(**changes: Any) -> str:
    wire = _wire(final(files=[FILE])())
    wire["Files"][0].update(changes)
    return json.dumps(wire)


@pytest.mark.decision("D15")
@pytest.mark.parametrize(
    ("expires", "expected"),
    [
        ("2026-01-02T03:04:05Z", EXPIRES),
        ("2026-01-02T03:04:05.000+00:00", EXPIRES),
        ("2026-01-02T04:04:05+01:00", EXPIRES.astimezone(timezone(timedelta(hours=1)))),
    ],
)
def test_file_ref_content_expires_parses_from_iso_8601(expires: str, expected: datetime) -> None:
    text = _file_json(ContentExpires=expires)

    response = AgentExecuteResponse.model_validate_json(text)

    assert response.files is not None
    assert response.files[0].content_expires == expected


@pytest.mark.decision("D15")
@pytest.mark.parametrize("expires", ["tomorrow", 12345, "next week", ""])
def test_file_ref_content_expires_that_is_not_iso_8601_is_rejected_at_parse(
    expires: object,
) -> None:
    text = _file_json(ContentExpires=expires)

    with pytest.raises(ValidationError, match="ContentExpires"):
        AgentExecuteResponse.model_validate_json(text)


@pytest.mark.parametrize("missing", ["Name", "MimeType", "Url", "SizeBytes", "ContentHash"])
def test_file_ref_without_a_required_field_is_rejected_at_parse(missing: str) -> None:
    wire = _wire(final(files=[FILE])())
    del wire["Files"][0][missing]

    with pytest.raises(ValidationError, match=missing):
        AgentExecuteResponse.model_validate_json(json.dumps(wire))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_final_json(Diagnostics={"trace": []}), id="top-level"),
        pytest.param(_final_json(PreviousResponseId="resp_1"), id="server-only-id"),
        pytest.param(_file_json(Inline="SGVsbG8="), id="inside-file-ref"),
    ],
)
def test_unknown_key_in_response_json_is_rejected(text: str) -> None:
    with pytest.raises(ValidationError):
        AgentExecuteResponse.model_validate_json(text)


def test_unknown_key_in_tool_call_json_is_rejected() -> None:
    wire = _wire(continuation()())
    wire["ToolCalls"][0]["Arguments"] = {"path": "a.py"}

    with pytest.raises(ValidationError, match="Arguments"):
        AgentExecuteResponse.model_validate_json(json.dumps(wire))


@pytest.mark.parametrize("kind", ["partial", "Final", "streaming", "", None])
def test_kind_outside_the_closed_set_is_rejected_at_parse(kind: str | None) -> None:
    text = _final_json(Kind=kind)

    with pytest.raises(ValidationError, match="Kind"):
        AgentExecuteResponse.model_validate_json(text)


def test_response_json_without_kind_is_rejected_at_parse() -> None:
    wire = _wire(final()())
    del wire["Kind"]

    with pytest.raises(ValidationError, match="Kind"):
        AgentExecuteResponse.model_validate_json(json.dumps(wire))


# --- InvokeResult (§2.1) -------------------------------------------------------------------

ERROR = InvokeError(
    code=ErrorCode.INVALID_RESPONSE,
    message="a final response must include exactly one PrimaryOutputText",
    rule_id="AGN-033/3.4/final-primary-output-required",
)


def test_unsuccessful_result_carrying_a_response_is_refused() -> None:
    with pytest.raises(ValidationError, match="Result must be null"):
        InvokeResult[AgentExecuteResponse](successful=False, result=final()(), errors=(ERROR,))


def test_unsuccessful_result_without_errors_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least one error"):
        InvokeResult[AgentExecuteResponse](successful=False)


def test_successful_result_with_errors_is_refused() -> None:
    with pytest.raises(ValidationError, match="carries no Errors"):
        InvokeResult[AgentExecuteResponse](successful=True, result=final()(), errors=(ERROR,))


def test_failure_json_has_a_null_result_and_errors_with_rule_ids() -> None:
    failure = InvokeResult[AgentExecuteResponse].failure([ERROR])

    wire = json.loads(failure.to_json())

    assert wire["Successful"] is False
    assert "Result" in wire
    assert wire["Result"] is None
    assert wire["Errors"] == [
        {
            "Code": "invalid_response",
            "Message": "a final response must include exactly one PrimaryOutputText",
            "RuleId": "AGN-033/3.4/final-primary-output-required",
        }
    ]


def test_error_json_omits_absent_optional_fields() -> None:
    error = InvokeError(
        code=ErrorCode.INVALID_RESPONSE,
        message="m",
        rule_id="AGN-033/3.4/final-tool-calls-forbidden",
        field="ToolCalls",
    )

    wire = json.loads(InvokeResult[AgentExecuteResponse].failure([error]).to_json())

    assert set(wire["Errors"][0]) == {"Code", "Message", "RuleId", "Field"}


def test_success_json_carries_the_response_in_wire_form() -> None:
    response = final(files=[])()

    wire = json.loads(InvokeResult[AgentExecuteResponse].success(response).to_json())

    assert wire["Successful"] is True
    assert wire["Result"] == _wire(response)
    assert wire["Errors"] == []


def test_failed_validation_serializes_with_the_broken_rule_ids() -> None:
    response = final_with(tool_calls=[])()

    wire = json.loads(validate_response(response).to_json())

    assert wire["Result"] is None
    assert [error["RuleId"] for error in wire["Errors"]] == [
        "AGN-033/3.4/final-tool-calls-forbidden"
    ]
    assert wire["Errors"][0]["Field"] == "ToolCalls"
    assert "ToolCallId" not in wire["Errors"][0]
