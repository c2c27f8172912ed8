"""An eval report in four forms: a terminal table, JSON, JUnit XML and one HTML page.

- ``report_table``: a line a case — each candidate's verdict, the first divergence,
  tokens, cost and model time against the recording's — then each failure, and a
  summary line;
- ``report_json``: ``aptix.eval-report/1``, the schema docs/EVALS.md "JSON" lists
  (keys are only added within a version);
- ``report_junit``: a ``testsuite`` with a ``testcase`` a case, the candidate's
  failures (and its divergence) in each ``failure``'s message;
- ``report_html``: a self-contained page (no script, no link out), which the turn
  browser serves from a folder of reports (``aptix ui --evals DIR``, docs/UI.md).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Final
from xml.etree import ElementTree

from aptix_pipeline.engine.replay import Divergence, TurnFacts

from .suite import CaseResult, EvalReport, SideResult, money

__all__ = ["EVAL_REPORT_FORMAT", "report_html", "report_json", "report_junit", "report_table"]

EVAL_REPORT_FORMAT: Final = "aptix.eval-report/1"


def _divergence_short(divergence: Divergence | None) -> str:
    if divergence is None:
        return "none"
    where = f" at {divergence.where}" if divergence.where else ""
    if divergence.call_number is not None:
        return f"#{divergence.call_number} {divergence.port_call} {divergence.kind}{where}"
    return f"{divergence.kind}{where}"


def _verdict(side: SideResult, regressed: bool) -> str:
    if side.passed:
        return "pass"
    return "FAIL (regressed)" if regressed else "FAIL"


def _tokens(facts: TurnFacts | None) -> str:
    if facts is None or facts.tokens is None:
        return "-"
    return str(facts.tokens)


def _cost(facts: TurnFacts | None) -> str:
    if facts is None:
        return "-"
    return money(facts.cost, facts.currency) or "unpriced"


def _ms(facts: TurnFacts | None) -> str:
    if facts is None or facts.latency_ms is None:
        return "-"
    return f"{facts.latency_ms:.1f}"


def _summary(report: EvalReport) -> str:
    results = report.results
    passed = sum(result.candidate.passed for result in results)
    line = (
        f"{len(results)} cases: {passed} pass, {len(results) - passed} fail, "
        f"{len(report.regressions)} regress"
    )
    if report.baseline is not None:
        held = sum(bool(result.baseline and result.baseline.passed) for result in results)
        line += f" ({report.baseline}: {held} pass)"
    return line


def report_table(report: EvalReport) -> str:
    """The report as a table for a terminal, then the summary line."""
    sides = [report.candidate] + ([report.baseline] if report.baseline is not None else [])
    header = ["case", *sides, "divergence", "tokens rec→cand", "cost rec→cand", "model ms rec→cand"]
    rows: list[list[str]] = []
    notes: list[list[str]] = []
    for result in report.results:
        side = result.candidate
        verdicts = [_verdict(side, result.regressed)]
        if result.baseline is not None:
            verdicts.append(_verdict(result.baseline, False))
        rows.append(
            [
                result.case.name,
                *verdicts,
                _divergence_short(side.divergence),
                f"{_tokens(result.recorded)}→{_tokens(side.facts)}",
                f"{_cost(result.recorded)}→{_cost(side.facts)}",
                f"{_ms(result.recorded)}→{_ms(side.facts)}",
            ]
        )
        lines = [f"  {report.candidate}: {failure}" for failure in side.failures]
        if result.baseline is not None:
            lines += [f"  {report.baseline}: {failure}" for failure in result.baseline.failures]
        notes.append(lines)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True))]
    for row, lines in zip(rows, notes, strict=True):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        out.extend(lines)
    out.append(_summary(report))
    return "\n".join(out)


def _facts_json(facts: TurnFacts | None) -> dict[str, Any] | None:
    if facts is None:
        return None
    return {
        "kind": facts.kind,
        "text": facts.text,
        "tool_calls": [call.name for call in facts.tool_calls],
        "model_calls": facts.model_calls,
        "tokens": facts.tokens,
        "cost": None if facts.cost is None else format(facts.cost, "f"),
        "currency": facts.currency,
        "latency_ms": None if facts.latency_ms is None else round(facts.latency_ms, 3),
    }


def _side_json(side: SideResult | None) -> dict[str, Any] | None:
    if side is None:
        return None
    return {
        "passed": side.passed,
        "failures": list(side.failures),
        "divergence": None if side.divergence is None else side.divergence.to_dict(),
        "turn": _facts_json(side.facts),
    }


def report_json(report: EvalReport) -> dict[str, Any]:
    """The report as JSON data (``aptix.eval-report/1``)."""
    results = report.results
    passed = sum(result.candidate.passed for result in results)
    return {
        "format": EVAL_REPORT_FORMAT,
        "candidate": report.candidate,
        "baseline": report.baseline,
        "summary": {
            "cases": len(results),
            "passed": passed,
            "failed": len(results) - passed,
            "regressed": len(report.regressions),
        },
        "cases": [
            {
                "name": result.case.name,
                "recording": str(result.case.path),
                "regressed": result.regressed,
                "recorded": _facts_json(result.recorded),
                "candidate": _side_json(result.candidate),
                "baseline": _side_json(result.baseline),
            }
            for result in results
        ],
    }


def _failure_text(result: CaseResult) -> str:
    side = result.candidate
    lines = list(side.failures)
    if side.divergence is not None:
        lines.append(side.divergence.describe())
    if result.baseline is not None:
        lines.append(f"baseline: {'pass' if result.baseline.passed else 'fail'}")
    return "\n".join(lines)


def report_junit(report: EvalReport) -> str:
    """The report as JUnit XML: a ``testcase`` a case, a ``failure`` for each the candidate
    fails (its message: the failed expectations, and ``regressed`` when it regresses)."""
    results = report.results
    failed = [result for result in results if not result.candidate.passed]
    suite = ElementTree.Element(
        "testsuite",
        name=f"aptix eval {report.candidate}",
        tests=str(len(results)),
        failures=str(len(failed)),
        errors="0",
        skipped="0",
    )
    for result in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname="aptix.eval",
            name=result.case.name,
            file=str(result.case.path),
        )
        side = result.candidate
        if not side.passed:
            prefix = "regressed: " if result.regressed else ""
            failure = ElementTree.SubElement(
                case,
                "failure",
                message=prefix + "; ".join(side.failures),
                type="regression" if result.regressed else "failure",
            )
            failure.text = _failure_text(result)
    ElementTree.indent(suite)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        + ElementTree.tostring(suite, encoding="unicode")
        + "\n"
    )


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1d2330}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #d5d9e2;padding:.3em .6em;
text-align:left;vertical-align:top}th{background:#f1f3f8}.pass{color:#176b2c}
.fail{color:#b3261e;font-weight:600}pre{background:#f6f7fa;padding:.6em;white-space:pre-wrap}
section{border-top:1px solid #d5d9e2;margin-top:1.5em}
"""


