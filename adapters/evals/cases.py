"""A case folder: recordings, and the expectations beside them.

A case is one recording (``*.json``, ``aptix.turn-recording``) under the folder,
named by its path in the folder without ``.json`` (``01-initial``,
``nightly/turn-7``). Beside them, ``expectations.toml`` may hold one table per
case, under its name (docs/EVALS.md "Expectations"); a case without a table
expects what its recording did. A table naming no case, an unknown key, a value
of the wrong kind: a ``ValueError`` naming the file, the case and the key
(docs/CONFORMANCE.md D622).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from aptix_pipeline.engine.replay import Expectations, TurnRecording, recordings_in

__all__ = ["EXPECTATIONS_FILE", "EvalCase", "case_name", "load_cases"]

EXPECTATIONS_FILE = "expectations.toml"


@dataclass(frozen=True, slots=True)
class EvalCase:
    """One recording of a case folder, and what is expected of a candidate's turn."""

    name: str
    path: Path
    recording: TurnRecording
    expectations: Expectations = field(default_factory=Expectations)


def case_name(folder: Path, path: Path) -> str:
    """A recording's case name: its path in ``folder``, without ``.json``."""
    return path.relative_to(folder).with_suffix("").as_posix()


def load_cases(folder: str | Path) -> list[EvalCase]:
    """The cases of a folder, sorted by name; ``ValueError`` for a recording that does
    not load, an expectations file that does not read, or an empty folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder of recordings")
    paths = recordings_in(folder)
    if not paths:
        raise ValueError(f"{folder}: no recordings (*.json)")
    names = {case_name(folder, path): path for path in paths}
    tables = _expectations(folder / EXPECTATIONS_FILE, set(names))
    return [
        EvalCase(name, path, TurnRecording.load(path), tables.get(name, Expectations()))
        for name, path in sorted(names.items())
    ]


def _expectations(file: Path, names: set[str]) -> dict[str, Expectations]:
    if not file.exists():
        return {}
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"), parse_float=Decimal)
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{file}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{file}: not valid TOML: {error}") from None
    parsed: dict[str, Expectations] = {}
    for name, table in data.items():
        where = f"{file} [{name}]"
        if name not in names:
            raise ValueError(f"{where}: no recording {name}.json in {file.parent}")
        parsed[name] = Expectations.parse(table, where)
    return parsed
