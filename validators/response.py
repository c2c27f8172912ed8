"""AGN-033 response rules: session metadata, closed kinds, bucket presence, files.

``validate_response`` is what the ResponseBuilder's POST runs ("Returned response
conforms to AGN-033", AGN-036 §4.10). Presence is what the bucket rules see
(§3.5: "Forbidden buckets must not appear (even as empty values)"), so a final
response with ``ToolCalls: []`` is as wrong as one with calls.

Decisions (docs/CONFORMANCE.md): §6.1 is checked on the text the client renders —
a ``data:…;base64,`` URI or a run of 200+ base64 characters anywhere, fenced or
not, counts as embedded file contents, except inside an Aptix bundle: a JSON
object or array in a fence tagged ``aptix-json`` (D14, D403); §4.1 — an untagged
fence whose body is a JSON object or array is an unguarded machine payload; a
FileRef ``Url`` must be an absolute URI and never a ``data:`` URI.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    ErrorCode,
    InvokeError,
    InvokeResult,
    ResponseKind,
)

from .checks import Check, requirement, run_checks
from .core import has_text
from .json_text import (
    json_path,
    non_utf8_fields,
    null_fields,
    strict_json_loads,
    text_depth_exceeds,
    value_depth_exceeds,
)
from .rules import outcome, rule
from .tool_results import ToolResultRules, tool_result_errors

__all__ = [
    "RESPONSE_CHECKS",
    "guard_machine_payloads",
    "is_reference_url",
    "parse_response",
    "response_errors",
    "validate_response",
]

# Parametrized once and kept: pydantic rebuilds a generic whose class was collected.
_ResponseResult = InvokeResult[AgentExecuteResponse]

_INVALID = ErrorCode.INVALID_RESPONSE

RESPONSE_SHAPE = rule(
    "AGN-033/3/response-shape",
    "AGN-033 §3, §5, §6",
    "the response must be one JSON object with the AgentExecuteResponse fields and types",
    _INVALID,
    module=__name__,
)
TEXT_UTF8 = rule(
    "AGN-033/4.1/text-utf8",
    "AGN-033 §4.1",
    "response text must be UTF-8 encodable Unicode (no lone surrogates)",
    _INVALID,
    module=__name__,
)
ABSENT_NOT_NULL = rule(
    "AGN-033/3.5/absent-not-null",
    "AGN-033 §3.4, §3.5",
    "an absent field is omitted from the JSON, never null",
    _INVALID,
    module=__name__,
)
SESSION_ID_PRESENT = rule(
    "AGN-033/3.1/session-id-present",
    "AGN-033 §3.1",
    "every successful response must include SessionId",
    _INVALID,
    module=__name__,
)
TURN_ID_PRESENT = rule(
    "AGN-033/3.1/turn-id-present",
    "AGN-033 §3.1",
    "every successful response must include TurnId",
    _INVALID,
    module=__name__,
)
MODE_DISPLAY_NAME_PRESENT = rule(
    "AGN-033/3.1/mode-display-name-present",
    "AGN-033 §3.1",
    "every successful response must include ModeDisplayName",
    _INVALID,
    module=__name__,
)
KIND_CLOSED = rule(
    "AGN-033/3.2/kind-closed",
    "AGN-033 §3.2",
    "Kind must be 'final' or 'client_tool_continuation'",
    _INVALID,
    module=__name__,
)
FINAL_PRIMARY_OUTPUT_REQUIRED = rule(
    "AGN-033/3.4/final-primary-output-required",
    "AGN-033 §2.3, §3.4",
    "a final response must include exactly one PrimaryOutputText",
    _INVALID,
    module=__name__,
)
FINAL_TOOL_CALLS_FORBIDDEN = rule(
    "AGN-033/3.4/final-tool-calls-forbidden",
    "AGN-033 §3.4, §5.1",
    "a final response must not include ToolCalls, not even empty",
    _INVALID,
    module=__name__,
)
FINAL_TOOL_CONTINUATION_MESSAGE_FORBIDDEN = rule(
    "AGN-033/3.4/final-tool-continuation-message-forbidden",
    "AGN-033 §3.4, §4.2",
    "a final response must not include ToolContinuationMessage",
    _INVALID,
    module=__name__,
)
CONTINUATION_TOOL_CALLS_REQUIRED = rule(
    "AGN-033/3.4/continuation-tool-calls-required",
    "AGN-033 §3.4",
    "a client_tool_continuation response must include one or more ToolCalls",
    _INVALID,
    module=__name__,
)
CONTINUATION_PRIMARY_OUTPUT_FORBIDDEN = rule(
    "AGN-033/3.4/continuation-primary-output-forbidden",
    "AGN-033 §2.3, §3.4",
    "a client_tool_continuation response must not include PrimaryOutputText",
    _INVALID,
    module=__name__,
)
CONTINUATION_TOOL_RESULTS_FORBIDDEN = rule(
    "AGN-033/3.4/continuation-tool-results-forbidden",
    "AGN-033 §3.4, §5.3",
    "a client_tool_continuation response must not include ToolResults, not even empty",
    _INVALID,
    module=__name__,
)
CONTINUATION_FILES_FORBIDDEN = rule(
    "AGN-033/3.4/continuation-files-forbidden",
    "AGN-033 §3.4, §6.2",
    "a client_tool_continuation response must not include Files, not even empty",
    _INVALID,
    module=__name__,
)
CONTINUATION_USER_WARNINGS_FORBIDDEN = rule(
    "AGN-033/3.4/continuation-user-warnings-forbidden",
    "AGN-033 §3.4, §4.3",
    "a client_tool_continuation response must not include UserWarnings, not even empty",
    _INVALID,
    module=__name__,
)
CONTINUATION_USAGE_FORBIDDEN = rule(
    "AGN-033/3.4/continuation-usage-forbidden",
    "AGN-033 §3.4",
    "a client_tool_continuation response must not include Usage",
    _INVALID,
    module=__name__,
)
TOOL_CALL_FIELDS_PRESENT = rule(
    "AGN-033/5.1/tool-call-fields-present",
    "AGN-033 §5.1",
    "a ToolCall needs a non-empty ToolCallId and Name",
    _INVALID,
    module=__name__,
)
ARGUMENTS_JSON_OBJECT = rule(
    "AGN-033/5.1/arguments-json-object",
    "AGN-033 §5.1",
    "a ToolCall's ArgumentsJson must be a JSON object",
    _INVALID,
    module=__name__,
)
TOOL_CALL_IDS_UNIQUE = rule(
    "AGN-033/3.3/tool-call-ids-unique",
    "AGN-033 §3.3, §5.1",
    "ToolCalls are an exact set: each ToolCallId appears once",
    _INVALID,
    module=__name__,
)
TOOL_RESULT_RULES = ToolResultRules(
    exactly_one_outcome=rule(
        "AGN-033/5.2/exactly-one-outcome",
        "AGN-033 §5.2",
        "a tool result holds exactly one of ResultJson or ErrorMessage",
        _INVALID,
        module=__name__,
    ),
    tool_call_id_present=rule(
        "AGN-033/5.2/tool-call-id-present",
        "AGN-033 §5.2",
        "a tool result's ToolCallId must not be empty",
        _INVALID,
        module=__name__,
    ),
    tool_call_ids_unique=rule(
        "AGN-033/5.2/tool-call-ids-unique",
        "AGN-033 §5.2",
        "each server tool call has one result; the ToolCallId repeats",
        _INVALID,
        module=__name__,
    ),
    execution_ms_non_negative=rule(
        "AGN-033/5.2/execution-ms-non-negative",
        "AGN-033 §5.2",
        "ExecutionMs must not be negative",
        _INVALID,
        module=__name__,
    ),
    result_json_valid=rule(
        "AGN-033/5.2/result-json-valid",
        "AGN-033 §5.2",
        "ResultJson must be well-formed JSON",
        _INVALID,
        module=__name__,
    ),
    error_message_not_blank=rule(
        "AGN-033/5.2/error-message-not-blank",
        "AGN-033 §5.2",
        "ErrorMessage must say what failed",
        _INVALID,
        module=__name__,
    ),
)
GUARDED_PAYLOAD = rule(
    "AGN-033/4.1/guarded-payload",
    "AGN-033 §4.1",
    "machine-consumable payloads must sit in a fenced code block with a language tag",
    _INVALID,
    module=__name__,
)
NO_EMBEDDED_FILE_CONTENTS = rule(
    "AGN-033/6.1/no-embedded-file-contents",
    "AGN-033 §6.1",
    "responses must not embed file contents (base64), fenced or not, except in an Aptix "
    "bundle (JSON in an aptix-json fence); reference files through FileRef",
    _INVALID,
    module=__name__,
)
FILE_REF_FIELDS_PRESENT = rule(
    "AGN-033/6.3/file-ref-fields-present",
    "AGN-033 §6.3",
    "a FileRef needs Name, MimeType, Url, SizeBytes (>= 0) and ContentHash",
    _INVALID,
    module=__name__,
)
FILE_REF_URL_ABSOLUTE = rule(
    "AGN-033/6.3/file-ref-url-absolute",
    "AGN-033 §6.1, §6.3",
    "a FileRef Url must be an absolute URI that references the file, never a data: URI",
    _INVALID,
    module=__name__,
)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
_DATA_URI = re.compile(r"data:[\w.+\-]+/[\w.+\-]+(?:;[\w\-]+=[\w\-]+)*;base64,", re.IGNORECASE)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{200,}={0,2}")
_BASE64_LINE = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_BASE64_MIN = 200
_PARAGRAPHS = re.compile(r"\n\s*\n")
_APTIX_BUNDLE_TAG = "aptix-json"
"""The language tag of the fence that guards an Aptix bundle (AGN-033 §4.1's own example,
D403): the only fenced block whose body may carry file contents (§6.1)."""


def _kind(response: AgentExecuteResponse) -> ResponseKind | None:
    if type(response.kind) is ResponseKind:  # as validated; a test may set plain text
        return response.kind
    try:
        return ResponseKind(response.kind)
    except ValueError:
        return None


def _segments(text: str) -> Iterator[tuple[str | None, str]]:
    """Split Markdown into (fence language or None for prose, body) segments.

    An untagged fence yields ``""`` as its language.
    """
    prose: list[str] = []
    body: list[str] = []
    fence: str | None = None
    language = ""
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            yield None, "\n".join(prose)
            prose = []
            fence, language = match.group(1), match.group(2)
        elif (
            fence is not None and match and match.group(1).startswith(fence) and not match.group(2)
        ):
            yield language, "\n".join(body)
            body, fence = [], None
        elif fence is None:
            prose.append(line)
        else:
            body.append(line)
    if fence is not None:  # an unclosed fence guards nothing
        prose.extend(body)
    yield None, "\n".join(prose)


def _is_machine_payload(text: str, *, fenced: bool) -> bool:
    """JSON data rather than prose or code.

    In an untagged fence any JSON object or array counts; in prose, where ``[1, 2]``
    can be ordinary text, an object or an array holding objects or arrays.
    """
    stripped = text.strip()
    if stripped[:1] not in ("{", "["):
        return False
    try:
        value = strict_json_loads(stripped)
    except (ValueError, RecursionError):
        return False
    if fenced or isinstance(value, dict):
        return True
    return isinstance(value, list) and any(isinstance(item, dict | list) for item in value)


def _with_ending(raw: str) -> str:
    """A line that may have been the last one, with a line break."""
    return raw if raw.splitlines(keepends=False) != [raw] else raw + "\n"


def guard_machine_payloads(text: str) -> str:
    """``text`` with each unguarded JSON payload put in a ```` ```json ```` fence (AGN-033 §4.1).

    What counts as unguarded is what ``AGN-033/4.1/guarded-payload`` refuses, read
    with the same line and fence rules: an untagged fence whose body is JSON gets
    the ``json`` tag, and a prose paragraph that is a JSON object or an array of
    objects/arrays is fenced. A fence left open (a reply cut short) is closed at
    the end of the text. Everything else is kept byte for byte. Pure and
    idempotent; the engine applies it to the model's text before it becomes a
    response.
    """
    raw = text.splitlines(keepends=True)
    plain = text.splitlines()
    out: list[str] = []
    paragraph: list[int] = []

    def end_paragraph() -> None:
        if paragraph and _is_machine_payload("\n".join(plain[i] for i in paragraph), fenced=False):
            out.append("```json\n")
            out.extend(_with_ending(raw[i]) for i in paragraph)
            out.append("```" + ("\n" if raw[paragraph[-1]] != plain[paragraph[-1]] else ""))
        else:
            out.extend(raw[i] for i in paragraph)
        paragraph.clear()

    index = 0
    while index < len(raw):
        opening = _FENCE.match(plain[index])
        if opening is None:
            if plain[index].strip():
                paragraph.append(index)
            else:
                end_paragraph()
                out.append(raw[index])
            index += 1
            continue
        end_paragraph()
        fence = opening.group(1)
        closing_at = next(
            (
                later
                for later in range(index + 1, len(raw))
                if (match := _FENCE.match(plain[later]))
                and match.group(1).startswith(fence)
                and not match.group(2)
            ),
            None,
        )
        body_end = closing_at if closing_at is not None else len(raw)
        first = raw[index]
        body = "\n".join(plain[index + 1 : body_end])
        if not opening.group(2) and _is_machine_payload(body, fenced=True):
            first = first[: opening.end(1)] + "json" + first[opening.end(1) :]
        out.append(first)
        out.extend(raw[index + 1 : body_end])
        if closing_at is None:  # close a fence the text left open
            out[-1] = _with_ending(out[-1])
            out.append(fence)
            index = len(raw)
        else:
            out.append(raw[closing_at])
            index = closing_at + 1
    end_paragraph()
    return "".join(out)


