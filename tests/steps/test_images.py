"""Images and artifacts reach the model: content parts, caps, vision, the adapters.

The LLM port's messages carry content parts (``contracts/llm.py``); the prompt
initializer builds them (``steps/prompt_content_provider_initializer.py``); the
OpenAI-compatible adapter sends images as ``image_url`` data URIs; caps refuse a
request before any model call; spans and redacted recordings hold no image bytes.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from engine_kit import (
    ALL_STORE_KINDS,
    CALLER,
    READ_A,
    calls,
    continuation,
    follow_on,
    make_pipeline,
    ok,
    open_store_of_kind,
    text,
)
from pydantic import ValidationError
from replay_kit import recording_pipeline
from repo import ROOT
from span_kit import Recorded, values_of

from aptix_pipeline.adapters.config.catalog import ConfigCatalog
from aptix_pipeline.adapters.config.service import ConfigError, load_service_config
from aptix_pipeline.adapters.models.openai_compatible import OpenAICompatibleLLM
from aptix_pipeline.adapters.models.scripted import ScriptedLLM, received
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import (
    ChatMessage,
    ChatRole,
    ImagePart,
    LLMRequest,
    ResponseKind,
    TextPart,
)
from aptix_pipeline.engine.replay import RecordingOptions, TurnRecording, replay
from aptix_pipeline.engine.replay.redaction import REDACTED_BASE64
from aptix_pipeline.steps import PipelineOptions
from aptix_pipeline.testing import fake_openai_server
from aptix_pipeline.validators import ImageCaps, parse_request

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(60))  # 68 bytes, a distinctive body
PNG64 = base64.b64encode(PNG).decode("ascii")
NO_WAIT = PipelineOptions(retry_wait_seconds=0, retry_max_wait_seconds=0)


def clipboard(image_id: str = "img1", data: str = PNG64, mime: str = "image/png") -> dict[str, str]:
    """One wire clipboard image."""
    return {"Id": image_id, "MimeType": mime, "DataBase64": data}


def artifact(path: str, contents: str, **more: str) -> dict[str, str]:
    """One wire input artifact from the user."""
    name = path.rsplit("/", 1)[-1]
    return {"RelativePath": path, "FileName": name, "Contents": contents, "Origin": "user", **more}


def image_artifact(path: str = "shots/screen.png", data: str = PNG64) -> dict[str, str]:
    """A base64 image artifact."""
    return artifact(path, data, MimeType="image/png", Encoding="base64")


def looking(**more: Any) -> dict[str, Any]:
    """A request asking the model to look at one clipboard image."""
    return {"Instruction": "look at this", "ClipboardImages": [clipboard()], **more}


def catalog(*, agent_vision: bool = True, review_vision: bool = True) -> str:
    """Catalog TOML: modes general and review, one agent with read_file."""
    return f"""
