"""``aptix eval capture``: recordings of a session or a time window made into a case folder.

``capture_cases(source, out, session=..., since=..., until=...)`` copies the
recordings under ``source`` whose turn belongs to the session (its response's
``SessionId``, else the session its store calls name), or began in the window (its
first clock reading: ``since`` inclusive, ``until`` exclusive), into the new folder
``out``, and writes ``expectations.toml`` beside them with what the recorded turn
did: its final kind and the tools its model called. They are a start, for the user
to edit (docs/EVALS.md "Capture a case folder"); a case whose table is removed
expects what its recording did (docs/CONFORMANCE.md D624).
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

from aptix_pipeline.contracts import AptixPipelineError
from aptix_pipeline.engine.replay import TurnFacts, TurnRecording, recordings_in

from .cases import EXPECTATIONS_FILE, case_name

__all__ = ["CaptureError", "capture_cases"]


class CaptureError(AptixPipelineError, ValueError):
    """A capture that cannot be made: the message names the folder, file or option."""


def _session_of(recording: TurnRecording) -> str | None:
    response = recording.result.get("Result")
    if isinstance(response, dict) and isinstance(response.get("SessionId"), str):
        return str(response["SessionId"])
    for call in recording.calls:
        if call.port != "SessionTransaction":
            continue
        if "session_id" in call.args:
            return str(call.args["session_id"])
        session = call.args.get("session")
        if isinstance(session, dict) and isinstance(session.get("Id"), str):
            return str(session["Id"])
    return None


def _began(recording: TurnRecording) -> datetime | None:
    readings = recording.clock_readings
    if not readings:
        return None
    try:
        return datetime.fromisoformat(readings[0].replace("Z", "+00:00"))
    except ValueError:
        return None


def _aware(moment: datetime | None, name: str) -> datetime | None:
    if moment is not None and moment.tzinfo is None:
        raise CaptureError(f"{name}: give a time zone (2026-11-28T09:00:00Z)")
    return moment


def _table(name: str, recording: TurnRecording) -> list[str]:
    answers = [c.answer for c in recording.calls if c.port == "LLM" and c.answer is not None]
    facts = TurnFacts.of(recording.result, answers)
    tools = list(dict.fromkeys(call.name for call in facts.tool_calls))
    key = name if name.replace("-", "").replace("_", "").isalnum() else json.dumps(name)
    lines = [f"[{key}]", f"kind = {json.dumps(facts.kind)}"]
    if tools:
        lines.append(f"calls = {json.dumps(tools)}")
    lines += [
        "# no_calls = []            # tools it must not call",
        "# text_contains = []       # text_not_contains, text_matches",
        "# max_tokens, max_cost, max_latency_ms; allow_divergence = false",
        "",
    ]
    return lines


def capture_cases(
    source: str | Path,
    out: str | Path,
    *,
    session: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[Path]:
    """Make the case folder ``out``; the recordings copied into it, in order.

    Raises ``CaptureError`` when neither a session nor a window is given, when ``out``
    holds recordings or expectations already, when a recording does not load, or when
    no recording matches.
    """
    if session is None and since is None and until is None:
        raise CaptureError("give --session ID, or a window: --since and/or --until")
    since, until = _aware(since, "--since"), _aware(until, "--until")
    source, out = Path(source), Path(out)
    if not source.exists():
        raise CaptureError(f"{source}: no such file or folder")
    if out.exists() and (recordings_in(out) or (out / EXPECTATIONS_FILE).exists()):
        raise CaptureError(f"{out}: holds cases already; capture into a new folder")
    chosen: list[tuple[Path, TurnRecording]] = []
    for path in recordings_in(source):
        try:
            recording = TurnRecording.load(path)
        except ValueError as error:
            raise CaptureError(str(error)) from None
        if session is not None and _session_of(recording) != session:
            continue
        began = _began(recording)
        if since is not None and (began is None or began < since):
            continue
        if until is not None and (began is None or began >= until):
            continue
        chosen.append((path, recording))
    if not chosen:
        raise CaptureError(f"{source}: no recording of that session or window")
    out.mkdir(parents=True, exist_ok=True)
    base = source if source.is_dir() else source.parent
    copied, lines = (
        [],
        [
            "# Expectations of each case, inferred from its recorded turn (docs/EVALS.md):",
            "# edit them. A case without a table passes when it does what its recording did.",
            "",
        ],
    )
    for path, recording in chosen:
        target = out / path.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(target)
        lines += _table(case_name(out, target), recording)
    (out / EXPECTATIONS_FILE).write_text("\n".join(lines), encoding="utf-8")
    return copied
