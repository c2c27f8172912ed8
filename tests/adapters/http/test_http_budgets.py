"""Budgets over HTTP (docs/BUDGETS.md, docs/HTTP.md): a refused turn is a 429 with
``Retry-After`` for a windowed budget, and ``GET /v1/usage`` reports the caller's own org
only. A real uvicorn server on loopback, a real httpx client, the memory store."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from http_kit import ANA, BOB, ENV, write_config
from server_thread import server_thread

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import create_app

CAROL_KEY = "carol-test-key"
CAROL = {"Authorization": f"Bearer {CAROL_KEY}"}
CAROL_KEYS = f"""
[[auth.keys]]
org = "beta"
user = "carol"
key_sha256 = "{hashlib.sha256(CAROL_KEY.encode()).hexdigest()}"
"""
PRICED = """
[prices.default]
input = "2.50"
output = "10"
"""
TWO_CALLS_A_DAY = """
[[budgets]]
id = "two-a-day"
metric = "model_calls"
limit = 2
window = "day"
per = "user"
"""
REPLY = {"text": "Done.", "usage": {"input_tokens": 1000, "output_tokens": 100}}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The service on a memory store: prices, two model calls a day per user, ana and bob
    of acme, carol of beta; its base URL."""
    path = write_config(
        tmp_path,
        [REPLY] * 8,
        store='url = "memory"',
        more=PRICED + TWO_CALLS_A_DAY + CAROL_KEYS,
    )
    with server_thread(create_app(load_service_config(path, env=ENV))) as port:
        yield f"http://127.0.0.1:{port}"


def _turn(client: httpx.Client, headers: dict[str, str], **more: object) -> httpx.Response:
    return client.post("/v1/agent/execute", json={"Instruction": "go", **more}, headers=headers)


def _seconds_to_midnight() -> float:
    now = datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return 86_400 - (now - midnight).total_seconds()


@pytest.mark.decision("D592")
def test_a_turn_over_a_daily_budget_is_a_429_with_retry_after(served: str) -> None:
    with httpx.Client(base_url=served) as client:
        assert [_turn(client, ANA).status_code for _ in range(2)] == [200, 200]

        refused = _turn(client, ANA)
        other_user = _turn(client, BOB)

    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/json"
    body = refused.json()
    assert body["Successful"] is False
    (error,) = body["Errors"]
    assert (error["Code"], error["RuleId"]) == ("budget_exceeded", "DESIGN/budget/within")
    budget = error["Budget"]
    assert budget["BudgetId"] == "two-a-day"
    assert (budget["Limit"], budget["Used"], budget["Remaining"]) == ("2", "2", "0")
    assert budget["Window"] == "per day (UTC)"
    retry = int(refused.headers["Retry-After"])
    assert retry == budget["RetryAfterSeconds"]
    assert 1 <= retry <= _seconds_to_midnight() + 1
    assert other_user.status_code == 200  # bob's own two calls


@pytest.mark.decision("D592")
def test_a_streamed_turn_refused_before_its_model_call_is_the_same_429(served: str) -> None:
    with httpx.Client(base_url=served) as client:
        for _ in range(2):
            assert _turn(client, ANA).status_code == 200

        streamed = _turn(client, ANA, Stream=True)
        by_accept = _turn(client, {**ANA, "Accept": "text/event-stream"})

    for refused in (streamed, by_accept):
        assert refused.status_code == 429
        assert refused.headers["content-type"] == "application/json"
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["Errors"][0]["Code"] == "budget_exceeded"