[[modes]]
name = "general"
display_name = "General"
[[modes]]
name = "review"
display_name = "Code Review"
vision = {str(review_vision).lower()}
[[agents]]
id = "assistant"
name = "Assistant"
vision = {str(agent_vision).lower()}
[[agents.client_tools]]
name = "read_file"
parameters = {{ type = "object", properties = {{ path = {{ type = "string" }} }} }}
[[conversations]]
id = "workspace"
"""


def rule_fields(result: Any) -> list[tuple[str | None, str | None]]:
    """Rule id and field of each error of a result."""
    return [(error.rule_id, error.field) for error in result.errors]


def last_user(request: LLMRequest) -> ChatMessage:
    """The newest user message the model was sent."""
    return [m for m in request.messages if m.role is ChatRole.USER][-1]


# === the contract ===============================================================================


@pytest.mark.decision("D300")
@pytest.mark.decision("D301")
def test_a_message_with_parts_keeps_its_text_as_content_and_its_bytes_as_base64() -> None:
    message = ChatMessage.of_parts(
        ChatRole.USER,
        [TextPart(text="look"), ImagePart(mime_type="image/png", data=PNG, clipboard_image_id="a")],
    )

    wire = json.loads(message.model_dump_json())

    assert message.content == "look\n\n[image a: image/png, 68 bytes, not shown]"
    assert wire["Parts"][1] == {
        "Type": "image",
        "MimeType": "image/png",
        "Data": PNG64,
        "ClipboardImageId": "a",
    }
    assert ChatMessage.model_validate_json(json.dumps(wire)) == message
    assert ChatMessage.model_validate(wire).images[0].data == PNG


@pytest.mark.decision("D301")
@pytest.mark.parametrize(
    "part",
    [
        {"Type": "image", "MimeType": "image/png", "Data": "not base64!"},
        {
            "Type": "image",
            "MimeType": "image/png",
            "Data": PNG64,
            "ClipboardImageId": "a",
            "RelativePath": "a.png",
        },
        {"Type": "sound", "Text": "x"},
    ],
    ids=["bad-base64", "two-sources", "unknown-type"],
)
def test_a_malformed_part_is_refused(part: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ChatMessage.model_validate({"Role": "user", "Content": "x", "Parts": [part]})


@pytest.mark.decision("D302")
@pytest.mark.parametrize("kind", ALL_STORE_KINDS)
async def test_the_stored_transcript_keeps_image_bytes_for_a_follow_on_turn(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with open_store_of_kind(kind, request, tmp_path) as store:
        pipeline, llm = make_pipeline(store, [text("I see it."), text("Still there.")])
        first = ok(await pipeline.execute(looking(), CALLER))
        ok(await pipeline.execute(follow_on(first, "and now?"), CALLER))

    assert llm is not None
    history = llm.requests[1].messages
    [shown] = [m for m in history if m.images]
    assert shown.images[0].data == PNG
    assert shown.images[0].clipboard_image_id == "img1"


@pytest.mark.decision("D302")
async def test_parts_round_trip_through_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "aptix.db"
    writer = SQLiteStore(path)
    pipeline, _ = make_pipeline(writer, [text("ok")])
    response = ok(await pipeline.execute(looking(), CALLER))
    await writer.aclose()

    reader = SQLiteStore(path)
    try:
        transcript = await reader.read_transcript(CALLER.org, CALLER.user, response.session_id)
    finally:
        await reader.aclose()

    assert transcript[0].images[0].data == PNG
    assert transcript[0].parts is not None
    assert transcript[0].content.startswith("look at this\n\n[image img1")


# === the prompt initializer =====================================================================


@pytest.mark.decision("D306")
async def test_images_artifacts_and_binaries_become_parts_in_request_order() -> None:
    zipped = base64.b64encode(b"PK\x03\x04" + bytes(16)).decode("ascii")
    request = {
        "Instruction": "look at this",
        "InputArtifacts": [
            artifact("src/app.py", "print(1)\n", Language="python"),
            image_artifact(),
            artifact("dist/app.zip", zipped, MimeType="application/zip", Encoding="base64"),
        ],
        "ClipboardImages": [clipboard()],
    }
    pipeline, llm = make_pipeline(MemoryStore(), [text("ok")])

    ok(await pipeline.execute(request, CALLER))

    assert llm is not None
    parts = last_user(llm.requests[0]).parts or ()
    assert [type(p).__name__ for p in parts] == [
        "TextPart",
        "TextPart",
        "ImagePart",
        "TextPart",
        "ImagePart",
    ]
    source = parts[1]
    assert isinstance(source, TextPart)
    assert source.text == "[artifact src/app.py, python]\nprint(1)\n"
    assert (source.relative_path, source.language) == ("src/app.py", "python")
    screenshot = parts[2]
    assert isinstance(screenshot, ImagePart)
    assert (screenshot.relative_path, screenshot.data) == ("shots/screen.png", PNG)
    binary = parts[3]
    assert isinstance(binary, TextPart)
    assert binary.text == "[artifact dist/app.zip: application/zip, 20 bytes, not shown]"
    assert zipped not in json.dumps(llm.requests[0].to_wire())
    pasted = parts[4]
    assert isinstance(pasted, ImagePart)
    assert (pasted.clipboard_image_id, pasted.mime_type) == ("img1", "image/png")


@pytest.mark.decision("D300")
async def test_a_message_of_text_alone_has_no_parts() -> None:
    request = {"Instruction": "hi", "WorkspaceHints": {"RepositoryName": "demo"}}
    pipeline, llm = make_pipeline(MemoryStore(), [text("ok")])

    ok(await pipeline.execute(request, CALLER))

    assert llm is not None
    message = last_user(llm.requests[0])
    assert message.parts is None
    assert message.content == 'hi\n\n[workspace] {"RepositoryName": "demo"}'


@pytest.mark.decision("D306")
async def test_an_image_type_artifact_sent_as_utf8_is_text() -> None:
    svg = "<svg xmlns='http://www.w3.org/2000/svg'/>"
    request = {
        "Instruction": "x",
        "InputArtifacts": [artifact("logo.svg", svg, MimeType="image/svg+xml")],
    }
    pipeline, llm = make_pipeline(MemoryStore(), [text("ok")])

    ok(await pipeline.execute(request, CALLER))

    assert llm is not None
    message = last_user(llm.requests[0])
    assert message.images == ()
    assert f"[artifact logo.svg]\n{svg}" in message.content


# === caps =======================================================================================


@pytest.mark.decision("D307")
@pytest.mark.rule("DESIGN/limits/image-count", "broken")
def test_more_images_than_the_cap_are_refused_naming_the_first_past_it() -> None:
    request = {
        "InputArtifacts": [image_artifact()],
        "ClipboardImages": [clipboard("a"), clipboard("b")],
    }

    result = parse_request(request, image_caps=_caps(count=2))

    assert rule_fields(result) == [("DESIGN/limits/image-count", "ClipboardImages[1]")]


@pytest.mark.decision("D307")
@pytest.mark.rule("DESIGN/limits/image-count", "holds")
@pytest.mark.rule("DESIGN/limits/image-bytes", "holds")
@pytest.mark.rule("DESIGN/limits/image-total-bytes", "holds")
def test_images_at_the_caps_are_accepted() -> None:
    request = {"InputArtifacts": [image_artifact()], "ClipboardImages": [clipboard()]}

    result = parse_request(request, image_caps=_caps(count=2, each=68, total=136))

    assert result.successful


@pytest.mark.decision("D307")
@pytest.mark.rule("DESIGN/limits/image-bytes", "broken")
def test_an_image_over_the_byte_cap_is_refused_naming_its_base64_field() -> None:
    big = base64.b64encode(PNG + b"!").decode("ascii")
    request = {
        "InputArtifacts": [image_artifact(data=big)],
        "ClipboardImages": [clipboard("a"), clipboard("b"), clipboard("c", big)],
    }

    result = parse_request(request, image_caps=_caps(each=68))

    assert rule_fields(result) == [
        ("DESIGN/limits/image-bytes", "InputArtifacts[0].Contents"),
        ("DESIGN/limits/image-bytes", "ClipboardImages[2].DataBase64"),
    ]
    assert "69 > 68" in result.errors[0].message


@pytest.mark.decision("D307")
@pytest.mark.rule("DESIGN/limits/image-total-bytes", "broken")
def test_images_over_the_total_cap_are_refused_naming_the_image_that_went_past() -> None:
    request = {"ClipboardImages": [clipboard("a"), clipboard("b"), clipboard("c")]}

    result = parse_request(request, image_caps=_caps(total=136))

    assert rule_fields(result) == [
        ("DESIGN/limits/image-total-bytes", "ClipboardImages[2].DataBase64")
    ]


@pytest.mark.decision("D307")
async def test_a_capped_request_is_refused_before_any_model_call() -> None:
    options = PipelineOptions(max_image_bytes=67, retry_wait_seconds=0)
    pipeline, llm = make_pipeline(MemoryStore(), [text("never")], options=options)

    report = await pipeline.run(looking(), CALLER)

    assert rule_fields(report.result) == [
        ("DESIGN/limits/image-bytes", "ClipboardImages[0].DataBase64")
    ]
    assert report.faulted_step == "request_handler"
    assert llm is not None
    assert llm.requests == []


@pytest.mark.decision("D307")
def test_the_engine_table_sets_the_image_caps(tmp_path: Path) -> None:
    path = tmp_path / "aptix.toml"
    path.write_text(
        "[engine]\nmax_images = 3\nmax_image_bytes = 1000\nmax_total_image_bytes = 2000\n",
        encoding="utf-8",
    )
    options = load_service_config(path).options
    assert (options.max_images, options.max_image_bytes, options.max_total_image_bytes) == (
        3,
        1000,
        2000,
    )
    path.write_text("[engine]\nmax_image_bytes = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[engine\]\.max_image_bytes"):
        load_service_config(path)
    with pytest.raises(ValueError, match="image caps"):
        PipelineOptions(max_total_image_bytes=-1)


@pytest.mark.decision("D308")
@pytest.mark.rule("AGN-034/4.3/clipboard-mime-image", "broken")
@pytest.mark.parametrize("mime", ["image/", "image/png; charset=x", "text/plain", "image"])
def test_a_clipboard_mime_type_that_is_not_image_subtype_is_refused(mime: str) -> None:
    result = parse_request({"ClipboardImages": [clipboard(mime=mime)]})

    assert rule_fields(result) == [
        ("AGN-034/4.3/clipboard-mime-image", "ClipboardImages[0].MimeType")
    ]


@pytest.mark.decision("D308")
@pytest.mark.rule("AGN-034/4.3/clipboard-mime-image", "holds")
@pytest.mark.parametrize("mime", ["image/png", "IMAGE/JPEG", "image/svg+xml", "image/vnd.ms-photo"])
def test_a_clipboard_image_subtype_is_accepted(mime: str) -> None:
    assert parse_request({"ClipboardImages": [clipboard(mime=mime)]}).successful


def _caps(count: int = 20, each: int = 5_000_000, total: int = 20_000_000) -> ImageCaps:
    return ImageCaps(count, each, total)


# === vision =====================================================================================


@pytest.mark.decision("D303")
def test_vision_is_on_unless_the_catalog_turns_it_off() -> None:
    default = ConfigCatalog.default()
    blind = ConfigCatalog.from_toml(catalog(agent_vision=False, review_vision=False))

    assert all(mode.vision for mode in default.all_modes())
    assert all(agent.vision for agent in default.all_agents())
    assert [m.vision for m in blind.all_modes()] == [True, False]
    assert [a.vision for a in blind.all_agents()] == [False]


@pytest.mark.decision("D303")
@pytest.mark.decision("D305")
@pytest.mark.parametrize(
    ("config", "mode", "why"),
    [
        (catalog(agent_vision=False), None, "agent 'assistant' has no vision"),
        (catalog(review_vision=False), "review", "mode 'review' has no vision"),
    ],
    ids=["agent", "mode"],
)
async def test_without_vision_the_model_reads_a_reference_and_the_user_is_warned(
    config: str, mode: str | None, why: str
) -> None:
    pipeline, llm = make_pipeline(MemoryStore(), [text("{received}")], config=config)

    report = await pipeline.run(looking(), CALLER, initial_mode=mode)

    answer = ok(report.result)
    assert answer.primary_output_text == (
        "received: text 'look at this', text '[image img1: image/png, 68 bytes, not shown]'"
    )
    assert answer.user_warnings == [
        f"image img1 (image/png, 68 bytes) was not shown to the model: {why}; "
        "it was told of the image instead"
    ]
    assert llm is not None
    assert PNG64 not in json.dumps(llm.requests[0].to_wire())


@pytest.mark.decision("D303")
async def test_with_vision_the_model_gets_the_image_and_no_warning() -> None:
    pipeline, _ = make_pipeline(MemoryStore(), [text("{received}")], config=catalog())

    answer = ok(await pipeline.execute(looking(), CALLER, initial_mode="review"))

    assert (
        answer.primary_output_text == "received: text 'look at this', image img1 image/png 68 bytes"
    )
    assert answer.user_warnings is None


@pytest.mark.decision("D305")
async def test_the_warning_waits_for_the_final_response_of_a_continued_turn() -> None:
    script = [calls(READ_A), text("{received}")]
    pipeline, _ = make_pipeline(MemoryStore(), script, config=catalog(agent_vision=False))

    pending = ok(await pipeline.execute(looking(), CALLER))
    final = ok(await pipeline.execute(continuation(pending), CALLER))

    assert pending.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert pending.user_warnings is None
    assert final.user_warnings is not None
    assert len(final.user_warnings) == 1
    assert final.user_warnings[0].startswith("image img1 (image/png, 68 bytes) was not shown")


@pytest.mark.decision("D302")
@pytest.mark.decision("D304")
async def test_a_continuation_shows_the_model_the_image_again() -> None:
    pipeline, llm = make_pipeline(MemoryStore(), [calls(READ_A), text("done")])

    pending = ok(await pipeline.execute(looking(), CALLER))
    ok(await pipeline.execute(continuation(pending), CALLER))

    assert llm is not None
    assert last_user(llm.requests[1]).images[0].data == PNG


@pytest.mark.decision("D305")
async def test_an_earlier_turns_image_is_described_without_a_new_warning() -> None:
    script = [text("first"), text("{received}")]
    pipeline, llm = make_pipeline(MemoryStore(), script, config=catalog(agent_vision=False))

    first = ok(await pipeline.execute(looking(), CALLER))
    second = ok(await pipeline.execute(follow_on(first, "and now?"), CALLER))

    assert first.user_warnings is not None
    assert second.user_warnings is None
    assert llm is not None
    earlier = next(m for m in llm.requests[1].messages if m.role is ChatRole.USER)
    assert "[image img1: image/png, 68 bytes, not shown]" in earlier.content
    assert all(not m.images for m in llm.requests[1].messages)


@pytest.mark.decision("D467")
@pytest.mark.parametrize("kind", ALL_STORE_KINDS)
@pytest.mark.parametrize(
    ("limit", "image_sent"),
    [(3, False), (4, True), (6, True)],
    ids=["image-cut-off", "image-first-of-the-window", "whole-transcript"],
)
async def test_an_earlier_image_is_described_wherever_the_sent_history_holds_it(
    kind: str, limit: int, image_sent: bool, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Stored before the fourth turn: user, assistant | user (image), assistant | user, assistant.
    options = PipelineOptions(max_transcript_messages=limit, transcript_policy="truncate")
    script = [text("one"), text("two"), text("three"), text("{received}")]
    async with open_store_of_kind(kind, request, tmp_path) as store:
        pipeline, llm = make_pipeline(
            store, script, config=catalog(agent_vision=False), options=options
        )
        first = ok(await pipeline.execute({"Instruction": "hi"}, CALLER))
        second = ok(await pipeline.execute({**follow_on(first), **looking()}, CALLER))
        third = ok(await pipeline.execute(follow_on(second, "and?"), CALLER))
        ok(await pipeline.execute(follow_on(third, "and now?"), CALLER))

    assert llm is not None
    sent = llm.requests[3].messages
    assert all(not message.images for message in sent)
    described = [m for m in sent if "[image img1: image/png, 68 bytes, not shown]" in m.content]
    assert len(described) == int(image_sent)


@pytest.mark.decision("D467")
async def test_a_replayed_turn_finds_an_earlier_image_without_the_stores_transcript() -> None:
    # In a replay the transcript comes from the recording, as a plain list: looked through.
    store = MemoryStore()
    script = [text("one"), text("{received}")]
    pipeline = recording_pipeline(store, script, config=catalog(agent_vision=False))
    first = (await pipeline.run(looking(), CALLER)).result.result
    assert first is not None
    report = await pipeline.run(follow_on(first, "and now?"), CALLER)

    assert report.recording is not None
    [model_call] = [c for c in report.recording.calls if c.name == "LLM.complete"]
    sent = model_call.args["request"]["Messages"]
    assert all(part["Type"] == "text" for m in sent for part in m.get("Parts") or ())
    outcome = await replay(report.recording)
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


# === the OpenAI-compatible adapter ==============================================================


def _image_url_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    content = body["messages"][-1]["content"]
    assert isinstance(content, list)
    return [part for part in content if part["type"] == "image_url"]


@pytest.mark.decision("D311")
@pytest.mark.parametrize(
    "request_data",
    [looking(), {"Instruction": "look at this", "InputArtifacts": [image_artifact()]}],
    ids=["clipboard-image", "base64-image-artifact"],
)
async def test_the_openai_request_really_carries_the_image_as_a_data_uri(
    request_data: dict[str, Any],
) -> None:
    with fake_openai_server([{"text": "I see a PNG."}]) as server:
        async with OpenAICompatibleLLM(
            model="fake-model", base_url=server.base_url, api_key="k"
        ) as llm:
            pipeline, _ = make_pipeline(MemoryStore(), llm)
            ok(await pipeline.execute(request_data, CALLER))

    [sent] = server.completions()
    content = sent.body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "look at this"}
    assert _image_url_parts(sent.body) == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}}
    ]


@pytest.mark.decision("D311")
async def test_a_streamed_openai_request_carries_the_image_too() -> None:
    message = ChatMessage.of_parts(
        ChatRole.USER, [TextPart(text="see"), ImagePart(mime_type="image/png", data=PNG)]
    )
    request = LLMRequest(mode="general", messages=[message])
    with fake_openai_server([{"text": "seen"}]) as server:
        async with OpenAICompatibleLLM(
            model="fake-model", base_url=server.base_url, api_key="k"
        ) as llm:
            chunks = [chunk async for chunk in llm.stream(request)]

    assert chunks
    [sent] = server.completions()
    assert sent.body["stream"] is True
    assert sent.body["messages"][0]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
    ]


# === the scripted model's echo ==================================================================


@pytest.mark.decision("D312")
def test_the_echo_summarises_the_newest_user_message() -> None:
    plain = LLMRequest(
        mode="general", messages=[ChatMessage(role=ChatRole.USER, content="hi\nthere")]
    )
    empty = LLMRequest(mode="general", messages=[ChatMessage(role=ChatRole.SYSTEM, content="s")])
    artifact_image = ChatMessage.of_parts(
        ChatRole.USER, [ImagePart(mime_type="image/gif", data=b"GIF8", relative_path="a.gif")]
    )

    assert received(plain) == "received: text 'hi there'"
    assert received(empty) == "received: no user message"
    assert received(LLMRequest(mode="general", messages=[artifact_image])) == (
        "received: image a.gif image/gif 4 bytes"
    )


@pytest.mark.decision("D312")
async def test_a_scripted_reply_without_the_placeholder_is_played_as_written() -> None:
    llm = ScriptedLLM([{"text": "received: {nothing}"}])

    reply = await llm.complete(LLMRequest(mode="general", messages=[]))

    assert reply.text == "received: {nothing}"


# === spans and recordings =======================================================================


@pytest.mark.decision("D309")
async def test_spans_hold_no_image_bytes_without_content_capture() -> None:
    recorded = Recorded()
    try:
        pipeline, _ = make_pipeline(
            MemoryStore(), [text("ok")], telemetry=recorded.telemetry(capture_content=False)
        )
        ok(await pipeline.execute(looking(), CALLER))
        quiet = [value for span in recorded.spans for _, value in values_of(span)]
        recorded.clear()
        pipeline, _ = make_pipeline(
            MemoryStore(), [text("ok")], telemetry=recorded.telemetry(capture_content=True)
        )
        ok(await pipeline.execute(looking(), CALLER))
        [chat] = [span for span in recorded.spans if span.name.startswith("chat")]
    finally:
        recorded.shutdown()

    assert quiet
    assert not any(PNG64 in value for value in quiet)
    messages = json.loads(str((chat.attributes or {})["gen_ai.input.messages"]))
    [blob] = [p for m in messages for p in m["parts"] if p["type"] == "blob"]
    assert blob == {
        "type": "blob",
        "modality": "image",
        "mime_type": "image/png",
        "size_bytes": 68,
        "clipboard_image_id": "img1",
        "content": PNG64,
    }


@pytest.mark.decision("D310")
async def test_a_redacted_recording_keeps_the_image_parts_shape_and_drops_its_bytes() -> None:
    request = {
        "Instruction": "look at this",
        "InputArtifacts": [image_artifact()],
        "ClipboardImages": [clipboard()],
    }
    plain = recording_pipeline(MemoryStore(), [text("ok")], recording=RecordingOptions())
    redacting = recording_pipeline(
        MemoryStore(), [text("ok")], recording=RecordingOptions(redact=True)
    )

    kept = (await plain.run(request, CALLER)).recording
    dropped = (await redacting.run(request, CALLER)).recording

    assert kept is not None
    assert dropped is not None
    assert PNG64 in kept.to_json()
    assert PNG64 not in dropped.to_json()
    [model_call] = [c for c in dropped.calls if c.name == "LLM.complete"]
    parts = model_call.args["request"]["Messages"][-1]["Parts"]
    images = [part for part in parts if part["Type"] == "image"]
    assert images == [
        {
            "Type": "image",
            "MimeType": "image/redacted",
            "Data": REDACTED_BASE64,
            "RelativePath": "redacted/redacted",
        },
        {
            "Type": "image",
            "MimeType": "image/redacted",
            "Data": REDACTED_BASE64,
            "ClipboardImageId": "img1",
        },
    ]
    outcome = await replay(TurnRecording.from_dict(json.loads(dropped.to_json())))
    assert outcome.ok, outcome.divergence.describe() if outcome.divergence else ""


# === the demo ===================================================================================


@pytest.mark.decision("D312")
def test_the_demo_shows_an_image_reaching_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "examples" / "demo.py"
    spec = importlib.util.spec_from_file_location("aptix_demo", path)
    assert spec is not None
    assert spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)

    echoed = demo.show_an_image_reaching_the_model()

    assert echoed.startswith("received: text 'look at this', image img1 image/png ")
    assert echoed in capsys.readouterr().out
    assert demo.tiny_png().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.decision("D306")
async def test_an_empty_image_artifact_is_described_not_sent_as_an_image() -> None:
    empty = artifact("empty.png", "", MimeType="image/png", Encoding="base64")
    pipeline, llm = make_pipeline(MemoryStore(), [text("ok")])

    ok(await pipeline.execute({"Instruction": "x", "InputArtifacts": [empty]}, CALLER))

    assert llm is not None
    message = last_user(llm.requests[0])
    assert message.images == ()
    assert "[artifact empty.png: image/png, 0 bytes, not shown]" in message.content
