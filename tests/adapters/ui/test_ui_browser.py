"""The turn browser in a real headless browser: the system's Chromium, driven by Playwright.

``aptix ui`` runs as a process of its own on a real SQLite store and recordings
folder (tests/kits/ui_kit.py); the browser opens its page, follows the session to a
turn, reads the path picture and the timeline, opens the faulted turn and finds
its step and rule named, presses "replay" and reads the outcome. The page mounted
in ``aptix serve`` is signed in to with a key and its watch view shows a turn's
events as they stream. Screenshots are kept in ``build/test-artifacts/``
(tests/kits/browser_kit.py, which holds the ``browser`` and ``tab`` fixtures).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from browser_kit import off_the_loop, screenshot
from http_kit import ANA_KEY, ENV
from repo import ROOT
from server_thread import WAIT, server_thread
from ui_actions_kit import BUDGETS_TOML, Shop, budget_shop, session_rows
from ui_kit import FAULT_RULE, Browsed, browsed_store, write_ui_config
from ui_kit import aptix_ui as running_ui

from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.http.app import create_app

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page


@contextmanager
def signed_in(tab: Page, config_file: Path) -> Iterator[int]:
    """``aptix serve``'s app on ``config_file`` in a thread, its page open in ``tab`` and
    signed in to with ana's key; the port."""
    config = load_service_config(config_file, env=ENV)
    with server_thread(create_app(config)) as port:
        tab.goto(f"http://127.0.0.1:{port}/ui/")
        tab.fill("#key", ANA_KEY)
        tab.click("button[type=submit]")
        yield port


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return browsed_store(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def aptix_ui(browsed: Browsed) -> Iterator[str]:
    """``aptix ui`` on the browsed store and folder, a process of its own; the URL it
    printed, with its token: a browser opens the page there first."""
    args = ("--store", browsed.store_url, "--recordings", str(browsed.recordings))
    with running_ui(*args, cwd=browsed.db.parent) as running:
        yield running.url


@pytest.mark.decision("D359")
def test_a_session_followed_to_its_turn_shows_the_path_and_the_timeline(
    aptix_ui: str, browsed: Browsed, tab: Page
) -> None:
    tab.goto(aptix_ui)
    tab.click(f"tr[data-session='{browsed.session_id}'] a")
    tab.click(f"tr[data-turn='{browsed.second_turn}'] a")

    picture = tab.locator("[data-picture]").first.inner_text()
    steps = tab.locator("#timeline li.kind-transition").evaluate_all(
        "items => items.map(item => item.dataset.step)"
    )
    assert tab.locator("#turn-id").inner_text() == browsed.second_turn
    assert "path: FollowOn turn" in picture
    assert ", done" in picture
    assert steps[:3] == ["request_handler", "session_restorer", "agent_context_loader"]
    assert steps[-1] == "complete"
    assert "llm_client" in steps
    assert "server_tool_round" in steps
    assert screenshot(tab, "turn-page.png").stat().st_size > 0


@pytest.mark.decision("D359")
def test_the_faulted_turn_names_its_step_and_rule_and_replays_to_the_same_fault(
    aptix_ui: str, tab: Page
) -> None:
    tab.goto(aptix_ui)
    tab.click("tr[data-recording]:has-text('faulted at') a")

    picture = tab.locator("[data-picture]").first.inner_text()
    banner = tab.locator(".fault-banner").inner_text()
    fault = tab.locator("#timeline li.kind-fault").inner_text()
    tab.click("#replay")
    outcome = tab.locator("#replay-result")
    outcome.wait_for()

    assert f"faulted at client_tool_continuation_resolver (rule {FAULT_RULE})" in picture
    assert "client_tool_continuation_resolver" in banner
    assert FAULT_RULE in banner
    assert FAULT_RULE in fault
    assert outcome.get_attribute("data-verdict") == "ok"
    assert (
        f"the turn faulted at client_tool_continuation_resolver (rule {FAULT_RULE})"
        in outcome.inner_text()
    )
    assert screenshot(tab, "faulted-turn-replayed.png").stat().st_size > 0


@pytest.mark.decision("D356")
def test_the_mounted_page_takes_a_key_and_watches_a_turn_stream(
    tmp_path: Path, browsed: Browsed, tab: Page
) -> None:
    with signed_in(tab, write_ui_config(tmp_path, browsed)):
        tab.click("text=watch a turn")
        tab.click("#watch-send")
        tab.locator("#events li[data-event=result]").wait_for()

        names = tab.locator("#events li").evaluate_all(
            "items => items.map(item => item.dataset.event)"
        )
        result = tab.locator("#events li[data-event=result]").inner_text()
        screenshot(tab, "watch-view.png")

    assert tab.url.endswith("/ui/watch")
    assert names[0] == "progress"
    assert names.count("result") == 1
    assert names.count("progress") >= 5
    assert "2 + 3 = 5" in result


@pytest.mark.decision("D625")
def test_eval_reports_are_listed_and_the_failing_case_is_shown(tmp_path: Path, tab: Page) -> None:
    import subprocess

    from cli_kit import APTIX

    reports = tmp_path / "evals"
    reports.mkdir()
    made = subprocess.run(
        [
            str(APTIX),
            "eval",
            str(ROOT / "examples" / "recordings"),
            "--config",
            str(ROOT / "examples" / "evals" / "candidate.toml"),
            "--html",
            str(reports / "candidate.html"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 1, made.stderr

    with running_ui("--evals", str(reports), cwd=tmp_path) as running:
        tab.goto(running.url)
        tab.goto(f"{running.base}/evals")
        listed = tab.locator("#eval-reports li").all_inner_texts()
        tab.click("#eval-reports a")
        summary = tab.locator("#summary").inner_text()
        failing = tab.locator("tbody tr:has(td.fail)").evaluate_all(
            "rows => rows.map(row => row.id)"
        )
        divergence = tab.locator("#case-05-streamed-initial pre.divergence").inner_text()

    assert listed == ["candidate.html"]
    assert summary == "5 cases: 4 pass, 1 fail, 1 regress"
    assert failing == ["row-05-streamed-initial"]
    assert "LLM.stream" in divergence
    assert screenshot(tab, "eval-report.png").stat().st_size > 0


@pytest.fixture
def own_store(tmp_path: Path) -> Browsed:
    """A store of the test's own, which it adds turns to."""
    return off_the_loop(browsed_store, tmp_path / "own")


@pytest.mark.decision("D685")
def test_the_live_view_shows_a_turn_another_process_stores_without_a_reload(
    tmp_path: Path, own_store: Browsed, tab: Page
) -> None:
    from cli_kit import turn_from_another_process

    with running_ui("--store", own_store.store_url, cwd=tmp_path) as running:
        tab.goto(running.url)
        tab.click("header nav >> text=live")
        tab.locator(f"#live-turns tr[data-turn='{own_store.second_turn}']").wait_for()
        tab.evaluate("window.aptixNotReloaded = true")
        turn_id = turn_from_another_process(
            tmp_path, own_store.store_url, "Anything new?", "stored by another process"
        )
        tab.locator(f"#live-turns tr[data-turn='{turn_id}']").wait_for()
        first = tab.locator("#live-turns tbody tr").first.get_attribute("data-turn")
        kept = tab.evaluate("window.aptixNotReloaded === true")
        screenshot(tab, "live-view.png")

    assert tab.url.endswith("/live")
    assert first == turn_id
    assert kept  # the row came by polling, not by loading the page again


@pytest.mark.decision("D686")
def test_the_watch_view_shows_the_models_text_as_one_growing_block(
    tmp_path: Path, browsed: Browsed, tab: Page
) -> None:
    config_file = write_ui_config(tmp_path, browsed)
    reply = "The sum of two and three is five, as counted on fingers."
    (tmp_path / "script.json").write_text(
        '{"replies": [{"text": "' + reply + '"}], "chunk_size": 4, "chunk_delay_seconds": 0.02}',
        encoding="utf-8",
    )
    with signed_in(tab, config_file):
        tab.click("text=watch a turn")
        tab.fill("#watch-request", '{"Instruction": "What is 2 + 3?", "Stream": true}')
        tab.click("#watch-send")
        tab.locator("#events li[data-event=result]").wait_for()
        names = tab.locator("#events li").evaluate_all(
            "items => items.map(item => item.dataset.event)"
        )
        block = tab.locator("#events li[data-event=text]")
        text = block.locator("pre").inner_text()
        deltas = int(block.get_attribute("data-deltas") or "0")
        screenshot(tab, "watch-text.png")

    assert names.count("text") == 1
    assert "delta" not in names
    assert text == reply
    assert deltas == (len(reply) + 3) // 4  # a delta a chunk of four characters


@pytest.mark.decision("D687")
def test_the_path_picture_starts_at_actual_size_zooms_pans_and_links_to_the_timeline(
    aptix_ui: str, browsed: Browsed, tab: Page
) -> None:
    tab.goto(aptix_ui)
    tab.click(f"tr[data-session='{browsed.session_id}'] a")
    tab.click(f"tr[data-turn='{browsed.second_turn}'] a")
    picture = tab.locator(".picture").first
    natural = picture.evaluate("box => box.querySelector('svg').viewBox.baseVal.width")
    shown = picture.evaluate("box => box.querySelector('svg').getBoundingClientRect().width")
    frame = picture.evaluate("box => box.clientWidth")
    tab.click(".picture-tools button[data-zoom=in]")
    zoomed = picture.evaluate("box => box.querySelector('svg').getBoundingClientRect().width")
    tab.click(".picture-tools button[data-zoom=fit]")
    fitted = picture.evaluate("box => box.querySelector('svg').getBoundingClientRect().width")
    tab.click(".picture-tools button[data-zoom=actual]")
    picture.evaluate("box => { box.scrollTo(0, 0); box.scrollIntoView(); }")
    before_pan = picture.evaluate("box => [box.scrollLeft, box.scrollTop]")
    box = picture.bounding_box()
    assert box is not None
    tab.mouse.move(box["x"] + 200, box["y"] + 300)  # on the picture's blank ground
    tab.mouse.down()
    tab.mouse.move(box["x"] + 50, box["y"] + 200)
    tab.mouse.up()
    after_pan = picture.evaluate("box => [box.scrollLeft, box.scrollTop]")
    state = tab.locator(".picture a.path-state[data-state=llm_answered]").first
    number = (state.get_attribute("href") or "").removeprefix("#")
    state.locator("text").first.click()
    highlighted = tab.locator("#timeline li:has(:target)").get_attribute("data-step")
    screenshot(tab, "turn-picture.png")  # panned, its state's step highlighted

    assert shown >= natural * 4 / 3 - 1  # Graphviz's points at actual size: not shrunk
    assert shown > frame  # wider than the page's column: panned, not shrunk
    assert zoomed == pytest.approx(shown * 1.25, rel=0.01)
    assert fitted <= frame
    assert after_pan == [before_pan[0] + 150, before_pan[1] + 100]  # dragged left and up
    assert tab.url.endswith(f"#{number}")
    assert highlighted == "llm_client"


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    """The budgets' store (ui_actions_kit)."""
    return off_the_loop(budget_shop, tmp_path / "shop.db")


@pytest.mark.decision("D675")
def test_the_fork_button_opens_the_fork_and_the_session_shows_its_budgets(
    tmp_path: Path, shop: Shop, tab: Page
) -> None:
    config = tmp_path / "service.toml"
    config.write_text(f'[store]\nurl = "sqlite:{shop.db}"\n\n{BUDGETS_TOML}', encoding="utf-8")
    with running_ui("--config", str(config), cwd=tmp_path) as running:
        tab.goto(running.url)
        tab.goto(f"{running.base}/session?org=acme&user=ana&id={shop.session}")
        budget = tab.locator("tr[data-budget='two-calls-a-day'] td").all_inner_texts()
        assert budget[-2:] == ["2", "0"]  # used, remaining
        assert "budget_exceeded" in tab.locator("#budget-refusals").inner_text()
        screenshot(tab, "session-budgets.png")
        before = session_rows(shop.db)

        tab.click(f"button[data-fork-turn='{shop.turns[0]}']")  # a real form post, with its Origin

        tab.wait_for_selector("#forked-from")
        assert "(2 messages shared)" in tab.locator("#forked-from").inner_text()
        assert tab.locator("#session-id").inner_text() != shop.session
        assert session_rows(shop.db) == before + 1
        assert screenshot(tab, "fork-button.png").stat().st_size > 0


def _followed_on_the_live_page(tab: Page, port: int) -> tuple[httpx.Response, str, Locator]:
    """Open serve's live page, send a streamed turn as ana, and wait until the page shows
    it completed: the answer, the turn's id and its entry on the page."""
    tab.goto(f"http://127.0.0.1:{port}/ui/live")
    tab.locator("#live-running[data-ready=true]").wait_for()
    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/agent/execute",
        json={"Instruction": "What is 2 + 3?", "Stream": True},
        headers={"Authorization": f"Bearer {ANA_KEY}"},
        timeout=WAIT,
    )
    turn_id = answer.text.split('"TurnId":"')[1].split('"')[0]
    run = tab.locator(f"#live-runs li[data-turn='{turn_id}'][data-status=completed]")
    run.wait_for()
    return answer, turn_id, run


@pytest.mark.decision("D689")
def test_the_live_page_follows_a_served_turn_with_its_text_as_one_growing_block(
    tmp_path: Path, own_store: Browsed, tab: Page
) -> None:
    config_file = write_ui_config(tmp_path, own_store)
    reply = "Five, since two and three make five: counted on the fingers of one hand."
    (tmp_path / "script.json").write_text(
        '{"replies": [{"text": "' + reply + '", "usage": {"input_tokens": 9, "output_tokens": 18}'
        '}], "chunk_size": 4, "chunk_delay_seconds": 0.02}',
        encoding="utf-8",
    )
    with signed_in(tab, config_file) as port:
        answer, turn_id, run = _followed_on_the_live_page(tab, port)
        blocks = run.locator("pre.live-text")
        text = blocks.first.inner_text()
        pieces = int(blocks.first.get_attribute("data-pieces") or "0")
        steps = run.locator(".live-steps li").count()
        tokens = run.locator(".live-tokens").inner_text()
        tab.locator(f"#live-turns tr[data-turn='{turn_id}']").wait_for()
        screenshot(tab, "live-serve.png")

    assert answer.status_code == 200
    assert blocks.count() == 1
    assert text == reply
    assert pieces == (len(reply) + 3) // 4  # a piece a chunk of four characters
    assert steps >= 5  # its steps, model call and more, as rows of their own
    assert tokens == "9 in / 18 out"


@pytest.mark.decision("D689")
def test_the_live_page_shows_each_model_calls_text_as_its_own_block_among_the_rows(
    tmp_path: Path, own_store: Browsed, tab: Page
) -> None:
    config_file = write_ui_config(tmp_path, own_store)
    first, second = "Opening the math tools first.", "Two and three make five."
    call = {"id": "m1", "name": "Math", "arguments": {}}
    (tmp_path / "script.json").write_text(
        json.dumps(
            {
                "replies": [{"text": first, "tool_calls": [call]}, {"text": second}],
                "chunk_size": 4,
                "chunk_delay_seconds": 0.01,
            }
        ),
        encoding="utf-8",
    )
    with signed_in(tab, config_file) as port:
        answer, _, run = _followed_on_the_live_page(tab, port)
        blocks = run.locator("pre.live-text")
        texts = blocks.all_inner_texts()
        rounds = [blocks.nth(n).get_attribute("data-round") for n in range(blocks.count())]
        kinds = [row.get_attribute("data-kind") for row in run.locator(".live-steps > li").all()]

    assert answer.status_code == 200
    assert texts == [first, second]
    assert rounds == ["1", "2"]
    # Each block in its place: the first call's text, then the tool's rows, then the
    # second call's text.
    first_text = kinds.index("text")
    second_text = kinds.index("text", first_text + 1)
    assert "tool_call" in kinds[first_text:second_text], kinds


@pytest.mark.decision("D675")
def test_the_fork_button_in_the_mounted_page_forks_as_the_keys_caller(
    tmp_path: Path, own_store: Browsed, tab: Page
) -> None:
    with signed_in(tab, write_ui_config(tmp_path, own_store)) as port:
        tab.click(f"tr[data-session='{own_store.session_id}'] a")
        tab.click(f"button[data-fork-turn='{own_store.second_turn}']")
        tab.wait_for_selector("#forked-from")
        forked_from = tab.locator("#forked-from").inner_text()
        fork_id = tab.locator("#session-id").inner_text()
        tab.goto(f"http://127.0.0.1:{port}/ui/")
        listed = tab.locator("#sessions tbody tr").evaluate_all(
            "rows => rows.map(row => row.dataset.session)"
        )

    assert own_store.session_id in forked_from
    assert own_store.second_turn in forked_from
    assert fork_id != own_store.session_id
    assert fork_id in listed  # the key's caller's own session now
