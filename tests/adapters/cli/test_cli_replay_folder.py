"""``aptix replay DIR``: a folder of recordings replayed in one event loop (D475)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from engine_kit import CALLER
from replay_kit import recording_pipeline

from aptix_pipeline import LivePorts, RecordingOptions
from aptix_pipeline.adapters.cli import replay as cli_replay
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.contracts import LLMReply, LLMRequest


class LoopBoundModel:
    """A host's model holding what an HTTP client's connection pool holds: state bound to
    the event loop it was first used on. Asked from another loop, it fails, as such a
    client does."""

    provider_name = "host"

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.asked = 0

    async def complete(self, request: LLMRequest) -> LLMReply:
        """The same answer each time, from the loop of the first call only."""
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
        if loop is not self.loop:
            raise RuntimeError("the connection pool is bound to a different event loop")
        self.asked += 1
        return LLMReply(text="Hello.")


async def _record(folder: Path, turns: int) -> None:
    pipeline = recording_pipeline(
        MemoryStore(), LoopBoundModel(), recording=RecordingOptions(directory=folder, timer=None)
    )
    for _ in range(turns):
        report = await pipeline.run({"Instruction": "hi"}, CALLER)
        assert report.successful, report.result.errors


@pytest.mark.decision("D475")
def test_a_folder_replays_live_on_one_loop_so_a_loop_bound_model_serves_every_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_record(tmp_path, 3))
    paths, recordings, _ = cli_replay._recordings([tmp_path], None)
    model = LoopBoundModel()

    diverged = cli_replay._replay_all(
        paths, recordings, spans=False, quiet=True, live=LivePorts(llm=model)
    )

    assert diverged == 0, capsys.readouterr().out
    assert model.asked == 3
    verdicts = capsys.readouterr().out.splitlines()[1::2]
    # 17 of the turn, and its model call's clock reading, reservation and settlement (D594)
    assert verdicts == ["ok: the same 20 port calls, state trace and result"] * 3


@pytest.mark.decision("D475")
def test_a_folder_replay_prints_each_recording_in_order_and_counts_divergences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_record(tmp_path, 2))
    paths, recordings, _ = cli_replay._recordings([tmp_path], None)

    diverged = cli_replay._replay_all(paths, recordings, spans=False, quiet=True)

    lines = capsys.readouterr().out.splitlines()
    assert diverged == 0
    assert [line.split(":")[0] for line in lines[0::2]] == [f"replay {path}" for path in paths]
