"""The fork button and the budgets of a session's page (adapters/ui/actions.py).

On a real SQLite file: a session run by a real pipeline with a budget of two model
calls a day, whose third turn is refused for budget, and a session whose turn awaits
a client tool (written through the store's transaction). The standalone page is
served on loopback with the fork of ``aptix ui`` (``fork_session`` on the browsed
store) and read with httpx; then the page mounted in ``aptix serve``, and
``aptix ui --config`` as a process.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest
from http_kit import ANA_KEY, ENV
from server_thread import WAIT, server_thread
from starlette.applications import Starlette
from ui_actions_kit import BUDGETS, BUDGETS_TOML, Shop, budget_shop, session_rows
from ui_kit import ANA, aptix_ui, browsed_store, signed_in_client, with_token, write_ui_config

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.http.app import create_app
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.browse import SessionDetail, read_session_detail
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system import RandomIds, SystemClock
from aptix_pipeline.adapters.ui.app import create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard
from aptix_pipeline.contracts import (
    Caller,
    InvokeResult,
    Session,
)
from aptix_pipeline.engine import Telemetry, fork_session

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Shop:
    return budget_shop(tmp_path_factory.mktemp("actions") / "s.db")


def _standalone(db: Path, *, budgets: bool = True, forks: bool = True) -> tuple[Starlette, UIGuard]:
    store = SQLiteStore(db)

    async def fork(session_id: str, turn_id: str, caller: Caller) -> InvokeResult[Session]:
        return await fork_session(store, RandomIds(), SystemClock(), session_id, turn_id, caller)

    guard = UIGuard.start()
    app = create_ui_app(
        store,
        None,
        store_name="s",
        guard=guard,
        fork=fork if forks else None,
        budgets=BUDGETS if budgets else None,
    )
    return app, guard


@pytest.fixture(scope="module")
def page(shop: Shop) -> Iterator[httpx.Client]:
    app, guard = _standalone(shop.db)
    with signed_in_client(app, guard) as client:
        yield client


def _session_page(client: httpx.Client, session_id: str, prefix: str = "") -> str:
    answer = client.get(
        f"{prefix}/session", params={"org": "acme", "user": "ana", "id": session_id}
    )
    assert answer.status_code == 200, answer.text
    return answer.text


def _fork_forms(text: str) -> dict[str, dict[str, str]]:
    """Each fork button's turn and its form's hidden fields."""
    forms: dict[str, dict[str, str]] = {}
    for form in re.findall(
        r"<form method='post' action='[^']*/session/fork' class='fork'>(.*?)</form>", text
    ):
        fields = {
            name: unescape(value)
            for name, value in re.findall(r"name='([^']+)' value='([^']*)'", form)
        }
        forms[fields["turn"]] = fields
    return forms


def _post(
    client: httpx.Client, fields: dict[str, str], prefix: str = "", **headers: str
) -> httpx.Response:
    return client.post(f"{prefix}/session/fork", data=fields, headers={**FORM, **headers})


# --- the fork button ---------------------------------------------------------------------------


@pytest.mark.decision("D675")
def test_each_settled_turn_has_a_fork_button_and_forking_opens_the_new_session(
    page: httpx.Client, shop: Shop
) -> None:
    forms = _fork_forms(_session_page(page, shop.session))
    assert sorted(forms) == sorted(shop.turns)
    before = session_rows(shop.db)

    answer = _post(page, forms[shop.turns[0]])

    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith("/session?org=acme&user=ana&id=")
    assert session_rows(shop.db) == before + 1
    fork = page.get(location).text
    parent = re.search(r"<p id='forked-from'>(.*?)</p>", fork)
    assert parent is not None
    assert f"id={shop.session}'>{shop.session}</a> after turn" in parent[1]
    assert "(2 messages shared)" in parent[1]
    assert "id='forks'" in _session_page(page, shop.session)


@pytest.mark.decision("D675")
def test_a_fork_from_the_page_is_the_fork_pipeline_fork_makes(
    page: httpx.Client, shop: Shop
) -> None:
    forms = _fork_forms(_session_page(page, shop.session))
    location = _post(page, forms[shop.turns[1]]).headers["location"]
    from_page = location.rsplit("id=", 1)[1]

    async def both() -> tuple[SessionDetail | None, SessionDetail | None, list[str], list[str]]:
        with SQLiteStore(shop.db) as store:
            pipeline = embedded_pipeline(
                llm=ScriptedLLM([]), store=store, telemetry=Telemetry.off()
            )
            made = await pipeline.fork(shop.session, shop.turns[1], ANA)
            assert made.result is not None
            ours = await read_session_detail(store, "acme", "ana", from_page)
            theirs = await read_session_detail(store, "acme", "ana", made.result.id)
            said = [
                [str(m.content) for m in await store.read_transcript("acme", "ana", s)]
                for s in (from_page, made.result.id)
            ]
            return ours, theirs, said[0], said[1]

    ours, theirs, ours_said, theirs_said = asyncio.run(both())
    assert ours is not None
    assert theirs is not None
    assert ours.session.forked_from == theirs.session.forked_from
    assert ours.session.mode == theirs.session.mode
    assert ours.session.mode_history == theirs.session.mode_history
    assert ours_said == theirs_said
    assert len(ours_said) == 4  # both turns' question and answer


@pytest.mark.decision("D675")
@pytest.mark.parametrize(
    ("session", "turn", "status", "code", "field"),
    [
        ("waiting", "w1", 409, "conflict", "TurnId"),
        ("SOURCE", "t-none", 404, "not_found", "TurnId"),
    ],
)
def test_a_refused_fork_shows_the_page_with_the_error_and_writes_nothing(
    page: httpx.Client, shop: Shop, session: str, turn: str, status: int, code: str, field: str
) -> None:
    session = shop.session if session == "SOURCE" else session
    token = next(iter(_fork_forms(_session_page(page, shop.session)).values()))["form_token"]
    before = session_rows(shop.db)

    answer = _post(
        page, {"org": "acme", "user": "ana", "session": session, "turn": turn, "form_token": token}
    )

    assert answer.status_code == status
    refused = re.search(r"<div class='error' id='fork-refused'[^>]*>(.*?)</div>", answer.text)
    assert refused is not None
    assert f"<li data-code='{code}' data-field='{field}'>" in refused[1]
    assert f"not forked after turn <code>{turn}</code>; nothing was written" in refused[1]
    assert f"<code id='session-id'>{session}</code>" in answer.text  # the session's own page
    assert session_rows(shop.db) == before


@pytest.mark.decision("D675")
def test_a_pending_turn_has_no_fork_button(page: httpx.Client) -> None:
    text = _session_page(page, "waiting")
    assert _fork_forms(text) == {}
    assert "<td class='muted'>pending</td>" in text


@pytest.mark.decision("D675")
def test_a_store_that_cannot_fork_is_named_in_the_refusal(tmp_path: Path, shop: Shop) -> None:
    class OnlySessions:  # a host's store that is only a SessionStore
        def __init__(self, inner: SQLiteStore) -> None:
            self.inner = inner

        def begin(self, org: str, user: str) -> object:
            return self.inner.begin(org, user)

    inner = SQLiteStore(shop.db)

    async def fork(session_id: str, turn_id: str, caller: Caller) -> InvokeResult[Session]:
        store = OnlySessions(inner)
        return await fork_session(store, RandomIds(), SystemClock(), session_id, turn_id, caller)  # type: ignore[arg-type]

    guard = UIGuard.start()
    app = create_ui_app(inner, None, guard=guard, fork=fork)
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        forms = _fork_forms(_session_page(client, shop.session))
        before = session_rows(shop.db)
        answer = _post(client, forms[shop.turns[0]])
    assert answer.status_code == 501
    assert "<li data-code='invalid_request' data-field='SessionStore'>" in answer.text
    assert "SessionForks" in answer.text
    assert session_rows(shop.db) == before


@pytest.mark.decision("D676")
def test_a_forged_fork_post_is_refused_and_writes_nothing(page: httpx.Client, shop: Shop) -> None:
    forms = _fork_forms(_session_page(page, shop.session))
    good = forms[shop.turns[0]]
    host = str(page.base_url).split("://", 1)[1].rstrip("/")
    before = session_rows(shop.db)

    answers = {
        "no form token": _post(page, {k: v for k, v in good.items() if k != "form_token"}),
        "a made-up form token": _post(page, {**good, "form_token": "x" * 43}),
        "another site's origin": _post(page, good, origin="https://evil.example"),
        "an opaque origin": _post(page, good, origin="null"),
        "cross-site fetch": _post(page, good, **{"sec-fetch-site": "cross-site"}),
    }

    assert {name: a.status_code for name, a in answers.items()} == dict.fromkeys(answers, 403)
    assert all("id='post-refused'" in a.text for a in answers.values())
    assert session_rows(shop.db) == before
    # the page's own post, from its own origin, goes through
    assert _post(page, good, origin=f"http://{host}").status_code == 303


@pytest.mark.decision("D676")
def test_a_form_token_of_another_start_is_refused(shop: Shop) -> None:
    app, guard = _standalone(shop.db)
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        stale = _fork_forms(_session_page(client, shop.session))[shop.turns[0]]
    app, guard = _standalone(shop.db)
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        assert _post(client, stale).status_code == 403


@pytest.mark.decision("D675")
def test_without_a_fork_the_page_has_no_button(shop: Shop) -> None:
    app, guard = _standalone(shop.db, forks=False)
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        assert _fork_forms(_session_page(client, shop.session)) == {}
        assert "<th>fork</th>" not in _session_page(client, shop.session)


# --- budgets -----------------------------------------------------------------------------------


@pytest.mark.decision("D677")
def test_the_session_page_shows_each_budget_its_use_and_the_turn_refused_for_it(
    page: httpx.Client, shop: Shop
) -> None:
    text = _session_page(page, shop.session)

    row = re.search(r"<tr data-budget='two-calls-a-day'>(.*?)</tr>", text)
    assert row is not None
    cells = re.findall(r"<td>(.*?)</td>", row[1])
    assert cells == ["two-calls-a-day", "model_calls", "per day (UTC)", "user ana", "2", "2", "0"]
    refused = re.search(r"<ul id='budget-refusals'>(.*?)</ul>", text)
    assert refused is not None
    assert refused[1].count("<li") == 1
    assert "<code>budget_exceeded</code>" in refused[1]
    assert "two-calls-a-day" in refused[1]


@pytest.mark.decision("D677")
def test_the_owners_traces_page_shows_the_budgets_too(page: httpx.Client) -> None:
    text = page.get("/traces", params={"org": "acme", "user": "ana"}).text
    assert "<tr data-budget='two-calls-a-day'>" in text
    assert "id='budget-refusals'" in text


@pytest.mark.decision("D677")
def test_without_budgets_the_page_says_none_are_configured(shop: Shop) -> None:
    app, guard = _standalone(shop.db, budgets=False)
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        text = _session_page(client, shop.session)
    assert "<p class='muted' id='no-budgets'>no budgets configured" in text
    assert "data-budget=" not in text
    assert "id='budget-refusals'" in text  # the refused turn shows all the same


@pytest.mark.decision("D677")
def test_aptix_ui_reads_the_budgets_of_its_config(tmp_path: Path, shop: Shop) -> None:
    config = tmp_path / "service.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:{shop.db}"\n\n{BUDGETS_TOML}',
        encoding="utf-8",
    )
    with (
        aptix_ui("--config", str(config), cwd=tmp_path) as running,
        httpx.Client(base_url=running.base, timeout=WAIT) as client,
    ):
        with_token(client, running.token)
        text = _session_page(client, shop.session)
    assert "<tr data-budget='two-calls-a-day'>" in text
    assert _fork_forms(text)  # aptix ui forks in the store it browses


# --- mounted in aptix serve --------------------------------------------------------------------


@pytest.mark.decision("D675")
def test_the_mounted_page_forks_as_the_keys_caller(tmp_path: Path) -> None:
    browsed = browsed_store(tmp_path / "browsed")
    config = load_service_config(write_ui_config(tmp_path, browsed), env=ENV)
    with (
        server_thread(create_app(config)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        client.post("/ui/login", content=f"key={ANA_KEY}", headers=FORM)
        text = _session_page(client, browsed.session_id, "/ui")
        forms = _fork_forms(text)
        assert "id='no-budgets'" in text  # the service configures none
        before = session_rows(browsed.db)
        forged = _post(client, {**forms[browsed.first_turn], "form_token": "x"}, "/ui")
        other = _post(client, {**forms[browsed.first_turn], "org": "globex", "user": "zoe"}, "/ui")
        answer = _post(client, forms[browsed.first_turn], "/ui")
        assert (forged.status_code, other.status_code) == (403, 404)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/ui/session?org=acme&user=ana&id=")
        assert "id='forked-from'" in client.get(answer.headers["location"]).text
        assert session_rows(browsed.db) == before + 1
        client.cookies.clear()  # the key's form token is no other browser's
        assert _post(client, forms[browsed.first_turn], "/ui").status_code == 303  # to /ui/login
        assert session_rows(browsed.db) == before + 1


@pytest.mark.decision("D677")
def test_the_mounted_page_shows_the_services_budgets_for_the_keys_caller(tmp_path: Path) -> None:
    browsed = browsed_store(tmp_path / "browsed")
    path = write_ui_config(tmp_path, browsed)
    path.write_text(path.read_text(encoding="utf-8") + BUDGETS_TOML, encoding="utf-8")
    config = load_service_config(path, env=ENV)
    with (
        server_thread(create_app(config)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        client.post("/ui/login", content=f"key={ANA_KEY}", headers=FORM)
        text = _session_page(client, browsed.session_id, "/ui")
        traces = client.get("/ui/traces", params={"org": "acme", "user": "ana"}).text
    row = re.search(r"<tr data-budget='two-calls-a-day'>(.*?)</tr>", text)
    assert row is not None
    assert re.findall(r"<td>(.*?)</td>", row[1])[:5] == [
        "two-calls-a-day",
        "model_calls",
        "per day (UTC)",
        "user ana",
        "2",
    ]
    assert "id='no-budgets'" not in text
    assert "<tr data-budget='two-calls-a-day'>" in traces
