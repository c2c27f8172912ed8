"""Retries over HTTP: ``Idempotency-Key``, ``Idempotent-Replayed`` and idempotent continuations.

A request whose first copy committed is answered from the answer it stored
(``engine/idempotency.py``): the same body, the header ``Idempotent-Replayed: true``,
no model call. The app runs under a real uvicorn server in a thread of this process,
on a pipeline with a scripted model that keeps every request it answered, on the
memory store and on a SQLite file (``store`` fixture); a real httpx client talks to it.
Two ``aptix serve`` processes on one SQLite file race a continuation, and
``aptix run --idempotency-key`` re-runs a request, the key's command-line twin.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_kit import aptix_run, stdout_json
from fastapi import FastAPI
from http_kit import (
    ANA,
    ANA_KEY,
    BOB,
    BOB_KEY,
    ENV,
    KEYS,
    READ_THEN_ANSWER,
    aptix_serve,
    continuation_body,
    follow_on_body,
    host_app,
)
from server_thread import WAIT, server_thread

from aptix_pipeline.adapters.config.service import ApiKey
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.http.app import (
    EXECUTE_PATH,
    IDEMPOTENCY_KEY_HEADER,
    REPLAYED_HEADER,
    ApiKeyAuthenticator,
    create_app,
)
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.contracts import LLMReply, LLMRequest, PermanentPortError
from aptix_pipeline.testing import fake_openai_server


@contextmanager
def _running(app: FastAPI) -> Iterator[httpx.Client]:
    """``app`` under a real uvicorn server on 127.0.0.1, in a thread; a client of it."""
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        yield client


@contextmanager
def _served(
    store: MemoryStore | SQLiteStore, replies: list[dict[str, Any]]
) -> Iterator[tuple[httpx.Client, ScriptedLLM]]:
    """The app on ``store`` and a scripted model, ana's and bob's keys; a client and the model."""
    llm = ScriptedLLM(replies)
    keys = [
        ApiKey(org="acme", user=user, sha256=hashlib.sha256(key.encode()).digest())
        for user, key in (("ana", ANA_KEY), ("bob", BOB_KEY))
    ]
    app = create_app(
        embedded_pipeline(llm=llm, store=store), authenticator=ApiKeyAuthenticator(keys)
    )
    with _running(app) as client:
        yield client, llm


def _keyed(key: str, caller: Mapping[str, str] = ANA) -> dict[str, str]:
    return {**caller, IDEMPOTENCY_KEY_HEADER: key}


def _raw(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.encode(), value.encode()) for name, value in headers.items()]


def _rule_ids(answer: httpx.Response) -> list[str]:
    return [error["RuleId"] for error in answer.json()["Errors"]]


# --- Initial and FollowOn turns with a key ----------------------------------------------------


@pytest.mark.decision("D182")
@pytest.mark.rule("DESIGN/idempotency/key-reused", "holds")
@pytest.mark.rule("DESIGN/idempotency/key-format", "holds")
def test_an_initial_turn_retried_with_its_key_gets_the_stored_answer(
    store: MemoryStore | SQLiteStore,
) -> None:
    with _served(store, [{"text": "first"}, {"text": "second"}]) as (client, llm):
        first = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed("order-1"))
        retry = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed("order-1"))
        # The same request spelled with other spacing is the same request.
        spaced = client.post(
            EXECUTE_PATH,
            content=b'{ "Instruction" :  "hi" }',
            headers={**_keyed("order-1"), "Content-Type": "application/json"},
        )

    assert (first.status_code, retry.status_code, spaced.status_code) == (200, 200, 200)
    assert first.json()["Result"]["PrimaryOutputText"] == "first"
    assert retry.content == spaced.content == first.content
    assert REPLAYED_HEADER.lower() not in first.headers
    assert retry.headers[REPLAYED_HEADER] == spaced.headers[REPLAYED_HEADER] == "true"
    assert len(llm.requests) == 1


@pytest.mark.decision("D182")
@pytest.mark.rule("DESIGN/idempotency/key-reused", "broken")
def test_the_same_key_with_another_body_is_409_naming_the_key(
    store: MemoryStore | SQLiteStore,
) -> None:
    with _served(store, [{"text": "first"}, {"text": "never"}]) as (client, llm):
        first = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed("order-1"))
        other = client.post(EXECUTE_PATH, json={"Instruction": "ho"}, headers=_keyed("order-1"))

    assert (first.status_code, other.status_code) == (200, 409)
    [error] = other.json()["Errors"]
    assert (error["Code"], error["RuleId"]) == ("conflict", "DESIGN/idempotency/key-reused")
    assert error["Field"] == IDEMPOTENCY_KEY_HEADER
    assert "'order-1'" in error["Message"]
    assert first.json()["Result"]["TurnId"] in error["Message"]
    assert REPLAYED_HEADER.lower() not in other.headers
    assert len(llm.requests) == 1


@pytest.mark.decision("D182")
@pytest.mark.parametrize(
    "key",
    [("k" * 256).encode(), b"two words", "clé".encode(), "ключ".encode(), b"", b"a\tb"],
    ids=["256-characters", "a-space", "latin-1", "cyrillic", "empty", "a-tab"],
)
@pytest.mark.rule("DESIGN/idempotency/key-format", "broken")
def test_a_malformed_key_is_400_naming_the_header_and_nothing_runs(
    tmp_path: Path, key: bytes
) -> None:
    app, llm, store = host_app(tmp_path)

    with _running(app) as client:
        answer = client.post(
            EXECUTE_PATH,
            json={"Instruction": "hi"},
            headers=[*_raw(ANA), (b"Idempotency-Key", key)],
        )

    assert answer.status_code == 400
    [error] = answer.json()["Errors"]
    assert (error["Code"], error["RuleId"]) == ("invalid_request", "DESIGN/idempotency/key-format")
    assert error["Field"] == IDEMPOTENCY_KEY_HEADER
    assert (store.begun, llm.requests) == (0, [])  # no store read, no model call, no write


@pytest.mark.decision("D182")
@pytest.mark.rule("DESIGN/idempotency/key-format", "broken")
def test_a_key_sent_twice_is_400_whatever_the_copies(tmp_path: Path) -> None:
    app, llm, store = host_app(tmp_path)
    twice = [*ANA.items(), ("Idempotency-Key", "order-1"), ("Idempotency-Key", "order-1")]

    with _running(app) as client:
        answer = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=twice)

    assert answer.status_code == 400
    assert _rule_ids(answer) == ["DESIGN/idempotency/key-format"]
    assert "'order-1, order-1'" in answer.json()["Errors"][0]["Message"]
    assert (store.begun, llm.requests) == (0, [])


@pytest.mark.decision("D182")
@pytest.mark.parametrize("key", ["!", "~" * 255, "550e8400-e29b-41d4-a716-446655440000"])
@pytest.mark.rule("DESIGN/idempotency/key-format", "holds")
def test_keys_of_visible_ascii_from_1_to_255_characters_are_taken(tmp_path: Path, key: str) -> None:
    app, llm, _ = host_app(tmp_path)

    with _running(app) as client:
        answer = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed(key))

    assert answer.status_code == 200, answer.text
    assert len(llm.requests) == 1


@pytest.mark.decision("D182")
def test_a_key_belongs_to_its_caller(store: MemoryStore | SQLiteStore) -> None:
    replies = [{"text": "for ana"}, {"text": "for bob"}, {"text": "bob again"}]
    with _served(store, replies) as (client, llm):
        ana = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed("k"))
        bob = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed("k", BOB))
        bob_other = client.post(
            EXECUTE_PATH, json={"Instruction": "other"}, headers=_keyed("k", BOB)
        )

    assert (ana.status_code, bob.status_code) == (200, 200)
    assert bob.json()["Result"]["PrimaryOutputText"] == "for bob"  # his own turn, not ana's
    assert bob.json()["Result"]["SessionId"] != ana.json()["Result"]["SessionId"]
    assert REPLAYED_HEADER.lower() not in bob.headers
    assert bob_other.status_code == 409  # the key is bob's now, for his own request
    assert len(llm.requests) == 2


@pytest.mark.decision("D182")
def test_a_follow_on_retried_with_its_key_runs_once(store: MemoryStore | SQLiteStore) -> None:
    replies = [{"text": "first"}, {"text": "follow-on"}, {"text": "never"}]
    with _served(store, replies) as (client, llm):
        first = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=ANA)
        body = follow_on_body(first.json()["Result"])
        answer = client.post(EXECUTE_PATH, json=body, headers=_keyed("next-1"))
        retry = client.post(EXECUTE_PATH, json=body, headers=_keyed("next-1"))
        # A retry without the key is a new turn of the session: the key is what asks for once.
        unkeyed = client.post(EXECUTE_PATH, json=body, headers=ANA)

    assert (answer.status_code, retry.status_code) == (200, 200)
    assert answer.json()["Result"]["PrimaryOutputText"] == "follow-on"
    assert retry.content == answer.content
    assert retry.headers[REPLAYED_HEADER] == "true"
    assert unkeyed.json()["Result"]["PrimaryOutputText"] == "never"
    assert len(llm.requests) == 3


class _FailingOnceLLM:
    """A scripted model whose first call fails: the turn it was in stores nothing."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.inner = ScriptedLLM(replies)
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        self.calls += 1
        if self.calls == 1:
            raise PermanentPortError("the model is down")
        return await self.inner.complete(request)


