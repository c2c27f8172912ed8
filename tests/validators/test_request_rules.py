"""AGN-034: every request rule, holding and broken (``parse_request``), and the request model.

Each case is a wire request (a PascalCase JSON object, or JSON text) that either keeps a
rule or breaks it; the broken cases name the field the error must point at (a JSON path
such as ``InputArtifacts[0].RelativePath``). AGN-036 §3.1 decides what counts as an empty
id; docs/CONFORMANCE.md lists the decisions where AGN-034 is silent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

import pytest
from builders import request_data
from rulecases import rule_params

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    ArtifactEncoding,
    ArtifactOrigin,
    ContextType,
    ErrorCode,
    InputArtifact,
    ToolResult,
)
from aptix_pipeline.validators import all_rules, classify_request, parse_request

INITIAL = ContextType.INITIAL
FOLLOW_ON = ContextType.FOLLOW_ON
CONTINUATION = ContextType.CLIENT_TOOL_CALL_CONTINUATION
PNG_BASE64 = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode("ascii")


class _Absent(Enum):
    ABSENT = auto()


ABSENT = _Absent.ABSENT
"""A change that removes the key instead of setting it."""

Changes = Mapping[str, object]
RequestInput = AgentExecuteRequest | Mapping[str, Any] | str | bytes


def _changed(base: Mapping[str, Any], changes: Changes | None) -> dict[str, Any]:
    data = dict(base)
    for key, value in (changes or {}).items():
        if value is ABSENT:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def _initial(changes: Changes | None = None) -> dict[str, Any]:
    return _changed(request_data(INITIAL), changes)


def _follow_on(changes: Changes | None = None) -> dict[str, Any]:
    return _changed(request_data(FOLLOW_ON), changes)


def _continuation(changes: Changes | None = None) -> dict[str, Any]:
    return _changed(request_data(CONTINUATION), changes)


def _artifact(changes: Changes | None = None) -> dict[str, Any]:
    base = {"RelativePath": "src/x.py", "FileName": "x.py", "Contents": "x = 1", "Origin": "ide"}
    return _changed(base, changes)


def _image(changes: Changes | None = None) -> dict[str, Any]:
    base = {"Id": "img-1", "MimeType": "image/png", "DataBase64": PNG_BASE64}
    return _changed(base, changes)


def _condition(changes: Changes | None = None) -> dict[str, Any]:
    base = {"Key": "language", "Operator": "==", "Values": ["python"]}
    return _changed(base, changes)


def _result(changes: Changes | None = None) -> dict[str, Any]:
    base = {"ToolCallId": "call-1", "ExecutionMs": 12, "ResultJson": '{"text": "x = 1"}'}
    return _changed(base, changes)


def _with_artifact(changes: Changes | None = None) -> dict[str, Any]:
    """A user turn whose only input is one artifact, changed by ``changes``."""
    return _initial({"Instruction": ABSENT, "InputArtifacts": [_artifact(changes)]})


def _with_image(changes: Changes | None = None) -> dict[str, Any]:
    """A user turn whose only input is one clipboard image, changed by ``changes``."""
    return _initial({"Instruction": ABSENT, "ClipboardImages": [_image(changes)]})


def _with_condition(changes: Changes | None = None) -> dict[str, Any]:
    return _initial({"RagScope": [_condition(changes)]})


def _with_results(*results: dict[str, Any]) -> dict[str, Any]:
    return _continuation({"ToolResults": list(results)})


def _with_result(changes: Changes | None = None) -> dict[str, Any]:
    return _with_results(_result(changes))


def _deeply_nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@dataclass(frozen=True)
class RequestCase:
    """A wire request (object or JSON text) that keeps or breaks ``rule_id``.

    Broken cases name the ``field`` the error points at (``None``: the whole request).
    Holding cases say whether the request as a whole is ``valid``.
    """

    rule_id: str
    variant: str
    request: Mapping[str, Any] | str
    field: str | None = None
    valid: bool = True
    decisions: tuple[str, ...] = ()


ENVELOPE = "AGN-034/3/envelope-object"
SERVER_OWNED = "AGN-034/3/server-owned-field"
UNKNOWN = "AGN-034/3/unknown-field"
FIELD_TYPE = "AGN-034/3/field-type"
PAIR = "AGN-034/3/session-turn-pair"
INPUT_REQUIRED = "AGN-034/2.1/input-required"
RESULTS_FORBIDDEN = "AGN-034/2.1/tool-results-forbidden"
RESULTS_REQUIRED = "AGN-034/2.2/tool-results-required"
INSTRUCTION_FORBIDDEN = "AGN-034/2.2/instruction-forbidden"
ARTIFACTS_FORBIDDEN = "AGN-034/2.2/input-artifacts-forbidden"
IMAGES_FORBIDDEN = "AGN-034/2.2/clipboard-images-forbidden"
CONTEXT_FORBIDDEN = "AGN-034/2.2/context-inputs-forbidden"
STREAM_FORBIDDEN = "AGN-034/2.2/stream-forbidden"
ARTIFACT_SHAPE = "AGN-034/4.2/artifact-shape"
NAMES_PRESENT = "AGN-034/4.2/artifact-names-present"
NOT_ABSOLUTE = "AGN-034/4.2/relative-path-not-absolute"
WITHIN_ROOT = "AGN-034/4.2/relative-path-within-root"
CONTENTS_BASE64 = "AGN-034/4.2/base64-contents-valid"
IMAGE_SHAPE = "AGN-034/4.3/clipboard-image-shape"
IMAGE_ID = "AGN-034/4.3/clipboard-id-present"
IMAGE_MIME = "AGN-034/4.3/clipboard-mime-image"
IMAGE_BASE64 = "AGN-034/4.3/clipboard-data-base64-valid"
RAG_SHAPE = "AGN-034/4.4/rag-condition-shape"
RAG_KEY = "AGN-034/4.4/rag-key-present"
RAG_VALUES = "AGN-034/4.4/rag-values-present"
RESULT_SHAPE = "AGN-034/5/tool-result-shape"
ONE_OUTCOME = "AGN-034/5/exactly-one-outcome"
CALL_ID_PRESENT = "AGN-034/5/tool-call-id-present"
CALL_IDS_UNIQUE = "AGN-034/5/tool-call-ids-unique"
MS_NON_NEGATIVE = "AGN-034/5/execution-ms-non-negative"
RESULT_JSON = "AGN-034/5/result-json-valid"
ERROR_NOT_BLANK = "AGN-034/5/error-message-not-blank"
TEXT_UTF8 = "AGN-034/4.1/text-utf8"

C = RequestCase
PATH0 = "InputArtifacts[0].RelativePath"

BROKEN = [
    # §3: the request is one JSON object.
    C(ENVELOPE, "array", "[]", None),
    C(ENVELOPE, "number", "3", None),
    C(ENVELOPE, "string", '"Explain this file."', None),
    C(ENVELOPE, "null", "null", None),
    C(ENVELOPE, "not-json", "nope", None),
    C(ENVELOPE, "empty-text", "", None),
    C(ENVELOPE, "truncated-object", '{"Instruction": "x"', None),
    C(ENVELOPE, "nested-60-deep", _deeply_nested(60), None),
    C(ENVELOPE, "nan-is-not-json", '{"Instruction": "x", "Stream": NaN}', None, decisions=("D22",)),
    # §4.1: text is UTF-8; a lone surrogate has no UTF-8 encoding.
    C(TEXT_UTF8, "instruction-lone-surrogate", '{"Instruction": "Explain \\ud800 this."}',
      "Instruction", decisions=("D22",)),
    C(TEXT_UTF8, "artifact-contents", _with_artifact({"Contents": "x\udfff"}),
      "InputArtifacts[0].Contents"),
    C(TEXT_UTF8, "unknown-key", _initial({"K\ud800": 1}), "K\\ud800", decisions=("D22",)),
    # §2.1, §3: mode, correlation, diagnostics and provider state are server-owned.
    C(SERVER_OWNED, "Mode", _initial({"Mode": "coding"}), "Mode"),
    C(SERVER_OWNED, "mode", _initial({"mode": "coding"}), "mode", decisions=("D10",)),
    C(SERVER_OWNED, "ModeId", _follow_on({"ModeId": "coding"}), "ModeId", decisions=("D10",)),
    C(SERVER_OWNED, "CorrelationId", _initial({"CorrelationId": "corr-1"}), "CorrelationId"),
    C(SERVER_OWNED, "previous_response_id", _follow_on({"previous_response_id": "resp-1"}),
      "previous_response_id", decisions=("D10",)),
    C(SERVER_OWNED, "PreviousResponseId", _initial({"PreviousResponseId": "resp-1"}),
      "PreviousResponseId"),
    C(SERVER_OWNED, "ProviderContinuationId", _continuation({"ProviderContinuationId": "p-1"}),
      "ProviderContinuationId"),
    C(SERVER_OWNED, "Diagnostics", _initial({"Diagnostics": {}}), "Diagnostics"),
    C(SERVER_OWNED, "TraceId", _initial({"TraceId": "t-1"}), "TraceId", decisions=("D10",)),
    C(SERVER_OWNED, "Model", _initial({"Model": "gpt"}), "Model", decisions=("D10",)),
    # §3: nothing outside the contract, at the top or nested; the wire is PascalCase.
    C(UNKNOWN, "top-level", _initial({"Priority": 1}), "Priority", decisions=("D10",)),
    C(UNKNOWN, "snake-session_id", _initial({"session_id": "session-1"}), "session_id",
      decisions=("D23",)),
    C(UNKNOWN, "snake-instruction", _initial({"instruction": "x"}), "instruction"),
    C(UNKNOWN, "snake-tool_results", _continuation({"tool_results": []}), "tool_results"),
    C(UNKNOWN, "camel-sessionId", _initial({"sessionId": "session-1"}), "sessionId",
      decisions=("D23",)),
    C(UNKNOWN, "artifact", _with_artifact({"Size": 5}), "InputArtifacts[0].Size"),
    C(UNKNOWN, "artifact-snake", _with_artifact({"file_name": "x.py"}),
      "InputArtifacts[0].file_name"),
    C(UNKNOWN, "image", _with_image({"Width": 5}), "ClipboardImages[0].Width"),
    C(UNKNOWN, "rag-condition", _with_condition({"Boost": 2}), "RagScope[0].Boost"),
    C(UNKNOWN, "workspace-hints", _initial({"WorkspaceHints": {"Branch": "main"}}),
      "WorkspaceHints.Branch"),
    C(UNKNOWN, "tool-result", _with_result({"Name": "read_file"}), "ToolResults[0].Name"),
    C(UNKNOWN, "tool-result-mode", _with_result({"Mode": "coding"}), "ToolResults[0].Mode"),
    # §3, §4: field types.
    C(FIELD_TYPE, "stream-string", _initial({"Stream": "true"}), "Stream"),
    C(FIELD_TYPE, "stream-number", _initial({"Stream": 1}), "Stream"),
    C(FIELD_TYPE, "session-id-number", _follow_on({"SessionId": 5}), "SessionId"),
    C(FIELD_TYPE, "turn-id-bool", _follow_on({"TurnId": True}), "TurnId"),
    C(FIELD_TYPE, "instruction-list", _initial({"Instruction": ["x"]}), "Instruction"),
    C(FIELD_TYPE, "solution-context-number", _initial({"SolutionContextText": 5}),
      "SolutionContextText"),
    C(FIELD_TYPE, "agent-context-id-object", _initial({"AgentContextId": {}}), "AgentContextId"),
    C(FIELD_TYPE, "workspace-hints-string", _initial({"WorkspaceHints": "repo"}),
      "WorkspaceHints"),
    C(FIELD_TYPE, "workspace-hint-number", _initial({"WorkspaceHints": {"RepositoryName": 5}}),
      "WorkspaceHints.RepositoryName"),
    # §3: SessionId and TurnId come together; an empty id is an absent id.
    C(PAIR, "session-only", _follow_on({"TurnId": ABSENT}), "TurnId"),
    C(PAIR, "turn-only", _follow_on({"SessionId": ABSENT}), "SessionId"),
    C(PAIR, "empty-session", _follow_on({"SessionId": ""}), "SessionId", decisions=("D1",)),
    C(PAIR, "empty-turn", _follow_on({"TurnId": ""}), "TurnId", decisions=("D1",)),
    C(PAIR, "continuation-without-turn", _continuation({"TurnId": ABSENT}), "TurnId"),
    # §2.1: a user turn needs at least one input.
    C(INPUT_REQUIRED, "initial-nothing", _initial({"Instruction": ABSENT}), "Instruction"),
    C(INPUT_REQUIRED, "empty-object", "{}", "Instruction"),
    C(INPUT_REQUIRED, "follow-on-nothing", _follow_on({"Instruction": ABSENT}), "Instruction"),
    C(INPUT_REQUIRED, "empty-instruction", _initial({"Instruction": ""}), "Instruction"),
    C(INPUT_REQUIRED, "blank-instruction", _follow_on({"Instruction": " \n\t"}), "Instruction",
      decisions=("D2",)),
    C(INPUT_REQUIRED, "empty-lists", _initial({"Instruction": ABSENT, "InputArtifacts": [],
                                               "ClipboardImages": []}), "Instruction"),
    # §2.1, §5: tool results only with the ids of the turn that asked for them.
    C(RESULTS_FORBIDDEN, "initial", _initial({"ToolResults": [_result()]}), "ToolResults",
      decisions=("D4",)),
    C(RESULTS_FORBIDDEN, "initial-empty-ids",
      _initial({"SessionId": "", "TurnId": "", "ToolResults": [_result()]}), "ToolResults",
      decisions=("D1", "D4")),
    # §2.2: a continuation carries one or more results ...
    C(RESULTS_REQUIRED, "empty-list", _continuation({"ToolResults": []}), "ToolResults",
      decisions=("D4",)),
    # ... and nothing else: present, even empty or false, is forbidden.
    C(INSTRUCTION_FORBIDDEN, "text", _continuation({"Instruction": "Go on."}), "Instruction"),
    C(INSTRUCTION_FORBIDDEN, "empty", _continuation({"Instruction": ""}), "Instruction",
      decisions=("D3",)),
    C(ARTIFACTS_FORBIDDEN, "one", _continuation({"InputArtifacts": [_artifact()]}),
      "InputArtifacts"),
    C(ARTIFACTS_FORBIDDEN, "empty-list", _continuation({"InputArtifacts": []}), "InputArtifacts",
      decisions=("D3",)),
    C(IMAGES_FORBIDDEN, "one", _continuation({"ClipboardImages": [_image()]}), "ClipboardImages"),
    C(IMAGES_FORBIDDEN, "empty-list", _continuation({"ClipboardImages": []}), "ClipboardImages",
      decisions=("D3",)),
    C(CONTEXT_FORBIDDEN, "rag-scope", _continuation({"RagScope": [_condition()]}), "RagScope"),
    C(CONTEXT_FORBIDDEN, "rag-scope-empty", _continuation({"RagScope": []}), "RagScope",
      decisions=("D3",)),
    C(CONTEXT_FORBIDDEN, "solution-context", _continuation({"SolutionContextText": "repo"}),
      "SolutionContextText"),
    C(CONTEXT_FORBIDDEN, "solution-context-empty", _continuation({"SolutionContextText": ""}),
      "SolutionContextText", decisions=("D3",)),
    C(CONTEXT_FORBIDDEN, "workspace-hints-empty", _continuation({"WorkspaceHints": {}}),
      "WorkspaceHints", decisions=("D3",)),
    C(CONTEXT_FORBIDDEN, "agent-context-id", _continuation({"AgentContextId": "coder"}),
      "AgentContextId", decisions=("D3",)),
    C(CONTEXT_FORBIDDEN, "agent-context-id-empty", _continuation({"AgentContextId": ""}),
      "AgentContextId", decisions=("D3",)),
    C(CONTEXT_FORBIDDEN, "conversation-context-id",
      _continuation({"ConversationContextId": "default"}), "ConversationContextId",
      decisions=("D3",)),
    C(STREAM_FORBIDDEN, "true", _continuation({"Stream": True}), "Stream"),
    C(STREAM_FORBIDDEN, "false", _continuation({"Stream": False}), "Stream", decisions=("D3",)),
    # §4.2: artifact shape.
    C(ARTIFACT_SHAPE, "no-relative-path", _with_artifact({"RelativePath": ABSENT}), PATH0),
    C(ARTIFACT_SHAPE, "no-file-name", _with_artifact({"FileName": ABSENT}),
      "InputArtifacts[0].FileName"),
    C(ARTIFACT_SHAPE, "no-contents", _with_artifact({"Contents": ABSENT}),
      "InputArtifacts[0].Contents"),
    C(ARTIFACT_SHAPE, "no-origin", _with_artifact({"Origin": ABSENT}),
      "InputArtifacts[0].Origin"),
    C(ARTIFACT_SHAPE, "origin-disk", _with_artifact({"Origin": "disk"}),
      "InputArtifacts[0].Origin"),
    C(ARTIFACT_SHAPE, "encoding-utf16", _with_artifact({"Encoding": "utf16"}),
      "InputArtifacts[0].Encoding"),
    C(ARTIFACT_SHAPE, "contents-number", _with_artifact({"Contents": 5}),
      "InputArtifacts[0].Contents"),
    C(ARTIFACT_SHAPE, "artifact-not-object", _initial({"InputArtifacts": ["x.py"]}),
      "InputArtifacts[0]"),
    C(ARTIFACT_SHAPE, "not-a-list", _initial({"InputArtifacts": _artifact()}), "InputArtifacts"),
    C(NAMES_PRESENT, "empty-relative-path", _with_artifact({"RelativePath": ""}), PATH0,
      decisions=("D1",)),
    C(NAMES_PRESENT, "empty-file-name", _with_artifact({"FileName": ""}),
      "InputArtifacts[0].FileName", decisions=("D1",)),
    # §4.2: no absolute paths.
    C(NOT_ABSOLUTE, "posix-root", _with_artifact({"RelativePath": "/etc/x"}), PATH0,
      decisions=("D9",)),
    C(NOT_ABSOLUTE, "windows-drive-backslash", _with_artifact({"RelativePath": "C:\\x"}), PATH0,
      decisions=("D9",)),
    C(NOT_ABSOLUTE, "windows-drive-slash", _with_artifact({"RelativePath": "C:/x"}), PATH0),
    C(NOT_ABSOLUTE, "unc-share", _with_artifact({"RelativePath": "\\\\server\\share"}), PATH0,
      decisions=("D9",)),
    C(NOT_ABSOLUTE, "home", _with_artifact({"RelativePath": "~/x"}), PATH0, decisions=("D9",)),
    C(NOT_ABSOLUTE, "file-uri", _with_artifact({"RelativePath": "file:///x"}), PATH0),
    C(NOT_ABSOLUTE, "file-uri-one-slash", _with_artifact({"RelativePath": "file:/etc/passwd"}),
      PATH0, decisions=("D9",)),
    C(NOT_ABSOLUTE, "home-alone", _with_artifact({"RelativePath": "~"}), PATH0),
    C(NOT_ABSOLUTE, "other-users-home", _with_artifact({"RelativePath": "~root/.ssh/id"}), PATH0,
      decisions=("D9",)),
    C(NOT_ABSOLUTE, "second-artifact",
      _initial({"InputArtifacts": [_artifact(), _artifact({"RelativePath": "/etc/passwd"})]}),
      "InputArtifacts[1].RelativePath"),
    # §4.2: relative to the opened root means inside it.
    C(WITHIN_ROOT, "parent", _with_artifact({"RelativePath": "../a"}), PATH0),
    C(WITHIN_ROOT, "dot-dot-only", _with_artifact({"RelativePath": ".."}), PATH0),
    C(WITHIN_ROOT, "down-then-up-twice", _with_artifact({"RelativePath": "a/../../b"}), PATH0,
      decisions=("D9",)),
    C(WITHIN_ROOT, "backslashes", _with_artifact({"RelativePath": "a\\..\\..\\b"}), PATH0,
      decisions=("D9",)),
    C(WITHIN_ROOT, "dot-segments", _with_artifact({"RelativePath": "./a/./../../b"}), PATH0),
    # §4.2: base64 contents are base64.
    C(CONTENTS_BASE64, "invalid-characters",
      _with_artifact({"Encoding": "base64", "Contents": "not base64!"}),
      "InputArtifacts[0].Contents", decisions=("D5",)),
    C(CONTENTS_BASE64, "missing-padding", _with_artifact({"Encoding": "base64", "Contents": "QQ"}),
      "InputArtifacts[0].Contents", decisions=("D5",)),
    C(CONTENTS_BASE64, "short-padding", _with_artifact({"Encoding": "base64", "Contents": "QQ="}),
      "InputArtifacts[0].Contents", decisions=("D5",)),
    C(CONTENTS_BASE64, "padding-after-a-whole-quantum",
      _with_artifact({"Encoding": "base64", "Contents": "QUJD=="}),
      "InputArtifacts[0].Contents", decisions=("D5",)),
    C(CONTENTS_BASE64, "length-not-a-multiple-of-four",
      _with_artifact({"Encoding": "base64", "Contents": "QUJD="}),
      "InputArtifacts[0].Contents", decisions=("D5",)),
    C(CONTENTS_BASE64, "embedded-newline",
      _with_artifact({"Encoding": "base64", "Contents": "QUJD\nREVG"}),
      "InputArtifacts[0].Contents", decisions=("D5",)),
    # §4.3: clipboard images.
    C(IMAGE_SHAPE, "no-id", _with_image({"Id": ABSENT}), "ClipboardImages[0].Id"),
    C(IMAGE_SHAPE, "no-mime-type", _with_image({"MimeType": ABSENT}),
      "ClipboardImages[0].MimeType"),
    C(IMAGE_SHAPE, "no-data", _with_image({"DataBase64": ABSENT}),
      "ClipboardImages[0].DataBase64"),
    C(IMAGE_SHAPE, "data-number", _with_image({"DataBase64": 5}),
      "ClipboardImages[0].DataBase64"),
    C(IMAGE_SHAPE, "not-a-list", _initial({"ClipboardImages": "img"}), "ClipboardImages"),
    C(IMAGE_ID, "empty", _with_image({"Id": ""}), "ClipboardImages[0].Id"),
    C(IMAGE_ID, "blank", _with_image({"Id": "  "}), "ClipboardImages[0].Id"),
    C(IMAGE_MIME, "text-plain", _with_image({"MimeType": "text/plain"}),
      "ClipboardImages[0].MimeType", decisions=("D6",)),
    C(IMAGE_MIME, "octet-stream", _with_image({"MimeType": "application/octet-stream"}),
      "ClipboardImages[0].MimeType", decisions=("D6",)),
    C(IMAGE_MIME, "empty", _with_image({"MimeType": ""}), "ClipboardImages[0].MimeType"),
    C(IMAGE_MIME, "no-slash", _with_image({"MimeType": "imagepng"}),
      "ClipboardImages[0].MimeType", decisions=("D6",)),
    C(IMAGE_BASE64, "empty", _with_image({"DataBase64": ""}), "ClipboardImages[0].DataBase64",
      decisions=("D5",)),
    C(IMAGE_BASE64, "invalid-characters", _with_image({"DataBase64": "not base64!"}),
      "ClipboardImages[0].DataBase64", decisions=("D5",)),
    C(IMAGE_BASE64, "missing-padding", _with_image({"DataBase64": PNG_BASE64.rstrip("=")}),
      "ClipboardImages[0].DataBase64", decisions=("D5",)),
    C(IMAGE_BASE64, "extra-padding", _with_image({"DataBase64": PNG_BASE64 + "=="}),
      "ClipboardImages[0].DataBase64", decisions=("D5",)),
    # §4.4: RAG scope conditions.
    C(RAG_SHAPE, "operator-like", _with_condition({"Operator": "like"}), "RagScope[0].Operator"),
    C(RAG_SHAPE, "operator-single-equals", _with_condition({"Operator": "="}),
      "RagScope[0].Operator"),
    C(RAG_SHAPE, "operator-upper-case", _with_condition({"Operator": "CONTAINS"}),
      "RagScope[0].Operator"),
    C(RAG_SHAPE, "no-key", _with_condition({"Key": ABSENT}), "RagScope[0].Key"),
    C(RAG_SHAPE, "no-values", _with_condition({"Values": ABSENT}), "RagScope[0].Values"),
    C(RAG_SHAPE, "values-string", _with_condition({"Values": "python"}), "RagScope[0].Values"),
    C(RAG_SHAPE, "value-number", _with_condition({"Values": ["a", 1]}), "RagScope[0].Values[1]"),
    C(RAG_KEY, "empty", _with_condition({"Key": ""}), "RagScope[0].Key", decisions=("D7",)),
    C(RAG_KEY, "blank", _with_condition({"Key": " "}), "RagScope[0].Key", decisions=("D7", "D1")),
    C(RAG_VALUES, "empty", _with_condition({"Values": []}), "RagScope[0].Values",
      decisions=("D7",)),
    # §5: tool results.
    C(RESULT_SHAPE, "execution-ms-string", _with_result({"ExecutionMs": "5"}),
      "ToolResults[0].ExecutionMs", decisions=("D8",)),
    C(RESULT_SHAPE, "execution-ms-fraction", _with_result({"ExecutionMs": 5.5}),
      "ToolResults[0].ExecutionMs", decisions=("D8",)),
    C(RESULT_SHAPE, "execution-ms-bool", _with_result({"ExecutionMs": True}),
      "ToolResults[0].ExecutionMs", decisions=("D8",)),
    C(RESULT_SHAPE, "no-execution-ms", _with_result({"ExecutionMs": ABSENT}),
      "ToolResults[0].ExecutionMs"),
    C(RESULT_SHAPE, "no-tool-call-id", _with_result({"ToolCallId": ABSENT}),
      "ToolResults[0].ToolCallId"),
    C(RESULT_SHAPE, "tool-call-id-number", _with_result({"ToolCallId": 7}),
      "ToolResults[0].ToolCallId"),
    C(RESULT_SHAPE, "result-json-object", _with_result({"ResultJson": {"text": "x"}}),
      "ToolResults[0].ResultJson"),
    C(RESULT_SHAPE, "error-message-number",
      _with_result({"ResultJson": ABSENT, "ErrorMessage": 5}), "ToolResults[0].ErrorMessage"),
    C(RESULT_SHAPE, "result-not-object", _continuation({"ToolResults": ["call-1"]}),
      "ToolResults[0]"),
    C(RESULT_SHAPE, "not-a-list", _continuation({"ToolResults": _result()}), "ToolResults"),
    C(ONE_OUTCOME, "both", _with_result({"ErrorMessage": "failed"}), "ToolResults[0]"),
    C(ONE_OUTCOME, "neither", _with_result({"ResultJson": ABSENT}), "ToolResults[0]"),
    C(ONE_OUTCOME, "second-result",
      _with_results(_result(), _result({"ToolCallId": "call-2", "ErrorMessage": "failed"})),
      "ToolResults[1]"),
    C(CALL_ID_PRESENT, "empty", _with_result({"ToolCallId": ""}), "ToolResults[0].ToolCallId"),
    C(CALL_ID_PRESENT, "blank", _with_result({"ToolCallId": "  "}), "ToolResults[0].ToolCallId",
      decisions=("D8",)),
    C(CALL_IDS_UNIQUE, "repeated", _with_results(_result(), _result()),
      "ToolResults[1].ToolCallId", decisions=("D8",)),
    C(MS_NON_NEGATIVE, "minus-one", _with_result({"ExecutionMs": -1}),
      "ToolResults[0].ExecutionMs"),
    C(RESULT_JSON, "truncated", _with_result({"ResultJson": '{"text": '}),
      "ToolResults[0].ResultJson", decisions=("D8",)),
    C(RESULT_JSON, "empty", _with_result({"ResultJson": ""}), "ToolResults[0].ResultJson"),
    C(RESULT_JSON, "single-quotes", _with_result({"ResultJson": "{'text': 'x'}"}),
      "ToolResults[0].ResultJson", decisions=("D8",)),
    # RFC 8259 §6: NaN and Infinity are not JSON numbers.
    C(RESULT_JSON, "nan-literal", _with_result({"ResultJson": "NaN"}),
      "ToolResults[0].ResultJson"),
    C(RESULT_JSON, "infinity-literal", _with_result({"ResultJson": '{"ms": Infinity}'}),
      "ToolResults[0].ResultJson"),
    C(ERROR_NOT_BLANK, "empty", _with_result({"ResultJson": ABSENT, "ErrorMessage": ""}),
      "ToolResults[0].ErrorMessage"),
    C(ERROR_NOT_BLANK, "blank", _with_result({"ResultJson": ABSENT, "ErrorMessage": " \n"}),
      "ToolResults[0].ErrorMessage", decisions=("D8",)),
]  # fmt: skip

HOLDS = [
    C(ENVELOPE, "object-text", json.dumps(_initial())),
    C(TEXT_UTF8, "non-ascii-text", _initial({"Instruction": "Erkläre 日本語 🚀"})),
    C(TEXT_UTF8, "escaped-astral", '{"Instruction": "\\ud83d\\ude80 ok"}'),
    C(ENVELOPE, "object-breaking-other-rules", "{}", valid=False),
    C(SERVER_OWNED, "initial", _initial()),
    C(SERVER_OWNED, "follow-on", _follow_on()),
    C(SERVER_OWNED, "continuation", _continuation()),
    C(UNKNOWN, "every-optional-field", _initial({
        "InputArtifacts": [_artifact({"MimeType": "text/x-python", "Language": "python",
                                      "Encoding": "utf8"})],
        "ClipboardImages": [_image()], "RagScope": [_condition()],
        "SolutionContextText": "agent.aptix present", "Stream": True,
        "WorkspaceHints": {"WorkspaceId": "w-1", "RepositoryName": "aptix",
                           "LanguageHint": "python"},
        "ConversationContextId": "default",
    }), decisions=("D21",)),
    C(UNKNOWN, "continuation", _continuation()),
    C(FIELD_TYPE, "stream-true", _initial({"Stream": True})),
    C(FIELD_TYPE, "stream-false", _follow_on({"Stream": False})),
    C(FIELD_TYPE, "strings", _initial({"SolutionContextText": "", "AgentContextId": "coder"})),
    C(PAIR, "both-absent", _initial()),
    C(PAIR, "both-empty", _initial({"SessionId": "", "TurnId": ""}), decisions=("D1",)),
    C(PAIR, "both-set", _follow_on()),
    C(PAIR, "both-set-with-results", _continuation()),
    C(PAIR, "no-ids-breaking-other-rules", _initial({"Instruction": ABSENT}), valid=False),
    C(INPUT_REQUIRED, "instruction", _initial()),
    C(INPUT_REQUIRED, "artifact-only", _with_artifact()),
    C(INPUT_REQUIRED, "image-only", _with_image()),
    C(INPUT_REQUIRED, "follow-on-instruction", _follow_on()),
    C(INPUT_REQUIRED, "not-needed-on-continuation", _continuation()),
    C(RESULTS_FORBIDDEN, "initial-without-results", _initial()),
    C(RESULTS_FORBIDDEN, "continuation", _continuation()),
    C(RESULTS_REQUIRED, "two-results", _continuation()),
    C(RESULTS_REQUIRED, "one-result", _with_result()),
    C(INSTRUCTION_FORBIDDEN, "continuation-without", _continuation()),
    C(INSTRUCTION_FORBIDDEN, "follow-on-with", _follow_on()),
    C(ARTIFACTS_FORBIDDEN, "continuation-without", _continuation()),
    C(ARTIFACTS_FORBIDDEN, "follow-on-with", _follow_on({"InputArtifacts": [_artifact()]})),
    C(IMAGES_FORBIDDEN, "continuation-without", _continuation()),
    C(IMAGES_FORBIDDEN, "follow-on-with", _follow_on({"ClipboardImages": [_image()]})),
    C(CONTEXT_FORBIDDEN, "continuation-without", _continuation()),
    C(CONTEXT_FORBIDDEN, "follow-on-with-all", _follow_on({
        "RagScope": [_condition()], "SolutionContextText": "repo", "WorkspaceHints": {},
        "AgentContextId": "coder", "ConversationContextId": "default",
    })),
    C(STREAM_FORBIDDEN, "continuation-without", _continuation()),
    C(STREAM_FORBIDDEN, "follow-on-with", _follow_on({"Stream": True})),
    C(ARTIFACT_SHAPE, "origin-ide", _with_artifact()),
    C(ARTIFACT_SHAPE, "origin-user", _with_artifact({"Origin": "user"})),
    C(ARTIFACT_SHAPE, "every-optional-field",
      _with_artifact({"MimeType": "text/plain", "Language": "python", "Encoding": "utf8"})),
    C(NAMES_PRESENT, "both-set", _with_artifact()),
    C(NOT_ABSOLUTE, "nested", _with_artifact({"RelativePath": "src/x.py"})),
    C(NOT_ABSOLUTE, "bare-name", _with_artifact({"RelativePath": "x.py"})),
    C(NOT_ABSOLUTE, "dot-slash", _with_artifact({"RelativePath": "./a"})),
    C(NOT_ABSOLUTE, "tilde-inside-name", _with_artifact({"RelativePath": "a~b/x.py"})),
    C(NOT_ABSOLUTE, "office-lock-file", _with_artifact({"RelativePath": "~$report.docx"}),
      decisions=("D9",)),
    C(NOT_ABSOLUTE, "tilde-temp-file", _with_artifact({"RelativePath": "~tmp.txt"}),
      decisions=("D9",)),
    C(WITHIN_ROOT, "down-then-up", _with_artifact({"RelativePath": "a/../b"}), decisions=("D9",)),
    C(WITHIN_ROOT, "dot-slash", _with_artifact({"RelativePath": "./a"})),
    C(WITHIN_ROOT, "plain", _with_artifact({"RelativePath": "src/x.py"})),
    C(WITHIN_ROOT, "backslashes-down-then-up", _with_artifact({"RelativePath": "a\\b\\..\\c"})),
    C(WITHIN_ROOT, "dots-inside-name", _with_artifact({"RelativePath": "a/..b/c..d"})),
    C(CONTENTS_BASE64, "valid-base64", _with_artifact({"Encoding": "base64", "Contents": "QUJD"})),
    C(CONTENTS_BASE64, "valid-padded", _with_artifact({"Encoding": "base64", "Contents": "QQ=="}),
      decisions=("D5",)),
    C(CONTENTS_BASE64, "utf8-need-not-be-base64",
      _with_artifact({"Encoding": "utf8", "Contents": "not base64!"})),
    C(CONTENTS_BASE64, "default-encoding-is-utf8", _with_artifact({"Contents": "not base64!"})),
    C(IMAGE_SHAPE, "complete", _with_image()),
    C(IMAGE_ID, "set", _with_image()),
    C(IMAGE_MIME, "png", _with_image()),
    C(IMAGE_MIME, "jpeg", _with_image({"MimeType": "image/jpeg"})),
    C(IMAGE_MIME, "svg", _with_image({"MimeType": "image/svg+xml"}), decisions=("D6",)),
    C(IMAGE_BASE64, "valid", _with_image()),
    C(RAG_SHAPE, "equals", _with_condition({"Operator": "=="})),
    C(RAG_SHAPE, "not-equals", _with_condition({"Operator": "!="})),
    C(RAG_SHAPE, "contains", _with_condition({"Operator": "contains"})),
    C(RAG_SHAPE, "does-not-contain", _with_condition({"Operator": "does_not_contain"})),
    C(RAG_SHAPE, "two-conditions",
      _initial({"RagScope": [_condition(), _condition({"Key": "path", "Operator": "contains",
                                                       "Values": ["src/", "lib/"]})]})),
    C(RAG_KEY, "set", _with_condition()),
    C(RAG_VALUES, "one", _with_condition()),
    C(RAG_VALUES, "two", _with_condition({"Values": ["python", "rust"]})),
    C(RESULT_SHAPE, "result-json", _with_result()),
    C(RESULT_SHAPE, "error-message", _with_result({"ResultJson": ABSENT, "ErrorMessage": "no"})),
    C(ONE_OUTCOME, "result-json-only", _with_result()),
    C(ONE_OUTCOME, "error-message-only",
      _with_result({"ResultJson": ABSENT, "ErrorMessage": "permission denied"})),
    C(CALL_ID_PRESENT, "set", _with_result()),
    C(CALL_IDS_UNIQUE, "distinct", _continuation()),
    C(MS_NON_NEGATIVE, "zero", _with_result({"ExecutionMs": 0})),
    C(MS_NON_NEGATIVE, "positive", _with_result({"ExecutionMs": 12})),
    C(MS_NON_NEGATIVE, "large", _with_result({"ExecutionMs": 10**12})),
    C(RESULT_JSON, "object", _with_result()),
    C(RESULT_JSON, "array", _with_result({"ResultJson": "[1, 2]"})),
    C(RESULT_JSON, "null", _with_result({"ResultJson": "null"})),
    C(RESULT_JSON, "string", _with_result({"ResultJson": '"done"'})),
    C(RESULT_JSON, "number", _with_result({"ResultJson": "3"})),
    C(ERROR_NOT_BLANK, "says-what-failed",
      _with_result({"ResultJson": ABSENT, "ErrorMessage": "permission denied"})),
]  # fmt: skip


def _wire(case: RequestCase) -> object:
    """The request as plain JSON data."""
    return json.loads(case.request) if isinstance(case.request, str) else case.request


@pytest.mark.decision("R2")
@pytest.mark.parametrize("case", rule_params(BROKEN, "broken"))
def test_broken_request_rule_is_reported_at_its_field(case: RequestCase) -> None:
    result = parse_request(case.request)

    assert not result.successful
    assert result.result is None
    assert case.rule_id in result.rule_ids
    error = next(e for e in result.errors if e.rule_id == case.rule_id)
    assert error.field == case.field
    assert error.code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("case", rule_params(HOLDS, "holds"))
def test_holding_request_rule_is_not_reported(case: RequestCase) -> None:
    result = parse_request(case.request)

    assert case.rule_id not in result.rule_ids
    if case.valid:
        assert result.successful, result.errors
        assert result.result is not None
        assert json.loads(result.result.to_json()) == _wire(case)
        assert parse_request(result.result.to_json()) == result
    else:
        assert not result.successful


def test_every_request_rule_has_a_holding_and_a_breaking_case() -> None:
    request_ids = {rule_id for rule_id in all_rules() if rule_id.startswith("AGN-034/")}

    assert request_ids == {case.rule_id for case in BROKEN}
    assert request_ids == {case.rule_id for case in HOLDS}


def test_case_ids_are_unique() -> None:
    ids = [f"{case.rule_id}|{case.variant}" for case in [*BROKEN, *HOLDS]]

    assert len(ids) == len(set(ids))


@pytest.mark.decision("D3")
def test_every_broken_rule_of_a_continuation_is_reported_at_once() -> None:
    data = _continuation({"Instruction": "Go on.", "Stream": False, "ToolResults": []})

    result = parse_request(data)

    assert set(result.rule_ids) == {INSTRUCTION_FORBIDDEN, STREAM_FORBIDDEN, RESULTS_REQUIRED}


@pytest.mark.decision("D8")
def test_tool_result_errors_name_the_tool_call() -> None:
    data = _with_results(_result(), _result({"ExecutionMs": -3}))

    result = parse_request(data)

    assert {(e.rule_id, e.tool_call_id) for e in result.errors} == {
        (CALL_IDS_UNIQUE, "call-1"),
        (MS_NON_NEGATIVE, "call-1"),
    }


@pytest.mark.decision("D3")
def test_continuation_forbidden_fields_are_not_checked_as_user_input() -> None:
    # A forbidden artifact is reported as forbidden, not also as a bad path.
    data = _continuation({"InputArtifacts": [_artifact({"RelativePath": "/etc/x"})]})

    result = parse_request(data)

    assert result.rule_ids == (ARTIFACTS_FORBIDDEN,)


@pytest.mark.decision("D22")
def test_instruction_that_is_not_utf8_text_is_rejected() -> None:
    # AGN-034 §4.1: Instruction is UTF-8 text; a lone surrogate has no UTF-8 encoding.
    text = '{"Instruction": "Explain \\ud800 this."}'

    result = parse_request(text)

    assert not result.successful
    assert result.result is None
    assert [(e.rule_id, e.field) for e in result.errors] == [(TEXT_UTF8, "Instruction")]


@pytest.mark.decision("D22")
@pytest.mark.parametrize(
    "text",
    [
        b'{"Instruction": "Explain \\ud800 this."}',  # an escape, in bytes
        b'{"Instruction": "Explain \xed\xa0\x80 this."}',  # a surrogate encoded in the bytes
        '{"Instruction": "Explain \ud800 this."}',  # the str holds the surrogate itself
        '{"Instruction": "Explain \\uDFFF this."}'.encode("utf-16"),  # JSON in UTF-16
    ],
    ids=["escape", "encoded-bytes", "str-character", "utf-16-escape"],
)
def test_a_lone_surrogate_in_any_text_form_is_rejected(text: str | bytes) -> None:
    result = parse_request(text)

    assert [(e.rule_id, e.field) for e in result.errors] == [(TEXT_UTF8, "Instruction")]


@pytest.mark.parametrize(
    ("text", "instruction"),
    [
        (b'{"Instruction": "smile \\ud83d\\ude00"}', "smile \U0001f600"),  # a pair
        (b'{"Instruction": "path C:\\\\ud800"}', "path C:\\ud800"),  # an escaped backslash
        (b'{"Instruction": "Korean \\uD55C"}', "Korean \ud55c"),  # no surrogate
    ],
    ids=["surrogate-pair", "escaped-backslash", "not-a-surrogate"],
)
def test_text_whose_escapes_make_no_lone_surrogate_passes(text: bytes, instruction: str) -> None:
    result = parse_request(text)

    assert result.successful, result.errors
    assert result.result is not None
    assert result.result.instruction == instruction


@pytest.mark.decision("D22")
def test_model_built_in_python_with_a_lone_surrogate_is_rejected() -> None:
    request = AgentExecuteRequest(instruction="bad \ud800")

    result = parse_request(request)

    assert [(e.rule_id, e.field) for e in result.errors] == [(TEXT_UTF8, "Instruction")]


# classify_request: the scenario is decided by field presence (AGN-034 §3, AGN-036 §3.1).


@pytest.mark.decision("R1")
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(request_data(INITIAL), INITIAL, id="no-ids"),
        pytest.param(
            _initial({"SessionId": "", "TurnId": ""}),
            INITIAL,
            id="empty-ids",
            marks=pytest.mark.decision("D1"),
        ),
        pytest.param(request_data(FOLLOW_ON), FOLLOW_ON, id="both-ids"),
        pytest.param(request_data(CONTINUATION), CONTINUATION, id="both-ids-and-results"),
        pytest.param(
            _continuation({"ToolResults": []}),
            CONTINUATION,
            id="empty-results-list",
            marks=pytest.mark.decision("D4"),
        ),
    ],
)
def test_request_is_classified_by_field_presence(
    data: dict[str, Any], expected: ContextType
) -> None:
    request = AgentExecuteRequest.model_validate(data)

    assert classify_request(request) is expected


@pytest.mark.decision("R1")
@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_follow_on({"TurnId": ABSENT}), id="session-only"),
        pytest.param(_follow_on({"SessionId": ABSENT}), id="turn-only"),
        pytest.param(
            _follow_on({"SessionId": ""}), id="empty-session", marks=pytest.mark.decision("D1")
        ),
        pytest.param(
            _continuation({"TurnId": ""}),
            id="empty-turn-with-results",
            marks=pytest.mark.decision("D1"),
        ),
    ],
)
def test_request_with_one_id_has_no_scenario(data: dict[str, Any]) -> None:
    request = AgentExecuteRequest.model_validate(data)

    assert classify_request(request) is None


# The model: absent is not empty (AGN-034 §2.2), defaults (§4.2, §4.7), accepted inputs.


def test_absent_optional_fields_are_missing_from_the_wire_json() -> None:
    request = AgentExecuteRequest(instruction="Explain this file.")

    assert json.loads(request.to_json()) == {"Instruction": "Explain this file."}


def test_empty_list_and_false_stay_on_the_wire() -> None:
    request = AgentExecuteRequest(
        session_id="s", turn_id="t", input_artifacts=[], clipboard_images=[], stream=False
    )

    wire = json.loads(request.to_json())

    assert wire == {
        "SessionId": "s",
        "TurnId": "t",
        "InputArtifacts": [],
        "ClipboardImages": [],
        "Stream": False,
    }


def test_tool_result_without_error_message_omits_it() -> None:
    result = ToolResult(tool_call_id="call-1", execution_ms=0, result_json="{}")

    assert json.loads(result.to_json()) == {
        "ToolCallId": "call-1",
        "ExecutionMs": 0,
        "ResultJson": "{}",
    }


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        (None, ArtifactEncoding.UTF8),
        (ArtifactEncoding.UTF8, ArtifactEncoding.UTF8),
        (ArtifactEncoding.BASE64, ArtifactEncoding.BASE64),
    ],
)
def test_artifact_encoding_defaults_to_utf8(
    encoding: ArtifactEncoding | None, expected: ArtifactEncoding
) -> None:
    artifact = InputArtifact(
        relative_path="a.txt",
        file_name="a.txt",
        contents="QQ==",
        origin=ArtifactOrigin.USER,
        encoding=encoding,
    )

    assert artifact.effective_encoding is expected


@pytest.mark.parametrize(("stream", "expected"), [(None, False), (False, False), (True, True)])
def test_streaming_preference_defaults_to_false(stream: bool | None, expected: bool) -> None:
    request = AgentExecuteRequest(instruction="x", stream=stream)

    assert request.wants_stream is expected


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(lambda data: json.dumps(data), id="json-str"),
        pytest.param(lambda data: json.dumps(data).encode("utf-8"), id="json-bytes"),
        pytest.param(lambda data: data, id="dict"),
        pytest.param(AgentExecuteRequest.model_validate, id="model"),
    ],
)
@pytest.mark.parametrize("kind", list(ContextType))
def test_parse_request_accepts_text_bytes_mapping_and_model(
    source: Callable[[dict[str, Any]], RequestInput], kind: ContextType
) -> None:
    data = request_data(kind)

    result = parse_request(source(data))

    assert result.successful, result.errors
    assert result.result == AgentExecuteRequest.model_validate(data)


@pytest.mark.decision("D3")
def test_parse_request_checks_a_model_instance_too() -> None:
    request = AgentExecuteRequest(session_id="s", turn_id="t", tool_results=[], stream=True)

    result = parse_request(request)

    assert not result.successful
    assert set(result.rule_ids) == {RESULTS_REQUIRED, STREAM_FORBIDDEN}


@pytest.mark.decision("D24")
def test_json_null_counts_as_an_absent_field() -> None:
    # Decision D24: C#-style serializers write null for unset properties.
    data = {
        **request_data(ContextType.CLIENT_TOOL_CALL_CONTINUATION),
        "Instruction": None,
        "InputArtifacts": None,
        "Stream": None,
    }

    result = parse_request(data)

    assert result.successful, result.errors
    assert result.result is not None
    assert "Instruction" not in result.result.to_wire()
