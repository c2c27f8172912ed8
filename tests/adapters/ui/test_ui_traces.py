"""The page shows every turn's kept trace, failed and unrecorded turns included
(issue 33 parts 2 and 3): a session lists its turns' traces with status and error;
a failed turn's trace page shows its fault, path and timeline, and beside each
step what it changed; a failed first turn, which left no session, is listed under
its owner; a turn without a recording shows its kept trace."""

from __future__ import annotations

from collections.abc import Iterator
from html import unescape

import httpx
import pytest
from trace_kit import FailedTurns, failed_turns_store
from ui_kit import signed_in_client

from aptix_pipeline.adapters.stores import close_browse_store, open_browse_store
from aptix_pipeline.adapters.ui import create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard

WHO = {"org": "acme", "user": "ana"}


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> FailedTurns:
    return failed_turns_store(tmp_path_factory.mktemp("ui-traces"))


@pytest.fixture(scope="module")
def page(failed: FailedTurns) -> Iterator[httpx.Client]:
    guard = UIGuard.start()
    store = open_browse_store(failed.store_url)

    async def close() -> None:
        await close_browse_store(store)

    app = create_ui_app(store, None, store_name="traces", guard=guard, close_store=close)
    with signed_in_client(app, guard) as client:
        yield client


def _trace_links(text: str) -> list[str]:
    import re

    return [unescape(href) for href in re.findall(r"href='(/trace\?[^']+)'", text)]


@pytest.mark.decision("D660")
def test_a_session_lists_its_turns_traces_with_the_failed_one_first(
    page: httpx.Client, failed: FailedTurns
) -> None:
    answer = page.get("/session", params={**WHO, "id": failed.session_id})

    assert answer.status_code == 200
    text = unescape(answer.text)
    assert "Turn traces" in text
    assert "faulted at llm_client" in text
    assert "port_failed: the LLM failed" in text
    assert len(_trace_links(answer.text)) == 2


@pytest.mark.decision("D660")
def test_a_failed_unrecorded_turns_page_shows_its_fault_path_and_step_changes(
    page: httpx.Client, failed: FailedTurns
) -> None:
    session = page.get("/session", params={**WHO, "id": failed.session_id})
    failed_link = _trace_links(session.text)[0]

    answer = page.get(failed_link)

    assert answer.status_code == 200
    text = unescape(answer.text)
    assert 'data-fault-step="llm_client"' in text
    assert "the model is gone" in text
    assert "<h2>Path</h2>" in text
    assert 'id="timeline"' in text
    assert "kind-fault" in text
    assert "data-diff='prompt_content_provider_initializer'" in text
    assert "+ user message" in text


@pytest.mark.decision("D660")
def test_the_owners_traces_list_a_failed_first_turn_without_a_session(
    page: httpx.Client,
) -> None:
    listed = page.get("/traces", params=WHO)
    first = page.get(_trace_links(listed.text)[0])

    assert listed.status_code == 200
    assert len(_trace_links(listed.text)) == 3
    assert "(none)" in listed.text
    assert "no session (the turn stored nothing)" in first.text
    assert "turn traces" in page.get("/").text


@pytest.mark.decision("D660")
def test_a_turn_without_a_recording_shows_its_kept_trace(
    page: httpx.Client, failed: FailedTurns
) -> None:
    answer = page.get("/turn", params={**WHO, "session": failed.session_id, "id": failed.done_turn})

    assert answer.status_code == 200
    assert "kept-trace" in answer.text
    assert "+ response Final" in unescape(answer.text)


@pytest.mark.decision("D660")
def test_another_callers_trace_and_an_unknown_one_are_not_found(page: httpx.Client) -> None:
    listed = page.get("/traces", params=WHO)
    link = _trace_links(listed.text)[0].replace("org=acme", "org=globex")

    assert page.get(link).status_code == 404
    assert page.get("/trace", params={**WHO, "id": "nope"}).status_code == 404
    assert page.get("/trace", params=WHO).status_code == 404


@pytest.mark.decision("D664")
def test_the_first_page_lists_a_session_whose_last_turn_failed_as_faulted_with_its_error(
    page: httpx.Client, failed: FailedTurns
) -> None:
    import re

    answer = page.get("/")

    row = re.search(rf"<tr data-session='{failed.session_id}'[^>]*>.*?</tr>", answer.text, re.S)
    assert row is not None
    assert "data-status='faulted'" in row.group(0)
    assert "port_failed: the LLM failed" in unescape(row.group(0))
