"""AGN-034 request rules: parsing, scenario classification and the scenario rules.

``parse_request`` turns wire input (JSON text, a dict or a model) into an
``AgentExecuteRequest`` or an unsuccessful ``InvokeResult`` whose errors each name
a rule id and a field. It never raises for bad input.

Decisions where the DDRs are silent (docs/CONFORMANCE.md, "Decisions"):

- an empty-string ``SessionId``/``TurnId`` counts as absent (AGN-036 §3.1 speaks of
  "empty" ids for Initial);
- a whitespace-only ``Instruction`` is not an input (AGN-034 §2.1);
- on a tool continuation every non-required field is forbidden when present, even
  empty or ``false`` — the submission is "mechanical only" (AGN-034 §2.2) —
  including ``AgentContextId``/``ConversationContextId``, which only select an
  agent for a user turn;
- base64 is the standard alphabet with padding, no whitespace (RFC 4648 §4);
- a request's images are its clipboard images and its base64 artifacts whose
  ``MimeType`` is an image type (``image_inputs``); the engine caps their count,
  the decoded bytes of each and their total (``ImageCaps``, ``DESIGN/limits/image-…``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from aptix_pipeline.contracts import (
    AgentExecuteRequest,
    ArtifactEncoding,
    ContextType,
    ErrorCode,
    InvokeError,
    InvokeResult,
)

from .core import has_text, has_user_input
from .json_text import (
    json_loads_with_deep_text,
    json_path,
    non_utf8_fields,
    text_depth_exceeds,
    value_depth_exceeds,
)
from .rules import rule
from .tool_results import ToolResultRules, tool_result_errors

__all__ = [
    "DEFAULT_IMAGE_CAPS",
    "SERVER_OWNED_FIELDS",
    "ImageCaps",
    "ImageInput",
    "classify_request",
    "image_inputs",
    "is_image_type",
    "parse_request",
    "validate_request",
]

# Parametrized once and kept: pydantic rebuilds a generic whose class was collected.
_KindResult = InvokeResult[ContextType]
_RequestResult = InvokeResult[AgentExecuteRequest]

_INVALID = ErrorCode.INVALID_REQUEST

DEFAULT_MAX_JSON_DEPTH = 64
DEFAULT_MAX_ERRORS = 20
QUOTE_LIMIT = 80
_COUNT_CAPS = {
    "InputArtifacts": rule(
        "DESIGN/limits/input-artifacts",
        "DESIGN.md limits",
        "the request holds more InputArtifacts than the engine allows",
        _INVALID,
        module=__name__,
    ),
    "ClipboardImages": rule(
        "DESIGN/limits/clipboard-images",
        "DESIGN.md limits",
        "the request holds more ClipboardImages than the engine allows",
        _INVALID,
        module=__name__,
    ),
    "ToolResults": rule(
        "DESIGN/limits/tool-results",
        "DESIGN.md limits",
        "the request holds more ToolResults than the engine allows",
        _INVALID,
        module=__name__,
    ),
}
DEFAULT_COUNT_CAPS = {"InputArtifacts": 100, "ClipboardImages": 20, "ToolResults": 128}
IMAGE_COUNT = rule(
    "DESIGN/limits/image-count",
    "DESIGN.md limits",
    "the request holds more images (ClipboardImages and base64 image/* InputArtifacts) "
    "than the engine allows",
    _INVALID,
    module=__name__,
)
IMAGE_BYTES = rule(
    "DESIGN/limits/image-bytes",
    "DESIGN.md limits",
    "an image holds more bytes than the engine allows for one image",
    _INVALID,
    module=__name__,
)
IMAGE_TOTAL_BYTES = rule(
    "DESIGN/limits/image-total-bytes",
    "DESIGN.md limits",
    "the request's images hold more bytes together than the engine allows",
    _INVALID,
    module=__name__,
)
ERROR_COUNT = rule(
    "DESIGN/limits/error-count",
    "DESIGN.md limits",
    "more errors were found than a result lists",
    _INVALID,
    module=__name__,
)
JSON_DEPTH = rule(
    "DESIGN/limits/json-depth",
    "DESIGN.md limits",
    "the request nests JSON arrays/objects deeper than the engine allows "
    "(checked before any other work; also for ResultJson/ArgumentsJson text)",
    _INVALID,
    module=__name__,
)
ENVELOPE_OBJECT = rule(
    "AGN-034/3/envelope-object",
    "AGN-034 §3",
    "the request must be one JSON object",
    _INVALID,
    module=__name__,
)
SERVER_OWNED_FIELD = rule(
    "AGN-034/3/server-owned-field",
    "AGN-034 §2.1, §3",
    "mode, correlation, diagnostic and provider continuation fields are server-owned and "
    "must never appear in the request",
    _INVALID,
    module=__name__,
)
UNKNOWN_FIELD = rule(
    "AGN-034/3/unknown-field",
    "AGN-034 §3",
    "the field is not part of the AgentExecuteRequest contract",
    _INVALID,
    module=__name__,
)
FIELD_TYPE = rule(
    "AGN-034/3/field-type",
    "AGN-034 §3, §4",
    "the field has the wrong type",
    _INVALID,
    module=__name__,
)
TEXT_UTF8 = rule(
    "AGN-034/4.1/text-utf8",
    "AGN-034 §4.1, §3",
    "text must be UTF-8 encodable Unicode (no lone surrogates)",
    _INVALID,
    module=__name__,
)
SESSION_TURN_PAIR = rule(
    "AGN-034/3/session-turn-pair",
    "AGN-034 §3, AGN-033 §3.1, DESIGN R1",
    "SessionId and TurnId come together: both (follow-on, continuation) or neither (new session)",
    _INVALID,
    module=__name__,
)
INPUT_REQUIRED = rule(
    "AGN-034/2.1/input-required",
    "AGN-034 §2.1",
    "a user turn needs at least one input: Instruction, InputArtifacts or ClipboardImages",
    _INVALID,
    module=__name__,
)
TOOL_RESULTS_FORBIDDEN = rule(
    "AGN-034/2.1/tool-results-forbidden",
    "AGN-034 §2.1, §5",
    "tool results may only be submitted with the SessionId and TurnId of the turn that "
    "asked for them",
    _INVALID,
    module=__name__,
)
TOOL_RESULTS_REQUIRED = rule(
    "AGN-034/2.2/tool-results-required",
    "AGN-034 §2.2",
    "a tool continuation submission needs one or more ToolResults",
    _INVALID,
    module=__name__,
)
INSTRUCTION_FORBIDDEN = rule(
    "AGN-034/2.2/instruction-forbidden",
    "AGN-034 §2.2",
    "a tool continuation submission must not carry an Instruction",
    _INVALID,
    module=__name__,
)
INPUT_ARTIFACTS_FORBIDDEN = rule(
    "AGN-034/2.2/input-artifacts-forbidden",
    "AGN-034 §2.2, §4.2",
    "input artifacts are allowed only in user turn requests",
    _INVALID,
    module=__name__,
)
CLIPBOARD_IMAGES_FORBIDDEN = rule(
    "AGN-034/2.2/clipboard-images-forbidden",
    "AGN-034 §2.2",
    "a tool continuation submission must not carry clipboard images",
    _INVALID,
    module=__name__,
)
CONTEXT_INPUTS_FORBIDDEN = rule(
    "AGN-034/2.2/context-inputs-forbidden",
    "AGN-034 §2.2",
    "a tool continuation submission must not carry context inputs",
    _INVALID,
    module=__name__,
)
STREAM_FORBIDDEN = rule(
    "AGN-034/2.2/stream-forbidden",
    "AGN-034 §2.2",
    "a tool continuation submission must not carry a streaming flag",
    _INVALID,
    module=__name__,
)
ARTIFACT_SHAPE = rule(
    "AGN-034/4.2/artifact-shape",
    "AGN-034 §4.2",
    "an input artifact needs RelativePath, FileName, Contents and Origin (ide|user); "
    "Encoding is utf8 or base64",
    _INVALID,
    module=__name__,
)
ARTIFACT_NAMES_PRESENT = rule(
    "AGN-034/4.2/artifact-names-present",
    "AGN-034 §4.2",
    "an input artifact's RelativePath and FileName must not be empty",
    _INVALID,
    module=__name__,
)
RELATIVE_PATH_NOT_ABSOLUTE = rule(
    "AGN-034/4.2/relative-path-not-absolute",
    "AGN-034 §4.2",
    "RelativePath must be relative to the opened root folder; absolute paths are not permitted",
    _INVALID,
    module=__name__,
)
RELATIVE_PATH_WITHIN_ROOT = rule(
    "AGN-034/4.2/relative-path-within-root",
    "AGN-034 §4.2",
    "RelativePath must not escape the root folder with '..'",
    _INVALID,
    module=__name__,
)
ARTIFACT_BASE64_VALID = rule(
    "AGN-034/4.2/base64-contents-valid",
    "AGN-034 §4.2",
    "Contents must be valid base64 when Encoding is base64",
    _INVALID,
    module=__name__,
)
CLIPBOARD_IMAGE_SHAPE = rule(
    "AGN-034/4.3/clipboard-image-shape",
    "AGN-034 §4.3",
    "a clipboard image needs Id, MimeType and DataBase64",
    _INVALID,
    module=__name__,
)
CLIPBOARD_ID_PRESENT = rule(
    "AGN-034/4.3/clipboard-id-present",
    "AGN-034 §4.3",
    "a clipboard image's Id must not be empty",
    _INVALID,
    module=__name__,
)
CLIPBOARD_MIME_IMAGE = rule(
    "AGN-034/4.3/clipboard-mime-image",
    "AGN-034 §4.3",
    "a clipboard image's MimeType must be an image type (image/<subtype>, no parameters)",
    _INVALID,
    module=__name__,
)
CLIPBOARD_BASE64_VALID = rule(
    "AGN-034/4.3/clipboard-data-base64-valid",
    "AGN-034 §4.3",
    "DataBase64 must be non-empty valid base64",
    _INVALID,
    module=__name__,
)
RAG_CONDITION_SHAPE = rule(
    "AGN-034/4.4/rag-condition-shape",
    "AGN-034 §4.4",
    "a RAG scope condition needs Key, Operator (==, !=, contains, does_not_contain) and Values[]",
    _INVALID,
    module=__name__,
)
RAG_KEY_PRESENT = rule(
    "AGN-034/4.4/rag-key-present",
    "AGN-034 §4.4",
    "a RAG scope condition's Key must not be empty",
    _INVALID,
    module=__name__,
)
RAG_VALUES_PRESENT = rule(
    "AGN-034/4.4/rag-values-present",
    "AGN-034 §4.4",
    "a RAG scope condition needs at least one value",
    _INVALID,
    module=__name__,
)
TOOL_RESULT_SHAPE = rule(
    "AGN-034/5/tool-result-shape",
    "AGN-034 §5",
    "a tool result needs ToolCallId (string), ExecutionMs (integer) and ResultJson or "
    "ErrorMessage (string)",
    _INVALID,
    module=__name__,
)
TOOL_RESULT_RULES = ToolResultRules(
    exactly_one_outcome=rule(
        "AGN-034/5/exactly-one-outcome",
        "AGN-034 §5",
        "a tool result holds exactly one of ResultJson or ErrorMessage",
        _INVALID,
        module=__name__,
    ),
    tool_call_id_present=rule(
        "AGN-034/5/tool-call-id-present",
        "AGN-034 §5",
        "a tool result's ToolCallId must not be empty",
        _INVALID,
        module=__name__,
    ),
    tool_call_ids_unique=rule(
        "AGN-034/5/tool-call-ids-unique",
        "AGN-034 §5, AGN-033 §3.3",
        "each tool call gets exactly one result; the ToolCallId repeats",
        _INVALID,
        module=__name__,
    ),
    execution_ms_non_negative=rule(
        "AGN-034/5/execution-ms-non-negative",
        "AGN-034 §5",
        "ExecutionMs must not be negative",
        _INVALID,
        module=__name__,
    ),
    result_json_valid=rule(
        "AGN-034/5/result-json-valid",
        "AGN-034 §5",
        "ResultJson must be well-formed JSON",
        _INVALID,
        module=__name__,
    ),
    error_message_not_blank=rule(
        "AGN-034/5/error-message-not-blank",
        "AGN-034 §5",
        "ErrorMessage must say what failed",
        _INVALID,
        module=__name__,
    ),
)

SERVER_OWNED_FIELDS: frozenset[str] = frozenset(
    {
        "mode",
        "modeid",
        "modename",
        "modedisplayname",
        "currentmode",
        "correlationid",
        "traceid",
        "spanid",
        "diagnostics",
        "previousresponseid",
        "responseid",
        "providerresponseid",
        "continuationid",
        "providercontinuationid",
        "modelcontinuationid",
        "threadid",
        "runid",
        "provider",
        "model",
    }
)
"""Field names (case, ``_`` and ``-`` ignored) that AGN-034 §2.1/§3 reserve to the server."""

_SHAPE_RULE_BY_FIELD = {
    "InputArtifacts": ARTIFACT_SHAPE,
    "ClipboardImages": CLIPBOARD_IMAGE_SHAPE,
    "RagScope": RAG_CONDITION_SHAPE,
    "ToolResults": TOOL_RESULT_SHAPE,
}
_IMAGE_TYPE = re.compile(r"image/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}", re.IGNORECASE)
_DRIVE = re.compile(r"^[A-Za-z]:")
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:")
_HOME = re.compile(r"^~(?:[^/\\$]*[/\\]|$)")  # "~", "~/x", "~user/x"; not "~tmp.txt"
_SEPARATORS = re.compile(r"[\\/]")


def _normalized_name(name: str) -> str:
    return re.sub(r"[_\-\s]", "", name).lower()


def _present(value: object) -> bool:
    """Presence in AGN-034's sense: sent at all. An empty list or ``false`` is present."""
    return value is not None


