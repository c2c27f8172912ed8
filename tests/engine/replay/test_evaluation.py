"""``evaluate``: a recorded request run on a candidate's live ports, past its first
divergence (docs/EVALS.md, D620, D621)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from eval_kit import CANDIDATE, RECORDINGS, TURNS

from aptix_pipeline.adapters.config import SecretTable, load_service_config
from aptix_pipeline.adapters.evals import RecordedStore
from aptix_pipeline.adapters.models import TurnScript
from aptix_pipeline.engine.replay import Evaluation, LivePorts, TurnRecording, evaluate

MODEL_ONLY: tuple[SecretTable, ...] = ("model",)

CONFIG = load_service_config(CANDIDATE, secrets_for=MODEL_ONLY)


def _evaluated(name: str, script: Any) -> Evaluation:
    recording = TurnRecording.load(RECORDINGS / f"{name}.json")
    catalog = CONFIG.catalog
    live = LivePorts(
        llm=TurnScript(json.dumps(script)),
        tools=dict(catalog.tools),
        modes=catalog,
        agents=catalog,
    )
    return asyncio.run(evaluate(recording, live=live, scratch=RecordedStore(recording)))


@pytest.mark.decision("D620")
@pytest.mark.parametrize("name", ["01-initial", "03-continuation", "04-follow-on"])
def test_a_candidate_that_answers_as_recorded_does_not_diverge(name: str) -> None:
    evaluation = _evaluated(name, TURNS)

    assert evaluation.divergence is None
    assert evaluation.result == evaluation.recording.result
    assert len(evaluation.model_calls) == sum(
        call.port == "LLM" for call in evaluation.recording.calls
    )


@pytest.mark.decision("D620")
def test_another_answer_is_named_and_the_turn_finishes_on_the_candidates_answer() -> None:
    script = copy.deepcopy(TURNS)
    script["turns"][1][1]["text"] = "Looks fine to me."

    evaluation = _evaluated("04-follow-on", script)

    divergence = evaluation.divergence
    assert divergence is not None
    assert (divergence.kind, divergence.call_number, divergence.port_call) == (
        "answer",
        22,
        "LLM.complete",
    )
    assert divergence.where == "answer.Text"
    assert divergence.actual == "Looks fine to me."
    assert evaluation.result["Successful"] is True
    assert evaluation.result["Result"]["PrimaryOutputText"] == "Looks fine to me."


@pytest.mark.decision("D620")
def test_after_a_divergence_the_store_answers_from_the_scratch_store() -> None:
    # The streamed turn was recorded with another script: the candidate changes mode and
    # asks for a client tool, on the session the recorded turn created before it diverged.
    evaluation = _evaluated("05-streamed-initial", TURNS)

    assert evaluation.divergence is not None
    assert evaluation.divergence.port_call == "LLM.stream"
    result = evaluation.result
    assert result["Successful"] is True, result["Errors"]
    assert result["Result"]["Kind"] == "client_tool_continuation"
    assert result["Result"]["ModeDisplayName"] == "Code Review"
    assert [call["Name"] for call in result["Result"]["ToolCalls"]] == ["read_file"]


@pytest.mark.decision("D620")
def test_a_candidate_taking_more_rounds_gets_clock_readings_and_ids_past_the_recording() -> None:
    script = {
        "turns": [
            [
                {"tool_calls": [{"id": "call_math", "name": "Math", "arguments": {}}]},
                {"tool_calls": [{"id": "call_add", "name": "Add", "arguments": {"a": 2, "b": 3}}]},
                {"text": "5."},
            ]
        ]
    }

    evaluation = _evaluated("01-initial", script)

    assert evaluation.divergence is not None
    assert evaluation.divergence.where.startswith("answer.")
    result = evaluation.result
    assert result["Successful"] is True, result["Errors"]
    assert result["Result"]["PrimaryOutputText"] == "5."
    assert len(evaluation.model_calls) == 3


@pytest.mark.decision("D621")
def test_response_ids_model_names_and_token_counts_are_not_divergences() -> None:
    script = copy.deepcopy(TURNS)
    for reply in script["turns"][1]:
        reply["usage"] = {"input_tokens": 7, "output_tokens": 3}
        reply["model"] = "another-model"

    evaluation = _evaluated("04-follow-on", script)

    assert evaluation.divergence is None
    answers = [call.answer for call in evaluation.model_calls]
    assert [answer["Model"] for answer in answers if answer] == ["another-model"] * 2
    assert evaluation.result["Result"]["Usage"]["TotalTokens"] == 20
    assert evaluation.recording.result["Result"]["Usage"]["TotalTokens"] == 1309


@pytest.mark.decision("D620")
def test_a_redacted_recording_is_refused(tmp_path: Path) -> None:
    recording = TurnRecording.load(RECORDINGS / "01-initial.json").redact()
    live = LivePorts(llm=TurnScript(json.dumps(TURNS)))

    with pytest.raises(ValueError, match="the recording is redacted"):
        asyncio.run(evaluate(recording, live=live, scratch=RecordedStore(recording)))


@pytest.mark.decision("D621")
def test_a_streamed_reply_is_compared_on_its_text_and_tool_calls_only() -> None:
    usage = {"input_tokens": 11, "output_tokens": 5}
    streamed: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "call_math", "name": "Math", "arguments": {}}]},
        {
            "text": "Adding them on the server. ",
            "tool_calls": [{"id": "call_add", "name": "Add", "arguments": {"a": 2, "b": 3}}],
        },
        {"text": "2 + 3 = 5, as the server's Add tool computed."},
    ]
    same: dict[str, Any] = {"turns": [streamed]}
    priced = {"turns": [[{**reply, "usage": usage, "model": "other"} for reply in streamed]]}
    worded = copy.deepcopy(same)
    worded["turns"][0][2]["text"] = "It is 5."

    as_recorded = _evaluated("05-streamed-initial", same)
    other_model = _evaluated("05-streamed-initial", priced)
    other_words = _evaluated("05-streamed-initial", worded)

    assert as_recorded.divergence is None
    assert other_model.divergence is None
    assert [call.answer["Model"] for call in other_model.model_calls if call.answer] == [
        "other"
    ] * 3
    assert other_words.divergence is not None
    assert (other_words.divergence.port_call, other_words.divergence.where) == (
        "LLM.stream",
        "answer.Text",
    )
    assert other_words.result["Result"]["PrimaryOutputText"] == "It is 5."
