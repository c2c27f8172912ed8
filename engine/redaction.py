"""Redaction: a turn recording without user content, that still replays.

User content is what DESIGN.md "Observability without leaks" keeps off spans
and traces unless the host opts in: the instruction, artifact contents, image
data, the solution context, every message's text, the model's text, tool call
arguments and results, tool error messages and a mode change's reason. It is
found by the wire names the recording holds (``CONTENT_KEYS``, ``JSON_TEXT_KEYS``)
and replaced by placeholders that keep what the engine's rules look at:

- text becomes ``[redacted]``; text that was valid base64 (AGN-034 §4.2, §4.3)
  becomes valid base64 (``REDACTED_BASE64``), so the request still passes;
- JSON text (``ArgumentsJson``, ``ResultJson``, a server tool's result) keeps
  its shape — keys, numbers, booleans, nulls — and only its strings are
  replaced, so argument validation sees the same structure; the ``mode`` and
  ``branch`` of an ``agent_change_mode`` call are catalog data, not content
  (AGN-011 §5.1), and are kept so a mode change replays;
- the request text is redacted the same way, key by key.

Redaction is idempotent: a redacted recording redacts to itself, so a replay
compares a redacted recording with the redacted form of what the code does now.
Ids, names, paths, modes, rule ids, counts and the shape of every call stay.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .recording import RecordedError

__all__ = [
    "CONTENT_KEYS",
    "JSON_TEXT_KEYS",
    "REDACTED",
    "REDACTED_BASE64",
    "redact_json_text",
    "redact_port_call",
    "redact_request",
    "redact_text",
    "redact_value",
]

REDACTED = "[redacted]"
REDACTED_BASE64 = base64.b64encode(b"redacted").decode("ascii")

CONTENT_KEYS = frozenset(
    {
        # AGN-034 request
        "Instruction",
        "Contents",
        "DataBase64",
        "SolutionContextText",
        "ErrorMessage",
        # messages, model replies and the AGN-033 response
        "Content",
        "Text",
        "PrimaryOutputText",
        "ToolContinuationMessage",
        # AGN-011 ModeHistory
        "Reason",
        # the state trace (content capture) and set_solution_context's argument
        "text",
        "reason",
    }
)
"""Keys whose string values are user content."""

JSON_TEXT_KEYS = frozenset({"ArgumentsJson", "ResultJson"})
"""Keys whose values are JSON text holding user content."""

_MODE_CHANGE = "agent_change_mode"
_MODE_CHANGE_KEPT = frozenset({"mode", "branch"})


def _is_base64(text: str) -> bool:
    if not text:
        return False
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def redact_text(text: str) -> str:
    """The placeholder for one piece of user text (base64 stays base64).

    Empty text stays empty: it holds no content, and the engine's rules tell
    empty text apart (an empty model reply has no outcome, AGN-036 §4.9).
    """
    if not text:
        return text
    return REDACTED_BASE64 if _is_base64(text) else REDACTED


def _strings_redacted(value: Any, keep: frozenset[str] = frozenset()) -> Any:
    """Every string of JSON data (objects as ``_Pairs``) redacted; top-level ``keep`` keys kept."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, _Pairs):
        return _Pairs(
            (key, item if key in keep else _strings_redacted(item)) for key, item in value
        )
    if isinstance(value, list):
        return [_strings_redacted(item) for item in value]
    return value


def redact_json_text(text: str, *, keep: frozenset[str] = frozenset()) -> str:
    """JSON text with every string replaced (top-level keys in ``keep`` left alone).

    Read as pairs like request text, so duplicate keys stay; text that is not
    JSON is redacted whole.
    """
    try:
        value = json.loads(text, object_pairs_hook=_Pairs)
    except ValueError:
        return redact_text(text)
    return _dump_pairs(_strings_redacted(value, keep))


def redact_value(value: Any) -> Any:
    """JSON data with the values under ``CONTENT_KEYS`` and ``JSON_TEXT_KEYS`` redacted."""
    return _plain(_redact_pairs(_as_pairs(value)))


def redact_port_call(
    port: str, call: str, args: Mapping[str, Any], answer: Any, error: RecordedError | None
) -> dict[str, Any]:
    """A port call's ``args``, ``answer`` and ``error`` without user content.

    A server tool's arguments and result are all content (its name is the call);
    so is the message of an exception it raised, which goes back to the model.
    """
    if port != "ToolExecutor":
        return {"args": redact_value(dict(args)), "answer": redact_value(answer), "error": error}
    keep = _MODE_CHANGE_KEPT if call == _MODE_CHANGE else frozenset()
    redacted_args = {
        name: _plain(_strings_redacted(_as_pairs(value), keep))
        if name == "arguments"
        else redact_value(value)
        for name, value in args.items()
    }
    return {
        "args": redacted_args,
        "answer": redact_json_text(answer) if isinstance(answer, str) else answer,
        "error": None if error is None else type(error)(error.type, REDACTED, error.classes),
    }