_CHAR_CLASSES = (str.isupper, str.islower, str.isdigit)


def _char_classes(text: str) -> set[int]:
    """Which of upper case, lower case and digits occur in ``text`` (by index)."""
    return {i for i, test in enumerate(_CHAR_CLASSES) if any(test(c) for c in text)}


def _looks_encoded(run: str) -> bool:
    """Encoded bytes mix upper case, lower case and digits; a long word or path does not."""
    return len(_char_classes(run)) == len(_CHAR_CLASSES)


def _has_base64_blob(text: str) -> bool:
    """A data: URI, or ≥ 200 base64 characters on one line or wrapped over several."""
    if _DATA_URI.search(text):
        return True
    if any(_looks_encoded(m.group()) for m in _BASE64_RUN.finditer(text)):
        return True
    length, classes = 0, set[int]()  # the current run of base64-only lines
    for line in text.splitlines():
        token = line.strip()
        if not (token and _BASE64_LINE.match(token)):
            length, classes = 0, set()
            continue
        length += len(token)
        classes |= _char_classes(token)
        if length >= _BASE64_MIN and len(classes) == len(_CHAR_CLASSES):
            return True
    return False


def _is_aptix_bundle(language: str, body: str) -> bool:
    """Whether a fenced block is an Aptix bundle: tagged ``aptix-json`` (any case), its
    body a JSON object or array (AGN-033 §4.1, §6.1; D403)."""
    if language.lower() != _APTIX_BUNDLE_TAG:
        return False
    stripped = body.strip()
    if stripped[:1] not in ("{", "["):
        return False
    try:
        strict_json_loads(stripped)
    except (ValueError, RecursionError):
        return False
    return True