def _cell(text: str, css: str = "") -> str:
    attribute = f' class="{css}"' if css else ""
    return f"<td{attribute}>{html.escape(text)}</td>"


def _side_section(name: str, side: SideResult) -> str:
    parts = [f"<h4>{html.escape(name)}: {'pass' if side.passed else 'fail'}</h4>"]
    if side.failures:
        items = "".join(f"<li>{html.escape(failure)}</li>" for failure in side.failures)
        parts.append(f"<ul>{items}</ul>")
    if side.divergence is not None:
        parts.append(f'<pre class="divergence">{html.escape(side.divergence.describe())}</pre>')
    if side.facts is not None:
        parts.append(_facts_html(side.facts))
    return "".join(parts)


def _facts_html(facts: TurnFacts) -> str:
    tools = ", ".join(call.name for call in facts.tool_calls) or "none"
    return (
        f"<p>kind <b>{html.escape(facts.kind)}</b>; tool calls: {html.escape(tools)}</p>"
        f"<pre>{html.escape(facts.text)}</pre>"
    )


def report_html(report: EvalReport, *, title: str | None = None) -> str:
    """The report as one self-contained HTML page."""
    heading = title or f"aptix eval: {report.candidate}"
    sides: Sequence[str] = [report.candidate] + (
        [report.baseline] if report.baseline is not None else []
    )
    head = "".join(
        f"<th>{html.escape(h)}</th>"
        for h in ["case", *sides, "divergence", "tokens", "cost", "model ms"]
    )
    rows, sections = [], []
    for result in report.results:
        side = result.candidate
        verdict = _verdict(side, result.regressed)
        cells = [_cell(result.case.name), _cell(verdict, "pass" if side.passed else "fail")]
        if result.baseline is not None:
            base = result.baseline
            cells.append(_cell(_verdict(base, False), "pass" if base.passed else "fail"))
        cells += [
            _cell(_divergence_short(side.divergence)),
            _cell(f"{_tokens(result.recorded)} → {_tokens(side.facts)}"),
            _cell(f"{_cost(result.recorded)} → {_cost(side.facts)}"),
            _cell(f"{_ms(result.recorded)} → {_ms(side.facts)}"),
        ]
        anchor = html.escape(result.case.name, quote=True)
        rows.append(f'<tr id="row-{anchor}">{"".join(cells)}</tr>')
        body = [
            f'<section id="case-{anchor}"><h3>{html.escape(result.case.name)}</h3>',
            f"<p>recording <code>{html.escape(str(result.case.path))}</code></p>",
            "<h4>recorded</h4>",
            _facts_html(result.recorded),
            _side_section(report.candidate, side),
        ]
        if result.baseline is not None and report.baseline is not None:
            body.append(_side_section(report.baseline, result.baseline))
        sections.append("".join(body) + "</section>")
    summary = html.escape(_summary(report))
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(heading)}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f'<h1>{html.escape(heading)}</h1><p id="summary">{summary}</p>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"{''.join(sections)}"
        "</body></html>\n"
    )