@pytest.mark.decision("D592")
def test_a_per_turn_budget_refuses_without_retry_after(tmp_path: Path) -> None:
    turn_budget = (
        '[[budgets]]\nid = "small-turn"\nmetric = "tokens"\nlimit = 100\nwindow = "turn"\n'
    )
    path = write_config(tmp_path, [REPLY], store='url = "memory"', more=turn_budget)

    with (
        server_thread(create_app(load_service_config(path, env=ENV))) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        refused = _turn(client, ANA)

    assert refused.status_code == 429
    assert "Retry-After" not in refused.headers
    budget = refused.json()["Errors"][0]["Budget"]
    assert budget["Window"] == "per turn"
    assert "RetryAfterSeconds" not in budget


@pytest.mark.decision("D591")
def test_usage_reports_the_callers_own_org_with_its_budgets(served: str) -> None:
    with httpx.Client(base_url=served) as client:
        for headers in (ANA, ANA, BOB, CAROL):
            assert _turn(client, headers).status_code == 200
        acme = client.get("/v1/usage", params={"by": "user"}, headers=ANA)
        beta = client.get("/v1/usage", headers=CAROL)
        own_org = client.get("/v1/usage", params={"org": "acme", "user": "bob"}, headers=BOB)

    assert acme.status_code == 200
    report = acme.json()
    assert report["Query"]["Org"] == "acme"
    groups = {g["Key"]["user"]: g["Totals"] for g in report["Groups"]}
    assert {user: totals["Calls"] for user, totals in groups.items()} == {"ana": 2, "bob": 1}
    # 1,000 input tokens at 2.50 and 100 output at 10 per million: 0.0035 a call, exactly
    assert groups["ana"]["Cost"] == {"USD": "0.0070"}
    assert Decimal(report["Total"]["Cost"]["USD"]) == Decimal("0.0105")
    assert report["Total"]["UnpricedCalls"] == 0
    assert [(b["BudgetId"], b["User"], b["Remaining"]) for b in report["Budgets"]] == [
        ("two-a-day", "ana", "0"),
        ("two-a-day", "bob", "1"),
    ]
    assert beta.json()["Total"]["Calls"] == 1  # carol's org sees only carol's call
    assert beta.json()["Query"]["Org"] == "beta"
    assert own_org.status_code == 200
    assert own_org.json()["Total"]["Calls"] == 1


@pytest.mark.decision("D591")
def test_usage_of_another_org_is_forbidden_and_a_key_is_needed(served: str) -> None:
    with httpx.Client(base_url=served) as client:
        assert _turn(client, CAROL).status_code == 200
        other = client.get("/v1/usage", params={"org": "beta"}, headers=ANA)
        anonymous = client.get("/v1/usage", params={"org": "beta"})
        wrong_key = client.get("/v1/usage", headers={"X-API-Key": "nobody"})

    assert other.status_code == 403
    (error,) = other.json()["Errors"]
    assert (error["Code"], error["Field"]) == ("forbidden", "org")
    assert "beta" not in other.text.replace("org=beta", "")
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == "Bearer"
    assert wrong_key.status_code == 401


@pytest.mark.decision("D591")
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"by": "team"}, "by"),
        ({"by": "user,user"}, "by"),
        ({"since": "yesterday"}, "since"),
        ({"until": "soon"}, "until"),
        ({"window": "week"}, "window"),
        ({"window": "day", "since": "2026-11-01"}, "window"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_usage_parameter_is_a_400_naming_it(
    served: str, params: dict[str, str], field: str
) -> None:
    with httpx.Client(base_url=served) as client:
        answer = client.get("/v1/usage", params=params, headers=ANA)

    assert answer.status_code == 400
    (error,) = answer.json()["Errors"]
    assert (error["Code"], error["Field"]) == ("invalid_request", field)


@pytest.mark.decision("D591")
def test_usage_filters_and_windows_narrow_the_report(served: str) -> None:
    with httpx.Client(base_url=served) as client:
        for headers in (ANA, BOB):
            assert _turn(client, headers).status_code == 200
        today = client.get("/v1/usage", params={"window": "day", "by": "mode"}, headers=ANA)
        ana = client.get("/v1/usage", params={"user": "ana", "window": "24h"}, headers=BOB)
        future = client.get("/v1/usage", params={"since": "2999-01-01"}, headers=ANA)
        past = client.get("/v1/usage", params={"until": "2000-01-01T00:00:00Z"}, headers=ANA)

    assert today.json()["Total"]["Calls"] == 2
    assert [g["Key"] for g in today.json()["Groups"]] == [{"mode": "general"}]
    assert ana.json()["Total"]["Calls"] == 1
    assert future.json()["Total"]["Calls"] == 0
    assert past.json()["Total"]["Calls"] == 0


@pytest.mark.decision("D591", "D592")
def test_the_openapi_document_has_the_usage_route_and_the_429(served: str) -> None:
    with httpx.Client(base_url=served) as client:
        document = client.get("/openapi.json").json()

    usage = document["paths"]["/v1/usage"]["get"]
    assert {p["name"] for p in usage["parameters"]} >= {"org", "by", "since", "window"}
    assert usage["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/UsageReport"
    }
    assert "UsageReport" in document["components"]["schemas"]
    refused = document["paths"]["/v1/agent/execute"]["post"]["responses"]["429"]
    assert "Retry-After" in refused["headers"]
    json.dumps(document)  # a valid JSON document