def classify_request(request: AgentExecuteRequest) -> ContextType | None:
    """The context type a request asks for, by field presence (AGN-034 §3, DESIGN R1).

    ``None`` when exactly one of ``SessionId``/``TurnId`` is given: such a request
    has no scenario and is rejected by ``AGN-034/3/session-turn-pair``.
    """
    has_session, has_turn = has_text(request.session_id), has_text(request.turn_id)
    if has_session != has_turn:
        return None
    if not has_session:
        return ContextType.INITIAL
    if _present(request.tool_results):
        return ContextType.CLIENT_TOOL_CALL_CONTINUATION
    return ContextType.FOLLOW_ON


_BASE64_ALPHABET: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def is_base64(text: str) -> bool:
    """Whether ``text`` is RFC 4648 standard base64 with padding and no whitespace (D5):
    whole quanta of four characters of the standard alphabet, the last ending in at
    most two ``=``. Checked without decoding (an image's base64 is checked in one
    ``bytes.translate`` pass)."""
    if not text.isascii() or len(text) % 4:
        return False
    data = text.encode("ascii")
    body = data[:-2] + data[-2:].rstrip(b"=")
    return not body.translate(None, _BASE64_ALPHABET)


def is_image_type(mime_type: str | None) -> bool:
    """Whether ``mime_type`` is ``image/<subtype>`` (RFC 6838 names, no parameters)."""
    return mime_type is not None and _IMAGE_TYPE.fullmatch(mime_type) is not None


