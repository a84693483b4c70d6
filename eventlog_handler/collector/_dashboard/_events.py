"""The events list: every event (or one stack's), newest first, with search and cursor paging."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventlog_handler.collector._dashboard._layout import (
    clip,
    e,
    first,
    format_count,
    int_param,
    options,
    relative_time,
    url,
)
from eventlog_handler.collector._eventstore import EventPage
from eventlog_handler.collector._filters import FILTER_HELP, EventQuery, parse_filter
from eventlog_handler.collector._formats import DateFormatError, parse_date
from eventlog_handler.collector._normalize import error_chain

__all__ = [
    "DEFAULT_ROWS",
    "LEVELS",
    "MAX_ROWS",
    "TYPE_TABS",
    "event_query",
    "event_rows",
    "event_summary",
    "pager",
    "search_help",
]

LEVELS = ("Trace", "Debug", "Info", "Warn", "Error", "Fatal")
#: The service's event types, always offered by the type filter: (type, label of its tab).
TYPE_TABS = (
    ("error", "Errors"),
    ("log", "Logs"),
    ("usage", "Feature usage"),
    ("404", "Not found"),
    ("session", "Sessions"),
)
DEFAULT_ROWS = 50
MAX_ROWS = 200
_CELL = 300


def data_of(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event's ``data`` (an empty dict when it has none)."""
    data = event.get("data")
    return data if isinstance(data, dict) else {}


def level_of(data: Mapping[str, Any]) -> str:
    """``data["@level"]`` as text ("" when absent)."""
    level = data.get("@level")
    return level if isinstance(level, str) else ""


def event_summary(event: Mapping[str, Any]) -> str:
    """One line for an event: its message, and its error's type and message; for an event of
    the service's other types without a message, what it is (a feature used, a path not
    found, a user's session)."""
    message = event.get("message")
    data = data_of(event)
    chain = error_chain(data)
    if chain:
        outer = chain[0]
        text = f"{outer.get('type') or 'Error'}: {outer.get('message') or ''}".rstrip(": ")
        if message and str(message) != str(outer.get("message") or ""):
            return f"{message} — {text}"
        return text
    if message not in (None, ""):
        return str(message)
    kind, source = event.get("type"), event.get("source") or ""
    if kind == "usage" and source:
        return f"Feature used: {source}"
    if kind == "404" and source:
        return f"Not found: {source}"
    if kind in ("session", "sessionend", "heartbeat"):
        user = data.get("@user")
        identity = user.get("identity") if isinstance(user, dict) else None
        what = {"session": "Session", "sessionend": "Session end", "heartbeat": "Heartbeat"}
        return what[str(kind)] + (f" of {identity}" if identity else "")
    return "(no message)"


def event_timestamp(event: Mapping[str, Any]) -> float:
    """The event's date as a timestamp (0 when it does not parse)."""
    try:
        return parse_date(str(event.get("date"))).timestamp()
    except (DateFormatError, OverflowError, ValueError):
        return 0.0


def event_query(query: Mapping[str, list[str]], limit: int) -> EventQuery:
    """The selection of the events page: ``project``, ``type``, ``level`` and ``q``."""
    selection = EventQuery(limit=limit)
    project, event_type, level, text = (
        first(query, name) for name in ("project", "type", "level", "q")
    )
    if project:
        selection.project_ids.append(project)
    if event_type:
        selection.types.append(event_type)
    if level:
        selection.levels.append(level.lower())
    if text:
        parse_filter(text, selection)
    return selection


def event_rows(
    events: list[dict[str, Any]], names: Mapping[str, str], *, show_project: bool
) -> str:
    """The events as a table: when, type and level, source, message, user (and project)."""
    if not events:
        return '<p class="muted">No events match.</p>\n'
    head = "<th>When</th><th>Event</th><th>Source</th><th>User</th>"
    if show_project:
        head += "<th>Project</th>"
    rows = []
    for event in events:
        data = data_of(event)
        level = level_of(data)
        kind = str(event.get("type") or "")
        user = data.get("@user")
        identity = user.get("identity") if isinstance(user, dict) else None
        badges = f'<span class="badge {e(kind.lower()[:20])}">{e(clip(kind, 30))}</span>'
        if level:
            badges += f' <span class="badge {e(level.lower()[:20])}">{e(clip(level, 20))}</span>'
        link = f"/events/{e(event['id'])}"
        cells = (
            f'<td class="when"><a href="{link}">{relative_time(event_timestamp(event))}</a></td>'
            f'<td class="what msg">{badges} <a href="{link}">'
            f"{e(clip(event_summary(event), _CELL))}</a></td>"
            f"<td>{e(clip(event.get('source') or '', 80))}</td>"
            f"<td>{e(clip(identity or '', 60))}</td>"
        )
        if show_project:
            cells += f"<td>{e(clip(names.get(str(event.get('project_id'))) or '', 60))}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return (
        f'<table class="list events"><thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(rows)
        + "\n</tbody></table>\n"
    )


