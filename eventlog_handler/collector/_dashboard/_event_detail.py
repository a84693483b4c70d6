"""One event's page: its fields, then each known data key in a block of its own.

- the error chain (``@simple_error`` / ``@error``): each error, then "Caused by" its inner ones,
  with the type, message, stack trace (frames formatted when structured) and extra data;
- ``@trace``: the log lines that led up to the event;
- ``@request``: method and URL, client, headers, cookies, query and posted data;
- ``@environment``: machine, process, runtime and operating system;
- ``@user`` and ``@user_description``;
- every other data key, as text or indented JSON.

The raw JSON document is one link away (``/events/{id}/json``), not on the page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from eventlog_handler.collector._dashboard._events import (
    data_of,
    event_summary,
    event_timestamp,
    level_of,
)
from eventlog_handler.collector._dashboard._frames import FRAMES_KEY, frames_html
from eventlog_handler.collector._dashboard._layout import clip, e, relative_time
from eventlog_handler.collector._normalize import error_chain

__all__ = ["event_body"]

_FIELD = 5_000
_STACK = 50_000
_DATA = 100_000
_FRAMES = 200
_ROWS = 200
_HANDLED = frozenset(
    (
        "@simple_error",
        "@error",
        "@trace",
        "@request",
        "@environment",
        "@user",
        "@user_description",
        "@level",
        "@submission_method",
        "@submission_client",
        "@version",
        "@stack",
        FRAMES_KEY,
    )
)
_ENVIRONMENT = (
    ("machine_name", "Machine"),
    ("ip_address", "IP address"),
    ("process_name", "Process"),
    ("process_id", "Process id"),
    ("command_line", "Command line"),
    ("thread_name", "Thread"),
    ("thread_id", "Thread id"),
    ("runtime_version", "Runtime"),
    ("o_s_name", "Operating system"),
    ("o_s_version", "OS version"),
    ("architecture", "Architecture"),
    ("processor_count", "Processors"),
    ("total_physical_memory", "Memory"),
    ("available_physical_memory", "Free memory"),
    ("process_memory_size", "Process memory"),
    ("install_id", "Install id"),
)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str, indent=2)


def _value_html(value: Any, limit: int = _FIELD) -> str:
    """A value as text; objects and lists as indented JSON in a ``<pre>``."""
    if isinstance(value, (dict, list)):
        return f"<pre>{e(clip(_text(value), limit))}</pre>"
    if value is None:
        return '<span class="muted">null</span>'
    return e(clip(_text(value), limit))


def _kv_table(items: Any, limit: int = _ROWS) -> str:
    if not isinstance(items, dict) or not items:
        return ""
    rows = []
    for index, (key, value) in enumerate(items.items()):
        if index == limit:
            rows.append(f'<tr><td colspan="2">… {len(items) - limit} more</td></tr>')
            break
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            value = ", ".join(value)
        rows.append(f"<tr><th>{e(clip(key, 200))}</th><td>{_value_html(value)}</td></tr>")
    return f'<table class="kv">{"".join(rows)}</table>'


def _fields(items: list[tuple[str, str]]) -> str:
    """``(label, html)`` pairs as a definition list (empty values left out)."""
    body = "".join(f"<dt>{e(label)}</dt><dd>{value}</dd>\n" for label, value in items if value)
    return f'<dl class="fields">\n{body}</dl>\n' if body else ""


def _format_frames(frames: list[Any]) -> str:
    lines = []
    for frame in frames[:_FRAMES]:
        if not isinstance(frame, dict):
            lines.append(str(frame))
            continue
        where = ".".join(
            str(frame[k]) for k in ("declaring_namespace", "declaring_type", "name") if frame.get(k)
        )
        place = str(frame.get("file_name") or "")
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


def _errors(data: Mapping[str, Any]) -> str:
    parts = []
    for depth, error in enumerate(error_chain(data)):
        heading = "Error" if depth == 0 else "Caused by"
        css = "card error-block" + (" inner" if depth else "")
        parts.append(
            f'<section class="{css}"><h2>{heading}: '
            f"<code>{e(clip(error.get('type') or 'Error', 300))}</code></h2>\n"
            f'<p class="error-message">{e(clip(error.get("message") or "", _FIELD))}</p>\n'
        )
        stack = _stack_text(error)
        if stack:
            parts.append(f'<pre class="stack">{e(clip(stack, _STACK))}</pre>\n')
        extra = error.get("data")
        if isinstance(extra, dict) and extra:
            parts.append(frames_html(extra.get(FRAMES_KEY)))
            rest = {key: value for key, value in extra.items() if key != FRAMES_KEY}
            if rest:
                parts.append(f"<h3>Error data</h3>{_kv_table(rest)}\n")
        parts.append("</section>\n")
    return "".join(parts)


def _trace(value: Any) -> str:
    if not isinstance(value, list) or not value:
        return ""
    lines: list[str] = []
    previous, repeats = None, 0
    for line in [str(item) for item in value[:_ROWS]]:
        text = line.split(" ", 1)[-1]  # the same line at another time is a repeat
        if text == previous:
            repeats += 1
            continue
        if repeats:
            lines.append(f"    … the same line {repeats} more time{'s' if repeats > 1 else ''}")
        lines.append(line)
        previous, repeats = text, 0
    if repeats:
        lines.append(f"    … the same line {repeats} more time{'s' if repeats > 1 else ''}")
    if len(value) > _ROWS:
        lines.append(f"… {len(value) - _ROWS} more lines")
    return (
        '<section class="card trace-block"><h2>Trace <small>(the log lines before the event, '
        f'oldest first)</small></h2>\n<pre class="trace">{e(clip(chr(10).join(lines), _STACK))}'
        "</pre></section>\n"
    )


def _count(event: Mapping[str, Any]) -> str:
    count = event.get("count")
    if count is None:
        return ""
    if isinstance(count, int) and count > 1:
        return (
            f"{e(count)} <small>— this event stands for {e(count)} identical events: the "
            "client rolled them up (same message, data and error within its roll-up window) "
            "and sent the last of them with this count</small>"
        )
    return e(count)


def _request(value: Any) -> str:
    if not isinstance(value, dict) or not value:
        return ""
    method = str(value.get("http_method") or "")
    host = str(value.get("host") or "")
    port = value.get("port")
    scheme = "https" if value.get("is_secure") else "http"
    address = f"{scheme}://{host}" if host else ""
    if host and port and port not in (80, 443, "80", "443"):
        address += f":{port}"
    address += str(value.get("path") or "")
    query = value.get("query_string")
    if isinstance(query, dict) and query:
        address += "?" + "&".join(f"{key}={item}" for key, item in query.items())
    summary = f"{method} {address}".strip()
    parts = [
        '<section class="card request-block"><h2>Request</h2>\n',
        f"<p><code>{e(clip(summary, 2000))}</code></p>\n" if summary else "",
        _fields(
            [
                ("Client IP", e(clip(value.get("client_ip_address") or "", 100))),
                ("User agent", e(clip(value.get("user_agent") or "", 500))),
                ("Referrer", e(clip(value.get("referrer") or "", 500))),
            ]
        ),
    ]
    for key, label in (
        ("headers", "Headers"),
        ("cookies", "Cookies"),
        ("query_string", "Query"),
    ):
        table = _kv_table(value.get(key))
        if table:
            parts.append(f"<h3>{label}</h3>{table}\n")
    post = value.get("post_data")
    if post not in (None, "", {}, []):
        parts.append(f"<h3>Posted data</h3>{_value_html(post, _DATA)}\n")
    extra = value.get("data")
    if isinstance(extra, dict) and extra:
        parts.append(f"<h3>Request data</h3>{_kv_table(extra)}\n")
    others = {
        key: item
        for key, item in value.items()
        if key
        not in {
            "http_method", "host", "port", "is_secure", "path", "query_string", "client_ip_address",
            "user_agent", "referrer", "headers", "cookies", "post_data", "data",
        }
    }  # fmt: skip
    if others:
        parts.append(f"<h3>More</h3>{_kv_table(others)}\n")
    parts.append("</section>\n")
    return "".join(parts)


def _environment(value: Any) -> str:
    if not isinstance(value, dict) or not value:
        return ""
    known = [(label, _value_html(value[key])) for key, label in _ENVIRONMENT if key in value]
    labelled = {key for key, _ in _ENVIRONMENT}
    rest = {key: item for key, item in value.items() if key not in labelled}
    return (
        '<section class="card environment-block"><h2>Environment</h2>\n'
        + _fields(known)
        + (f"<h3>More</h3>{_kv_table(rest)}" if rest else "")
        + "</section>\n"
    )


def _client(value: Any) -> str:
    """``@submission_client`` in one line: the ``User-Agent`` that posted the event (and its
    version); any other shape as it is."""
    if not isinstance(value, dict):
        return "" if value is None else e(clip(_text(value), 300))
    agent, version = value.get("user_agent"), value.get("version")
    text = e(clip(agent, 300)) if isinstance(agent, str) else ""
    if isinstance(version, str) and version:
        text += f" <small>version {e(clip(version, 40))}</small>"
    rest = {k: v for k, v in value.items() if k not in ("user_agent", "version")}
    return text + (_kv_table(rest) if rest else "")


def _user(data: Mapping[str, Any]) -> str:
    user = data.get("@user")
    description = data.get("@user_description")
    if not isinstance(user, dict) and not isinstance(description, dict):
        if "@user" in data:
            return (
                '<section class="card user-block"><h2>User</h2>'
                f"{_value_html(data['@user'])}</section>\n"
            )
        return ""
    items: list[tuple[str, str]] = []
    extra = ""
    if isinstance(user, dict):
        items += [
            ("Identity", e(clip(user.get("identity") or "", 500))),
            ("Name", e(clip(user.get("name") or "", 500))),
        ]
        extra = _kv_table(user.get("data")) if isinstance(user.get("data"), dict) else ""
    if isinstance(description, dict):
        items += [
            ("E-mail", e(clip(description.get("email_address") or "", 500))),
            ("Description", e(clip(description.get("description") or "", _FIELD))),
        ]
    return (
        '<section class="card user-block"><h2>User</h2>\n'
        + _fields(items)
        + (f"<h3>User data</h3>{extra}" if extra else "")
        + "</section>\n"
    )


def _other_data(data: Mapping[str, Any]) -> str:
    others = [(key, value) for key, value in data.items() if key not in _HANDLED]
    if not others:
        return ""
    simple = {key: value for key, value in others if not isinstance(value, (dict, list))}
    blocks = [
        f'<section class="card data-block"><h2>{e(clip(key, 200))}</h2>'
        f"{_value_html(value, _DATA)}</section>\n"
        for key, value in others[:_ROWS]
        if isinstance(value, (dict, list))
    ]
    head = (
        f'<section class="card data-block"><h2>Data</h2>{_kv_table(simple)}</section>\n'
        if simple
        else ""
    )
    return head + "".join(blocks)


def event_body(
    event: Mapping[str, Any],
    project_name: str,
    stack: Mapping[str, Any] | None,
    neighbours: tuple[str | None, str | None],
    note: str | None,
) -> str:
    """The body of ``/events/{id}``."""
    data = data_of(event)
    level = level_of(data)
    tags = event.get("tags") or []
    chips = "".join(f'<span class="chip">{e(clip(tag, 100))}</span>' for tag in tags)
    stack_link = ""
    if stack is not None:
        stack_link = f'<a href="/stacks/{e(stack["id"])}">{e(clip(stack["title"], 200))}</a>'
    version = data.get("@version")
    overview = _fields(
        [
            ("Type", e(clip(event.get("type") or "", 100))),
            ("Level", e(clip(level, 20))),
            (
                "Date",
                f"{relative_time(event_timestamp(event))} "
                f"<small>{e(clip(event.get('date') or '', 60))}</small>",
            ),
            ("Received", e(clip(event.get("created_utc") or "", 60))),
            ("Source", e(clip(event.get("source") or "", 2000))),
            ("Message", e(clip(event.get("message") or "", _FIELD))),
            ("Project", e(clip(project_name, 200))),
            ("Stack", stack_link),
            ("Tags", chips),
            ("Value", e(event.get("value")) if event.get("value") is not None else ""),
            ("Count", _count(event)),
            ("Geo", e(clip(event.get("geo") or "", 100))),
            ("Reference id", e(clip(event.get("reference_id") or "", 100))),
            ("Version", e(clip(version, 100)) if isinstance(version, str) else ""),
            ("Submitted by", e(clip(data.get("@submission_method") or "", 100))),
            ("Client", _client(data.get("@submission_client"))),
            ("Event id", e(event.get("id"))),
        ]
    )
    newer, older = neighbours
    nav = ['<a href="/">Stacks</a>']
    if stack is not None:
        nav.append(f'<a href="/stacks/{e(stack["id"])}">This stack</a>')
    if newer:
        nav.append(f'<a rel="prev" href="/events/{e(newer)}">← Newer in stack</a>')
    if older:
        nav.append(f'<a rel="next" href="/events/{e(older)}">Older in stack →</a>')
    nav.append(f'<a href="/events/{e(event["id"])}/json">Raw JSON</a>')
    notice = f'<div class="note">{e(clip(note, 1000))}</div>\n' if note else ""
    manual = data.get("@stack")
    manual_block = (
        '<section class="card data-block"><h2>Manual stacking</h2>'
        f"{_kv_table(manual if isinstance(manual, dict) else {'@stack': manual})}</section>\n"
        if "@stack" in data
        else ""
    )
    return (
        f"<h1>{e(clip(event_summary(event), 500))}</h1>\n"
        f'<nav class="pager">{" ".join(nav)}</nav>\n'
        + notice
        + f'<section class="card overview">{overview}</section>\n'
        + _errors(data)
        + frames_html(data.get(FRAMES_KEY), "Call site")
        + _trace(data.get("@trace"))
        + _request(data.get("@request"))
        + _user(data)
        + _environment(data.get("@environment"))
        + manual_block
        + _other_data(data)
    )
