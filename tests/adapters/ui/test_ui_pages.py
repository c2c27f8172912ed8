"""The turn browser page (adapters/ui/app.py) over real HTTP: uvicorn in a thread, httpx.

The standalone page (``aptix ui``) on a real SQLite store and recordings folder
(tests/kits/ui_kit.py): the sessions and recordings listed, a session's turns and
transcript, a stored turn linked to its recordings, a recorded turn's path picture,
timeline and request/response, the replay button's answer, escaping of what
stores and recordings hold, and the path drawn without Graphviz. Then the page
mounted in ``aptix serve`` (``[ui] enabled``): the key given once and kept in a
cookie of the UI's path, pages scoped to the key's caller, and the watch view's
stream. The browser itself drives the page in tests/adapters/ui/test_ui_browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest
from http_kit import ANA_KEY, ENV
from httpx_sse import EventSource
from server_thread import WAIT, server_thread
from ui_kit import (
    ANA,
    FAULT_RULE,
    ZOE,
    Browsed,
    browsed_store,
    signed_in_client,
    standalone_app,
    with_token,
    write_ui_config,
)

from aptix_pipeline.adapters.config.service import ConfigError, load_service_config
from aptix_pipeline.adapters.http.app import create_app
from aptix_pipeline.adapters.ui.app import KEY_COOKIE
from aptix_pipeline.adapters.ui.guard import UIGuard


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return browsed_store(tmp_path_factory.mktemp("browsed"))


@pytest.fixture(scope="module")
def page(browsed: Browsed) -> Iterator[httpx.Client]:
    """The standalone page on the browsed store, served on loopback; the client has
    visited it with its token, so it holds the page's cookie."""
    guard = UIGuard.start()
    with signed_in_client(standalone_app(browsed, guard), guard) as client:
        yield client


def _recording_of(client: httpx.Client, kind: str) -> str:
    """The name of the recording whose row says ``kind`` (Initial, faulted, …)."""
    index = client.get("/").text
    rows: list[tuple[str, str]] = re.findall(r"<tr data-recording='([^']+)'>(.*?)</tr>", index)
    return next(name for name, row in rows if kind in row)


# --- the standalone page -----------------------------------------------------------------------


@pytest.mark.decision("D355")
def test_the_first_page_lists_every_callers_sessions_and_the_recordings(
    page: httpx.Client, browsed: Browsed
) -> None:
    answer = page.get("/")

    assert answer.status_code == 200
    assert "acme / ana" in answer.text
    assert "globex / zoe" in answer.text
    row = re.search(rf"<tr data-session='{browsed.session_id}'[^>]*>(.*?)</tr>", answer.text)
    assert row is not None
    assert "<td>review</td>" in row[1]  # mode
    assert "completed</span></td>" in row[1]  # status
    assert "<td>2</td>" in row[1]  # turns
    assert answer.text.count("<tr data-recording=") == 4
    assert "faulted at client_tool_continuation_resolver" in answer.text


def test_a_session_page_lists_its_turns_and_transcript_with_content(
    page: httpx.Client, browsed: Browsed
) -> None:
    answer = page.get("/session", params={"org": "acme", "user": "ana", "id": browsed.session_id})

    assert answer.status_code == 200
    assert f"<tr data-turn='{browsed.first_turn}'>" in answer.text
    assert f"<tr data-turn='{browsed.second_turn}'>" in answer.text
    assert "Check it against the team&#x27;s review checklist." in answer.text
    assert "general → review" in answer.text  # the mode history


@pytest.mark.decision("D350")
def test_a_stored_turn_shows_its_recordings_and_the_last_ones_path(
    page: httpx.Client, browsed: Browsed
) -> None:
    query = {"org": "acme", "user": "ana", "session": browsed.session_id, "id": browsed.first_turn}

    answer = page.get("/turn", params=query)

    listed = re.search(r"<ul id='turn-recordings'>(.*?)</ul>", answer.text)
    assert listed is not None
    kinds = re.findall(r"\((\w+)\)</li>", listed[1])
    assert kinds == ["Initial", "ClientToolCallContinuation", "ClientToolCallContinuation"]
    assert "data-picture=" in answer.text
    assert 'id="timeline"' in answer.text


