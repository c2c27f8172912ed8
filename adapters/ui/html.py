"""HTML for the turn browser page (docs/UI.md): escaped by default, ``Markup`` where built here.

Every value put into a page goes through ``html()``: a ``Markup`` value (HTML this
package built) goes in as it is, anything else — ids, modes, rule ids, message
content, file names, all of which come from requests, stores or recording files —
is escaped with ``html.escape`` (quotes included, so it is safe in attributes
too). ``page()`` wraps a body in the page's layout: its stylesheet, the vendored
htmx (``static/``) and the page's scripts, all from the package's own static
folder; the Content-Security-Policy the app sends (``ui/app.py``) lets no other
script run.
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable
from string import Formatter
from typing import Any

__all__ = ["Markup", "escape", "html", "join", "page", "stylesheet"]


class Markup(str):
    """Text that is HTML already: ``html()`` puts it into a page unescaped."""

    __slots__ = ()


def escape(value: object) -> Markup:
    """``value`` as HTML: a ``Markup`` as it is, anything else as escaped text (``None``: empty)."""
    if isinstance(value, Markup):
        return value
    return Markup(_html.escape("" if value is None else str(value), quote=True))


class _Escaping(Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        return escape(value if isinstance(value, Markup) else format(value, format_spec))


_FORMATTER = _Escaping()


def html(template: str, /, **values: object) -> Markup:
    """``template`` (``str.format`` fields) with every value escaped unless ``Markup``."""
    return Markup(_FORMATTER.vformat(template, (), values))


def join(parts: Iterable[object], separator: str = "") -> Markup:
    """The parts, each escaped unless ``Markup``, one after the other."""
    return Markup(separator.join(escape(part) for part in parts))


_STYLE = """
:root { --ink: #24292f; --muted: #57606a; --line: #d0d7de; --blue: #0969da; --red: #cf222e;
  --green: #1a7f37; --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--ink);
  margin: 0; }
header { background: #24292f; color: #fff; padding: 10px 24px; display: flex; gap: 24px;
  align-items: baseline; }
header a { color: #fff; text-decoration: none; font-weight: 600; }
header nav a { font-weight: 400; margin-right: 16px; }
main { padding: 16px 24px 48px; max-width: 1500px; }
h1 { font-size: 20px; margin: 8px 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table { border-collapse: collapse; width: 100%; margin: 4px 0 12px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 12px; }
pre { background: var(--bg); border: 1px solid var(--line); padding: 8px; overflow: auto;
  max-height: 420px; white-space: pre-wrap; word-break: break-word; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 0 6px; border-radius: 10px; font-size: 12px;
  border: 1px solid var(--line); }
.badge.ok, .badge.passed, .badge.done, .badge.completed { color: var(--green);
  border-color: var(--green); }
.badge.failed, .badge.faulted, .error, li.failed { color: var(--red); border-color: var(--red); }
.badge.deferred, .badge.awaiting_client_tools, .badge.open, .badge.running { color: #9a6700;
  border-color: #9a6700; }
li.failed code { color: var(--red); }
.turn-grid { display: grid; grid-template-columns: minmax(480px, 3fr) minmax(420px, 2fr);
  gap: 20px; align-items: start; }
.picture { border: 1px solid var(--line); padding: 8px; overflow: auto; background: #fff;
  max-height: 78vh; cursor: grab; }
.picture.panning { cursor: grabbing; user-select: none; }
.picture svg { display: block; }
.picture a.path-state { cursor: pointer; }
.picture a.path-state:hover polygon, .picture a.path-state:hover ellipse,
.picture a.path-state:hover rect { stroke-width: 4; }
.picture-tools { display: flex; gap: 4px; align-items: center; margin: 4px 0; }
.picture-tools button { padding: 0 10px; }
ol.timeline li:has(:target) { background: #fff8c5; }
.bar-track { display: block; height: 6px; background: var(--bg); margin: 2px 0; }
.bar { display: block; height: 6px; }
.bar.model { background: #8250df; } .bar.tool { background: #bf8700; }
.fault-banner { border: 1px solid var(--red); background: #ffebe9; color: #82071e;
  padding: 6px 10px; margin: 8px 0; }
ol.timeline { list-style: none; padding: 0; margin: 0; }
ol.timeline li { border-left: 3px solid var(--line); padding: 3px 10px; margin: 0; }
ol.timeline li.kind-transition { border-color: var(--blue); font-weight: 600; }
ol.timeline li.kind-fault, ol.timeline li.failed { border-color: var(--red); }
ol.timeline li.kind-llm_call { border-color: #8250df; }
ol.timeline li.kind-tool_call { border-color: #bf8700; }
ol.timeline li.kind-mode_change { border-color: #1b7c83; }
.kind { display: inline-block; min-width: 88px; color: var(--muted); font-size: 12px; }
details summary { cursor: pointer; color: var(--muted); }
button, input[type=submit] { font: inherit; padding: 4px 12px; border-radius: 6px;
  border: 1px solid var(--line); background: var(--bg); cursor: pointer; }
textarea { width: 100%; font-family: ui-monospace, monospace; font-size: 12px; }
#replay-outcome { margin-top: 8px; }
.live-head .badge { margin: 0 8px; }
#live-runs > li { margin-bottom: 12px; }
.live-steps > li[data-kind=text] { list-style: none; margin: 4px 0; }
"""


def page(
    title: str, body: Markup, *, base: str, scripts: Iterable[str] = (), watch: bool = False
) -> Markup:
    """A whole page: the layout around ``body``; ``base`` is the UI's path prefix, ``watch``
    whether the UI can start turns (mounted in ``aptix serve``) and links its watch view."""
    tags = join(
        html('<script src="{src}" defer></script>', src=f"{base}/static/{name}")
        for name in ("htmx.min.js", "ui_picture.js", *scripts)
    )
    return html(
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>{title} · aptix</title><link rel='stylesheet' href='{base}/static/ui.css'>"
        "{tags}</head><body><header><a href='{base}/'>aptix turns</a>"
        "<nav><a href='{base}/'>sessions &amp; recordings</a><a href='{base}/live'>live</a>"
        "{watch}</nav></header>"
        "<main>{body}</main></body></html>\n",
        title=title,
        base=base,
        tags=tags,
        watch=html("<a href='{base}/watch'>watch a turn</a>", base=base) if watch else Markup(""),
        body=body,
    )


def stylesheet() -> str:
    """The page's stylesheet (served as ``static/ui.css``)."""
    return _STYLE