def _decoded_size(text: str) -> int:
    """How many bytes valid base64 ``text`` decodes to, without decoding it."""
    return len(text) // 4 * 3 - len(text[-2:]) + len(text[-2:].rstrip("="))


@dataclass(frozen=True, slots=True)
class ImageInput:
    """One image of a request: where it is (``field`` of its base64), its type and text."""

    field: str
    mime_type: str
    data_base64: str
    clipboard_image_id: str | None = None
    relative_path: str | None = None


def image_inputs(request: AgentExecuteRequest) -> list[ImageInput]:
    """The request's images, artifacts first, as the model is shown them.

    A base64 artifact is an image when its ``MimeType`` is ``image/<subtype>``
    (``is_image_type``) and it has contents; every clipboard image is one
    (AGN-034 §4.3).
    """
    found = [
        ImageInput(
            f"InputArtifacts[{index}].Contents",
            artifact.mime_type or "",
            artifact.contents,
            relative_path=artifact.relative_path,
        )
        for index, artifact in enumerate(request.input_artifacts or ())
        if artifact.effective_encoding is ArtifactEncoding.BASE64
        and artifact.contents
        and is_image_type(artifact.mime_type)
    ]
    found.extend(
        ImageInput(
            f"ClipboardImages[{index}].DataBase64",
            image.mime_type,
            image.data_base64,
            clipboard_image_id=image.id,
        )
        for index, image in enumerate(request.clipboard_images or ())
    )
    return found


