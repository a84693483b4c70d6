"""The stack list (the landing page) and a stack's own page."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from eventlog_handler.collector._dashboard._events import event_rows, pager, search_help
from eventlog_handler.collector._dashboard._frames import culprit, why_grouped
from eventlog_handler.collector._dashboard._layout import (
    clip,
    e,
    first,
    format_count,
    options,
    relative_time,
    url,
)
from eventlog_handler.collector._dashboard._sparkline import WINDOWS, sparkline
from eventlog_handler.collector._eventstore import EventPage

__all__ = ["SORTS", "STATUS_TABS", "stack_body", "stacks_body", "status_form"]

#: The status tabs: (value of ``status``, label, statuses shown).
STATUS_TABS = (
    ("", "Open", ("open", "regressed")),
    ("fixed", "Fixed", ("fixed",)),
    ("ignored", "Ignored", ("ignored",)),
    ("all", "All", ()),
)
SORTS = (
    ("recent", "Last seen"),
    ("frequent", "Most frequent"),
    ("new", "Newest"),
    ("users", "Most users"),
)
_STATUS_HELP = {
    "open": "Open: not dealt with yet.",
    "fixed": "Fixed: an event dated after now makes it regressed.",
    "regressed": "Regressed: it happened again after it was marked fixed.",
    "ignored": "Ignored: its events are still stored and counted, but it stays out of the Open "
    "list.",
}


def status_badge(status: str) -> str:
    """A coloured badge for a stack status."""
    return f'<span class="badge {e(status)}">{e(status)}</span>'


def _window(query: Mapping[str, list[str]]) -> tuple[str, tuple[str, float, int]]:
    name = first(query, "spark") or "24h"
    if name not in WINDOWS:
        name = "24h"
    return name, WINDOWS[name]


def spark_start(seconds: float, bars: int, now: float | None = None) -> float:
    """The start of a sparkline window ending with the current bucket."""
    now = time.time() if now is None else now
    return (now // seconds + 1) * seconds - seconds * bars


def stacks_body(
    stacks: list[dict[str, Any]],
    following: str | None,
    total: int,
    counts: Mapping[str, int],
    occurrences: Mapping[str, list[int]],
    spark: tuple[float, float, str],
    query: Mapping[str, list[str]],
    projects: list[tuple[str, str]],
    types: list[str],
    notes: list[str],
    kind: str = "all",
) -> str:
    """The body of ``/``: tabs per status, filters, the stacks with their counts, users, first
    and last seen and a sparkline, and a link to the next page."""
    status, project, event_type, sort, text = (
        first(query, name) for name in ("status", "project", "type", "sort", "q")
    )
    spark_name, _ = _window(query)
    keep = {"project": project, "type": event_type, "sort": sort, "q": text}
    if spark_name != "24h":
        keep["spark"] = spark_name
    kinds = []
    for value, label in (("errors", "Errors"), ("logs", "Logs"), ("all", "All")):
        mark = ' class="here"' if value == kind else ""
        kinds.append(
            f'<a{mark} href="{e(url("/", status=status, kind=value, **keep))}">{label}</a>'
        )
    tabs = []
    for value, label, statuses in STATUS_TABS:
        number = sum(counts.get(name, 0) for name in statuses) if statuses else sum(counts.values())
        mark = ' class="here"' if value == status else ""
        tabs.append(
            f'<a{mark} href="{e(url("/", status=value, **keep))}">{e(label)} '
            f"<small>{format_count(number)}</small></a>"
        )
    if event_type and event_type not in types:
        types = [*types, event_type]
    form = (
        '<form class="filters" method="get" action="/">\n'
        f'<input type="hidden" name="status" value="{e(status)}">\n'
        f'<label class="grow">Search events<input type="search" name="q" '
        f'value="{e(clip(text, 500))}" placeholder="level:error user:u-42"></label>\n'
        f'<label>Project<select name="project">{options(projects, project)}</select></label>\n'
        f'<label>Type<select name="type">{options(((t, t) for t in types), event_type)}'
        "</select></label>\n"
        f'<label>Sort<select name="sort">{options(SORTS, sort or "recent", everything="")}'
        "</select></label>\n"
        f'<label>Chart<select name="spark">'
        f"{options(((k, v[0]) for k, v in WINDOWS.items()), spark_name, everything='')}"
        "</select></label>\n"
        '<button class="primary" type="submit">Apply</button> <a href="/">Reset</a>\n'
        "</form>\n"
    )
    start, seconds, window_label = spark
    groups: list[tuple[str, list[dict[str, Any]]]] = [("", stacks)]
    if kind == "all":  # errors apart from the log stacks, first (the page's order within each)
        errors = [stack for stack in stacks if stack.get("type") == "error"]
        others = [stack for stack in stacks if stack.get("type") != "error"]
        if errors and others:
            groups = [("Errors", errors), ("Logs and other events", others)]
    tables = []
    for heading, members in groups:
        rows = []
        for stack in members:
            link = f"/stacks/{e(stack['id'])}"
            stack_type = str(stack.get("type") or "")
            hint = culprit(stack.get("signature_info") or {})
            rows.append(
                "<tr>"
                f'<td class="what"><a class="title" href="{link}">'
                f"{e(clip(stack['title'], 300))}</a>"
                f'<br><span class="badge {e(stack_type.lower()[:20])}">'
                f"{e(clip(stack_type, 30))}</span> {status_badge(stack['status'])} "
                f'<small class="culprit">{e(clip(hint, 160))}</small></td>'
                f'<td class="num" data-label="Count">'
                f"{format_count(stack['total_occurrences'])}</td>"
                f'<td class="num" data-label="Users">{format_count(stack["users"])}</td>'
                f'<td class="num" data-label="First">{relative_time(stack["first_ts"])}</td>'
                f'<td class="num" data-label="Last">{relative_time(stack["last_ts"])}</td>'
                f'<td class="spark">'
                f"{sparkline(occurrences.get(stack['id'], []), start, seconds, label=window_label)}"
                "</td></tr>"
            )
        if rows:
            tables.append(
                (f'<h2 class="group">{e(heading)}</h2>\n' if heading else "")
                + '<table class="list stacks"><thead><tr><th>Stack</th><th>Count</th>'
                f"<th>Users</th><th>First seen</th><th>Last seen</th>"
                f"<th>{e(window_label.capitalize())}</th></tr></thead>\n<tbody>\n"
                + "\n".join(rows)
                + "\n</tbody></table>\n"
            )
    if tables:
        table = "".join(tables)
    elif sum(counts.values()) == 0:
        table = (
            '<div class="card"><h2>No events yet</h2><p>Point a program at this collector and '
            "its errors and logs appear here, grouped into stacks: the same error (its type and "
            "stack trace) or the same logger is one stack, with a count.</p>"
            '<p>See <a href="/about">About</a> for how to connect.</p></div>\n'
        )
    else:
        table = '<p class="muted">No stacks match.</p>\n'
    more = ""
    if following:
        more = (
            '<nav class="pager">'
            f'<a href="{e(url("/", status=status, **keep))}">⇤ First page</a> '
            f'<a rel="next" href="{e(url("/", status=status, after=following, **keep))}">'
            "More stacks →</a></nav>\n"
        )
    shown = (
        f'<p class="muted">{format_count(total)} stack{"s" if total != 1 else ""}, '
        f"{_order_text(sort)}.</p>\n"
    )
    notice = ""
    if notes:
        items = "".join(f"<li>{e(clip(note, 300))}</li>" for note in notes[:5])
        notice = f'<div class="note"><b>Recently received</b><ul>{items}</ul></div>\n'
    return (
        "<h1>Stacks</h1>\n"
        + notice
        + f'<nav class="kinds">Show: {" ".join(kinds)}</nav>\n'
        + f'<nav class="tabs">{"".join(tabs)}</nav>\n'
        + form
        + search_help()
        + shown
        + table
        + more
    )


def _order_text(sort: str) -> str:
    return {
        "frequent": "most frequent first",
        "new": "newest first",
        "users": "most users first",
    }.get(sort, "most recently seen first")


def status_form(stack: Mapping[str, Any], form_token: str) -> str:
    """Buttons that set the stack's status (the current one is marked)."""
    buttons = []
    for status, label in (("open", "Open"), ("fixed", "Mark fixed"), ("ignored", "Ignore")):
        current = stack["status"] == status
        css = ' class="primary"' if current else ""
        buttons.append(
            f'<button{css} type="submit" name="status" value="{status}"'
            f"{' disabled' if current else ''}>{label}</button>"
        )
    return (
        f'<form class="actions" method="post" action="/stacks/{e(stack["id"])}/status">'
        f'<input type="hidden" name="token" value="{e(form_token)}">'
        + "".join(buttons)
        + "</form>\n"
    )