@pytest.mark.decision("D182")
def test_a_key_whose_turn_failed_runs_again(tmp_path: Path) -> None:
    llm = _FailingOnceLLM([{"text": "recovered"}])
    keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(ANA_KEY.encode()).digest())]
    app = create_app(
        embedded_pipeline(llm=llm, store=MemoryStore()), authenticator=ApiKeyAuthenticator(keys)
    )

    with _running(app) as client:
        failed = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed("k"))
        retry = client.post(EXECUTE_PATH, json={"Instruction": "hi"}, headers=_keyed("k"))

    assert (failed.status_code, retry.status_code) == (502, 200)
    assert retry.json()["Result"]["PrimaryOutputText"] == "recovered"
    assert REPLAYED_HEADER.lower() not in retry.headers
    assert llm.calls == 2


# --- continuations: idempotent without a key --------------------------------------------------


@pytest.mark.decision("D181")
@pytest.mark.rule("DESIGN/idempotency/continuation-conflict", "holds")
def test_a_continuation_resubmitted_after_success_gets_the_stored_answer(
    store: MemoryStore | SQLiteStore,
) -> None:
    with _served(store, [*READ_THEN_ANSWER, {"text": "never"}]) as (client, llm):
        first = client.post(EXECUTE_PATH, json={"Instruction": "Review app.py"}, headers=ANA)
        body = continuation_body(first.json()["Result"])
        answer = client.post(EXECUTE_PATH, json=body, headers=ANA)
        again = client.post(EXECUTE_PATH, json=body, headers=ANA)

    assert (answer.status_code, again.status_code) == (200, 200)
    assert answer.json()["Result"]["PrimaryOutputText"] == "app.py is fine."
    assert again.content == answer.content
    assert REPLAYED_HEADER.lower() not in answer.headers
    assert again.headers[REPLAYED_HEADER] == "true"
    assert len(llm.requests) == 2  # the initial turn and the continuation, once


