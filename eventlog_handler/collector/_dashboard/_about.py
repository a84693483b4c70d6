"""The About page: how to send events here, and where the collector differs from the service
on purpose."""

from __future__ import annotations

from eventlog_handler.collector._dashboard._layout import clip, e

__all__ = ["DIFFERENCES", "about_body"]

#: Where the collector answers differently from the real service, on purpose.
DIFFERENCES = (
    (
        "Creating tokens",
        "A user-scoped token may create project tokens (POST /api/v2/projects/{id}/tokens), as "
        'the interface document describes. The real service answers 403 "Token authentication '
        'cannot create tokens." to any API token and wants a logged-in user (POST '
        "/api/v2/auth/login, or Basic e-mail:password).",
    ),
    (
        "When events appear",
        "As on the service, a post is answered once it is read, and stored right after; but "
        "every read here (the API, these pages) waits for the posts answered before it, so "
        "events can be read at once. The service may take seconds.",
    ),
    (
        "Bodies that do not decode",
        "A body whose Content-Encoding does not decode (a corrupt or truncated gzip stream) is "
        "answered 400 here. The real service answers 202 and loses it.",
    ),
    (
        "Extra headers",
        "A 202 carries X-Events-Accepted and X-Events-Discarded, the collector's own; clients "
        "must not rely on them.",
    ),
    (
        "Throttling",
        "Off unless eventlog serve --throttle N is given (X-RateLimit-Limit then reports the "
        "service's default, 3500). Its 15-minute windows count from the collector's start, not "
        "from the clock's quarter hours.",
    ),
    (
        "@submission_client",
        "Set from the User-Agent of the request, as the service sets it (user_agent and the "
        "version after its slash), replacing what the client sent; the service also adds the "
        "client's address (ip_address), the collector does not.",
    ),
    (
        "Sessions",
        "Manual sessions only: a session event with a reference id starts one; heartbeats (by "
        "session id or user identity), its events and a sessionend keep it up to date. Events "
        "with a user identity and no session get no automatic session, and sessions are not "
        "closed for inactivity. The session event also carries @heartbeats and @last_heartbeat, "
        "the collector's own.",
    ),
    (
        "Regressions",
        "A fixed stack regresses when an event dated after the fix arrives; the real service "
        "also compares @version with the version a stack was fixed in.",
    ),
    (
        "Search",
        "The filter language is a small subset of the service's (see How to search on the "
        "Events page).",
    ),
    (
        "The dashboard",
        "No login: it serves this machine only, answers only requests addressed to a loopback "
        "name or address (against DNS rebinding), and its forms carry a token.",
    ),
)

_ACCEPTED = (
    "Authorization: Bearer or Token with the key (any case), Basic with client:KEY, "
    "KEY:x-oauth-basic or an e-mail and password; without an Authorization header, "
    "?access_token=, ?api_key= or ?apikey=.",
    "JSON (one event or an array) and text/plain; a body that is not events (plain text, JSON "
    "that does not parse, fields of the wrong types) is stored as log events, one per line, "
    "with a note on the event page saying why.",
    "Property names in any case (Message, ReferenceId, referenceId); tags as a case-insensitive "
    "set; @error as well as @simple_error; an error without a message takes its error's.",
    "GET /api/v2/events/submit (and /submit/{type}) with the event's fields as query parameters.",
    "A project token may post events and read its settings, not read events (403). Heartbeats "
    "and settings reads are never throttled.",
)


def about_body(url: str, notes: list[str]) -> str:
    """The body of ``/about``."""
    differences = "".join(
        f"<tr><th>{e(topic)}</th><td>{e(text)}</td></tr>" for topic, text in DIFFERENCES
    )
    accepted = "".join(f"<li>{e(text)}</li>" for text in _ACCEPTED)
    recent = ""
    if notes:
        items = "".join(f"<li>{e(clip(note, 500))}</li>" for note in notes)
        recent = f'<div class="card"><h2>Recently received</h2><ul>{items}</ul></div>\n'
    return (
        "<h1>About this collector</h1>\n"
        '<div class="card"><h2>Send events here</h2>\n'
        "<p>Point the handler at this collector with the project token that "
        "<code>eventlog serve</code> printed (it is never shown on these pages):</p>\n"
        f"<pre>export EVENTLOG_SERVER_URL={e(url)}\nexport EVENTLOG_API_KEY=&lt;project token&gt;"
        "</pre>\n"
        "<p><code>eventlog serve --print-env</code> prints both lines ready to paste, and the "
        "login of the collector's user.</p></div>\n"
        + recent
        + '<div class="card"><h2>What it accepts, as the service does</h2>'
        f"<ul>{accepted}</ul></div>\n"
        + '<div class="card"><h2>Where it differs from the service, on purpose</h2>'
        f'<table class="kv">{differences}</table></div>\n'
    )
