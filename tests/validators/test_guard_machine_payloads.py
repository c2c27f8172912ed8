"""``guard_machine_payloads``: unguarded JSON in the model's text is fenced (AGN-033 §4.1).

The function is what the engine applies to the model's text so that the response's
POST (``AGN-033/4.1/guarded-payload``) holds instead of failing the turn. The table
says what it does to each kind of Markdown; the properties say that its output never
breaks the rule it exists for, and that guarding guarded text changes nothing.
Through a turn (on the memory store and a SQLite file), a final answer and a
continuation's ``ToolContinuationMessage`` are guarded alike, and embedded file
contents (AGN-033 §6.1), which cannot be repaired, still fault the turn.
"""

from __future__ import annotations

import pytest
from engine_kit import (
    CALLER,
    NOTHING_STORED,
    READ_A,
    assert_refused,
    calls,
    make_pipeline,
    ok,
    start,
    stored,
    text,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import AgentExecuteResponse, ResponseKind
from aptix_pipeline.validators.response import guard_machine_payloads, validate_response

pytestmark = pytest.mark.decision("D42")

Store = MemoryStore | SQLiteStore

GUARDED_PAYLOAD = "AGN-033/4.1/guarded-payload"

PROPERTY_SETTINGS = settings(max_examples=500, deadline=None, database=None)

# (text, expected); an expected of None means "unchanged"
CASES: dict[str, tuple[str, str | None]] = {
    "whole-object": ('{"a": 1}', '```json\n{"a": 1}\n```'),
    "whole-object-multiline": (
        '{\n  "a": 1,\n  "b": [2]\n}',
        '```json\n{\n  "a": 1,\n  "b": [2]\n}\n```',
    ),
    "array-of-objects": ('[{"a": 1}, {"b": 2}]', '```json\n[{"a": 1}, {"b": 2}]\n```'),
    "array-of-arrays": ("[[1, 2], [3]]", "```json\n[[1, 2], [3]]\n```"),
    "paragraph-between-prose": (
        'Here it is:\n\n{"a": 1}\n\nThat is all.',
        'Here it is:\n\n```json\n{"a": 1}\n```\n\nThat is all.',
    ),
    "paragraph-between-prose-many-blank-lines": (
        'Before.\n\n\n{"a": 1}\n  \n\nAfter.',
        'Before.\n\n\n```json\n{"a": 1}\n```\n  \n\nAfter.',
    ),
    "two-payload-paragraphs": (
        '{"a": 1}\n\n[{"b": 2}]',
        '```json\n{"a": 1}\n```\n\n```json\n[{"b": 2}]\n```',
    ),
    "object-with-trailing-newline": ('{"a": 1}\n', '```json\n{"a": 1}\n```\n'),
    "untagged-fence-with-json": ('```\n{"a": 1}\n```', '```json\n{"a": 1}\n```'),
    "untagged-fence-with-json-array-of-numbers": ("```\n[1, 2]\n```", "```json\n[1, 2]\n```"),
    "untagged-fence-after-prose": (
        'The result:\n```\n{"a": 1}\n```\nDone.',
        'The result:\n```json\n{"a": 1}\n```\nDone.',
    ),
    "untagged-tilde-fence-with-json": ('~~~\n{"a": 1}\n~~~', '~~~json\n{"a": 1}\n~~~'),
    "untagged-long-fence-with-json": ('````\n{"a": 1}\n````', '````json\n{"a": 1}\n````'),
    "indented-untagged-fence-with-json": (
        '   ```\n{"a": 1}\n   ```',
        '   ```json\n{"a": 1}\n   ```',
    ),
    "untagged-fence-with-trailing-spaces": ('```   \n{"a": 1}\n```', '```json   \n{"a": 1}\n```'),
    "tilde-fence-closed-only-by-tildes": (
        '~~~\n{"a": 1}\n```\n~~~',
        None,  # the ``` line is body, so the body is not JSON
    ),
    "untagged-fence-with-code": ("```\nprint(1)\n```", None),
    "untagged-tilde-fence-with-code": ("~~~\nls -la\n~~~", None),
    "tagged-json-fence": ('```json\n{"a": 1}\n```', None),
    "tagged-code-fence-with-json-body": ('```python\n{"a": 1}\n```', None),
    "tagged-tilde-fence": ('~~~yaml\na: 1\n~~~', None),
    "indented-tagged-fence": ('  ```json\n  {"a": 1}\n  ```', None),
    "four-space-indent-is-not-a-fence": ('    ```\n    print(1)\n    ```', None),
    "prose": ("All done. Nothing to add.", None),
    "prose-list-of-numbers": ("[1, 2]", None),
    "prose-list-of-strings": ('["a", "b"]', None),
    "prose-with-braces": ("Use {a: 1} in the config.", None),
    "prose-sentence-starting-with-brace": ('{"a": 1} is what it returns.', None),
    "json-scalar": ("42", None),
    "json-split-by-a-blank-line": ('{\n\n"a": 1}', None),
    "empty": ("", None),
    "blank-lines-only": ("\n\n  \n", None),
    "nan-is-not-json": ('{"a": NaN}', None),
}  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), CASES.values(), ids=CASES.keys())
def test_guard_machine_payloads_fences_only_unguarded_json(text: str, expected: str | None) -> None:
    guarded = guard_machine_payloads(text)

    assert guarded == (text if expected is None else expected)


