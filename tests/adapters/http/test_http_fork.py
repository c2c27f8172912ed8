"""``POST /v1/sessions/{id}/fork`` (adapters/http/forks.py, docs/FORKS.md, D611).

The done-when test runs ``aptix serve`` as a real process on every store (memory, a
SQLite file, a PostgreSQL database), the model a loopback fake OpenAI server that
shows what each turn sent it. The refusals run on the app in process.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from fork_kit import ANSWERS, MODEL_ENV, said, store_url, write_fork_config
from http_kit import (
    ANA,
    ANA_KEY,
    BOB,
    ENV,
    READ_THEN_ANSWER,
    app_client,
    aptix_serve,
    write_config,
)

from aptix_pipeline import ScriptedLLM, create_app, embedded_pipeline
from aptix_pipeline.adapters.config.service import ApiKey, load_service_config
from aptix_pipeline.adapters.http.app import ApiKeyAuthenticator
from aptix_pipeline.adapters.http.execute import EXECUTE_PATH
from aptix_pipeline.contracts import SessionTransaction
from aptix_pipeline.testing import fake_openai_server


def fork_path(session_id: str) -> str:
    return f"/v1/sessions/{session_id}/fork"


@pytest.mark.decision("D611")
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_fork_from_turn_two_of_four_continues_as_its_own_session_over_http(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with fake_openai_server(ANSWERS) as model:
        config = write_fork_config(tmp_path, model.base_url, store_url(kind, request, tmp_path))
        with (
            aptix_serve(config, {**ENV, **MODEL_ENV}) as (base, _),
            httpx.Client(base_url=base, headers=ANA, timeout=30) as client,
        ):
            turns: list[dict[str, Any]] = []
            for n in range(1, 5):
                asked: dict[str, Any] = {"Instruction": f"question {n}"}
                if turns:
                    asked |= {"SessionId": turns[-1]["SessionId"], "TurnId": turns[-1]["TurnId"]}
                answer = client.post(EXECUTE_PATH, json=asked)
                assert answer.status_code == 200, answer.text
                turns.append(answer.json()["Result"])
            source, turn_two = turns[0]["SessionId"], turns[1]["TurnId"]

            forked = client.post(fork_path(source), json={"TurnId": turn_two})
            fork = forked.json()["Result"]
            went_on = client.post(
                EXECUTE_PATH,
                json={"SessionId": fork["Id"], "TurnId": turn_two, "Instruction": "question 2b"},
            )
            source_goes_on = client.post(
                EXECUTE_PATH,
                json={"SessionId": source, "TurnId": turns[3]["TurnId"], "Instruction": "q5"},
            )

    assert forked.status_code == 201, forked.text
    assert fork["ForkedFrom"] == {"SessionId": source, "TurnId": turn_two, "Messages": 4}
    assert fork["Id"] != source
    assert fork["Mode"] == "general"
    assert went_on.status_code == 200, went_on.text
    assert went_on.json()["Result"]["SessionId"] == fork["Id"]
    assert went_on.json()["Result"]["PrimaryOutputText"] == "answer 2b"
    assert said(model.requests[4]) == [
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
        "question 2b",
    ]
    # The source goes on from its own fourth turn: the fork's turn is not in it.
    assert source_goes_on.status_code == 502  # the script ran out: the request was made
    assert said(model.requests[5])[-3:] == ["question 4", "answer 4", "q5"]
    assert "question 2b" not in said(model.requests[5])


class _Forgetful:
    """A host's store that is only a ``SessionStore`` (no ``SessionForks``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def begin(self, org: str, user: str) -> SessionTransaction:
        transaction: SessionTransaction = self.inner.begin(org, user)
        return transaction


@pytest.mark.decision("D611")
async def test_a_fork_is_refused_with_the_status_and_error_that_say_why(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, READ_THEN_ANSWER), env=ENV))

    async with app_client(app) as client:
        first = await client.post(EXECUTE_PATH, json={"Instruction": "Review"}, headers=ANA)
        pending = first.json()["Result"]  # awaits read_file's result
        session, turn = pending["SessionId"], pending["TurnId"]
        answers = {
            "pending": await client.post(fork_path(session), json={"TurnId": turn}, headers=ANA),
            "bob": await client.post(fork_path(session), json={"TurnId": turn}, headers=BOB),
            "no turn": await client.post(fork_path(session), json={"TurnId": "t9"}, headers=ANA),
            "no session": await client.post(fork_path("s9"), json={"TurnId": turn}, headers=ANA),
            "extra field": await client.post(
                fork_path(session), json={"TurnId": turn, "Mode": "x"}, headers=ANA
            ),
            "no body": await client.post(fork_path(session), headers=ANA),
            "no key": await client.post(fork_path(session), json={"TurnId": turn}),
        }

    seen = {
        name: (
            answer.status_code,
            answer.json()["Errors"][0]["Code"],
            answer.json()["Errors"][0].get("Field"),
        )
        for name, answer in answers.items()
    }
    assert seen == {
        "pending": (409, "conflict", "TurnId"),
        "bob": (404, "not_found", "SessionId"),
        "no turn": (404, "not_found", "TurnId"),
        "no session": (404, "not_found", "SessionId"),
        "extra field": (422, "invalid_request", "Mode"),
        "no body": (422, "invalid_request", "body"),
        "no key": (401, "unauthorized", "Authorization"),
    }
    assert "still pending (awaiting_client_tools)" in answers["pending"].text
    assert "another org or user" in answers["bob"].text


@pytest.mark.decision("D611")
async def test_a_host_store_that_cannot_fork_answers_501_and_turns_still_run(
    tmp_path: Path,
) -> None:

    from aptix_pipeline.adapters.stores import MemoryStore

    pipeline = embedded_pipeline(llm=ScriptedLLM([{"text": "hi"}]), store=_Forgetful(MemoryStore()))
    keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(ANA_KEY.encode()).digest())]
    app = create_app(pipeline, authenticator=ApiKeyAuthenticator(keys))

    async with app_client(app) as client:
        turn = await client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
        done = turn.json()["Result"]
        refused = await client.post(
            fork_path(done["SessionId"]), json={"TurnId": done["TurnId"]}, headers=ANA
        )

    assert turn.status_code == 200
    assert refused.status_code == 501
    error = refused.json()["Errors"][0]
    assert (error["Code"], error["Field"]) == ("invalid_request", "SessionStore")
    assert "_Forgetful" in error["Message"]
    assert "SessionForks" in error["Message"]


@pytest.mark.decision("D611")
def test_openapi_documents_the_fork_route_its_body_and_answers(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, READ_THEN_ANSWER), env=ENV))

    document = app.openapi()

    operation = document["paths"]["/v1/sessions/{session_id}/fork"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["TurnId"]
    assert body["additionalProperties"] is False
    assert {"201", "404", "409", "422", "501"} <= set(operation["responses"])
    created = operation["responses"]["201"]["content"]["application/json"]["schema"]
    assert created == {"$ref": "#/components/schemas/ForkResult"}
    assert "ForkedFrom" in document["components"]["schemas"]["Session"]["properties"]