@dataclass(frozen=True, slots=True)
class ImageCaps:
    """The engine's caps on a request's images (``PipelineOptions``, docs/CONFIGURATION.md)."""

    count: int = 20
    bytes_each: int = 5 * 1024 * 1024
    bytes_total: int = 20 * 1024 * 1024


DEFAULT_IMAGE_CAPS: Final = ImageCaps()


def _image_cap_errors(request: AgentExecuteRequest, caps: ImageCaps) -> list[InvokeError]:
    """``DESIGN/limits/image-…``: each error names the base64 field of the image at fault."""
    if not (request.input_artifacts or request.clipboard_images):
        return []  # no image can be there: most requests
    images = image_inputs(request)
    errors: list[InvokeError] = []
    if len(images) > caps.count:
        where = images[caps.count].field.rsplit(".", 1)[0]
        errors.append(IMAGE_COUNT.error(f"{len(images)} > {caps.count}", field=where))
    total = 0
    over_total = False
    for image in images:
        size = _decoded_size(image.data_base64)
        total += size
        if size > caps.bytes_each:
            errors.append(IMAGE_BYTES.error(f"{size} > {caps.bytes_each}", field=image.field))
        if total > caps.bytes_total and not over_total:
            over_total = True
            errors.append(
                IMAGE_TOTAL_BYTES.error(
                    f"{total} bytes so far > {caps.bytes_total}", field=image.field
                )
            )
    return errors