def test_an_unclosed_fence_is_closed_at_the_end_of_the_text() -> None:
    text = "Here is code:\n```python\nprint(1)"

    assert guard_machine_payloads(text) == text + "\n```"


def test_a_payload_before_an_unclosed_fence_is_still_fenced() -> None:
    text = '{"a": 1}\n\n```\nnot closed'

    assert guard_machine_payloads(text) == '```json\n{"a": 1}\n```\n\n```\nnot closed\n```'


def final_response(text: str) -> AgentExecuteResponse:
    """A valid final response whose only text is ``text``."""
    return AgentExecuteResponse.final(
        session_id="session-1",
        turn_id="turn-1",
        mode_display_name="General",
        primary_output_text=text,
    )


@pytest.mark.parametrize(("text", "expected"), CASES.values(), ids=CASES.keys())
def test_every_guarded_table_text_passes_the_guarded_payload_rule(
    text: str, expected: str | None
) -> None:
    result = validate_response(final_response(guard_machine_payloads(text)))

    assert GUARDED_PAYLOAD not in result.rule_ids


@pytest.mark.parametrize(
    "text",
    ['{"a": 1}', '```\n{"a": 1}\n```', 'Prose.\n\n[{"a": 1}]'],
    ids=["object", "untagged-fence", "paragraph"],
)
def test_the_table_payloads_break_the_rule_before_they_are_guarded(text: str) -> None:
    result = validate_response(final_response(text))

    assert GUARDED_PAYLOAD in result.rule_ids


# --- properties ---------------------------------------------------------------------------

FRAGMENTS = [
    "```", "~~~", "````", "```json", "```python", "~~~json", "   ```", "    ```", "``` `x",
    '{"a": 1}', '[{"a": 1}]', "[1, 2]", "{", "}", '"a": 1', "[]", "{}", "NaN",
    "prose", "Here it is:", " ", "  ", "\t", "\n", "\n\n", "\r", "\r\n", "\x0b", "\x0c",
    "\x1c", "\x85", "\u2028",
]  # fmt: skip

markdownish = st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join)
texts = st.one_of(st.text(), markdownish)


@PROPERTY_SETTINGS
@given(text=texts)
@example(text='```\n{"a": 1}')  # an unclosed fence, then JSON
@example(text='```\r{"a": 1}\r```')  # a fence whose lines end in \r
@example(text='``` `x\n{"a": 1}\n```')  # an opening line whose info starts with a backtick
def test_guarded_text_never_breaks_the_guarded_payload_rule(text: str) -> None:
    result = validate_response(final_response(guard_machine_payloads(text)))

    assert GUARDED_PAYLOAD not in result.rule_ids


