"""The collector's HTML dashboard: the latest events, and one page per event.

Plain server-rendered pages with no external assets. Every piece of event content is escaped
with :func:`html.escape` (``quote=True``) and clipped, and the number of rows is bounded, so a
hostile or huge event cannot break a page. The pages also send a ``Content-Security-Policy``
that only lets run the one inline script carrying the page's nonce (the auto-refresh).
"""

from __future__ import annotations

import html
import json
import secrets
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from eventlog_handler.collector.filters import EventQuery, parse_filter
from eventlog_handler.collector.ingest import error_chain
from eventlog_handler.collector.messages import Response, html_response
from eventlog_handler.collector.storage import Storage

__all__ = ["LEVELS", "event_page", "index_page"]

LEVELS = ("Trace", "Debug", "Info", "Warn", "Error", "Fatal")
DEFAULT_ROWS = 50
MAX_ROWS = 200
DEFAULT_REFRESH = 5
_CELL = 300
_FIELD = 5_000
_STACK = 50_000
_DATA = 100_000
_FRAMES = 200

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #2d3e50; color: #fff; padding: .6em 1em; }
header a { color: #fff; text-decoration: none; font-weight: bold; }
main { padding: 1em; }
form { margin-bottom: 1em; display: flex; gap: .8em; flex-wrap: wrap; align-items: end; }
label { display: flex; flex-direction: column; font-size: 12px; color: #555; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: .3em .5em; border-bottom: 1px solid #ddd;
         vertical-align: top; }
td.msg { word-break: break-word; }
pre { background: #fff; border: 1px solid #ddd; padding: .6em; overflow-x: auto;
      white-space: pre-wrap; word-break: break-word; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
dt { font-weight: bold; color: #555; }
dd { margin: 0; word-break: break-word; }
.level-error, .level-fatal, .type-error { color: #b00020; font-weight: bold; }
.level-warn { color: #a05a00; }
.muted { color: #777; }
"""


def _e(value: object) -> str:
    """Escape for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def _clip(value: object, limit: int) -> str:
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _page(title: str, body: str, *, status: int = 200, refresh: int = 0) -> Response:
    nonce = secrets.token_urlsafe(16)
    script = ""
    if refresh > 0:
        delay = refresh * 1000
        script = (
            f'<script nonce="{nonce}">(function () {{\n'
            "  function tick() {\n"
            "    var active = document.activeElement;\n"
            "    if (active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) {\n"
            f"      setTimeout(tick, {delay}); return;\n"
            "    }\n"
            "    location.reload();\n"
            "  }\n"
            f"  setTimeout(tick, {delay});\n"
            "})();</script>\n"
        )
    page = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)} · eventlog collector</title>\n<style>{_STYLE}</style></head>\n"
        '<body><header><a href="/">eventlog collector</a></header>\n'
        f"<main>\n{body}</main>\n{script}</body></html>\n"
    )
    headers = {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; "
            "img-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        ),
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
    }
    return html_response(status, page, headers)


def _data(event: Mapping[str, Any]) -> dict[str, Any]:
    data = event.get("data")
    return data if isinstance(data, dict) else {}


def _level(data: Mapping[str, Any]) -> str:
    level = data.get("@level")
    return level if isinstance(level, str) else ""


def _summary(event: Mapping[str, Any]) -> str:
    message = event.get("message")
    data = _data(event)
    chain = error_chain(data)
    if chain:
        first = chain[0]
        text = f"{first.get('type') or 'Error'}: {first.get('message') or ''}"
        return f"{message} — {text}" if message else text
    return str(message) if message is not None else "(no message)"


def _first(query: Mapping[str, list[str]], name: str) -> str:
    values = query.get(name) or [""]
    return values[0].strip()


def _int(query: Mapping[str, list[str]], name: str, default: int, maximum: int) -> int:
    raw = _first(query, name)
    if not raw.isascii() or not raw.isdigit():
        return default
    return min(int(raw), maximum)


def _options(values: Iterable[tuple[str, str]], selected: str) -> str:
    parts = ['<option value="">All</option>']
    for value, label in values:
        mark = " selected" if value == selected else ""
        parts.append(f'<option value="{_e(value)}"{mark}>{_e(_clip(label, 80))}</option>')
    return "".join(parts)


def index_page(storage: Storage, query: Mapping[str, list[str]]) -> Response:
    """The latest events, filtered by ``project``, ``type``, ``level`` and free text ``q``.

    ``limit`` (default 50, at most 200) bounds the rows; ``refresh`` is the reload period in
    seconds (default 5, 0 to turn it off).
    """
    project, event_type, level, text = (
        _first(query, name) for name in ("project", "type", "level", "q")
    )
    limit = _int(query, "limit", DEFAULT_ROWS, MAX_ROWS) or DEFAULT_ROWS
    refresh = _int(query, "refresh", DEFAULT_REFRESH, 3600)
    selection = EventQuery(limit=limit)
    if project:
        selection.project_ids.append(project)
    if event_type:
        selection.types.append(event_type)
    if level:
        selection.levels.append(level.lower())
    if text:
        parse_filter(text, selection)
    events, total = storage.query_events(selection)
    projects, _ = storage.list_projects(None, 0, 1000)
    names = {p["id"]: p["name"] for p in projects}
    types = storage.distinct_types()
    if event_type and event_type not in types:
        types.append(event_type)

    form = (
        '<form method="get" action="/">\n'
        f'<label>Project<select name="project">'
        f"{_options(((p['id'], p['name']) for p in projects), project)}</select></label>\n"
        f'<label>Type<select name="type">{_options(((t, t) for t in types), event_type)}'
        "</select></label>\n"
        f'<label>Level<select name="level">'
        f"{_options(((lv, lv) for lv in LEVELS), level.capitalize() if level else '')}"
        "</select></label>\n"
        f'<label>Search<input type="search" name="q" value="{_e(_clip(text, 500))}"></label>\n'
        f'<input type="hidden" name="refresh" value="{refresh}">\n'
        '<button type="submit">Filter</button> <a href="/">Reset</a>\n</form>\n'
    )
    rows = []
    for event in events:
        data = _data(event)
        event_level = _level(data)
        kind = str(event.get("type") or "")
        rows.append(
            "<tr>"
            f'<td><a href="/events/{_e(event["id"])}">{_e(_clip(event.get("date") or "", 40))}'
            "</a></td>"
            f'<td class="type-{_e(kind.lower()[:20])}">{_e(_clip(kind, 40))}</td>'
            f'<td class="level-{_e(event_level.lower()[:20])}">{_e(_clip(event_level, 20))}</td>'
            f"<td>{_e(_clip(event.get('source') or '', 80))}</td>"
            f'<td class="msg"><a href="/events/{_e(event["id"])}">'
            f"{_e(_clip(_summary(event), _CELL))}</a></td>"
            f"<td>{_e(_clip(names.get(event.get('project_id') or '', ''), 60))}</td>"
            "</tr>"
        )
    table = (
        "<table><thead><tr><th>Date</th><th>Type</th><th>Level</th><th>Source</th>"
        "<th>Message</th><th>Project</th></tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + "\n</tbody></table>\n"
        if rows
        else '<p class="muted">No events yet.</p>\n'
    )
    shown = f'<p class="muted">Showing {len(events)} of {total} events, newest first.'
    if refresh:
        off = {k: v[0] for k, v in query.items() if v and k != "refresh"}
        off["refresh"] = "0"
        shown += f' Reloads every {refresh} s (<a href="/?{_e(urlencode(off))}">stop</a>).'
    shown += "</p>\n"
    return _page("Events", "<h1>Events</h1>\n" + form + shown + table, refresh=refresh)


def _format_frames(frames: list[Any]) -> str:
    lines = []
    for frame in frames[:_FRAMES]:
        if not isinstance(frame, dict):
            lines.append(str(frame))
            continue
        where = ".".join(
            str(frame[k]) for k in ("declaring_namespace", "declaring_type", "name") if frame.get(k)
        )
        place = frame.get("file_name") or ""
        if frame.get("line_number"):
            place += f":line {frame['line_number']}"
        lines.append(f"at {where}" + (f" in {place}" if place else ""))
    if len(frames) > _FRAMES:
        lines.append(f"… {len(frames) - _FRAMES} more frames")
    return "\n".join(lines)


def _stack_text(error: Mapping[str, Any]) -> str:
    stack = error.get("stack_trace")
    if isinstance(stack, list):
        return _format_frames(stack)
    return "" if stack is None else str(stack)


def _errors_html(data: Mapping[str, Any]) -> str:
    parts = []
    for depth, error in enumerate(error_chain(data)):
        heading = "Error" if depth == 0 else f"Inner error {depth}"
        parts.append(
            f'<section class="error"><h2>{heading}: '
            f'<span class="type-error">{_e(_clip(error.get("type") or "", 200))}</span></h2>\n'
            f"<p>{_e(_clip(error.get('message') or '', _FIELD))}</p>\n"
        )
        stack = _stack_text(error)
        if stack:
            parts.append(f'<pre class="stack">{_e(_clip(stack, _STACK))}</pre>\n')
        parts.append("</section>\n")
    return "".join(parts)


def _user_text(user: Any) -> str:
    if isinstance(user, dict):
        identity, name = user.get("identity"), user.get("name")
        if name and identity:
            return f"{name} ({identity})"
        return str(identity or name or json.dumps(user, default=str))
    return str(user)


def event_page(storage: Storage, event_id: str) -> Response:
    """One event: its fields, level, user, error chain with stack traces, and data."""
    event = storage.get_event(event_id)
    if event is None:
        return _page(
            "Not found",
            '<h1>No such event</h1>\n<p><a href="/">Back to the events</a></p>\n',
            status=404,
        )
    data = _data(event)
    project = storage.get_project(str(event.get("project_id")))
    fields: list[tuple[str, Any]] = [
        ("Id", event.get("id")),
        ("Project", (project or {}).get("name", event.get("project_id"))),
        ("Type", event.get("type")),
        ("Level", _level(data) or None),
        ("Date", event.get("date")),
        ("Received", event.get("created_utc")),
        ("Source", event.get("source")),
        ("Message", event.get("message")),
        ("User", _user_text(data["@user"]) if "@user" in data else None),
        ("Reference id", event.get("reference_id")),
        ("Tags", ", ".join(map(str, event.get("tags") or [])) or None),
        ("Value", event.get("value")),
        ("Count", event.get("count")),
        ("Geo", event.get("geo")),
    ]
    description = data.get("@user_description")
    if isinstance(description, dict):
        fields.append(("User description", description.get("description")))
        fields.append(("User e-mail", description.get("email_address")))
    items = "".join(
        f"<dt>{_e(name)}</dt><dd>{_e(_clip(value, _FIELD))}</dd>\n"
        for name, value in fields
        if value is not None and value != ""
    )
    pretty = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    body = (
        f"<h1>{_e(_clip(_summary(event), 500))}</h1>\n"
        '<p><a href="/">← All events</a></p>\n'
        f"<dl>\n{items}</dl>\n"
        + _errors_html(data)
        + f'<h2>Data</h2>\n<pre class="data">{_e(_clip(pretty, _DATA))}</pre>\n'
    )
    return _page(_clip(_summary(event), 80), body)