def test_a_turn_of_a_session_the_folder_did_not_record_shows_what_the_store_holds(
    page: httpx.Client, browsed: Browsed
) -> None:
    query = {"org": "globex", "user": "zoe", "session": browsed.other_session, "id": "zoe-turn-1"}

    answer = page.get("/turn", params=query)

    assert answer.status_code == 200
    assert "none in" in answer.text
    assert "what the store holds" in answer.text
    assert "&lt;b&gt;zoe&#x27;s&lt;/b&gt; answer" in answer.text


@pytest.mark.decision("D347")
def test_a_faulted_recording_names_its_step_and_rule_on_the_picture_and_the_timeline(
    page: httpx.Client, browsed: Browsed
) -> None:
    name = _recording_of(page, "faulted")

    answer = page.get("/recording", params={"name": name})

    text = answer.text
    picture = unescape(text[text.index("data-picture=") : text.index("<h2>Timeline")])
    assert f"faulted at client_tool_continuation_resolver (rule {FAULT_RULE})" in picture
    timeline = text[text.index('id="timeline"') : text.index("<h2>Request and response")]
    steps = re.findall(r'<li class="kind-transition" data-step="(\w+)">', timeline)
    assert steps == [
        "request_handler",
        "session_restorer",
        "client_tool_continuation_resolver",
        "fault",
    ]
    assert 'data-fault="client_tool_continuation_resolver"' in timeline
    assert FAULT_RULE in timeline
    assert "call_unknown" in text[text.index("id='request'") :]


@pytest.mark.decision("D361")
def test_a_completed_recording_shows_model_calls_with_tokens_and_tool_calls(
    page: httpx.Client, browsed: Browsed
) -> None:
    name = _recording_of(page, "Initial")

    text = page.get("/recording", params={"name": name}).text

    assert "412 in / 38 out tokens" in text
    assert re.search(r"1 attempt\(s\) in \d+(\.\d)? (ms|µs), finish", text)  # timed
    assert "<code>agent_change_mode</code>" in text
    assert "<code>read_file</code>" in text
    assert "<code>general</code> → <code>review</code>" in text
    assert "clock 2026-01-01T00:00:00" in text


@pytest.mark.decision("D351")
def test_replay_answers_ok_and_how_the_replayed_turn_ended(
    page: httpx.Client, browsed: Browsed
) -> None:
    name = _recording_of(page, "faulted")

    fragment = page.post("/recording/replay", params={"name": name}, headers={"HX-Request": "true"})

    assert fragment.status_code == 200
    assert fragment.text.startswith('<div id="replay-result" data-verdict="ok">')
    assert f"the turn faulted at client_tool_continuation_resolver (rule {FAULT_RULE})" in (
        fragment.text
    )


def test_a_replay_posted_without_htmx_gets_a_whole_page(
    page: httpx.Client, browsed: Browsed
) -> None:
    name = _recording_of(page, "Initial")

    answer = page.post("/recording/replay", params={"name": name})

    assert answer.text.startswith("<!doctype html>")
    assert 'data-verdict="ok"' in answer.text


@pytest.mark.decision("D352")
@pytest.mark.parametrize("name", ["../aptix.db", "/etc/passwd", "nope.json", ""])
def test_only_the_folders_own_recordings_can_be_opened(page: httpx.Client, name: str) -> None:
    answer = page.get("/recording", params={"name": name})

    assert answer.status_code == 404
    assert "no such recording" in answer.text


