"""A project's settings page: the client configuration (``@@log:*``, ``@@error:*``,
``@@DataExclusions``...), what each setting does, and forms to change them."""

from __future__ import annotations

from collections.abc import Mapping

from eventlog_handler.collector._dashboard._layout import clip, e

__all__ = ["SETTING_HELP", "explain", "settings_body"]

#: What the settings do, for the page: (key pattern, example value, explanation).
SETTING_HELP = (
    (
        "@@log:<source>",
        "Warn",
        "The lowest level of log events a client sends from that source (logger): Trace, Debug, "
        "Info, Warn, Error, Fatal, or Off to send none. @@log:* covers every source; app.* a "
        "prefix. The exact source wins, then the longest pattern.",
    ),
    (
        "@@error:<exception type>",
        "false",
        "false (or off) stops clients sending errors of that exception type; the type may use "
        "* (@@error:*Timeout*).",
    ),
    (
        "@@<event type>:<source>",
        "false",
        "false (or off) stops clients sending events of that type from that source.",
    ),
    (
        "@@DataExclusions",
        "password,*token*",
        "Comma-separated data keys (with * wildcards) that clients remove from every event "
        "before sending it, in addition to their own list.",
    ),
)
_LEVELS = {"trace", "debug", "info", "warn", "error", "fatal", "off", "false"}


def explain(key: str, value: str) -> str:
    """What one setting does, in a sentence."""
    lowered = value.strip().lower()
    if key.startswith("@@log:"):
        source = key[len("@@log:") :] or "*"
        where = "every source" if source == "*" else f"sources matching {source}"
        if lowered in ("off", "false"):
            return f"Log events from {where} are not sent."
        if lowered in _LEVELS:
            return f"Log events from {where} are sent from level {value.strip()} up."
        return f"Not a level ({value!r}): clients ignore it."
    if key == "@@DataExclusions":
        keys = ", ".join(part.strip() for part in value.split(",") if part.strip())
        return f"Clients remove these data keys from events: {keys}."
    if key.startswith("@@") and ":" in key:
        kind, pattern = key[2:].split(":", 1)
        if lowered in ("off", "false"):
            return f"Events of type {kind} matching {pattern or '*'} are not sent."
        return f"Events of type {kind} matching {pattern or '*'} are sent."
    return "A setting of the application's own (clients pass it on to the program)."


def settings_body(
    project: Mapping[str, object],
    projects: list[tuple[str, str]],
    version: int,
    settings: Mapping[str, str],
    form_token: str,
    message: str = "",
) -> str:
    """The body of ``/projects/{id}/settings``."""
    project_id = str(project["id"])
    action = f"/projects/{e(project_id)}/settings"
    switch = ""
    if len(projects) > 1:
        links = " ".join(
            f'<a href="/projects/{e(pid)}/settings">{e(clip(name, 60))}</a>'
            if pid != project_id
            else f"<b>{e(clip(name, 60))}</b>"
            for pid, name in projects
        )
        switch = f'<p class="tabs">{links}</p>\n'
    rows = []
    for key, value in sorted(settings.items()):
        rows.append(
            "<tr>"
            f"<td><code>{e(clip(key, 200))}</code></td>"
            f"<td><code>{e(clip(value, 1000))}</code></td>"
            f"<td>{e(clip(explain(key, value), 500))}</td>"
            f'<td><form class="inline" method="post" action="{action}">'
            f'<input type="hidden" name="token" value="{e(form_token)}">'
            '<input type="hidden" name="action" value="delete">'
            f'<input type="hidden" name="key" value="{e(key)}">'
            f'<button type="submit" aria-label="Delete {e(clip(key, 100))}">Delete</button>'
            "</form></td></tr>"
        )
    table = (
        '<table class="list settings"><thead><tr><th>Key</th><th>Value</th><th>What it does</th>'
        "<th></th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>\n"
        if rows
        else '<p class="muted">No settings: clients use their own configuration.</p>\n'
    )
    suggestions = "".join(
        f'<option value="{e(key)}">' for key in ("@@log:*", "@@error:*", "@@DataExclusions")
    )
    form = (
        f'<form class="filters card" method="post" action="{action}">\n'
        f'<input type="hidden" name="token" value="{e(form_token)}">\n'
        '<input type="hidden" name="action" value="set">\n'
        '<label class="grow">Key<input name="key" list="setting-keys" required '
        'placeholder="@@log:*" autocomplete="off"></label>\n'
        f'<datalist id="setting-keys">{suggestions}</datalist>\n'
        '<label class="grow">Value<input name="value" required placeholder="Warn"'
        ' autocomplete="off"></label>\n'
        '<button class="primary" type="submit">Save</button>\n'
        "</form>\n"
    )
    help_rows = "".join(
        f"<tr><th><code>{e(key)}</code> <small>e.g. {e(example)}</small></th><td>{e(text)}</td>"
        "</tr>"
        for key, example, text in SETTING_HELP
    )
    notice = f'<div class="note">{e(message)}</div>\n' if message else ""
    return (
        f"<h1>Settings of {e(clip(project['name'], 120))}</h1>\n"
        + switch
        + notice
        + f'<p class="muted">Configuration version {version}. Clients read these settings with '
        "their project token (GET /api/v2/projects/config) and fetch them again when a response's "
        "X-Exceptionless-ConfigVersion header shows a newer version: a change here reaches "
        "running programs with their next request.</p>\n"
        + table
        + "<h2>Add or change a setting</h2>\n"
        + form
        + f'<div class="card"><h2>What settings do</h2><table class="kv">{help_rows}</table>'
        "</div>\n"
    )