def _text_errors(text: str | None, field: str) -> list[InvokeError]:
    if not text:
        return []
    payload = blob = False
    for language, body in _segments(text):
        if language:
            # A tagged block is guarded: it may carry a machine payload (§4.1). Only an
            # Aptix bundle may carry file contents (§6.1): any other block is checked
            # as prose is (D403).
            blob = blob or (not _is_aptix_bundle(language, body) and _has_base64_blob(body))
            continue
        fenced = language == ""
        pieces = [body] if fenced else _PARAGRAPHS.split(body)
        payload = payload or any(_is_machine_payload(p, fenced=fenced) for p in pieces)
        blob = blob or _has_base64_blob(body)
    errors: list[InvokeError] = []
    if payload:
        errors.append(GUARDED_PAYLOAD.error(field=field))
    if blob:
        errors.append(NO_EMBEDDED_FILE_CONTENTS.error(field=field))
    return errors


_NOT_REFERENCES = {"data", "javascript", "vbscript"}
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:")


def is_reference_url(url: str) -> bool:
    """An absolute URI that points at a file: a scheme of two or more characters (so no
    drive letter), no whitespace, not ``data:``/script, and a host for http(s)."""
    if not _URL_SCHEME.match(url) or any(c.isspace() for c in url):
        return False
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in _NOT_REFERENCES:
        return False
    return bool(parts.netloc) or scheme not in {"http", "https"}