def test_a_session_or_turn_that_does_not_exist_is_a_404(
    page: httpx.Client, browsed: Browsed
) -> None:
    missing = page.get("/session", params={"org": "acme", "user": "ana", "id": "nope"})
    wrong_owner = page.get(
        "/session", params={"org": "acme", "user": "bob", "id": browsed.session_id}
    )
    no_turn = page.get(
        "/turn", params={"org": "acme", "user": "ana", "session": browsed.session_id, "id": "x"}
    )

    assert [missing.status_code, wrong_owner.status_code, no_turn.status_code] == [404] * 3


@pytest.mark.decision("D353")
def test_what_a_store_holds_is_escaped_and_no_script_may_run(
    page: httpx.Client, browsed: Browsed
) -> None:
    answer = page.get(
        "/session", params={"org": "globex", "user": "zoe", "id": browsed.other_session}
    )

    assert "<script>alert(1)</script>" not in answer.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in answer.text
    assert "script-src 'self'" in answer.headers["content-security-policy"]


def test_the_static_files_are_the_packaged_htmx_and_nothing_else(page: httpx.Client) -> None:
    htmx = page.get("/static/htmx.min.js")
    licence = page.get("/static/htmx.LICENSE")
    other = page.get("/static/..%2Fui_app.py")

    assert htmx.status_code == 200
    assert "htmx" in htmx.text[:2000]
    assert "Zero-Clause BSD" in licence.text
    assert other.status_code == 404


