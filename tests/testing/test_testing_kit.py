"""``aptix_pipeline.testing``: the kit for hosts, one door for what a host's tests need.

Its names resolve to the objects the package itself uses, so a host's test runs on
exactly the model, clock and ids the docs describe; importing the kit costs no pytest
until ``StoreContract`` is asked for; the fake OpenAI-compatible server answers the
official SDK over a real loopback socket.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import aptix_pipeline
import aptix_pipeline.testing as kit
from aptix_pipeline.adapters import (
    OpenAICompatibleLLM,
    ScriptedLLM,
    ScriptExhaustedError,
    SequentialIds,
    SteppingClock,
)
from aptix_pipeline.contracts import ChatMessage, ChatRole, LLMRequest


@pytest.mark.decision("D281")
def test_every_name_of_the_kit_resolves_and_is_listed() -> None:
    assert sorted(dir(kit)) == sorted({*kit.__all__, *vars(kit)})
    for name in kit.__all__:
        assert getattr(kit, name) is not None


@pytest.mark.decision("D281")
def test_the_kits_doubles_are_the_packages_own_objects() -> None:
    assert kit.StoreContract is aptix_pipeline.StoreContract
    assert (kit.ScriptedLLM, kit.SteppingClock, kit.SequentialIds) == (
        ScriptedLLM,
        SteppingClock,
        SequentialIds,
    )
    assert kit.ScriptExhaustedError is ScriptExhaustedError


@pytest.mark.decision("D281")
def test_importing_the_kit_imports_no_pytest_until_the_store_contract() -> None:
    code = (
        "import sys, aptix_pipeline.testing as kit; kit.ScriptedLLM; kit.FakeOpenAIServer; "
        "print('pytest' in sys.modules); kit.StoreContract; print('pytest' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert run.stdout.split() == ["False", "True"]


@pytest.mark.decision("D281")
async def test_the_fake_server_answers_the_official_sdk_on_loopback() -> None:
    with kit.fake_openai_server([{"text": "hello from the script"}]) as server:
        llm = OpenAICompatibleLLM(model="fake-model", base_url=server.base_url, api_key="k")
        reply = await llm.complete(
            LLMRequest(mode="general", messages=[ChatMessage(role=ChatRole.USER, content="hi")])
        )

    assert reply.text == "hello from the script"
    assert [request.path for request in server.requests] == ["/v1/chat/completions"]
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "hi"}


@pytest.mark.decision("D544")
async def test_the_fake_server_answers_each_request_from_its_own_body_when_given_respond() -> None:
    """``respond`` answers by the request, not by its place in line: the same question
    sent again gets the same answer, and two conversations never take each other's."""

    def respond(body: object) -> dict[str, object]:
        assert isinstance(body, dict)
        asked = body["messages"][-1]["content"]
        return {"text": f"you said {asked}", "delay": 0.01}

    with kit.fake_openai_server(respond=respond) as server:
        llm = OpenAICompatibleLLM(model="fake-model", base_url=server.base_url, api_key="k")

        async def ask(words: str) -> str | None:
            message = ChatMessage(role=ChatRole.USER, content=words)
            reply = await llm.complete(LLMRequest(mode="general", messages=[message]))
            return reply.text

        answers = [await ask("one"), await ask("two"), await ask("one")]

    assert answers == ["you said one", "you said two", "you said one"]
    assert len(server.completions()) == 3
