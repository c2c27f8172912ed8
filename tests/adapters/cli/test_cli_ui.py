"""``aptix ui`` as a user runs it: a process of its own serving real HTTP.

Its first line names the URL with this start's token; the page answers only a
request naming a loopback host (or one ``--allow-host`` gives) and holding the
token, given once in the URL and then kept in a cookie (adapters/ui/guard.py).
The store is the browsed one of tests/kits/ui_kit.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest
from cli_kit import APTIX
from serve_process import WAIT
from ui_kit import Browsed, aptix_ui, browsed_store


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return browsed_store(tmp_path_factory.mktemp("aptix-ui"))


def _store(browsed: Browsed) -> tuple[str, ...]:
    return ("--store", browsed.store_url, "--recordings", str(browsed.recordings))


@pytest.mark.decision("D415", "D416")
def test_aptix_ui_answers_only_the_printed_url_then_its_cookie_and_only_on_loopback(
    browsed: Browsed,
) -> None:
    with aptix_ui(*_store(browsed), cwd=browsed.db.parent) as running:
        port = running.base.rsplit(":", 1)[1]
        with httpx.Client(base_url=running.base, timeout=WAIT) as browser:
            without = browser.get("/")
            wrong = browser.get("/", params={"token": "not-the-token"})
            first = browser.get(running.url)
            later = browser.get("/session", params={"org": "acme", "user": "ana", "id": "x"})
            index = browser.get("/")
            rebound = browser.get(running.url, headers={"Host": f"evil.example:{port}"})

    assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/\?token=[A-Za-z0-9_-]{{43}}", running.url)
    assert without.status_code == 401
    assert "needs the token aptix ui printed" in without.text
    assert wrong.status_code == 403
    assert first.status_code == 200
    assert "acme / ana" in first.text
    assert f"aptix_ui_token_{port}={running.token}" in first.headers["set-cookie"]
    assert later.status_code == 404  # answered: no such session, but past the token
    assert index.status_code == 200
    assert "globex / zoe" in index.text
    assert rebound.status_code == 400
    assert "acme" not in rebound.text
    assert "acme" not in without.text + wrong.text


@pytest.mark.decision("D417")
def test_allow_host_adds_a_name_the_page_answers_to(browsed: Browsed) -> None:
    args = (*_store(browsed), "--allow-host", "aptix.test", "--allow-host", "[fe80::1]")
    with aptix_ui(*args, cwd=browsed.db.parent) as running:
        port = running.base.rsplit(":", 1)[1]
        allowed = httpx.get(running.url, headers={"Host": f"aptix.test:{port}"}, timeout=WAIT)
        other = httpx.get(running.url, headers={"Host": f"other.test:{port}"}, timeout=WAIT)
        address = httpx.get(running.url, headers={"Host": f"[fe80::1]:{port}"}, timeout=WAIT)

    assert allowed.status_code == 200
    assert "acme / ana" in allowed.text
    assert address.status_code == 200
    assert other.status_code == 400
    assert "<code>aptix.test</code>" in other.text


@pytest.mark.decision("D417")
@pytest.mark.parametrize("name", ["aptix.test:8090", "http://aptix.test", "*.example.com"])
def test_an_allow_host_that_is_not_a_host_name_is_a_usage_error(
    browsed: Browsed, name: str
) -> None:
    run = subprocess.run(
        [str(APTIX), "ui", *_store(browsed), "--allow-host", name, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.startswith(f"aptix ui: --allow-host {name!r} is not a host name")


@pytest.mark.decision("D417")
def test_listening_on_every_interface_prints_a_url_a_browser_here_can_open(
    browsed: Browsed, tmp_path: Path
) -> None:
    with aptix_ui(*_store(browsed), "--allow-remote", host="0.0.0.0", cwd=tmp_path) as running:
        answer = httpx.get(running.url, timeout=WAIT)

    assert running.url.startswith("http://127.0.0.1:")
    assert answer.status_code == 200
    assert "acme / ana" in answer.text
