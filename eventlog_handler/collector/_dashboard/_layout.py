"""The dashboard's page frame and the helpers every page uses.

Plain server-rendered pages with no external assets. Every piece of event content goes through
:func:`e` (``html.escape`` with quotes) and is clipped, and rows are bounded, so a hostile or
huge event cannot break a page. Pages send a ``Content-Security-Policy`` that only lets run the
one inline script carrying the page's nonce (the auto-refresh); forms post back to the collector
only and carry a form token.
"""

from __future__ import annotations

import html
import secrets
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from eventlog_handler.collector._messages import Response, html_response

__all__ = [
    "Page",
    "clip",
    "e",
    "first",
    "format_count",
    "int_param",
    "not_found",
    "options",
    "page",
    "redirect",
    "relative_time",
    "url",
]

NAV = (
    ("/", "Stacks"),
    ("/events", "Events"),
    ("/sessions", "Sessions"),
    ("/settings", "Settings"),
    ("/about", "About"),
)

STYLE = """
:root { --fg: #1d2430; --muted: #5d6878; --line: #dde2e8; --bg: #f6f7f9; --card: #fff;
        --accent: #2457c5; --bad: #b3261e; --warn: #9a5b00; --good: #1e7b34; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: var(--fg); background: var(--bg); }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
header.top { background: #1f2a3a; color: #fff; display: flex; flex-wrap: wrap;
             align-items: center; gap: .3em 1.2em; padding: .55em 1em; }
header.top .brand { color: #fff; font-weight: 600; }
header.top nav { display: flex; flex-wrap: wrap; gap: .2em .9em; }
header.top nav a { color: #c9d6ea; }
header.top nav a.here { color: #fff; font-weight: 600; }
main { padding: 1em; max-width: 1200px; margin: 0 auto; }
h1 { font-size: 1.35em; margin: .2em 0 .5em; overflow-wrap: anywhere; }
h2 { font-size: 1.1em; margin: 1.4em 0 .5em; }
.muted, small { color: var(--muted); }
form.filters { display: flex; flex-wrap: wrap; gap: .6em .8em; align-items: end;
               margin: 0 0 .8em; }
form.filters label { display: flex; flex-direction: column; font-size: 12px;
                     color: var(--muted); gap: .15em; }
form.filters label.grow { flex: 1 1 16em; }
input, select, button { font: inherit; padding: .3em .45em; border: 1px solid #b9c2cf;
                        border-radius: 4px; background: #fff; max-width: 100%; }
button { cursor: pointer; background: #eef2f8; }
button.primary { background: var(--accent); color: #fff; border-color: var(--accent); }
.tabs { display: flex; flex-wrap: wrap; gap: .3em; margin: .2em 0 .8em; }
.tabs a { padding: .2em .7em; border-radius: 999px; border: 1px solid var(--line);
          background: var(--card); color: var(--fg); }
.tabs a.here { background: var(--fg); color: #fff; border-color: var(--fg); }
table.list { width: 100%; border-collapse: collapse; background: var(--card);
             border: 1px solid var(--line); }
table.list th { text-align: left; font-size: 12px; color: var(--muted); font-weight: 600;
                padding: .45em .6em; border-bottom: 1px solid var(--line); white-space: nowrap; }
table.list td { padding: .5em .6em; border-bottom: 1px solid var(--line); vertical-align: top; }
table.list td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.what { overflow-wrap: anywhere; min-width: 12em; }
td.what .title { font-weight: 600; }
.badge { display: inline-block; font-size: 11px; padding: .05em .5em; border-radius: 999px;
         border: 1px solid var(--line); background: #f1f3f6; color: var(--muted);
         white-space: nowrap; vertical-align: 1px; }
.badge.error, .badge.fatal, .badge.regressed { background: #fde8e6; color: var(--bad);
                                               border-color: #f3c0bb; }
.badge.warn { background: #fff3dc; color: var(--warn); border-color: #f1d6a4; }
.badge.fixed { background: #e3f4e7; color: var(--good); border-color: #b9e0c2; }
.badge.open { background: #e6eefc; color: var(--accent); border-color: #bfd0f3; }
.badge.ignored { background: #eee; color: #666; }
svg.spark { display: block; }
svg.spark rect { fill: #7d9bd8; }
svg.spark rect.zero { fill: #d9dee6; }
.pager { display: flex; flex-wrap: wrap; gap: .5em 1em; align-items: center; margin: .8em 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px;
        padding: .8em 1em; margin: 0 0 1em; overflow-wrap: anywhere; }
.card h2 { margin-top: 0; }
dl.fields { display: grid; grid-template-columns: minmax(7em, max-content) 1fr;
            gap: .25em 1em; margin: 0; }
dl.fields dt { color: var(--muted); }
dl.fields dd { margin: 0; overflow-wrap: anywhere; min-width: 0; }
pre { background: #f3f5f8; border: 1px solid var(--line); border-radius: 4px; padding: .6em;
      overflow-x: auto; white-space: pre-wrap; overflow-wrap: anywhere; margin: .4em 0;
      font-size: 13px; max-width: 100%; }
pre.stack, pre.trace { white-space: pre; overflow-wrap: normal; }
details.frame { border-top: 1px solid var(--line); padding: .2em 0; }
details.frame summary { cursor: pointer; }
details.frame.library summary code { color: var(--muted); }
table.source { border-collapse: collapse; font-size: .9em; margin: .3em 0;
  display: block; max-width: 100%; overflow-x: auto; }
table.source td { padding: 0 .5em; white-space: pre; overflow-wrap: normal; }
table.source td.lineno { color: var(--muted); text-align: right; width: 4em; }
table.source tr.here { background: rgba(220, 60, 60, .15); font-weight: bold; }
h2.group { margin: 1em 0 .3em; font-size: 1.1em; }
nav.kinds { margin: .4em 0; }
nav.kinds a.here { font-weight: bold; text-decoration: none; }
small.culprit { font-family: monospace; }
table.kv { border-collapse: collapse; width: 100%; table-layout: fixed; }
table.kv th, table.kv td { text-align: left; padding: .25em .5em; border-top: 1px solid var(--line);
                           vertical-align: top; overflow-wrap: anywhere; }
table.kv th { width: 32%; color: var(--muted); font-weight: normal; }
.error-block { border-left: 4px solid var(--bad); }
.error-block.inner { border-left-color: #e08a83; }
.chip { display: inline-block; background: #eef2f8; border-radius: 4px; padding: 0 .4em;
        margin: 0 .2em .2em 0; }
.note { background: #fff8e1; border: 1px solid #f0dca0; border-radius: 6px; padding: .6em .9em;
        margin: 0 0 1em; }
.stats { display: grid; grid-template-columns: repeat(auto-fill, minmax(9em, 1fr));
         gap: .6em; margin: 0 0 1em; }
.stats div { background: var(--card); border: 1px solid var(--line); border-radius: 6px;
             padding: .5em .7em; }
.stats b { display: block; font-size: 1.25em; }
.charts { display: flex; flex-wrap: wrap; gap: .8em 2em; }
.charts small { display: block; margin-bottom: .2em; }
form.inline { display: inline; }
.actions { display: flex; flex-wrap: wrap; gap: .4em; margin: 0 0 1em; }
details.help { background: var(--card); border: 1px solid var(--line); border-radius: 6px;
               padding: .4em .8em; margin: 0 0 1em; }
details.help summary { cursor: pointer; color: var(--accent); }
code { background: #eef2f8; border-radius: 3px; padding: 0 .25em; font-size: 13px; }
@media (max-width: 720px) {
  main { padding: .7em; }
  table.list, table.list tbody, table.list tr, table.list td { display: block; width: 100%; }
  table.list thead { display: none; }
  table.list tr { border-bottom: 1px solid var(--line); padding: .45em .6em; }
  table.list td { border: 0; padding: .1em 0; }
  table.list td.num { text-align: left; display: inline-block; width: auto;
                      margin-right: .8em; }
  table.list td.num::before { content: attr(data-label) " "; color: var(--muted);
                              font-size: 12px; }
  table.list td.spark { display: block; }
  td.what { min-width: 0; }
  dl.fields { grid-template-columns: 1fr; }
  dl.fields dt { margin-top: .35em; }
}
"""