@pytest.mark.decision("D181")
@pytest.mark.rule("DESIGN/idempotency/continuation-conflict", "broken")
def test_the_same_continuation_with_other_results_is_409_naming_the_turn(
    store: MemoryStore | SQLiteStore,
) -> None:
    with _served(store, [*READ_THEN_ANSWER, {"text": "never"}]) as (client, llm):
        first = client.post(EXECUTE_PATH, json={"Instruction": "Review app.py"}, headers=ANA)
        body = continuation_body(first.json()["Result"])
        answer = client.post(EXECUTE_PATH, json=body, headers=ANA)
        body["ToolResults"][0]["ResultJson"] = '{"text": "x=2"}'
        other = client.post(EXECUTE_PATH, json=body, headers=ANA)

    assert (answer.status_code, other.status_code) == (200, 409)
    [error] = other.json()["Errors"]
    assert error["RuleId"] == "DESIGN/idempotency/continuation-conflict"
    assert error["Field"] == "ToolResults"
    assert repr(body["TurnId"]) in error["Message"]
    assert len(llm.requests) == 2


# --- the OpenAPI document -----------------------------------------------------------------------


@pytest.mark.decision("D182")
def test_openapi_documents_the_key_and_the_replay_header(tmp_path: Path) -> None:
    app, _, _ = host_app(tmp_path)

    with _running(app) as client:
        operation = client.get("/openapi.json").json()["paths"][EXECUTE_PATH]["post"]

    [parameter] = operation["parameters"]
    assert (parameter["name"], parameter["in"], parameter["required"]) == (
        IDEMPOTENCY_KEY_HEADER,
        "header",
        False,
    )
    assert parameter["schema"]["maxLength"] == 255
    assert REPLAYED_HEADER in operation["responses"]["200"]["headers"]
    assert "Idempotency-Key" in operation["responses"]["409"]["description"]