def _path_errors(path: str, field: str) -> list[InvokeError]:
    if (
        path.startswith(("/", "\\"))
        or _DRIVE.match(path)
        or _URI_SCHEME.match(path)
        or _HOME.match(path)
    ):
        return [RELATIVE_PATH_NOT_ABSOLUTE.error(repr(path), field=field)]
    depth = 0
    for segment in _SEPARATORS.split(path):
        if segment == "..":
            depth -= 1
            if depth < 0:
                return [RELATIVE_PATH_WITHIN_ROOT.error(repr(path), field=field)]
        elif segment not in ("", "."):
            depth += 1
    return []


def _user_turn_errors(request: AgentExecuteRequest, kind: ContextType) -> list[InvokeError]:
    errors: list[InvokeError] = []
    if not has_user_input(request.instruction, request.input_artifacts, request.clipboard_images):
        errors.append(INPUT_REQUIRED.error(field="Instruction"))
    if kind is ContextType.INITIAL and _present(request.tool_results):
        errors.append(TOOL_RESULTS_FORBIDDEN.error(field="ToolResults"))
    for index, artifact in enumerate(request.input_artifacts or ()):
        at = f"InputArtifacts[{index}]"
        if not has_text(artifact.relative_path) or not has_text(artifact.file_name):
            empty = "FileName" if has_text(artifact.relative_path) else "RelativePath"
            errors.append(ARTIFACT_NAMES_PRESENT.error(field=f"{at}.{empty}"))
        if has_text(artifact.relative_path):
            errors.extend(_path_errors(artifact.relative_path, f"{at}.RelativePath"))
        if artifact.effective_encoding is ArtifactEncoding.BASE64 and not is_base64(
            artifact.contents
        ):
            errors.append(ARTIFACT_BASE64_VALID.error(field=f"{at}.Contents"))
    for index, image in enumerate(request.clipboard_images or ()):
        at = f"ClipboardImages[{index}]"
        if not image.id.strip():
            errors.append(CLIPBOARD_ID_PRESENT.error(field=f"{at}.Id"))
        if not is_image_type(image.mime_type):
            errors.append(CLIPBOARD_MIME_IMAGE.error(repr(image.mime_type), field=f"{at}.MimeType"))
        if not image.data_base64 or not is_base64(image.data_base64):
            errors.append(CLIPBOARD_BASE64_VALID.error(field=f"{at}.DataBase64"))
    for index, condition in enumerate(request.rag_scope or ()):
        at = f"RagScope[{index}]"
        if not condition.key.strip():
            errors.append(RAG_KEY_PRESENT.error(field=f"{at}.Key"))
        if not condition.values:
            errors.append(RAG_VALUES_PRESENT.error(field=f"{at}.Values"))
    return errors


