"""Stacks: events grouped as the service groups them, with counts, users, first and last seen,
occurrences over time and a status; and the project counters that follow them."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from eventlog_handler.collector import Collector
from eventlog_handler.collector._formats import format_event_date, parse_date
from tests.support.collector import Client

TRACE = 'Traceback (most recent call last):\n  File "shop/checkout.py", line 12, in pay\nKeyError'


def _error(message: str = "'cvv'", trace: str = TRACE, kind: str = "KeyError") -> dict[str, Any]:
    return {"type": kind, "message": message, "stack_trace": trace}


def _by_title(collector: Collector) -> dict[str, dict[str, Any]]:
    return {stack["title"]: stack for stack in collector.stacks()}


def test_the_same_error_is_one_stack_with_a_count(client: Client, collector: Collector) -> None:
    batch = [{"@simple_error": _error(f"'cvv' #{i}")} for i in range(150)]
    assert client.post_events(batch, compress=True).status_code == 202
    (stack,) = collector.stacks()
    assert stack["total_occurrences"] == 150
    assert stack["event_count"] == 150
    assert stack["type"] == "error"
    assert stack["status"] == "open"
    assert stack["title"].startswith("KeyError: 'cvv'")
    events = collector.events(limit=1000)
    assert {event["stack_id"] for event in events} == {stack["id"]}
    assert sum(event["is_first_occurrence"] for event in events) == 1


def test_errors_split_by_type_and_exact_stack_trace(client: Client, collector: Collector) -> None:
    client.post_events(
        [
            {"@simple_error": _error()},
            {"@simple_error": _error(trace=TRACE + " ")},
            {"@simple_error": _error(kind="ValueError")},
            {"@simple_error": {**_error(), "inner": {"type": "OSError", "message": "io"}}},
        ]
    )
    counts = sorted(stack["total_occurrences"] for stack in collector.stacks())
    assert counts == [1, 1, 2]  # the inner error does not change the signature


def test_manual_stacking_with_at_stack(client: Client, collector: Collector) -> None:
    manual = {"title": "Payment provider down", "signature_data": {"provider": "acme"}}
    client.post_events(
        [
            {"@simple_error": _error(kind="TimeoutError"), "@stack": manual},
            {"@simple_error": _error(kind="ConnectionError"), "@stack": manual},
            {"message": "a log with the same key", "data": {"@stack": manual}},
        ]
    )
    (stack,) = collector.stacks()
    assert stack["title"] == "Payment provider down"
    assert stack["total_occurrences"] == 3
    assert stack["signature_info"] == {"provider": "acme"}


def test_manual_stacks_are_told_apart_by_their_values_alone_as_the_service_does(
    client: Client, collector: Collector
) -> None:
    """The service hashes the concatenated values of ``signature_data`` (not its keys), and
    ignores a ``@stack`` with a value that is not a string: the collector's stacks are the
    service's, checked against the signature the service computes (tests/grouping)."""
    from tests.grouping.signature import server_signature

    signatures = {
        "m1": {"gateway": "adyen"},
        "m2": {"processor": "adyen"},
        "m3": {"a": "ab", "b": "c"},
        "m4": {"a": "a", "b": "bc"},
        "m5": {"a": 5},
        "m6": {"a": "5"},
    }
    events = [
        {
            "type": "log",
            "source": "app.pay",
            "message": name,
            "data": {"@stack": {"title": f"stack {name}", "signature_data": signature}},
        }
        for name, signature in signatures.items()
    ]
    assert client.post_events(events).status_code == 202
    stack_of = {event["message"]: event["stack_id"] for event in collector.events(limit=100)}
    assert stack_of["m1"] == stack_of["m2"]
    assert stack_of["m3"] == stack_of["m4"]
    assert stack_of["m5"] != stack_of["m6"]  # m5's @stack is ignored: stacked by its source
    service = {event["message"]: server_signature(event) for event in events}
    for one in signatures:
        for other in signatures:
            assert (stack_of[one] == stack_of[other]) == (service[one] == service[other])


