"""Evals from recordings: case folders, candidates from configuration, runs and reports.

``aptix eval`` (``cli/replay.py``) runs a folder of recorded turns on a candidate
configuration's live model, prompts and tools and reports each case (docs/EVALS.md).
May import config and the port rooms; never http, ui or cli.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .candidate import Candidate
    from .capture import CaptureError, capture_cases
    from .cases import EXPECTATIONS_FILE, EvalCase, load_cases
    from .outputs import EVAL_REPORT_FORMAT, report_html, report_json, report_junit, report_table
    from .scratch import RecordedStore
    from .suite import CaseResult, EvalReport, SideResult, run_evals

_EXPORTS: dict[str, str] = {
    "Candidate": "candidate",
    "CaptureError": "capture",
    "capture_cases": "capture",
    "EXPECTATIONS_FILE": "cases",
    "EvalCase": "cases",
    "load_cases": "cases",
    "EVAL_REPORT_FORMAT": "outputs",
    "report_html": "outputs",
    "report_json": "outputs",
    "report_junit": "outputs",
    "report_table": "outputs",
    "RecordedStore": "scratch",
    "CaseResult": "suite",
    "EvalReport": "suite",
    "SideResult": "suite",
    "run_evals": "suite",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "EVAL_REPORT_FORMAT",
    "EXPECTATIONS_FILE",
    "Candidate",
    "CaptureError",
    "CaseResult",
    "EvalCase",
    "EvalReport",
    "RecordedStore",
    "SideResult",
    "capture_cases",
    "load_cases",
    "report_html",
    "report_json",
    "report_junit",
    "report_table",
    "run_evals",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