def e(value: object) -> str:
    """Escape for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def clip(value: object, limit: int) -> str:
    """``value`` as text, cut to ``limit`` characters with a note of how many more there were."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def first(query: Mapping[str, list[str]], name: str) -> str:
    """The first value of a query parameter, stripped ("" when absent)."""
    values = query.get(name) or [""]
    return values[0].strip()


def int_param(query: Mapping[str, list[str]], name: str, default: int, maximum: int) -> int:
    """A non-negative integer parameter (the default when absent or malformed)."""
    raw = first(query, name)
    if not raw.isascii() or not raw.isdigit():
        return default
    return min(int(raw), maximum)


def url(path: str, **params: str | None) -> str:
    """``path`` with the non-empty parameters as a query string."""
    kept = {key: value for key, value in params.items() if value}
    return f"{path}?{urlencode(kept)}" if kept else path


def options(values: Iterable[tuple[str, str]], selected: str, everything: str = "All") -> str:
    """``<option>`` elements; the first one, valued "", is ``everything``."""
    parts = [f'<option value="">{e(everything)}</option>'] if everything else []
    for value, label in values:
        mark = " selected" if value == selected else ""
        parts.append(f'<option value="{e(value)}"{mark}>{e(clip(label, 80))}</option>')
    return "".join(parts)