def stack_body(
    stack: Mapping[str, Any],
    project_name: str,
    result: EventPage,
    sparks: list[tuple[str, list[int], float, float]],
    form_token: str,
    params: dict[str, str],
) -> str:
    """The body of ``/stacks/{id}``: title, status and its buttons, counts, charts, signature,
    and the stack's events (newest first, paged)."""
    signature = stack.get("signature_info") or {}
    reason = why_grouped(signature)
    signature_rows = "".join(
        f"<tr><th>{e(clip(key, 60))}</th><td>{e(clip(value, 500))}</td></tr>"
        for key, value in signature.items()
    )
    charts = "".join(
        f"<div><small>{e(label.capitalize())}</small>"
        f"{sparkline(counts, start, seconds, width=240, height=40, label=label)}</div>"
        for label, counts, start, seconds in sparks
    )
    stats = (
        '<div class="stats">'
        f"<div><small>Occurrences</small><b>{format_count(stack['total_occurrences'])}</b></div>"
        f"<div><small>Events stored</small><b>{format_count(stack['event_count'])}</b></div>"
        f"<div><small>Users affected</small><b>{format_count(stack['users'])}</b></div>"
        f"<div><small>First seen</small><b>{relative_time(stack['first_ts'])}</b></div>"
        f"<div><small>Last seen</small><b>{relative_time(stack['last_ts'])}</b></div>"
        "</div>\n"
    )
    kind = str(stack.get("type") or "")
    return (
        f'<p><a href="/">← Stacks</a></p>\n'
        f"<h1>{e(clip(stack['title'], 500))}</h1>\n"
        f'<p><span class="badge {e(kind.lower()[:20])}">{e(clip(kind, 30))}</span> '
        f"{status_badge(stack['status'])} <small>{e(_STATUS_HELP.get(stack['status'], ''))}"
        f"</small> <small>Project: {e(clip(project_name, 80))}</small></p>\n"
        + status_form(stack, form_token)
        + stats
        + f'<div class="card"><div class="charts">{charts}</div>'
        + (
            f'<h2>Why these events are one stack</h2><p class="why">{e(reason)}</p>'
            f'<table class="kv">{signature_rows}</table>'
            if signature_rows
            else ""
        )
        + "</div>\n"
        + "<h2>Events</h2>\n"
        + pager(f"/stacks/{stack['id']}", params, result)
        + event_rows(result.events, {}, show_project=False)
        + pager(f"/stacks/{stack['id']}", params, result)
    )