def pager(path: str, params: dict[str, str], result: EventPage, noun: str = "events") -> str:
    """The position line and the newer/older links of a cursor page."""
    if not result.events:
        return ""
    last = result.first_rank + len(result.events) - 1
    parts = [
        f'<span class="muted">{e(noun.capitalize())} {format_count(result.first_rank)}-'
        f"{format_count(last)} of {format_count(result.total)}, newest first</span>"
    ]
    if result.newer is not None:
        parts.append(f'<a href="{e(url(path, **params))}">⇤ Newest</a>')
        parts.append(
            f'<a rel="prev" href="{e(url(path, **params, newer=result.newer))}">← Newer</a>'
        )
    if result.older is not None:
        parts.append(
            f'<a rel="next" href="{e(url(path, **params, older=result.older))}">Older →</a>'
        )
    return '<nav class="pager">' + " ".join(parts) + "</nav>\n"


def search_help(open_: bool = False) -> str:
    """The search syntax, explained."""
    rows = "".join(
        f"<tr><th><code>{e(term)}</code></th><td>{e(text)}</td></tr>" for term, text in FILTER_HELP
    )
    mark = " open" if open_ else ""
    return (
        f'<details class="help"{mark}><summary>How to search</summary>\n'
        "<p>Write terms separated by spaces. Terms on different fields must all match; several "
        "terms on the same field match any of them (<code>type:error type:log</code>). Use "
        'double quotes for values with spaces (<code>source:"my app"</code>).</p>\n'
        f'<table class="kv">{rows}</table>\n'
        '<p class="muted">Example: <code>level:error tag:checkout timeout</code> finds '
        "error-level events tagged <em>checkout</em> that mention <em>timeout</em>.</p>\n"
        "</details>\n"
    )


def events_body(
    result: EventPage,
    query: Mapping[str, list[str]],
    projects: list[tuple[str, str]],
    types: list[str],
) -> str:
    """The body of ``/events``."""
    project, event_type, level, text = (
        first(query, name) for name in ("project", "type", "level", "q")
    )
    limit = int_param(query, "limit", DEFAULT_ROWS, MAX_ROWS) or DEFAULT_ROWS
    known = [kind for kind, _ in TYPE_TABS]
    types = known + [kind for kind in types if kind not in known]
    if event_type and event_type not in types:
        types = [*types, event_type]
    form = (
        '<form class="filters" method="get" action="/events">\n'
        f'<label class="grow">Search<input type="search" name="q" value="{e(clip(text, 500))}"'
        ' placeholder="level:error checkout"></label>\n'
        f'<label>Project<select name="project">{options(projects, project)}</select></label>\n'
        f'<label>Type<select name="type">{options(((t, t) for t in types), event_type)}'
        "</select></label>\n"
        f'<label>Level<select name="level">'
        f"{options(((lv, lv) for lv in LEVELS), level.capitalize() if level else '')}"
        "</select></label>\n"
        '<button class="primary" type="submit">Search</button> <a href="/events">Reset</a>\n'
        "</form>\n"
    )
    params = {"q": text, "project": project, "type": event_type, "level": level}
    if limit != DEFAULT_ROWS:
        params["limit"] = str(limit)
    names = dict(projects)
    heading = "Events" if not text else f"Events matching {text}"
    tabs = []
    for value, label in (("", "All"), *TYPE_TABS):
        mark = ' class="here"' if value == event_type else ""
        target = url("/events", **{**params, "type": value})
        tabs.append(f'<a{mark} href="{e(target)}">{e(label)}</a>')
    return (
        f"<h1>{e(clip(heading, 200))}</h1>\n"
        + f'<nav class="tabs types">{"".join(tabs)}</nav>\n'
        + form
        + search_help(open_=bool(text) and not result.events)
        + pager("/events", params, result)
        + event_rows(result.events, names, show_project=len(projects) > 1)
        + pager("/events", params, result)
    )