def relative_time(timestamp: float, now: float | None = None) -> str:
    """``<time>`` with a relative text ("3 min ago") and the UTC date and time as its title."""
    now = time.time() if now is None else now
    moment = datetime.fromtimestamp(timestamp, timezone.utc)
    exact = moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    delta = now - timestamp
    if delta < -60:
        text = "in the future"
    elif delta < 45:
        text = "just now"
    elif delta < 3600:
        text = f"{round(delta / 60) or 1} min ago"
    elif delta < 86400:
        text = f"{round(delta / 3600)} h ago"
    else:
        text = f"{round(delta / 86400)} d ago"
    return f'<time datetime="{e(moment.isoformat())}" title="{e(exact)}">{e(text)}</time>'


class Page:
    """What a page is made of; :func:`page` renders it."""

    def __init__(self, title: str, body: str, *, here: str = "", refresh: int = 0) -> None:
        self.title = title
        self.body = body
        self.here = here
        self.refresh = refresh


def _refresh_script(nonce: str, seconds: int) -> str:
    delay = seconds * 1000
    return (
        f'<script nonce="{nonce}">(function () {{\n'
        "  function busy() {\n"
        "    var active = document.activeElement;\n"
        "    if (active && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(active.tagName)) return true;\n"
        "    var open = document.querySelector('details[open]');\n"
        "    return !!(open || (window.getSelection && String(window.getSelection())));\n"
        "  }\n"
        "  function tick() {\n"
        f"    if (busy() || document.hidden) {{ setTimeout(tick, {delay}); return; }}\n"
        "    location.reload();\n"
        "  }\n"
        f"  setTimeout(tick, {delay});\n"
        "})();</script>\n"
    )


def page(content: Page, *, status: int = 200) -> Response:
    """The complete HTML document for ``content``, with the security headers."""
    nonce = secrets.token_urlsafe(16)
    links = "".join(
        f'<a href="{path}" class="here">{label}</a>'
        if path == content.here
        else f'<a href="{path}">{label}</a>'
        for path, label in NAV
    )
    script = _refresh_script(nonce, content.refresh) if content.refresh > 0 else ""
    document = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{e(clip(content.title, 120))} · eventlog collector</title>\n"
        f"<style>{STYLE}</style></head>\n"
        '<body><header class="top"><a class="brand" href="/">eventlog collector</a>'
        f"<nav>{links}</nav></header>\n"
        f"<main>\n{content.body}</main>\n{script}</body></html>\n"
    )
    headers = {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; "
            "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        ),
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }
    return html_response(status, document, headers)


def redirect(location: str) -> Response:
    """303 See Other to a path of this collector."""
    if not location.startswith("/") or location.startswith("//"):
        location = "/"
    return Response(303, b"", None, {"Location": location, "Cache-Control": "no-store"})


def not_found(what: str, back: str = "/", back_label: str = "Back to the stacks") -> Response:
    """A 404 page."""
    body = f'<h1>{e(what)}</h1>\n<p><a href="{e(back)}">{e(back_label)}</a></p>\n'
    return page(Page("Not found", body), status=404)


def format_count(value: Any) -> str:
    """``1,234``."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)