_CONTINUATION_FORBIDDEN = (
    ("Instruction", "instruction", INSTRUCTION_FORBIDDEN),
    ("InputArtifacts", "input_artifacts", INPUT_ARTIFACTS_FORBIDDEN),
    ("ClipboardImages", "clipboard_images", CLIPBOARD_IMAGES_FORBIDDEN),
    ("RagScope", "rag_scope", CONTEXT_INPUTS_FORBIDDEN),
    ("SolutionContextText", "solution_context_text", CONTEXT_INPUTS_FORBIDDEN),
    ("WorkspaceHints", "workspace_hints", CONTEXT_INPUTS_FORBIDDEN),
    ("AgentContextId", "agent_context_id", CONTEXT_INPUTS_FORBIDDEN),
    ("ConversationContextId", "conversation_context_id", CONTEXT_INPUTS_FORBIDDEN),
    ("Stream", "stream", STREAM_FORBIDDEN),
)


def _continuation_errors(request: AgentExecuteRequest) -> list[InvokeError]:
    errors = [
        forbidden.error(field=wire_name)
        for wire_name, attribute, forbidden in _CONTINUATION_FORBIDDEN
        if _present(getattr(request, attribute))
    ]
    results = request.tool_results or []
    if not results:
        errors.append(TOOL_RESULTS_REQUIRED.error(field="ToolResults"))
    errors.extend(tool_result_errors(results, TOOL_RESULT_RULES, "ToolResults"))
    return errors


def validate_request(request: AgentExecuteRequest) -> InvokeResult[ContextType]:
    """Check the AGN-034 scenario rules; on success the result is the context type."""
    kind = classify_request(request)
    if kind is None:
        missing = "TurnId" if has_text(request.session_id) else "SessionId"
        return _KindResult.failure([SESSION_TURN_PAIR.error(field=missing)])
    if kind is ContextType.CLIENT_TOOL_CALL_CONTINUATION:
        errors = _continuation_errors(request)
    else:
        errors = _user_turn_errors(request, kind)
    if errors:
        return _KindResult.failure(errors)
    return _KindResult.success(kind)


