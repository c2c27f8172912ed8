"""The recorded turn's picture and timeline (adapters/ui/turn.py) over real HTTP.

The standalone page on the browsed recordings (tests/kits/ui_kit.py): each state of
the taken path, in Graphviz's picture and in the one the page draws without it, links
to the timeline's entry of the step that entered it; the picture comes with its zoom
tools; the timeline draws each timed model call and server tool call as a bar against
the turn's longest. The browser zooms, pans and follows the links in
tests/adapters/ui/test_ui_browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_thread import WAIT, server_thread
from ui_kit import Browsed, browsed_store, standalone_app, with_token

from aptix_pipeline.adapters.ui.guard import UIGuard


@pytest.fixture(scope="module")
def browsed(tmp_path_factory: pytest.TempPathFactory) -> Browsed:
    return browsed_store(tmp_path_factory.mktemp("pictured"))


def _client(browsed: Browsed) -> Iterator[httpx.Client]:
    guard = UIGuard.start()
    with (
        server_thread(standalone_app(None, guard, browsed.recordings)) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        yield client


def _recording_page(client: httpx.Client, kind: str) -> str:
    rows = re.findall(r"<tr data-recording='([^']+)'>(.*?)</tr>", client.get("/").text)
    name = next(name for name, row in rows if kind in row)
    return client.get("/recording", params={"name": name}).text


def _state_links(text: str) -> dict[str, int]:
    found = re.findall(r'<a href="#step-(\d+)" class="path-state" data-state="([^"]+)"', text)
    return {state: int(number) for number, state in found}


def _steps(text: str) -> dict[int, tuple[str, str]]:
    """The timeline's steps by number: (source, target)."""
    found = re.findall(
        r'<span class="kind" id="step-(\d+)">step #\d+</span><strong>\w+</strong> '
        r"<span class='muted'>(\w+) → (\w+)</span>",
        text,
    )
    return {int(number): (source, target) for number, source, target in found}


@pytest.mark.decision("D687")
@pytest.mark.parametrize("graphviz", [True, False], ids=["graphviz", "without-graphviz"])
def test_each_state_of_the_path_links_to_the_step_that_entered_it(
    browsed: Browsed, graphviz: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if not graphviz:
        monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    for client in _client(browsed):
        text = _recording_page(client, "faulted")

    links = _state_links(text)
    steps = _steps(text)
    assert ('data-picture="graphviz"' in text) is graphviz
    assert set(links) == {
        "received",
        "validated",
        "session_restored",
        "continuation_resolved",
        "faulted",
    }
    assert links["received"] == 1  # the first state: the step that left it
    for state, number in links.items():
        assert number in steps
        if state != "received":
            assert steps[number][1] == state
            assert all(target != state for n, (_, target) in steps.items() if n < number)
    assert 'data-zoom="in"' in text
    assert 'data-zoom="fit"' in text


@pytest.mark.decision("D688")
def test_the_timeline_draws_model_and_tool_time_as_bars_against_the_longest(
    browsed: Browsed,
) -> None:
    for client in _client(browsed):
        text = _recording_page(client, "FollowOn")

    bars = re.findall(r"<span class='bar (\w+)' data-ms='([^']+)' style='width: ([\d.]+)%'>", text)
    kinds = [kind for kind, _, _ in bars]
    widths = {float(ms): float(width) for _, ms, width in bars}
    longest = max(widths)
    assert kinds.count("model") == 2
    assert kinds.count("tool") == 1
    assert widths[longest] == 100.0
    for ms, width in widths.items():
        assert width == pytest.approx(max(100 * ms / longest, 0.5), abs=0.05)
    tool = next(float(ms) for kind, ms, _ in bars if kind == "tool")
    assert f", {tool:g} ms" in text  # the figure beside the bar
