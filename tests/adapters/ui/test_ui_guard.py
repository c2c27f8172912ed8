"""Who may open the standalone turn browser (adapters/ui/guard.py) over real HTTP.

The page behind a ``UIGuard`` under uvicorn in a thread, on the browsed store
(tests/kits/ui_kit.py): a request naming a ``Host`` that is not a loopback name or
an allowed one is refused with nothing of the store, whatever token it holds; a
loopback one needs this start's token, given once in the URL and then kept in the
cookie that visit sets. The page mounted in ``aptix serve`` keeps answering any
``Host`` behind its keys (D418). ``aptix ui`` itself is run in
tests/adapters/cli/test_cli_ui.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from http_kit import ENV
from server_thread import WAIT, server_thread
from ui_kit import Browsed, browsed_store, standalone_app, with_token, write_ui_config

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import create_app
from aptix_pipeline.adapters.ui.app import TOKEN_COOKIE, UIAccess, create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard, allowed_host_name, host_of


@dataclass(frozen=True)
class Page:
    """The standalone page served on loopback: its base URL, port and guard."""

    base: str
    port: int
    guard: UIGuard

    @property
    def cookie(self) -> str:
        return f"{TOKEN_COOKIE}_{self.port}"

    def client(self) -> httpx.Client:
        """A fresh client: no cookie yet."""
        return httpx.Client(base_url=self.base, timeout=WAIT)


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return browsed_store(tmp_path_factory.mktemp("guarded"))


@pytest.fixture(scope="module")
def page(browsed: Browsed) -> Iterator[Page]:
    guard = UIGuard.start(["aptix.test"])
    with server_thread(standalone_app(browsed, guard)) as port:
        yield Page(f"http://127.0.0.1:{port}", port, guard)


def _holds_nothing_of_the_store(answer: httpx.Response, browsed: Browsed) -> None:
    assert "acme" not in answer.text
    assert "globex" not in answer.text
    assert browsed.session_id not in answer.text
    assert "<tr data-recording=" not in answer.text


# --- the Host a request names --------------------------------------------------------------------


@pytest.mark.decision("D415")
@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "127.0.0.1.evil.example:{port}",
        "localhost.evil.example:{port}",
        "0.0.0.0:{port}",
        "[::2]:{port}",
        "other.test:{port}",
    ],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/"), ("GET", "/session"), ("POST", "/recording/replay"), ("GET", "/static/ui.css")],
)
def test_a_request_naming_a_foreign_host_is_refused_with_nothing_of_the_store(
    page: Page, browsed: Browsed, host: str, method: str, path: str
) -> None:
    params = {"org": "acme", "user": "ana", "id": browsed.session_id} if path == "/session" else {}
    with page.client() as client:
        client.cookies.set(page.cookie, page.guard.token)  # even the right token does not help
        answer = client.request(
            method,
            path,
            params={**params, "token": page.guard.token},
            headers={"Host": host.format(port=page.port)},
        )

    assert answer.status_code == 400
    assert "id='host-refused'" in answer.text
    assert "--allow-host NAME" in answer.text
    assert "set-cookie" not in answer.headers
    _holds_nothing_of_the_store(answer, browsed)


@pytest.mark.decision("D415")
@pytest.mark.parametrize(
    "host",
    [
        "localhost:{port}",
        "LOCALHOST",
        "127.0.0.1:{port}",
        "127.8.0.1:1",
        "[::1]:{port}",
        "aptix.test:{port}",  # allowed by the guard
        "APTIX.test",
    ],
)
def test_loopback_and_allowed_host_names_are_answered_with_any_port(page: Page, host: str) -> None:
    with page.client() as client:
        answer = client.get(
            "/", params={"token": page.guard.token}, headers={"Host": host.format(port=page.port)}
        )

    assert answer.status_code == 200
    assert "acme / ana" in answer.text


@pytest.mark.decision("D415")
def test_the_refusal_names_the_hosts_the_page_answers_to(page: Page) -> None:
    answer = httpx.get(f"{page.base}/", headers={"Host": "evil.example:1"})

    assert "<code>localhost</code>, <code>127.0.0.1</code>, <code>[::1]</code>" in answer.text
    assert "<code>aptix.test</code>" in answer.text
    assert "not at <code>evil.example</code>" in answer.text


# --- the token of the start ----------------------------------------------------------------------


@pytest.mark.decision("D416")
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/"), ("GET", "/session"), ("GET", "/recording"), ("POST", "/recording/replay")],
)
def test_without_the_token_every_page_is_a_401_with_nothing_of_the_store(
    page: Page, browsed: Browsed, method: str, path: str
) -> None:
    params = {"org": "acme", "user": "ana", "id": browsed.session_id, "name": "x.json"}
    with page.client() as client:
        answer = client.request(method, path, params=params)

    assert answer.status_code == 401
    assert "id='token-refused'" in answer.text
    assert "needs the token aptix ui printed" in answer.text
    assert "set-cookie" not in answer.headers
    _holds_nothing_of_the_store(answer, browsed)


@pytest.mark.decision("D416")
def test_the_token_in_the_url_answers_and_sets_an_httponly_strict_cookie_of_the_port(
    page: Page,
) -> None:
    with page.client() as client:
        answer = client.get("/", params={"token": page.guard.token})

    assert answer.status_code == 200
    assert "acme / ana" in answer.text
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}_{page.port}={page.guard.token};")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/;" in cookie
    assert "Domain" not in cookie


@pytest.mark.decision("D416")
def test_after_the_first_visit_the_cookie_opens_every_page(page: Page, browsed: Browsed) -> None:
    query = {"org": "acme", "user": "ana", "id": browsed.session_id}
    with page.client() as client:
        with_token(client, page.guard.token)
        session = client.get("/session", params=query)
        index = client.get("/")
    with page.client() as other:  # the cookie alone, as a browser sends it
        other.cookies.set(page.cookie, page.guard.token)
        alone = other.get("/session", params=query)

    assert [session.status_code, index.status_code, alone.status_code] == [200, 200, 200]
    assert f"<tr data-turn='{browsed.first_turn}'>" in session.text
    assert "set-cookie" not in index.headers  # given once


@pytest.mark.decision("D416")
def test_a_wrong_token_in_the_url_or_the_cookie_is_a_403(page: Page, browsed: Browsed) -> None:
    wrong = page.guard.token[:-1] + ("A" if page.guard.token[-1] != "A" else "B")
    with page.client() as client:
        in_url = client.get("/", params={"token": wrong})
    with page.client() as client:
        client.cookies.set(page.cookie, wrong)
        in_cookie = client.get("/")
    with page.client() as client:
        client.cookies.set(page.cookie, wrong)  # the right one in the URL wins
        mended = client.get("/", params={"token": page.guard.token})

    assert in_url.status_code == 403
    assert "the token in this URL is not this page&#x27;s" in in_url.text
    assert in_cookie.status_code == 403
    assert "the token of an earlier start" in in_cookie.text
    assert "set-cookie" not in in_url.headers
    _holds_nothing_of_the_store(in_url, browsed)
    _holds_nothing_of_the_store(in_cookie, browsed)
    assert mended.status_code == 200


@pytest.mark.decision("D416")
def test_the_static_files_need_no_token_and_hold_nothing_of_the_store(page: Page) -> None:
    with page.client() as client:
        css = client.get("/static/ui.css")
        htmx = client.get("/static/htmx.min.js")

    assert [css.status_code, htmx.status_code] == [200, 200]


@pytest.mark.decision("D416")
def test_each_start_has_its_own_token_compared_whole() -> None:
    first, second = UIGuard.start(), UIGuard.start()

    assert first.token != second.token
    assert len(first.token) >= 43  # 32 random bytes
    assert first.token_matches(first.token)
    assert not first.token_matches(second.token)
    assert not first.token_matches(first.token[:-1])
    assert not first.token_matches("")
    assert not first.token_matches(None)
    assert first.token not in repr(first)


@pytest.mark.decision("D416")
def test_the_page_is_built_either_mounted_or_standalone_never_unguarded() -> None:
    async def nobody(key: str) -> None:
        return None

    access = UIAccess(caller_for_key=nobody)

    with pytest.raises(ValueError, match="exactly one"):
        create_ui_app(None, None)
    with pytest.raises(ValueError, match="exactly one"):
        create_ui_app(None, None, access=access, guard=UIGuard.start())


# --- host names, as rules ----------------------------------------------------------------------


@pytest.mark.decision("D415")
@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("localhost:8090", "localhost"),
        ("LocalHost", "localhost"),
        ("127.0.0.1:1", "127.0.0.1"),
        ("[::1]:8090", "::1"),
        ("[0:0:0:0:0:0:0:1]", "::1"),
        ("aptix.test", "aptix.test"),
        ("[nope]:1", None),
        ("a:b:c", None),
        ("evil.example:123456", None),
        ("", None),
        (None, None),
    ],
)
def test_the_host_of_a_host_header(header: str | None, host: str | None) -> None:
    assert host_of(header) == host


@pytest.mark.decision("D417")
@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("aptix.example.lan", "aptix.example.lan"),
        ("My-Box", "my-box"),
        ("192.168.1.4", "192.168.1.4"),
        ("[fe80::1]", "fe80::1"),
        ("aptix.test:8090", None),
        ("http://aptix.test", None),
        ("aptix.test/ui", None),
        ("*.example.com", None),
        ("*", None),
        ("", None),
        ("-dash.example", None),
    ],
)
def test_an_allowed_host_is_a_name_or_an_address_alone(name: str, allowed: str | None) -> None:
    if allowed is None:
        with pytest.raises(ValueError, match="is not a host name"):
            allowed_host_name(name)
    else:
        assert allowed_host_name(name) == allowed


# --- mounted in aptix serve ----------------------------------------------------------------------


@pytest.mark.decision("D418")
def test_the_mounted_page_answers_any_host_but_shows_nothing_without_a_key(
    tmp_path: Path, browsed: Browsed
) -> None:
    config = load_service_config(write_ui_config(tmp_path, browsed), env=ENV)
    foreign = {"Host": "evil.example:8080"}
    with (
        server_thread(create_app(config)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        index = client.get("/ui/", headers=foreign)
        session = client.get(
            "/ui/session",
            params={"org": "acme", "user": "ana", "id": browsed.session_id},
            headers=foreign,
        )
        api = client.post("/v1/agent/execute", json={"Instruction": "hi"}, headers=foreign)
        signed_in = client.post(
            "/ui/login",
            content=f"key={ENV['APTIX_TEST_KEY_ANA']}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )

    assert [index.status_code, session.status_code] == [303, 303]
    assert index.headers["location"] == "/ui/login"
    assert api.status_code == 401
    _holds_nothing_of_the_store(session, browsed)
    assert signed_in.status_code == 303
    assert "Domain" not in signed_in.headers["set-cookie"]  # host-only: never a rebound name's