def redact_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded request (``{"json"|"text"|"base64": ...}``) without user content.

    Request text is read keeping duplicate keys (a request the engine refuses for
    them must still be refused) and written back compact; text that is not JSON
    is redacted whole.
    """
    if "json" in request:
        return {"json": redact_value(request["json"])}
    if "base64" in request:
        try:
            raw = base64.b64decode(request["base64"], validate=True)
        except (binascii.Error, ValueError):
            return {"base64": REDACTED_BASE64}
        try:
            data = _redacted_text(raw.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:  # not UTF-8: keep where its bad bytes are (the error says)
            scrambled = _scrambled(raw.decode("utf-8", "surrogateescape"), in_bytes=True)
            data = scrambled.encode("utf-8", "surrogateescape")
        return {"base64": base64.b64encode(data).decode("ascii")}
    return {"text": _redacted_text(str(request["text"]))}


class _Pairs(list[tuple[str, Any]]):
    """A JSON object read as its pairs, so duplicate keys survive redaction."""


def _redact_pairs(value: Any) -> Any:
    if isinstance(value, _Pairs):
        as_map = dict(value)
        keep = _MODE_CHANGE_KEPT if as_map.get("Name") == _MODE_CHANGE else frozenset()
        pairs = _Pairs()
        for key, item in value:
            if key in JSON_TEXT_KEYS and isinstance(item, str):
                pairs.append((key, redact_json_text(item, keep=keep)))
            elif key in CONTENT_KEYS:
                pairs.append((key, _strings_redacted(item)))
            else:
                pairs.append((key, _redact_pairs(item)))
        return pairs
    if isinstance(value, list):
        return [_redact_pairs(item) for item in value]
    return value


def _as_pairs(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _Pairs((key, _as_pairs(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_as_pairs(item) for item in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, _Pairs):
        return {key: _plain(item) for key, item in value}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _dump_pairs(value: Any) -> str:
    if isinstance(value, _Pairs):
        body = ",".join(
            f"{json.dumps(key, ensure_ascii=False)}:{_dump_pairs(item)}" for key, item in value
        )
        return "{" + body + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump_pairs(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _redacted_text(text: str) -> str:
    try:
        value = json.loads(text, object_pairs_hook=_Pairs)
    except ValueError:
        return _scrambled(text)
    return _dump_pairs(_redact_pairs(value))


_PUNCTUATION = frozenset('{}[],:"\\')
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_KEPT_WORD = re.compile(r"true|false|null|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _scrambled(text: str, *, in_bytes: bool = False) -> str:
    """Request text that is not JSON, its content replaced where it stands.

    The engine refuses such a request naming where parsing failed (line, column,
    or the byte that is not UTF-8), so the placeholder keeps every position:
    each character of a string or a stray word becomes ``x`` (as many as its
    UTF-8 bytes when ``in_bytes``); JSON punctuation, whitespace, control
    characters, literals, numbers and undecodable bytes (surrogate escapes) stay.
    """

    def hidden(part: str) -> str:
        if not in_bytes:
            return "x" * len(part)
        return "".join(
            c if "\udc80" <= c <= "\udcff" else "x" * len(c.encode("utf-8", "surrogatepass"))
            for c in part
        )

    out: list[str] = []
    index, in_string = 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            if char == '"':
                in_string = False
                out.append(char)
            elif char == "\\" and index + 1 < len(text):  # an escape: valid stays valid
                escaped = text[index + 1]
                if escaped == "u" and _HEX4.fullmatch(text[index + 2 : index + 6]):
                    out.append("\\u0078")
                    index += 5
                else:
                    out.append("\\" + (escaped if escaped in '"\\/bfnrt' else hidden(escaped)))
                    index += 1
            elif char < " " or "\udc80" <= char <= "\udcff":
                out.append(char)
            else:
                out.append(hidden(char))
            index += 1
            continue
        if char == '"':
            in_string = True
            out.append(char)
            index += 1
            continue
        if char in _PUNCTUATION or char.isspace() or char < " ":
            out.append(char)
            index += 1
            continue
        end = index
        while end < len(text) and not (
            text[end] in _PUNCTUATION or text[end].isspace() or text[end] < " "
        ):
            end += 1
        word = text[index:end]
        out.append(word if _KEPT_WORD.fullmatch(word) else hidden(word))
        index = end
    return "".join(out)
