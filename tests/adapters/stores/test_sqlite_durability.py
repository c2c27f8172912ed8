"""The SQLite store's durability setting (docs/STORES.md).

WAL with ``synchronous=NORMAL`` by default, ``FULL`` as an option in the store URL
(``sqlite:PATH?synchronous=full``) or ``[store].synchronous``; a bad value is
refused naming the option; a turn acknowledged before the process is killed
(``kill -9``) is there when the file is reopened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from store_kit import sqlite_pragma

from aptix_pipeline.adapters.config.service import ConfigError, load_service_config
from aptix_pipeline.adapters.embedded import open_store
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore, synchronous_mode

SCRIPTED = '[model]\nkind = "scripted"\nscript = "replies.json"\n'


def _config(folder: Path, store: str) -> Path:
    (folder / "replies.json").write_text('[{"text": "ok"}]', encoding="utf-8")
    path = folder / "aptix.toml"
    path.write_text(f"[store]\n{store}\n{SCRIPTED}", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("spec", "synchronous", "level"),
    [
        ("sqlite:{path}", "normal", 1),
        ("sqlite:{path}?synchronous=normal", "normal", 1),
        ("sqlite:{path}?synchronous=full", "full", 2),
        ("sqlite:{path}?synchronous=FULL", "full", 2),
    ],
)
def test_the_store_url_sets_synchronous_on_the_connection_in_wal_mode(
    tmp_path: Path, spec: str, synchronous: str, level: int
) -> None:
    store = open_store(spec.format(path=tmp_path / "aptix.db"))
    assert isinstance(store, SQLiteStore)
    try:
        assert store.synchronous == synchronous
        assert sqlite_pragma(store, "synchronous") == level
        assert sqlite_pragma(store, "journal_mode") == "wal"
    finally:
        store.close()
    assert store.path == tmp_path / "aptix.db"


def test_the_constructor_takes_the_setting_and_refuses_others(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db", synchronous="full") as store:
        assert sqlite_pragma(store, "synchronous") == 2
    with pytest.raises(ValueError, match=r"synchronous must be one of normal, full, not 'off'"):
        SQLiteStore(tmp_path / "b.db", synchronous="off")
    assert not (tmp_path / "b.db").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sqlite:{path}?synchronous=off", "sqlite: option synchronous must be one of normal, full"),
        ("sqlite:{path}?synchronous=", "sqlite: option synchronous must be one of normal, full"),
        ("sqlite:{path}?sync=full", "unknown sqlite: option 'sync'; known: synchronous"),
        ("sqlite:?synchronous=full", "sqlite: needs a file path"),
    ],
)
def test_a_bad_store_url_option_is_refused_naming_it(
    tmp_path: Path, spec: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(spec.format(path=tmp_path / "aptix.db"))
    assert not (tmp_path / "aptix.db").exists()


@pytest.mark.parametrize(
    ("store", "url"),
    [
        ('url = "sqlite:a.db"', "sqlite:{folder}/a.db"),
        ('url = "sqlite:a.db"\nsynchronous = "normal"', "sqlite:{folder}/a.db"),
        ('url = "sqlite:a.db"\nsynchronous = "full"', "sqlite:{folder}/a.db?synchronous=full"),
        ('url = "sqlite:a.db?synchronous=full"', "sqlite:{folder}/a.db?synchronous=full"),
    ],
)
def test_the_configuration_sets_synchronous_in_the_url_or_the_store_table(
    tmp_path: Path, store: str, url: str
) -> None:
    config = load_service_config(_config(tmp_path, store))

    assert config.store_url == url.format(folder=tmp_path)


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ('url = "sqlite:a.db"\nsynchronous = "off"', r"\[store\]\.synchronous: Input should be"),
        ('url = "sqlite:a.db"\nsynchronous = 2', r"\[store\]\.synchronous: Input should be"),
        ('url = "memory"\nsynchronous = "full"', r"\[store\]\.synchronous applies to sqlite:"),
        (
            'url = "postgresql://aptix@db/aptix"\nsynchronous = "full"',
            r"\[store\]\.synchronous applies to sqlite:",
        ),
        (
            'url = "sqlite:a.db?synchronous=off"',
            r"\[store\]\.url: sqlite: option synchronous must be one of normal, full",
        ),
        ('url = "sqlite:a.db?mode=ro"', r"\[store\]\.url: unknown sqlite: option 'mode'"),
        (
            'url = "sqlite:a.db?synchronous=full"\nsynchronous = "full"',
            r"\[store\]: synchronous is given both in url and as \[store\]\.synchronous",
        ),
    ],
)
def test_a_bad_synchronous_in_the_configuration_names_the_key(
    tmp_path: Path, store: str, message: str
) -> None:
    path = _config(tmp_path, store)

    with pytest.raises(ConfigError, match=message) as refused:
        load_service_config(path)
    assert str(path) in str(refused.value)


def test_synchronous_mode_reads_any_case_and_names_the_option() -> None:
    assert synchronous_mode(" Full ") == "full"
    with pytest.raises(ValueError, match=r"^\[store\]\.x must be one of normal, full, not 'x'$"):
        synchronous_mode("x", option="[store].x")


# --- a crash after the acknowledgement -----------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from aptix_pipeline.adapters.embedded import embedded_pipeline, open_store
    from aptix_pipeline.adapters.models.scripted import ScriptedLLM

    async def main() -> None:
        store = open_store(sys.argv[1])
        pipeline = embedded_pipeline(llm=ScriptedLLM([{"text": "kept"}]), store=store)
        result = await pipeline.execute(
            '{"Instruction": "remember me"}', {"org": "acme", "user": "ana"})
        assert result.successful, result.to_json()
        # The acknowledgement: the turn is committed. The store is never closed.
        print(json.dumps({"session": result.result.session_id,
                          "turn": result.result.turn_id}), flush=True)
        time.sleep(600)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("options", ["", "?synchronous=full"])
async def test_a_turn_acknowledged_before_a_kill_9_is_there_after_reopening(
    tmp_path: Path, options: str
) -> None:
    path = tmp_path / "aptix.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"sqlite:{path}{options}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the turn is acknowledged
        assert line, child.stderr.read() if child.stderr else "no acknowledgement"
        acknowledged = json.loads(line)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    # Killed with the turn in the WAL only: reopening recovers it from there.
    assert (tmp_path / "aptix.db-wal").stat().st_size > 0

    with SQLiteStore(path) as reopened:
        tx = reopened.begin("acme", "ana")
        session_id, turn_id = acknowledged["session"], acknowledged["turn"]
        assert await tx.load_session(session_id) is not None
        assert await tx.load_turn(session_id, turn_id) is not None
        transcript = await tx.load_transcript(session_id)

    assert [message.content for message in transcript] == ["remember me", "kept"]