def test_logs_group_by_source_and_other_types_by_type_and_source(
    client: Client, collector: Collector
) -> None:
    client.post_events(
        [
            {"type": "log", "source": "app.db", "message": "slow query 1"},
            {"type": "log", "source": "app.db", "message": "slow query 2"},
            {"type": "log", "source": "app.web", "message": "GET /"},
            {"type": "usage", "source": "app.db", "message": "feature"},
            {"type": "usage", "source": "app.db", "message": "feature again"},
        ]
    )
    stacks = collector.stacks()
    assert sorted((s["type"], s["signature_info"].get("Source"), s["total_occurrences"])
                  for s in stacks) == [
        ("log", "app.db", 2),
        ("log", "app.web", 1),
        ("usage", "app.db", 2),
    ]  # fmt: skip


def test_count_users_and_first_and_last_seen(client: Client, collector: Collector) -> None:
    now = datetime.now(timezone.utc)
    earlier, later = now - timedelta(hours=2), now - timedelta(minutes=5)
    client.post_events(
        [
            {"@simple_error": _error(), "date": format_event_date(later), "count": 5,
             "@user": {"identity": "u-1"}},
            {"@simple_error": _error(), "date": format_event_date(earlier),
             "@user": {"identity": "u-2"}},
            {"@simple_error": _error(), "@user": {"identity": "u-1"}},
        ]
    )  # fmt: skip
    client.post_events({"@simple_error": _error(), "@user": {"identity": "u-3"}})
    (stack,) = collector.stacks()
    assert stack["total_occurrences"] == 5 + 1 + 1 + 1  # count stands for several occurrences
    assert stack["event_count"] == 4
    assert stack["users"] == 3
    assert abs(parse_date(stack["first_occurrence"]) - earlier) < timedelta(seconds=1)
    assert abs(parse_date(stack["last_occurrence"]) - now) < timedelta(minutes=2)


def test_status_fixed_regressed_and_ignored(client: Client, collector: Collector) -> None:
    client.post_events({"@simple_error": _error()})
    (stack,) = collector.stacks()
    fixed = collector.set_stack_status(stack["id"], "fixed")
    assert fixed["status"] == "fixed"
    assert fixed["date_fixed"] is not None
    old = format_event_date(datetime.now(timezone.utc) - timedelta(hours=1))
    client.post_events({"@simple_error": _error(), "date": old})  # from before the fix
    assert collector.stacks()[0]["status"] == "fixed"
    time.sleep(0.01)
    client.post_events({"@simple_error": _error()})
    assert collector.stacks()[0]["status"] == "regressed"
    collector.set_stack_status(stack["id"], "ignored")
    client.post_events({"@simple_error": _error()})
    (ignored,) = collector.stacks()
    assert ignored["status"] == "ignored"
    assert ignored["total_occurrences"] == 4
    assert collector.stacks(status="open") == []
    collector.set_stack_status(stack["id"], "open")
    assert collector.stacks(status="open")[0]["id"] == stack["id"]


def test_project_counts_follow_the_stacks(client: Client, collector: Collector) -> None:
    client.post_events([{"@simple_error": _error()}] * 3 + [{"message": "m", "source": "s"}] * 2)
    project = client.get(f"/api/v2/projects/{collector.project_id}", collector.user_token).json()
    assert (project["stack_count"], project["event_count"]) == (2, 5)
    assert project["is_configured"] is True
    collector.clear_events()
    project = client.get(f"/api/v2/projects/{collector.project_id}", collector.user_token).json()
    assert (project["stack_count"], project["event_count"]) == (0, 0)


def test_stacks_are_per_project(client: Client, collector: Collector) -> None:
    other = collector.create_project("Other")
    token = collector.create_token(other["id"])
    client.post_events({"@simple_error": _error()})
    client.post_events({"@simple_error": _error()}, token=token)
    stacks = collector.stacks()
    assert len(stacks) == 2
    assert {stack["project_id"] for stack in stacks} == {collector.project_id, other["id"]}
    assert len(collector.stacks(project_id=other["id"])) == 1


def test_duplicates_by_reference_id_are_not_counted(client: Client, collector: Collector) -> None:
    event = {"@simple_error": _error(), "reference_id": "stack-dup-0001"}
    client.post_events(event)
    client.post_events(event)
    assert collector.stacks()[0]["total_occurrences"] == 1