def _tool_call_errors(response: AgentExecuteResponse) -> list[InvokeError]:
    errors: list[InvokeError] = []
    seen: set[str] = set()
    for index, call in enumerate(response.tool_calls or ()):
        at = f"ToolCalls[{index}]"
        if not call.tool_call_id.strip() or not call.name.strip():
            errors.append(TOOL_CALL_FIELDS_PRESENT.error(field=at, tool_call_id=call.tool_call_id))
        if call.tool_call_id in seen:
            errors.append(
                TOOL_CALL_IDS_UNIQUE.error(
                    repr(call.tool_call_id),
                    field=f"{at}.ToolCallId",
                    tool_call_id=call.tool_call_id,
                    tool_name=call.name,
                )
            )
        seen.add(call.tool_call_id)
        try:
            arguments = strict_json_loads(call.arguments_json)
        except (ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            errors.append(
                ARGUMENTS_JSON_OBJECT.error(
                    field=f"{at}.ArgumentsJson", tool_call_id=call.tool_call_id, tool_name=call.name
                )
            )
    return errors


def _file_errors(response: AgentExecuteResponse) -> list[InvokeError]:
    errors: list[InvokeError] = []
    for index, file in enumerate(response.files or ()):
        at = f"Files[{index}]"
        required = {
            "Name": file.name,
            "MimeType": file.mime_type,
            "Url": file.url,
            "ContentHash": file.content_hash,
        }
        blank = [name for name, value in required.items() if not has_text(value)]
        if file.size_bytes < 0:
            blank.append("SizeBytes")
        if blank:
            errors.append(FILE_REF_FIELDS_PRESENT.error(", ".join(blank), field=f"{at}.{blank[0]}"))
        if has_text(file.url) and not is_reference_url(file.url):
            errors.append(FILE_REF_URL_ABSOLUTE.error(repr(file.url[:80]), field=f"{at}.Url"))
    return errors


def _utf8_errors(response: AgentExecuteResponse) -> list[InvokeError]:
    try:  # fast path: the JSON serializer refuses lone surrogates, so one pass finds none
        response.model_dump_json(warnings=False)
    except Exception:  # a lone surrogate, or something else odd: walk the wire form
        wire = response.model_dump(mode="json", by_alias=True, exclude_none=True, warnings=False)
        return [TEXT_UTF8.error(field=field or None) for field in non_utf8_fields(wire)]
    return []


def _kind_is(kind: ResponseKind) -> Callable[[AgentExecuteResponse], bool]:
    return lambda response: _kind(response) is kind


_FINAL = _kind_is(ResponseKind.FINAL)
_CONTINUATION = _kind_is(ResponseKind.CLIENT_TOOL_CONTINUATION)

RESPONSE_CHECKS: tuple[Check[AgentExecuteResponse], ...] = (
    requirement(SESSION_ID_PRESENT, lambda r: has_text(r.session_id), field="SessionId"),
    requirement(TURN_ID_PRESENT, lambda r: has_text(r.turn_id), field="TurnId"),
    requirement(
        MODE_DISPLAY_NAME_PRESENT,
        lambda r: has_text(r.mode_display_name),
        field="ModeDisplayName",
    ),
    requirement(KIND_CLOSED, lambda r: _kind(r) is not None, field="Kind"),
    requirement(
        FINAL_PRIMARY_OUTPUT_REQUIRED,
        lambda r: r.primary_output_text is not None,
        field="PrimaryOutputText",
        when=_FINAL,
    ),
    requirement(
        FINAL_TOOL_CALLS_FORBIDDEN, lambda r: r.tool_calls is None, field="ToolCalls", when=_FINAL
    ),
    requirement(
        FINAL_TOOL_CONTINUATION_MESSAGE_FORBIDDEN,
        lambda r: r.tool_continuation_message is None,
        field="ToolContinuationMessage",
        when=_FINAL,
    ),
    requirement(
        CONTINUATION_TOOL_CALLS_REQUIRED,
        lambda r: bool(r.tool_calls),
        field="ToolCalls",
        when=_CONTINUATION,
    ),
    requirement(
        CONTINUATION_PRIMARY_OUTPUT_FORBIDDEN,
        lambda r: r.primary_output_text is None,
        field="PrimaryOutputText",
        when=_CONTINUATION,
    ),
    requirement(
        CONTINUATION_TOOL_RESULTS_FORBIDDEN,
        lambda r: r.tool_results is None,
        field="ToolResults",
        when=_CONTINUATION,
    ),
    requirement(
        CONTINUATION_FILES_FORBIDDEN, lambda r: r.files is None, field="Files", when=_CONTINUATION
    ),
    requirement(
        CONTINUATION_USER_WARNINGS_FORBIDDEN,
        lambda r: r.user_warnings is None,
        field="UserWarnings",
        when=_CONTINUATION,
    ),
    requirement(
        CONTINUATION_USAGE_FORBIDDEN, lambda r: r.usage is None, field="Usage", when=_CONTINUATION
    ),
    Check(
        (TOOL_CALL_FIELDS_PRESENT.id, TOOL_CALL_IDS_UNIQUE.id, ARGUMENTS_JSON_OBJECT.id),
        _tool_call_errors,
    ),
    Check(
        TOOL_RESULT_RULES.ids,
        lambda r: tool_result_errors(r.tool_results or [], TOOL_RESULT_RULES, "ToolResults"),
    ),
    Check(
        (GUARDED_PAYLOAD.id, NO_EMBEDDED_FILE_CONTENTS.id),
        lambda r: (
            _text_errors(r.primary_output_text, "PrimaryOutputText")
            + _text_errors(r.tool_continuation_message, "ToolContinuationMessage")
        ),
    ),
    Check((FILE_REF_FIELDS_PRESENT.id, FILE_REF_URL_ABSOLUTE.id), _file_errors),
    Check((TEXT_UTF8.id,), _utf8_errors),
)
"""The AGN-033 rule set, in the DDR's section order."""


def response_errors(response: AgentExecuteResponse) -> list[InvokeError]:
    """Every AGN-033 rule ``response`` breaks."""
    return run_checks(RESPONSE_CHECKS, response)


def validate_response(response: AgentExecuteResponse) -> InvokeResult[None]:
    """Check a response against AGN-033; never raises, never mutates."""
    return outcome(response_errors(response))


def parse_response(
    data: str | bytes | Mapping[str, Any], *, max_json_depth: int = 64
) -> InvokeResult[AgentExecuteResponse]:
    """Parse a wire response (JSON text or a JSON-like mapping) and check it against AGN-033.

    For clients and hosts that receive responses: only the wire (PascalCase) names
    are accepted; unknown fields, wrong types and every AGN-033 rule are reported
    as errors with rule ids and fields. Never raises for bad input; input nested
    deeper than ``max_json_depth`` is refused first (``DESIGN/limits/json-depth``).
    """
    if (
        text_depth_exceeds(data, max_json_depth)
        if isinstance(data, str | bytes | bytearray)
        else value_depth_exceeds(data, max_json_depth)
    ):
        return _ResponseResult.failure([RESPONSE_SHAPE.error(f"deeper than {max_json_depth}")])
    try:
        loaded = strict_json_loads(data) if isinstance(data, str | bytes | bytearray) else data
    except (ValueError, RecursionError) as error:
        return _ResponseResult.failure([RESPONSE_SHAPE.error(f"not JSON ({error})")])
    if not isinstance(loaded, Mapping):
        return _ResponseResult.failure([RESPONSE_SHAPE.error(type(loaded).__name__)])
    nulls = [ABSENT_NOT_NULL.error(field=field) for field in null_fields(loaded)]
    try:
        response = AgentExecuteResponse.model_validate(dict(loaded), by_alias=True, by_name=False)
    except ValidationError as error:
        return _ResponseResult.failure(
            nulls + [_shape_error(detail) for detail in error.errors(include_url=False)]
        )
    errors = nulls + response_errors(response)
    if errors:
        return _ResponseResult.failure(errors)
    return _ResponseResult.success(response)


_METADATA_RULES = {
    "SessionId": SESSION_ID_PRESENT,
    "TurnId": TURN_ID_PRESENT,
    "ModeDisplayName": MODE_DISPLAY_NAME_PRESENT,
}


def _shape_error(detail: ErrorDetails) -> InvokeError:
    """A parse error, under the AGN-033 rule it breaks where there is one."""
    loc, where = detail["loc"], json_path(detail["loc"])
    chosen = RESPONSE_SHAPE
    if loc == ("Kind",):
        chosen = KIND_CLOSED
    elif len(loc) == 1 and detail["type"] == "missing":
        chosen = _METADATA_RULES.get(str(loc[0]), RESPONSE_SHAPE)
    return chosen.error(f"{where}: {detail['msg']}", field=where or None)