@pytest.mark.decision("D348")
def test_without_graphviz_the_page_draws_the_path_itself(
    browsed: Browsed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    guard = UIGuard.start()
    app = standalone_app(None, guard, browsed.recordings)
    with server_thread(app) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        with_token(client, guard.token)
        name = _recording_of(client, "faulted")
        text = client.get("/recording", params={"name": name}).text

    assert 'data-picture="strip"' in text
    strip = text[text.index('data-picture="strip"') : text.index("<h2>Timeline")]
    assert f"faulted at client_tool_continuation_resolver (rule {FAULT_RULE})" in strip
    assert "✗ client_tool_continuation_resolver" in strip


# --- mounted in aptix serve ---------------------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path, browsed: Browsed) -> Iterator[httpx.Client]:
    config = load_service_config(write_ui_config(tmp_path, browsed), env=ENV)
    with (
        server_thread(create_app(config)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        yield client


def _signed_in(client: httpx.Client) -> httpx.Response:
    return client.post(
        "/ui/login",
        content=f"key={ANA_KEY}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )


@pytest.mark.decision("D354")
def test_the_mounted_page_sends_a_browser_without_a_key_to_sign_in(service: httpx.Client) -> None:
    answer = service.get("/ui/")

    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login"
    assert "API key" in service.get("/ui/login").text


@pytest.mark.decision("D354")
def test_a_key_given_once_is_kept_in_an_httponly_cookie_of_the_ui_path(
    service: httpx.Client,
) -> None:
    answer = _signed_in(service)

    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{KEY_COOKIE}=")
    assert "HttpOnly" in cookie
    assert "Path=/ui/" in cookie
    assert "SameSite=strict" in cookie


def test_a_wrong_key_is_refused_and_sets_no_cookie(service: httpx.Client) -> None:
    answer = service.post(
        "/ui/login",
        content="key=nope",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )

    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers
    assert "id='refused'" in answer.text


@pytest.mark.decision("D355")
def test_the_mounted_page_shows_only_the_keys_caller(
    service: httpx.Client, browsed: Browsed
) -> None:
    _signed_in(service)

    index = service.get("/ui/")
    theirs = service.get(
        "/ui/session", params={"org": ZOE.org, "user": ZOE.user, "id": browsed.other_session}
    )
    mine = service.get(
        "/ui/session", params={"org": ANA.org, "user": ANA.user, "id": browsed.session_id}
    )

    assert index.status_code == 200
    assert "acme / ana" in index.text
    assert "globex / zoe" not in index.text
    assert theirs.status_code == 404
    assert mine.status_code == 200
    assert "href='/ui/turn?" in mine.text  # links carry the mount path


@pytest.mark.decision("D356")
def test_the_watch_view_streams_the_services_own_events_for_the_keys_caller(
    service: httpx.Client,
) -> None:
    _signed_in(service)
    body = b'{"Instruction": "What is 2 + 3?", "Stream": true}'

    with service.stream("POST", "/ui/watch/run", content=body) as answer:
        events = list(EventSource(answer).iter_sse())

    names = [event.event for event in events]
    assert names[0] == "progress"
    assert names[-1] == "result"
    assert names.count("result") == 1
    assert events[-1].json()["Result"]["PrimaryOutputText"] == "2 + 3 = 5"
    assert "watch a turn" in service.get("/ui/watch").text


def test_the_watch_run_needs_the_key_too(service: httpx.Client) -> None:
    answer = service.post("/ui/watch/run", content=b'{"Instruction": "hi"}')

    assert answer.status_code == 303


def test_without_ui_enabled_nothing_is_mounted(tmp_path: Path, browsed: Browsed) -> None:
    config = load_service_config(write_ui_config(tmp_path, browsed, ui="[ui]\n"), env=ENV)
    with server_thread(create_app(config)) as port:
        answer = httpx.get(f"http://127.0.0.1:{port}/ui/login")

    assert answer.status_code == 404


@pytest.mark.parametrize("path", ["ui", "/", "/ui/", "/a b"])
def test_a_ui_path_that_is_not_a_plain_path_is_refused_naming_the_key(
    tmp_path: Path, browsed: Browsed, path: str
) -> None:
    config = write_ui_config(tmp_path, browsed, ui=f'[ui]\nenabled = true\npath = "{path}"\n')

    with pytest.raises(ConfigError, match=r"\[ui\]\.path"):
        load_service_config(config, env=ENV)


def test_an_owner_with_more_sessions_than_the_page_lists_says_where_the_rest_are() -> None:
    from datetime import UTC, datetime

    from aptix_pipeline.adapters.stores.session_browser import OwnerSummary, SessionSummary
    from aptix_pipeline.adapters.stores.session_search import SessionRow
    from aptix_pipeline.adapters.ui.pages import index_body

    when = datetime(2026, 1, 1, tzinfo=UTC)
    listed = [
        SessionRow(SessionSummary.of(f"s{n}", "acme", "ana", "general", when, []), None, None, 0)
        for n in range(2)
    ]

    crowded = index_body("/", [(OwnerSummary("acme", "ana", 5), listed)], "store", [], None)
    whole = index_body("/", [(OwnerSummary("acme", "ana", 2), listed)], "store", [], None)

    assert "the 2 most recently active of 5 are shown" in crowded
    assert "aptix sessions list --org acme --user ana --offset 2" in crowded
    assert "most recently active" not in whole
    many = index_body(
        "/", [(OwnerSummary("acme", "ana", 2), listed)], "store", [], None, more_owners=True
    )
    assert "the first 1 orgs and users are shown" in many
    assert "orgs and users are shown" not in whole


@pytest.mark.decision("D361")
async def test_the_timeline_shows_each_model_calls_duration_as_the_recorder_timed_it() -> None:
    from engine_kit import CALLER, text
    from replay_kit import Ticks, recording_pipeline

    from aptix_pipeline.adapters.stores.memory import MemoryStore
    from aptix_pipeline.adapters.ui.turn import timeline
    from aptix_pipeline.engine.replay import RecordingOptions

    timed = RecordingOptions(timer=Ticks())  # 2.5 ms between two readings
    untimed = RecordingOptions(timer=None)

    shown = []
    for options in (timed, untimed):
        pipeline = recording_pipeline(MemoryStore(), [text("hello")], recording=options)
        report = await pipeline.run({"Instruction": "hi"}, CALLER)
        assert report.recording is not None
        shown.append(str(timeline(report.recording)))

    assert "1 attempt(s) in 2.5 ms, finish" in shown[0]
    assert "1 attempt(s), finish" in shown[1]
