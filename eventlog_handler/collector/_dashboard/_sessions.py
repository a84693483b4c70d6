"""The sessions list: each session start event with its user, start, duration, heartbeats and
end (or "active"), newest first, with cursor paging (see
:mod:`~eventlog_handler.collector._sessions` for what the collector keeps of a session)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventlog_handler.collector._dashboard._events import (
    DEFAULT_ROWS,
    MAX_ROWS,
    data_of,
    event_timestamp,
    pager,
    search_help,
)
from eventlog_handler.collector._dashboard._layout import (
    clip,
    e,
    first,
    format_count,
    int_param,
    options,
    relative_time,
)
from eventlog_handler.collector._eventstore import EventPage
from eventlog_handler.collector._formats import DateFormatError, parse_date

__all__ = ["format_duration", "session_rows", "sessions_body"]


def format_duration(seconds: Any) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 05 min`` ("" when not a number)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return ""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _when(text: Any) -> str:
    try:
        return relative_time(parse_date(str(text)).timestamp())
    except (DateFormatError, OverflowError, ValueError):
        return e(clip(text, 60))


def session_rows(
    sessions: list[dict[str, Any]], names: Mapping[str, str], *, show_project: bool
) -> str:
    """The sessions as a table: user, start, duration, heartbeats, end (and project)."""
    if not sessions:
        return (
            '<p class="muted">No sessions. A session starts with an event of type '
            "<code>session</code> whose <code>reference_id</code> is the session id.</p>\n"
        )
    head = "<th>User</th><th>Started</th><th>Duration</th><th>Heartbeats</th><th>Ended</th>" + (
        "<th>Project</th>" if show_project else ""
    )
    rows = []
    for session in sessions:
        data = data_of(session)
        user = data.get("@user")
        user = user if isinstance(user, dict) else {}
        identity, name = user.get("identity"), user.get("name")
        who = e(clip(identity, 60)) if isinstance(identity, str) and identity else "(no user)"
        if isinstance(name, str) and name and name != identity:
            who += f" <small>{e(clip(name, 60))}</small>"
        link = f"/events/{e(session['id'])}"
        heartbeats = data.get("@heartbeats")
        end = data.get("sessionend")
        ended = _when(end) if end else '<span class="badge open">active</span>'
        cells = (
            f'<td class="what"><a href="{link}">{who}</a><br>'
            f"<small>{e(clip(session.get('reference_id') or '', 100))}</small></td>"
            f'<td class="when">{relative_time(event_timestamp(session))}</td>'
            f'<td class="num" data-label="Duration">'
            f"{e(format_duration(session.get('value')) or '0 s')}</td>"
            f'<td class="num" data-label="Heartbeats">'
            f"{format_count(heartbeats) if isinstance(heartbeats, int) else ''}</td>"
            f'<td class="when">{ended}</td>'
        )
        if show_project:
            cells += f"<td>{e(clip(names.get(str(session.get('project_id'))) or '', 60))}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return (
        f'<table class="list sessions"><thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(rows)
        + "\n</tbody></table>\n"
    )


def sessions_body(
    result: EventPage, query: Mapping[str, list[str]], projects: list[tuple[str, str]]
) -> str:
    """The body of ``/sessions``."""
    project, text = first(query, "project"), first(query, "q")
    limit = int_param(query, "limit", DEFAULT_ROWS, MAX_ROWS) or DEFAULT_ROWS
    form = (
        '<form class="filters" method="get" action="/sessions">\n'
        f'<label class="grow">Search<input type="search" name="q" value="{e(clip(text, 500))}"'
        ' placeholder="user:u-42"></label>\n'
        f'<label>Project<select name="project">{options(projects, project)}</select></label>\n'
        '<button class="primary" type="submit">Search</button> <a href="/sessions">Reset</a>\n'
        "</form>\n"
    )
    params = {"q": text, "project": project}
    if limit != DEFAULT_ROWS:
        params["limit"] = str(limit)
    return (
        "<h1>Sessions</h1>\n"
        + form
        + search_help(open_=bool(text) and not result.events)
        + pager("/sessions", params, result, "sessions")
        + session_rows(result.events, dict(projects), show_project=len(projects) > 1)
        + pager("/sessions", params, result, "sessions")
    )
