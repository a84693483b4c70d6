"""The dashboard's Sessions page, the events list's type tabs and filter (usage and 404 events
among them), and user descriptions on the event page, over HTTP."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from html import unescape
from typing import Any

from eventlog_handler.collector import Collector
from eventlog_handler.collector._formats import format_event_date
from tests.support.collector import Client

HEARTBEAT = "/api/v2/events/session/heartbeat"


def _page(client: Client, path: str, **params: Any) -> str:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    return response.text


def _rows(page: str, table: str) -> list[str]:
    match = re.search(rf'<table class="list {table}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert match is not None, f"no {table} table"
    return re.findall(r"<tr>(.*?)</tr>", match.group(1), re.S)


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def _ago(minutes: float) -> str:
    return format_event_date(datetime.now(timezone.utc) - timedelta(minutes=minutes))


def _session(session_id: str, identity: str, name: str, minutes_ago: float) -> dict[str, Any]:
    return {
        "type": "session",
        "reference_id": session_id,
        "date": _ago(minutes_ago),
        "@user": {"identity": identity, "name": name},
    }


def test_the_sessions_page_lists_user_start_duration_heartbeats_and_end(
    client: Client, collector: Collector
) -> None:
    client.post_events(
        [
            _session("session-ann-01", "ann@example.invalid", "Ann", 30),
            _session("session-bob-01", "bob", "Bob", 90),
            {"message": "not a session"},
        ]
    )
    for _ in range(3):
        beat = {"id": "ann@example.invalid", "close": "false"}
        assert client.get(HEARTBEAT, collector.project_token, params=beat).status_code == 200
    close = {"id": "session-bob-01", "close": "true"}
    assert client.get(HEARTBEAT, collector.project_token, params=close).status_code == 200

    page = _page(client, "/sessions")
    assert '<a href="/sessions" class="here">Sessions</a>' in page  # in the navigation
    ann, bob = (_text(row) for row in _rows(page, "sessions"))  # newest first
    assert "ann@example.invalid Ann" in ann
    assert "session-ann-01" in ann
    assert re.search(r"\b30 min \d\d s\b", ann), ann
    assert " 3 " in f" {ann} "  # heartbeats
    assert "active" in ann
    assert "Bob" in bob
    assert re.search(r"\b1 h 30 min\b", bob), bob
    assert "active" not in bob
    assert "just now" in bob  # ended now
    events = {e["reference_id"]: e["id"] for e in collector.events(type="session")}
    assert f'href="/events/{events["session-ann-01"]}"' in page

    searched = _page(client, "/sessions", q="user:bob")
    assert len(_rows(searched, "sessions")) == 1
    assert "No sessions" in _page(client, "/sessions", q="user:nobody")


def test_events_list_type_tabs_and_filter(client: Client, collector: Collector) -> None:
    client.post_events(
        [
            {"type": "usage", "source": "checkout.coupon"},
            {"type": "404", "source": "/no/such/page"},
            {"type": "error", "@simple_error": {"type": "KeyError", "message": "k"}},
            {"type": "log", "message": "hello"},
        ]
    )
    page = _page(client, "/events")
    tabs = re.search(r'<nav class="tabs types">(.*?)</nav>', page, re.S)
    assert tabs is not None
    labels = re.findall(r">([^<>]+)</a>", tabs.group(1))
    assert labels == ["All", "Errors", "Logs", "Feature usage", "Not found", "Sessions"]
    select = re.search(r'<select name="type">(.*?)</select>', page, re.S)
    assert select is not None
    offered = re.findall(r'<option value="([^"]*)"', select.group(1))
    assert offered[:6] == ["", "error", "log", "usage", "404", "session"]  # even unseen ones
    everything = _text(page)
    assert "Feature used: checkout.coupon" in everything
    assert "Not found: /no/such/page" in everything

    usage = _page(client, "/events", type="usage")
    (row,) = _rows(usage, "events")
    assert "Feature used: checkout.coupon" in _text(row)
    assert '<a class="here" href="/events?type=usage">Feature usage</a>' in usage
    (row,) = _rows(_page(client, "/events", type="404"), "events")
    assert "Not found: /no/such/page" in _text(row)
    assert "No events match" in _page(client, "/events", type="session")


def test_event_page_shows_the_users_description(client: Client, collector: Collector) -> None:
    client.post_events(
        {"message": "payment failed", "reference_id": "user-desc-0042", "@user": {"identity": "u"}}
    )
    description = {"email_address": "ann@example.invalid", "description": "I clicked <Pay>"}
    path = "/api/v2/events/by-ref/user-desc-0042/user-description"
    assert client.request("POST", path, collector.project_token, json=description).status_code
    (event,) = collector.events()
    page = _page(client, f"/events/{event['id']}")
    user = re.search(r'<section class="card user-block">(.*?)</section>', page, re.S)
    assert user is not None
    text = _text(user.group(1))
    assert "E-mail ann@example.invalid" in text
    assert "Description I clicked <Pay>" in text
    assert "&lt;Pay&gt;" in user.group(1)  # escaped
