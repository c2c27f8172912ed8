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