# --- across processes, and from the command line ---------------------------------------------


@pytest.mark.decision("D184")
def test_a_continuation_raced_on_two_servers_gets_the_winners_answer_from_both(
    tmp_path: Path,
) -> None:
    """Two ``aptix serve`` processes on one SQLite file: both run the continuation (the
    model is slow), one commits, and the other answers with the answer it stored."""
    read = {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "app.py"}}]}
    replies: list[dict[str, Any]] = [
        read,
        {"text": "one", "delay": 2.0},
        {"text": "two", "delay": 2.0},
    ]
    with fake_openai_server(replies) as model:
        config = tmp_path / "aptix.toml"
        config.write_text(
            '[store]\nurl = "sqlite:aptix.db"\n'
            f'[model]\nkind = "openai"\nbase_url = "{model.base_url}"\nmodel = "fake-model"\n'
            f"max_attempts = 1\n{KEYS}",
            encoding="utf-8",
        )

        async def race(bases: list[str], body: dict[str, Any]) -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=WAIT) as client:
                return await asyncio.gather(
                    *(client.post(base + EXECUTE_PATH, json=body, headers=ANA) for base in bases)
                )

        with aptix_serve(config, ENV) as (one, _), aptix_serve(config, ENV) as (two, _):
            first = httpx.post(
                one + EXECUTE_PATH, json={"Instruction": "Review"}, headers=ANA, timeout=WAIT
            )
            answers = asyncio.run(race([one, two], continuation_body(first.json()["Result"])))
        calls = model.completions()

    assert [answer.status_code for answer in answers] == [200, 200], [a.text for a in answers]
    assert answers[0].content == answers[1].content
    assert answers[0].json()["Result"]["PrimaryOutputText"] in {"one", "two"}
    assert len(calls) == 3  # both ran: the loser's model call is paid, its answer is not given
    assert [answer.headers.get(REPLAYED_HEADER) for answer in answers].count("true") == 1


@pytest.mark.decision("D182")
def test_aptix_run_with_an_idempotency_key_prints_the_stored_answer_on_a_re_run(
    tmp_path: Path,
) -> None:
    store = f"sqlite:{tmp_path / 'session.db'}"
    request = {"Instruction": "hi"}
    key = ("--idempotency-key", "run-1", "--store", store)

    first = aptix_run(tmp_path, request, [{"text": "first run"}], *key)
    again = aptix_run(tmp_path, request, [{"text": "never played"}], *key, "--report")
    bad = aptix_run(tmp_path, request, [{"text": "never played"}], "--idempotency-key", "a b")

    assert (first.returncode, again.returncode) == (0, 0), (first.stderr, again.stderr)
    assert stdout_json(again) == stdout_json(first)
    assert stdout_json(again)["Result"]["PrimaryOutputText"] == "first run"
    assert json.loads(again.stderr)["replayed"] is True
    assert bad.returncode == 1
    assert stdout_json(bad)["Errors"][0]["RuleId"] == "DESIGN/idempotency/key-format"