@PROPERTY_SETTINGS
@given(text=texts)
@example(text='``` `x\n{"a": 1}\n```')  # an opening line whose info starts with a backtick
def test_guarding_is_idempotent(text: str) -> None:
    once = guard_machine_payloads(text)

    assert guard_machine_payloads(once) == once


# --- through a turn: the engine guards the model's text ---------------------------------

EMBEDDED_FILE = "AGN-033/6.1/no-embedded-file-contents"

FENCED_TEXTS = {
    "whole-object": ('{"a": 1}', '```json\n{"a": 1}\n```'),
    "array-of-objects": ('[{"a": 1}, {"b": 2}]', '```json\n[{"a": 1}, {"b": 2}]\n```'),
    "untagged-fence": ('```\n{"a": 1}\n```', '```json\n{"a": 1}\n```'),
    "paragraph-between-prose": (
        'Here it is:\n\n{"a": 1}\n\nThat is all.',
        'Here it is:\n\n```json\n{"a": 1}\n```\n\nThat is all.',
    ),
}

UNCHANGED_TEXTS = {
    "prose": "All done. Nothing to add.",
    "prose-list": "[1, 2]",
    "prose-with-braces": "Use {a: 1} in the config.",
    "tagged-json-fence": '```json\n{"a": 1}\n```',
    "tagged-code-fence": '```python\nprint({"a": 1})\n```',
    "untagged-code-fence": "```\nprint(1)\n```",
}


@pytest.mark.parametrize(("answer", "expected"), FENCED_TEXTS.values(), ids=FENCED_TEXTS.keys())
async def test_unguarded_json_in_a_final_answer_is_fenced_as_json(
    store: Store, answer: str, expected: str
) -> None:
    pipeline, _ = make_pipeline(store, [text(answer)])

    report, response = await start(pipeline)

    assert report.states[-1] == "done"
    assert response.kind is ResponseKind.FINAL
    assert response.primary_output_text == expected


@pytest.mark.parametrize("answer", UNCHANGED_TEXTS.values(), ids=UNCHANGED_TEXTS.keys())
async def test_prose_and_guarded_fences_in_a_final_answer_stay_byte_identical(
    store: Store, answer: str
) -> None:
    pipeline, _ = make_pipeline(store, [text(answer)])

    _, response = await start(pipeline)

    assert response.primary_output_text == answer


async def test_json_after_an_unclosed_fence_does_not_fail_the_turn(store: Store) -> None:
    # A model cut off mid-answer leaves its fence open; the validator reads what follows
    # as prose, so the guard must leave nothing there that the guarded-payload rule refuses.
    pipeline, _ = make_pipeline(store, [text('```\n{"a": 1}')])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert report.successful, report.result.rule_ids
    assert '{"a": 1}' in (ok(report.result).primary_output_text or "")


@pytest.mark.rule(EMBEDDED_FILE, "broken")
@pytest.mark.parametrize("with_calls", [False, True], ids=["final", "continuation"])
async def test_embedded_file_contents_in_the_models_text_still_fail(
    store: Store, with_calls: bool
) -> None:
    blob = "See data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    answer = calls(READ_A, text=blob) if with_calls else text(blob)
    pipeline, _ = make_pipeline(store, [answer])

    report = await pipeline.run({"Instruction": "hello"}, CALLER)

    assert_refused(report, EMBEDDED_FILE, "response_builder")
    field = "ToolContinuationMessage" if with_calls else "PrimaryOutputText"
    assert [e.field for e in report.result.errors] == [field]
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D31")
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        *FENCED_TEXTS.values(),
        *((unchanged, unchanged) for unchanged in UNCHANGED_TEXTS.values()),
    ],
    ids=[*FENCED_TEXTS.keys(), *UNCHANGED_TEXTS.keys()],
)
async def test_tool_continuation_message_is_guarded_like_a_final_answer(
    store: Store, message: str, expected: str
) -> None:
    pipeline, _ = make_pipeline(store, [calls(READ_A, text=message)])

    _, response = await start(pipeline)

    assert response.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert response.tool_continuation_message == expected
    assert [c.tool_call_id for c in response.tool_calls or []] == ["c1"]
