"""What the turn browser's tests browse: a real SQLite store and a folder of recordings.

``browsed_store`` runs the demo session (examples/session/) on a SQLite file with
every turn recorded into a folder: turn 1 asks for ``read_file``, a continuation
naming a tool call the turn never made faults (AGN-036 §5, ``AGN-036/5/id-match``),
the right continuation completes turn 1, and a follow-on is turn 2 in review mode.
A second caller (globex/zoe) holds a session of its own, so scoping shows. Clock
and ids are the stepping and sequential ones, so each run stores the same thing.
``write_ui_config`` writes the config of ``aptix serve`` with the page mounted on it.

The standalone page answers only a browser holding the token of its start
(``ui/guard.py``): ``aptix_ui`` runs ``aptix ui`` as a process of its own and reads
the URL with the token from the line it prints; ``standalone_app`` builds the page
in process with a guard, and ``with_token`` gives an httpx client the page's cookie
by visiting it once with the token, as a browser does.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from cli_kit import APTIX
from http_kit import KEYS
from repo import ROOT
from serve_process import WAIT, Served, free_port, serving
from server_thread import server_thread
from starlette.applications import Starlette

from aptix_pipeline import RecordingOptions
from aptix_pipeline.adapters.embedded import embedded_pipeline
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.stores.browse import close_browse_store, open_browse_store
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.adapters.system.ids import SequentialIds
from aptix_pipeline.adapters.ui.app import create_ui_app
from aptix_pipeline.adapters.ui.guard import UIGuard
from aptix_pipeline.contracts import Caller
from aptix_pipeline.engine import Telemetry

__all__ = [
    "ANA",
    "EXAMPLES",
    "ZOE",
    "Browsed",
    "RunningUI",
    "aptix_ui",
    "browsed_store",
    "signed_in_client",
    "standalone_app",
    "token_of",
    "with_token",
    "write_ui_config",
]

EXAMPLES = ROOT / "examples"
ANA = Caller(org="acme", user="ana")
ZOE = Caller(org="globex", user="zoe")
FAULT_RULE = "AGN-036/5/id-match"


@dataclass(frozen=True)
class Browsed:
    """The store file, the recordings folder, and the ids the session got."""

    db: Path
    recordings: Path
    session_id: str
    first_turn: str
    second_turn: str
    other_session: str

    @property
    def store_url(self) -> str:
        return f"sqlite:{self.db}"


async def _session(db: Path, recordings: Path) -> Browsed:
    with SQLiteStore(db) as store:
        pipeline = embedded_pipeline(
            llm=ScriptedLLM.from_file(EXAMPLES / "session" / "script.json"),
            store=store,
            clock=SteppingClock(),
            ids=SequentialIds(),
            telemetry=Telemetry.off(),
            recording=RecordingOptions(directory=recordings),
        )
        first = await pipeline.execute(
            json.loads((EXAMPLES / "session" / "01-initial.json").read_text()), ANA
        )
        response = first.result
        assert response is not None
        assert response.tool_calls

        def continuation(tool_call_id: str) -> dict[str, Any]:
            assert response is not None
            contents = json.dumps({"path": "src/app.py", "contents": "print('hi')\n"})
            result = {"ToolCallId": tool_call_id, "ExecutionMs": 4, "ResultJson": contents}
            return {
                "SessionId": response.session_id,
                "TurnId": response.turn_id,
                "ToolResults": [result],
            }

        faulted = await pipeline.execute(continuation("call_unknown"), ANA)
        assert not faulted.successful
        second = await pipeline.execute(continuation(response.tool_calls[0].tool_call_id), ANA)
        assert second.result is not None, second.rule_ids
        follow_on = {
            "SessionId": response.session_id,
            "TurnId": second.result.turn_id,
            "Instruction": "Check it against the team's review checklist.",
        }
        third = await pipeline.execute(follow_on, ANA)
        assert third.result is not None, third.rule_ids
        other = embedded_pipeline(
            llm=ScriptedLLM([{"text": "<b>zoe's</b> answer"}]),
            store=store,
            clock=SteppingClock(),
            ids=SequentialIds(prefix="zoe-"),
            telemetry=Telemetry.off(),
        )
        theirs = await other.execute({"Instruction": "<script>alert(1)</script>"}, ZOE)
        assert theirs.result is not None
        return Browsed(
            db=db,
            recordings=recordings,
            session_id=response.session_id,
            first_turn=response.turn_id,
            second_turn=third.result.turn_id,
            other_session=theirs.result.session_id,
        )


def browsed_store(folder: Path) -> Browsed:
    """The demo session and globex/zoe's session in ``folder/aptix.db``, recorded in
    ``folder/recordings`` (module docstring)."""
    recordings = folder / "recordings"
    recordings.mkdir(parents=True, exist_ok=True)
    return asyncio.run(_session(folder / "aptix.db", recordings))


def write_ui_config(folder: Path, browsed: Browsed, ui: str = "[ui]\nenabled = true\n") -> Path:
    """An ``aptix.toml`` in ``folder`` for ``aptix serve`` with the page mounted: the
    browsed store and its recordings, a one-reply scripted model, the API keys ``KEYS``,
    and the ``[ui]`` table ``ui`` (enabled by default); its path."""
    (folder / "script.json").write_text('[{"text": "2 + 3 = 5"}]', encoding="utf-8")
    path = folder / "aptix.toml"
    path.write_text(
        f'[store]\nurl = "sqlite:{browsed.db}"\n[model]\nkind = "scripted"\n'
        f'script = "script.json"\n{KEYS}\n{ui}recordings = "{browsed.recordings}"\n',
        encoding="utf-8",
    )
    return path


# --- the standalone page and its token ---------------------------------------------------------


def token_of(url: str) -> str:
    """The ``token`` query parameter of ``url`` (the URL ``aptix ui`` prints)."""
    [token] = parse_qs(urlsplit(url).query)["token"]
    return token


def with_token(client: httpx.Client, token: str) -> httpx.Response:
    """Visit the standalone page's first page once with ``token``, as the printed URL
    does, so that ``client`` keeps the cookie it sets; the answer."""
    answer = client.get("/", params={"token": token})
    assert answer.status_code == 200, answer.text
    return answer


@contextmanager
def signed_in_client(app: Starlette, guard: UIGuard) -> Iterator[httpx.Client]:
    """``app`` (a standalone page behind ``guard``) served on loopback in a thread, and a
    client that has visited it with the guard's token, so it holds the page's cookie."""
    with (
        server_thread(app) as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client,
    ):
        with_token(client, guard.token)
        yield client


def standalone_app(
    browsed: Browsed | None, guard: UIGuard, recordings: Path | None = None
) -> Starlette:
    """The standalone page in process, behind ``guard``: on ``browsed``'s store (closed
    when the app stops) and recordings, or only on ``recordings`` when ``browsed`` is
    ``None``."""
    if browsed is None:
        return create_ui_app(None, recordings, guard=guard)
    store = open_browse_store(browsed.store_url)

    async def close() -> None:
        await close_browse_store(store)

    return create_ui_app(
        store, browsed.recordings, store_name="test store", guard=guard, close_store=close
    )


@dataclass(frozen=True)
class RunningUI:
    """An ``aptix ui`` process: where it listens, the URL it printed (with the token)."""

    served: Served
    url: str

    @property
    def base(self) -> str:
        return self.served.base

    @property
    def token(self) -> str:
        return token_of(self.url)


@contextmanager
def aptix_ui(*args: str, cwd: Path, host: str = "127.0.0.1") -> Iterator[RunningUI]:
    """``aptix ui ARGS --host HOST`` on a free port, a process of its own
    (``serve_process.serving``; its log in ``cwd``), once it has printed the URL it
    serves on; stopped when the block ends. Its ``base`` is on 127.0.0.1."""
    port = free_port()
    argv = [APTIX, "ui", *args, "--host", host, "--port", str(port)]
    log = cwd / f"ui-{port}.log"
    with serving(argv, dict(os.environ), port=port, cwd=cwd, log=log, wait=False) as served:
        deadline = time.monotonic() + WAIT
        while "\n" not in served.output():  # its first line: where it serves, or why not
            assert time.monotonic() < deadline, "aptix ui said nothing: " + served.output()
            time.sleep(0.05)
        line = served.output().splitlines()[0]
        assert line.startswith("aptix ui: the turn browser on "), served.output()
        yield RunningUI(served, line.split(" on ", 1)[1].split()[0])