def _clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """Client text quoted in an error, cut to ``limit`` characters with an ellipsis (D142)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def capped_errors(errors: list[InvokeError], max_errors: int) -> list[InvokeError]:
    """The first ``max_errors`` errors, then one ``DESIGN/limits/error-count`` for the rest."""
    if len(errors) <= max_errors:
        return errors
    rest = len(errors) - max_errors
    return [*errors[:max_errors], ERROR_COUNT.error(f"… and {rest} more")]


def _shape_errors(error: ValidationError, max_errors: int) -> list[InvokeError]:
    errors: list[InvokeError] = []
    details = error.errors(include_url=False)
    for detail in details[:max_errors]:
        loc = detail["loc"]
        field = _clip(json_path(loc), 200)
        if detail["type"] == "extra_forbidden":
            name = str(loc[-1]) if loc else ""
            owned = _normalized_name(name) in SERVER_OWNED_FIELDS
            chosen = SERVER_OWNED_FIELD if owned and len(loc) == 1 else UNKNOWN_FIELD
            errors.append(chosen.error(repr(_clip(name)), field=field))
            continue
        top = str(loc[0]) if loc else ""
        shape_rule = _SHAPE_RULE_BY_FIELD.get(top, FIELD_TYPE)
        errors.append(shape_rule.error(f"{field}: {_clip(detail['msg'])}", field=field or None))
    if len(details) > max_errors:
        errors.append(ERROR_COUNT.error(f"… and {len(details) - max_errors} more"))
    return errors


def _text_errors(data: object) -> list[InvokeError]:
    return [TEXT_UTF8.error(field=field or None) for field in non_utf8_fields(data)]


_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD]")


def _may_hold_lone_surrogates(text: str | bytes | bytearray) -> bool:
    """Whether JSON ``text`` could parse to a string with no UTF-8 form (a lone surrogate).

    Only text that holds one itself (a ``str``, or bytes that are not strict UTF-8,
    which ``json.loads`` decodes with ``surrogatepass``) or writes one as a
    ``\\uD800``-``\\uDFFF`` escape can; any other skips the walk of every string
    (``non_utf8_fields``), which costs as much as the text is long.
    """
    if isinstance(text, str):
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError:
            return True
    else:
        raw = bytes(text)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return True
    return b"\\" in raw and _SURROGATE_ESCAPE.search(raw) is not None


def _load(
    data: AgentExecuteRequest | Mapping[str, Any] | str | bytes, max_json_depth: int
) -> tuple[object, bool]:
    """The request as a value (or the error parsing it), and whether a ``ResultJson`` or
    ``ArgumentsJson`` text in a mapping read from text nests past ``max_json_depth``."""
    if isinstance(data, str | bytes | bytearray):
        try:
            loaded, deep = json_loads_with_deep_text(data, max_json_depth)
        except (ValueError, RecursionError) as error:
            return error, False
        return loaded, deep and isinstance(loaded, Mapping)
    return data, False


def parse_request(
    data: AgentExecuteRequest | Mapping[str, Any] | str | bytes,
    *,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_errors: int = DEFAULT_MAX_ERRORS,
    count_caps: Mapping[str, int] | None = None,
    image_caps: ImageCaps = DEFAULT_IMAGE_CAPS,
) -> InvokeResult[AgentExecuteRequest]:
    """Parse and check a request: JSON text, a JSON-like mapping or a model.

    Mappings and JSON use the wire (PascalCase) names only. The result is
    unsuccessful, never an exception, for anything that is not a valid AGN-034
    request; each error names its rule id and the offending field. Input nested
    deeper than ``max_json_depth`` is refused first (``DESIGN/limits/json-depth``),
    before JSON parsing, UTF-8 checks or model validation. A request that keeps
    the AGN-034 rules is then held to ``image_caps``.
    """
    if isinstance(data, str | bytes | bytearray):
        too_deep = text_depth_exceeds(data, max_json_depth)
    else:
        too_deep = not isinstance(data, AgentExecuteRequest) and value_depth_exceeds(
            data, max_json_depth
        )
    if too_deep:
        return _RequestResult.failure([JSON_DEPTH.error(f"deeper than {max_json_depth}")])
    loaded, deep_text = _load(data, max_json_depth)
    if deep_text:  # text inside ResultJson (a mapping's was checked with it, above)
        return _RequestResult.failure([JSON_DEPTH.error(f"deeper than {max_json_depth}")])
    if isinstance(loaded, AgentExecuteRequest):
        wire: Mapping[Any, Any] = loaded.model_dump(by_alias=True, exclude_none=True)
    elif isinstance(loaded, Mapping):
        wire = loaded
    else:
        detail = f"not JSON ({loaded})" if isinstance(loaded, Exception) else type(loaded).__name__
        return _RequestResult.failure([ENVELOPE_OBJECT.error(detail)])
    caps = DEFAULT_COUNT_CAPS if count_caps is None else {**DEFAULT_COUNT_CAPS, **count_caps}
    count_errors = [
        _COUNT_CAPS[name].error(f"{len(items)} > {caps[name]}", field=name)
        for name, items in ((name, wire.get(name)) for name in _COUNT_CAPS)
        if isinstance(items, list) and len(items) > caps[name]
    ]
    if count_errors:
        return _RequestResult.failure(count_errors)
    text_errors = (
        _text_errors(wire)
        if not isinstance(data, str | bytes | bytearray) or _may_hold_lone_surrogates(data)
        else []
    )
    if text_errors:
        return _RequestResult.failure(capped_errors(text_errors, max_errors))
    if isinstance(loaded, AgentExecuteRequest):
        request = loaded
    else:
        try:
            request = AgentExecuteRequest.model_validate(dict(loaded), by_alias=True, by_name=False)
        except ValidationError as error:
            return _RequestResult.failure(_shape_errors(error, max_errors))
    checked = validate_request(request)
    if not checked.successful:
        return _RequestResult.failure(capped_errors(list(checked.errors), max_errors))
    image_errors = _image_cap_errors(request, image_caps)
    if image_errors:
        return _RequestResult.failure(capped_errors(image_errors, max_errors))
    return _RequestResult.success(request)