def test_a_database_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    """Schema 1 (events without stacks): identity, settings and events survive the upgrade."""
    import json
    import sqlite3

    db = tmp_path / "old.sqlite3"
    now = datetime.now(timezone.utc)
    old_schema = """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE organizations (id TEXT PRIMARY KEY, name TEXT NOT NULL, created_utc TEXT NOT NULL);
    CREATE TABLE projects (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
        organization_id TEXT NOT NULL, name TEXT NOT NULL, created_utc TEXT NOT NULL,
        config_version INTEGER NOT NULL DEFAULT 0, settings TEXT NOT NULL DEFAULT '{}');
    CREATE TABLE tokens (id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, project_id TEXT,
        scopes TEXT NOT NULL, notes TEXT, expires_utc TEXT, expires_ts REAL,
        is_disabled INTEGER NOT NULL DEFAULT 0, created_utc TEXT NOT NULL,
        updated_utc TEXT NOT NULL);
    CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
        organization_id TEXT NOT NULL, project_id TEXT NOT NULL, type TEXT NOT NULL, level TEXT,
        source TEXT, date_ts REAL NOT NULL, reference_id TEXT, tags TEXT NOT NULL,
        stack_key TEXT NOT NULL, search_text TEXT NOT NULL, body TEXT NOT NULL);
    CREATE INDEX events_by_date ON events (date_ts, seq);
    CREATE INDEX events_by_stack ON events (project_id, stack_key);
    CREATE TABLE reference_ids (project_id TEXT NOT NULL, reference_id TEXT NOT NULL,
        seen_ts REAL NOT NULL, PRIMARY KEY (project_id, reference_id));
    """
    org, project, user_token, project_token = "a" * 24, "b" * 24, "U" * 40, "P" * 40
    with sqlite3.connect(db) as old:
        old.executescript(old_schema)
        old.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("schema_version", "1"), ("organization_id", org), ("project_id", project),
             ("user_token", user_token), ("project_token", project_token)],
        )  # fmt: skip
        old.execute(
            "INSERT INTO organizations VALUES (?, 'Old Org', '2026-01-01T00:00:00Z')", (org,)
        )
        old.execute(
            "INSERT INTO projects (id, organization_id, name, created_utc, config_version,"
            " settings) VALUES (?, ?, 'Old Project', '2026-01-01T00:00:00Z', 3, ?)",
            (project, org, json.dumps({"@@log:*": "Info"})),
        )
        for token, scopes, bound in ((user_token, '["user", "client"]', None),
                                     (project_token, '["client"]', project)):  # fmt: skip
            old.execute(
                "INSERT INTO tokens (id, organization_id, project_id, scopes, created_utc,"
                " updated_utc) VALUES (?, ?, ?, ?, 'x', 'x')",
                (token, org, bound, scopes),
            )
        for index in range(3):
            date = now - timedelta(minutes=index)
            body = {
                "id": f"{index:024x}", "organization_id": org, "project_id": project,
                "stack_id": "c" * 24, "is_first_occurrence": index == 0,
                "created_utc": "2026-01-01T00:00:00Z", "type": "error", "source": None,
                "date": format_event_date(date), "tags": [], "message": f"old {index}",
                "geo": None, "value": None, "count": None, "reference_id": None,
                "data": {"@simple_error": _error()},
            }  # fmt: skip
            old.execute(
                "INSERT INTO events (id, organization_id, project_id, type, date_ts, tags,"
                " stack_key, search_text, body) VALUES (?, ?, ?, 'error', ?, '[]', 'k', '', ?)",
                (body["id"], org, project, date.timestamp(), json.dumps(body)),
            )
    old.close()
    with Collector(db) as collector:
        assert (collector.user_token, collector.project_token) == (user_token, project_token)
        assert collector.admin_password
        assert sorted(e["message"] for e in collector.events()) == ["old 0", "old 1", "old 2"]
        (stack,) = collector.stacks()
        assert stack["total_occurrences"] == 3
        http = Client(collector)
        config = http.get("/api/v2/projects/config", project_token).json()
        assert config == {"version": 3, "settings": {"@@log:*": "Info"}}
        assert http.post_events({"message": "new"}, token=project_token).status_code == 202
        http.close()
    with Collector(db) as reopened:
        assert len(reopened.events()) == 4
